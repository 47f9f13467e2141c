//! nfx-ssm: the service-specific manager (SSM) of the SSH-tunnel paper. It polls each VNF's
//! element manager (EM) and hands the scarce lookaside queue pairs, at run time, to the
//! VNFs that need them most (docs/ssm.md).

pub mod chart;
pub mod decision;
pub mod em;
pub mod metrics;
pub mod policy;
pub mod runner;

pub use decision::{Decision, Kind};
pub use em::{EmClient, EmError, EmStatus};
/// The accelerator calibration [`Policy::new`] vetoes grants with.
pub use nfx_accel::Calibration;
pub use policy::{Action, Observation, Policy, PolicyConfig, Sample};
pub use runner::{EmFleet, Fleet, Ssm};
