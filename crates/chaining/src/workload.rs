//! The chaining workload read by `nfx chain --input FILE.json`: nodes, transfer latencies,
//! instances with their resource state, and independent SLA queries.

use nfx_model::{parse_json, read_file, ModelError};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// A node, instance, function or SLA id: a string or an integer, echoed back as given.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    /// An integer id such as `3`.
    Int(i64),
    /// A textual id such as `"fw-1"`.
    Text(String),
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Int(i) => write!(f, "{i}"),
            Id::Text(s) => f.write_str(s),
        }
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Self {
        Id::Text(s.to_string())
    }
}

impl From<String> for Id {
    fn from(s: String) -> Self {
        Id::Text(s)
    }
}

/// A whole chaining workload (the schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Node ids; their order indexes `transfer_latency_us`.
    pub nodes: Vec<Id>,
    /// Symmetric node-to-node transfer latency, µs (the diagonal is ignored: 0 on a node).
    pub transfer_latency_us: Vec<Vec<f64>>,
    /// Deployed instances.
    pub instances: Vec<InstanceSpec>,
    /// SLA queries, answered independently.
    pub slas: Vec<SlaSpec>,
}

/// One deployed instance with HYPER's resource model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSpec {
    /// Unique instance id.
    pub id: Id,
    /// Function it runs.
    pub function: Id,
    /// Node it runs on.
    pub node: Id,
    /// Infrastructure kind (e.g. `software`, `hardware`); informative only.
    pub kind: String,
    /// Processing latency, µs.
    pub processing_latency_us: f64,
    /// Total throughput, Gbit/s.
    pub throughput_total_gbps: f64,
    /// Throughput already used, Gbit/s.
    pub throughput_used_gbps: f64,
    /// Total capacity (table entries or CPU), unitless.
    pub capacity_total: f64,
    /// Capacity already used.
    pub capacity_used: f64,
}

/// One SLA query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlaSpec {
    /// Id echoed in the answer.
    pub id: Id,
    /// Node where traffic enters.
    pub src_node: Id,
    /// Node where traffic leaves.
    pub dst_node: Id,
    /// Functions in order.
    pub chain: Vec<Id>,
    /// Largest acceptable path latency, µs.
    pub latency_bound_us: f64,
    /// Free throughput every instance on the path must have, Gbit/s.
    pub throughput_gbps: f64,
    /// Free capacity every instance on the path must have (unless `stage_capacity`
    /// gives each stage its own).
    pub capacity_need: f64,
    /// Free capacity the instance of each stage must have, one entry per function of
    /// `chain` (its units are its tier's: cores, table entries, queue pairs); empty:
    /// `capacity_need` at every stage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stage_capacity: Vec<f64>,
}

/// Largest latency accepted anywhere (µs): keeps integer-nanosecond sums far from overflow.
pub const MAX_LATENCY_US: f64 = 1e9;

/// Checks a latency: finite, ≥ 0 and ≤ [`MAX_LATENCY_US`].
pub fn check_latency(file: &str, field: &str, v: f64) -> Result<(), ModelError> {
    if !v.is_finite() || !(0.0..=MAX_LATENCY_US).contains(&v) {
        return Err(ModelError::new(
            file,
            field,
            format!("must be a latency in µs between 0 and {MAX_LATENCY_US}, got {v}"),
        ));
    }
    Ok(())
}

/// Checks an amount: finite and ≥ 0.
pub fn check_amount(file: &str, field: &str, v: f64) -> Result<(), ModelError> {
    if !v.is_finite() || v < 0.0 {
        return Err(ModelError::new(
            file,
            field,
            format!("must be a finite number >= 0, got {v}"),
        ));
    }
    Ok(())
}

impl InstanceSpec {
    /// Checks the numbers of one instance; `field` is its path (e.g. `instances[3]`).
    /// Field names are only formatted on an error (the mediator adds thousands of
    /// instances per request).
    pub fn check(&self, file: &str, field: &str) -> Result<(), ModelError> {
        let at = |name: &str| format!("{field}.{name}");
        if self.id == Id::from("") {
            return Err(ModelError::new(file, at("id"), "must not be empty"));
        }
        if check_latency(file, "", self.processing_latency_us).is_err() {
            check_latency(
                file,
                &at("processing_latency_us"),
                self.processing_latency_us,
            )?;
        }
        for (name, v) in [
            ("throughput_total_gbps", self.throughput_total_gbps),
            ("throughput_used_gbps", self.throughput_used_gbps),
            ("capacity_total", self.capacity_total),
            ("capacity_used", self.capacity_used),
        ] {
            if check_amount(file, "", v).is_err() {
                check_amount(file, &at(name), v)?;
            }
        }
        Ok(())
    }
}

impl Workload {
    /// Reads a workload file (validated when compiled into a [`crate::Network`]).
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let text = read_file(path)?;
        parse_json(&path.display().to_string(), &text)
    }
}
