//! Node specifications as they appear in a chain's YAML, and building nodes from them.
//!
//! ```yaml
//! - firewall: { default: deny, rules: [ {action: allow, proto: tcp, dst: 10.0.0.0/8, dport: 5201} ], max_flows: 1000000 }
//! - nat: { snat: { public_ip: 10.200.2.100, port_range: [1024, 65535] } }
//! ```

use crate::dpi::DpiConfig;
use crate::elephant::ElephantConfig;
use crate::firewall::FirewallConfig;
use crate::nat::NatConfig;
use crate::Node;
use nfx_io::FileScope;

/// One node of a chain, as written in YAML (the variant name is the node kind). It
/// serializes as the one-key map it is read from (`{firewall: {...}}`), in YAML too
/// (where a derived enum would become a tag, `!firewall {...}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum NodeSpec {
    /// Stateful firewall.
    Firewall(FirewallConfig),
    /// Source / destination NAT.
    Nat(NatConfig),
    /// Deep packet inspection (patterns from a file).
    Dpi(DpiConfig),
    /// Elephant-flow detection.
    Elephant(ElephantConfig),
}

impl NodeSpec {
    /// Every node kind, as written in YAML.
    pub const KINDS: [&'static str; 4] = ["firewall", "nat", "dpi", "elephant"];

    /// The node of `function` with `config` (null: every default), as a chain entry
    /// `{function: config}` reads: the one way a descriptor's function and configuration
    /// become a spec, for plan-time checks and the tiers that run it.
    pub fn from_function(
        function: &str,
        config: &serde_json::Value,
    ) -> Result<NodeSpec, serde_json::Error> {
        let config = if config.is_null() {
            serde_json::json!({})
        } else {
            config.clone()
        };
        serde_json::from_value(serde_json::json!({ function: config }))
    }

    /// The node kind as written in YAML (default instance name).
    pub fn kind(&self) -> &'static str {
        match self {
            NodeSpec::Firewall(_) => "firewall",
            NodeSpec::Nat(_) => "nat",
            NodeSpec::Dpi(_) => "dpi",
            NodeSpec::Elephant(_) => "elephant",
        }
    }
}

impl serde::Serialize for NodeSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        match self {
            NodeSpec::Firewall(c) => m.serialize_entry(self.kind(), c)?,
            NodeSpec::Nat(c) => m.serialize_entry(self.kind(), c)?,
            NodeSpec::Dpi(c) => m.serialize_entry(self.kind(), c)?,
            NodeSpec::Elephant(c) => m.serialize_entry(self.kind(), c)?,
        }
        m.end()
    }
}

/// A configuration value that is wrong: which field (a dotted path inside the node's
/// spec, e.g. `firewall.rules[3].dst`) and why. The caller prefixes the file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {msg}")]
pub struct ConfigError {
    /// Dotted path of the field.
    pub field: String,
    /// What is wrong with it.
    pub msg: String,
}

impl ConfigError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, msg: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            msg: msg.into(),
        }
    }

    /// The same error with `parent.` put in front of the field path.
    pub fn within(self, parent: &str) -> Self {
        Self {
            field: format!("{parent}.{}", self.field),
            ..self
        }
    }
}

/// Builds the node described by `spec`, named `name`. Files the spec names (a rules
/// file, a pattern file) are read within `files`: the config file's directory (which
/// relative names start from) and the directories the operator allow-listed.
pub fn build(spec: &NodeSpec, name: &str, files: &FileScope) -> Result<Box<dyn Node>, ConfigError> {
    let kind = spec.kind();
    let node: Box<dyn Node> = match spec {
        NodeSpec::Firewall(c) => Box::new(c.build(name, files).map_err(|e| e.within(kind))?),
        NodeSpec::Nat(c) => Box::new(c.build(name).map_err(|e| e.within(kind))?),
        NodeSpec::Dpi(c) => Box::new(c.build(name, files).map_err(|e| e.within(kind))?),
        NodeSpec::Elephant(c) => Box::new(c.build(name).map_err(|e| e.within(kind))?),
    };
    Ok(node)
}

/// A port written as a number (`5201`) or as text (`1000-2000`, `any`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum PortField {
    /// A single port.
    Num(u64),
    /// A range or `any`.
    Text(String),
}

/// Protocol selector in rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// Any protocol.
    #[default]
    Any,
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// ICMP (1).
    Icmp,
}

impl Proto {
    /// The IP protocol number; `None` for any.
    pub fn number(self) -> Option<u8> {
        match self {
            Proto::Any => None,
            Proto::Tcp => Some(6),
            Proto::Udp => Some(17),
            Proto::Icmp => Some(1),
        }
    }
}

/// Parses an IPv4 address field.
pub fn parse_ipv4(field: &str, s: &str) -> Result<u32, ConfigError> {
    s.trim()
        .parse::<std::net::Ipv4Addr>()
        .map(u32::from)
        .map_err(|_| ConfigError::new(field, format!("'{s}' is not an IPv4 address")))
}

#[cfg(test)]
mod tests;
