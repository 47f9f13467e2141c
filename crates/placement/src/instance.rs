//! The offline placement instance of `nfx place` (HYPER §V-A, constraints (2)–(6)) and
//! its JSON schema, with validation that names the file and the field.

use crate::error::{PlacementError, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;

/// Which tier a device belongs to; it decides which need of an instance it consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// Table tier: consumes `tcam_need` from `tcam_capacity`.
    Hardware,
    /// Software tier: consumes `cpu_need` from `cpu_capacity`.
    Software,
}

/// One device that can host VNF instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Unique id, used in the assignment.
    pub id: String,
    /// Device model name (informational; identical devices are grouped by value anyway).
    #[serde(default)]
    pub model: String,
    /// Tier of the device.
    pub kind: DeviceKind,
    /// Functions the device can run (λ_mh).
    pub functions: Vec<String>,
    /// Cost c_h paid when the device hosts at least one instance.
    pub cost: u64,
    /// TCAM capacity ε_h (hardware).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcam_capacity: Option<u64>,
    /// CPU capacity (software).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_capacity: Option<u64>,
    /// Processing latency ζ_h in µs.
    pub latency_us: u64,
    /// Total throughput η_h.
    pub throughput_gbps: u64,
}

impl Device {
    /// The resource capacity of the device's tier (TCAM or CPU).
    pub fn capacity(&self) -> u64 {
        match self.kind {
            DeviceKind::Hardware => self.tcam_capacity.unwrap_or(0),
            DeviceKind::Software => self.cpu_capacity.unwrap_or(0),
        }
    }
}

/// One VNF instance to place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VnfInstance {
    /// Unique id, used in the assignment.
    pub id: String,
    /// Function the instance runs.
    pub function: String,
    /// TCAM need α_m on hardware.
    pub tcam_need: u64,
    /// CPU need on software.
    pub cpu_need: u64,
    /// Latency bound β_m in µs.
    pub latency_bound_us: u64,
    /// Throughput need γ_m.
    pub throughput_gbps: u64,
}

impl VnfInstance {
    /// The need this instance has on a device of `kind`.
    pub fn need_on(&self, kind: DeviceKind) -> u64 {
        match kind {
            DeviceKind::Hardware => self.tcam_need,
            DeviceKind::Software => self.cpu_need,
        }
    }
}

/// A whole offline placement instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    /// Name of the instance.
    #[serde(default)]
    pub name: String,
    /// Declared functions; every device and instance function must be one of them.
    pub functions: Vec<String>,
    /// Devices that can be used.
    pub devices: Vec<Device>,
    /// Instances to place, in arrival order (used by the online algorithm).
    pub vnf_instances: Vec<VnfInstance>,
}

/// Why device `d` cannot host instance `v` on its own, or `None` if it can.
pub fn host_reject(d: &Device, v: &VnfInstance) -> Option<&'static str> {
    if !d.functions.contains(&v.function) {
        Some("function not supported")
    } else if d.latency_us > v.latency_bound_us {
        Some("latency above the bound")
    } else if v.need_on(d.kind) > d.capacity() {
        Some("need above the resource capacity")
    } else if v.throughput_gbps > d.throughput_gbps {
        Some("throughput above the device throughput")
    } else {
        None
    }
}

impl Instance {
    /// Parses and validates an instance from JSON text; `file` names it in errors.
    pub fn from_json(text: &str, file: &str) -> Result<Instance> {
        let inst: Instance = serde_json::from_str(text).map_err(|e| PlacementError::Json {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        inst.validate(file)?;
        Ok(inst)
    }

    /// Reads and validates an instance from a JSON file.
    pub fn load(path: &Path) -> Result<Instance> {
        let text = std::fs::read_to_string(path).map_err(|source| PlacementError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Instance::from_json(&text, &path.display().to_string())
    }

    /// Checks ids, functions and tier capacities; every instance must fit some device.
    pub fn validate(&self, file: &str) -> Result<()> {
        let field = |field: String, message: String| PlacementError::Field {
            file: file.to_string(),
            field,
            message,
        };
        let functions: HashSet<&str> = self.functions.iter().map(String::as_str).collect();
        let mut ids = HashSet::new();
        for (i, d) in self.devices.iter().enumerate() {
            if d.id.is_empty() {
                return Err(field(format!("devices[{i}].id"), "empty id".into()));
            }
            if !ids.insert(d.id.as_str()) {
                return Err(field(
                    format!("devices[{i}].id"),
                    format!("duplicate device id `{}`", d.id),
                ));
            }
            for (j, f) in d.functions.iter().enumerate() {
                if !functions.contains(f.as_str()) {
                    return Err(field(
                        format!("devices[{i}].functions[{j}]"),
                        format!("function `{f}` is not in `functions`"),
                    ));
                }
            }
            let (name, cap) = match d.kind {
                DeviceKind::Hardware => ("tcam_capacity", d.tcam_capacity),
                DeviceKind::Software => ("cpu_capacity", d.cpu_capacity),
            };
            if cap.is_none() {
                return Err(field(
                    format!("devices[{i}].{name}"),
                    format!("missing: a {:?} device needs `{name}`", d.kind).to_lowercase(),
                ));
            }
        }
        let mut total = 0u64;
        for (i, d) in self.devices.iter().enumerate() {
            total = total.checked_add(d.cost).ok_or_else(|| {
                field(
                    format!("devices[{i}].cost"),
                    "the devices' costs add up past 2^64 - 1, so a placement's cost could not be reported".into(),
                )
            })?;
        }
        let mut vids = HashSet::new();
        for (i, v) in self.vnf_instances.iter().enumerate() {
            if v.id.is_empty() {
                return Err(field(format!("vnf_instances[{i}].id"), "empty id".into()));
            }
            if !vids.insert(v.id.as_str()) {
                return Err(field(
                    format!("vnf_instances[{i}].id"),
                    format!("duplicate instance id `{}`", v.id),
                ));
            }
            if !functions.contains(v.function.as_str()) {
                return Err(field(
                    format!("vnf_instances[{i}].function"),
                    format!("function `{}` is not in `functions`", v.function),
                ));
            }
        }
        for v in &self.vnf_instances {
            if self.devices.iter().all(|d| host_reject(d, v).is_some()) {
                let mut reasons: Vec<&str> = self
                    .devices
                    .iter()
                    .filter_map(|d| host_reject(d, v))
                    .collect();
                reasons.sort_unstable();
                reasons.dedup();
                let reason = if reasons.is_empty() {
                    "there are no devices".to_string()
                } else {
                    reasons.join("; ")
                };
                return Err(PlacementError::Unhostable {
                    id: v.id.clone(),
                    reason,
                });
            }
        }
        Ok(())
    }
}
