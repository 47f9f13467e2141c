//! nfx-energy: energy as a first-class metric.
//!
//! * [`meter`]: per host, per VNF and per worker, watts and joules with their
//!   [`Source`] — RAPL counters ([`rapl`]) where the host has them, else the host's
//!   power model ([`model`]) driven by the kernel's CPU-time accounting, attributed by
//!   CPU time ([`attribution`]);
//! * [`knobs`]: the power agent's actuators — poll mode, consolidation (affinity),
//!   speed (cpufreq ceiling, else a cgroup CPU quota);
//! * [`probe`] and [`manager`]: the energy paper's probing loop as a pure state
//!   machine, and the per-service power manager built on it (speed, poll mode and
//!   consolidation decisions, each with its reason);
//! * [`metrics`]: the Prometheus names `nfx_energy_joules_total` and `nfx_power_watts`.

pub mod attribution;
pub mod knobs;
pub mod manager;
pub mod meter;
pub mod metrics;
pub mod model;
pub mod probe;
pub mod rapl;
pub mod source;

pub use meter::{
    Figure, Group, GroupKind, GroupReading, HostBusy, Meter, MeterConfig, Reading, Target,
};
pub use model::HostModel;
pub use source::Source;
