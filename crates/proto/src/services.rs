//! The services form of a worker's configuration (`services:` and `instances:` in the
//! run config and in a `reconfigure` request): every VNF instance by id with its
//! function and configuration, every service with its selector and its chain. The
//! worker checks them (`nfx_dataplane::services::Topology`); here they are the wire and
//! file format.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One VNF instance: its function (node kind) and that function's configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    /// Node kind: `firewall`, `nat`, `dpi`, `elephant`.
    pub function: String,
    /// The function's configuration (the same fields as in a `chain:` entry).
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
}

impl InstanceConfig {
    /// Instance `function` with `config`; no configuration (`null`) is the function's
    /// defaults (`{}`).
    pub fn new(function: &str, config: &serde_json::Value) -> Self {
        InstanceConfig {
            function: function.to_string(),
            config: if config.is_null() {
                empty_object()
            } else {
                config.clone()
            },
        }
    }

    /// The instance as an entry of the run config's and `reconfigure`'s `chain:`
    /// (`{function: config}`).
    pub fn chain_entry(&self) -> serde_json::Value {
        let mut entry = serde_json::Map::new();
        entry.insert(self.function.clone(), self.config.clone());
        serde_json::Value::Object(entry)
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// A port selector written as a number (`5201`) or a range (`"1024-65535"`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum PortSpec {
    /// One port.
    Number(u64),
    /// `lo-hi` (or one port as text).
    Range(String),
}

/// A protocol selector written as a name (`tcp`, `udp`, `icmp`) or a number.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum ProtoSpec {
    /// IP protocol number.
    Number(u64),
    /// `tcp`, `udp` or `icmp`.
    Name(String),
}

/// Which frames entering the inside port belong to a service; absent fields match
/// everything.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SelectorConfig {
    /// Source prefix (`10.153.1.0/24`, `2001:db8::/32`, or one address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    /// Destination prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// IP protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<ProtoSpec>,
    /// Source port or range (TCP and UDP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<PortSpec>,
    /// Destination port or range (TCP and UDP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<PortSpec>,
}

/// One service: its id, its selector and its chain of instance ids in order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Service id (the controller's).
    pub id: String,
    /// Which frames are the service's (default: every frame).
    #[serde(default)]
    pub selector: SelectorConfig,
    /// Instance ids, in the order the service's frames from the inside port visit them.
    #[serde(default)]
    pub chain: Vec<String>,
}

/// The services form of a worker's configuration: what `reconfigure` with
/// `services`/`instances` carries, and the run config's fields of the same names.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceSet {
    /// Services in classification order (the first whose selector matches wins).
    #[serde(default)]
    pub services: Vec<ServiceConfig>,
    /// Every instance the worker runs, by id.
    #[serde(default)]
    pub instances: BTreeMap<String, InstanceConfig>,
}
