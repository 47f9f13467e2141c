//! nfx-chaining: SLA-aware service chaining (HYPER §IV, Algorithm 1 made exact).
//!
//! Instances that lack free throughput or capacity are filtered first, then a stage DP
//! (one stage per function, previous stage grouped by node) finds the minimum-latency
//! path; answers say `ok`, `infeasible_latency` (with the best achievable latency) or
//! `infeasible_resources` (with the stage at fault), and explain why. A retry loop asks
//! the mediator for faster instances; baselines and an exhaustive oracle support the
//! benchmark and the tests.

pub mod answer;
pub mod baseline;
pub mod bench;
pub mod dp;
pub mod exhaustive;
pub mod explain;
pub mod from_model;
pub mod generate;
pub mod network;
pub mod retry;
pub mod workload;

pub use answer::{answer_workload, Answer, Report, Timing};
pub use dp::{Chainer, Outcome, Status};
pub use network::{Needs, Network, Query};
pub use retry::{solve_with_retry, Mediator, RetryAnswer};
pub use workload::{Id, InstanceSpec, SlaSpec, Workload};
