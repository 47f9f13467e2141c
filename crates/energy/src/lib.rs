//! nfx-energy: energy as a first-class metric.
//!
//! * [`meter`]: per host, per VNF and per worker, watts and joules with their
//!   [`Source`] — RAPL counters ([`rapl`]) where the host has them, else the host's
//!   power model ([`model`]) driven by the kernel's CPU-time accounting, attributed by
//!   CPU time ([`attribution`]);
//! * [`metrics`]: the Prometheus names `nfx_energy_joules_total` and `nfx_power_watts`.

pub mod attribution;
pub mod meter;
pub mod metrics;
pub mod model;
pub mod rapl;
pub mod source;

pub use meter::{
    Figure, Group, GroupKind, GroupReading, HostBusy, Meter, MeterConfig, Reading, Target,
};
pub use model::HostModel;
pub use source::Source;
