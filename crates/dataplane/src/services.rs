//! The services a worker runs (`services:` and `instances:` in the run config and in a
//! `reconfigure` request) and their checked form, the [`Topology`]: every VNF instance
//! by id, every service with its selector and its chain as instance indices.
//!
//! The single `chain:` form of before is one implicit service that matches every frame
//! ([`Topology::from_chain`]); its instances are named by kind (`firewall`, `nat`, the
//! second firewall `firewall-2`, ...).

use crate::classify::{parse_proto, Cidr, PortRange, Selector};
use crate::config::ConfigError;
use std::collections::{HashMap, HashSet};

/// Most services one worker classifies into.
pub const MAX_SERVICES: usize = 4096;

/// Node names the graph uses itself; no instance may take them.
pub const RESERVED_NAMES: [&str; 3] = ["parse", "classify", "output"];

pub use nfx_proto::services::{
    InstanceConfig, PortSpec, ProtoSpec, SelectorConfig, ServiceConfig, ServiceSet,
};

/// Where an instance was written, for the fields of its build errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Entry `i` of a `chain:` list (the spec is the entry itself).
    Chain(usize),
    /// `instances.<id>` (the spec is `{function: config}`).
    Instance,
}

/// A checked instance: its id and its node spec in the form the builder takes
/// (`{"firewall": {...}}`).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceDef {
    /// Instance id; also the node's name in stats and in state export/import.
    pub id: String,
    /// `{kind: config}`.
    pub spec: serde_json::Value,
    /// Where it was written.
    pub origin: Origin,
}

impl InstanceDef {
    /// The config field of a builder error whose field is `inner` (relative to
    /// [`Self::spec`]): `chain[1].firewall.rules[0]` or
    /// `instances.fw-1.config.rules[0]`.
    pub fn field(&self, inner: &str) -> String {
        match self.origin {
            Origin::Chain(i) if inner.is_empty() => format!("chain[{i}]"),
            Origin::Chain(i) => format!("chain[{i}].{inner}"),
            Origin::Instance => {
                let kind = self.spec.as_object().and_then(|m| m.keys().next());
                let base = format!("instances.{}", self.id);
                match kind.and_then(|k| inner.strip_prefix(k.as_str())) {
                    _ if inner.is_empty() => format!("{base}.function"),
                    Some("") => format!("{base}.config"),
                    Some(rest) if rest.starts_with('.') => format!("{base}.config{rest}"),
                    _ => format!("{base}.{inner}"),
                }
            }
        }
    }
}

/// A checked service.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceDef {
    /// Service id.
    pub id: String,
    /// Its selector.
    pub selector: Selector,
    /// Its chain as indices into [`Topology::instances`], in Forward order.
    pub chain: Vec<usize>,
}

/// What a worker runs, checked: instances, services, and whether frames are
/// classified at all.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Every instance (in `chain:` order, or by id for the services form).
    pub instances: Vec<InstanceDef>,
    /// Services in classification order.
    pub services: Vec<ServiceDef>,
    /// The `chain:` form: one service takes every frame, no classifier runs.
    pub implicit: bool,
}

/// Checks an id (service or instance): 1..64 of `A-Z a-z 0-9 - _ .`, not starting with `.`.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty()
        || id.len() > 64
        || id.starts_with('.')
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "`{id}` must be 1..64 characters of A-Z a-z 0-9 - _ . (not starting with .)"
        ));
    }
    Ok(())
}

fn err(field: String, problem: String) -> ConfigError {
    ConfigError {
        file: String::new(),
        field,
        problem,
    }
}

impl Topology {
    /// The `chain:` form: every entry (`{"firewall": {...}}`, already checked to be a
    /// one-key map) is an instance named by its kind, numbered from the second of a
    /// kind on (`firewall-2`); one implicit service runs them all, in order.
    pub fn from_chain(specs: &[serde_json::Value]) -> Result<Self, ConfigError> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut instances = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let kind = match spec.as_object() {
                Some(m) if m.len() == 1 => m.keys().next().map(String::as_str).unwrap_or(""),
                _ => {
                    return Err(err(
                        format!("chain[{i}]"),
                        "each chain entry is a map with exactly one node kind, e.g. `- firewall: {...}`".into(),
                    ))
                }
            };
            let n = seen.entry(kind).or_insert(0);
            *n += 1;
            let id = if *n == 1 {
                kind.to_string()
            } else {
                format!("{kind}-{n}")
            };
            instances.push(InstanceDef {
                id,
                spec: spec.clone(),
                origin: Origin::Chain(i),
            });
        }
        Ok(Self {
            services: vec![ServiceDef {
                id: "chain".into(),
                selector: Selector::default(),
                chain: (0..instances.len()).collect(),
            }],
            instances,
            implicit: true,
        })
    }

    /// The services form. Refuses duplicate service ids, chains naming unknown
    /// instances or one instance twice, bad ids and selectors; overlapping selectors
    /// are allowed (the first in the list wins). Instances no service uses are kept
    /// (they hold state, e.g. imported before a service is steered to them).
    pub fn from_services(set: &ServiceSet) -> Result<Self, ConfigError> {
        let mut instances = Vec::with_capacity(set.instances.len());
        let mut index = HashMap::new();
        for (id, inst) in &set.instances {
            check_id(id).map_err(|p| err(format!("instances.{id}"), p))?;
            if RESERVED_NAMES.contains(&id.as_str()) {
                return Err(err(
                    format!("instances.{id}"),
                    format!("`{id}` is the name of a built-in node"),
                ));
            }
            index.insert(id.as_str(), instances.len());
            instances.push(InstanceDef {
                id: id.clone(),
                spec: serde_json::json!({ inst.function.as_str(): inst.config }),
                origin: Origin::Instance,
            });
        }
        if set.services.len() > MAX_SERVICES {
            return Err(err(
                "services".into(),
                format!(
                    "{} services; a worker classifies into at most {MAX_SERVICES}",
                    set.services.len()
                ),
            ));
        }
        let mut ids = HashSet::new();
        let mut services = Vec::with_capacity(set.services.len());
        for (i, s) in set.services.iter().enumerate() {
            let at = |f: &str| format!("services[{i}].{f}");
            check_id(&s.id).map_err(|p| err(at("id"), p))?;
            if !ids.insert(s.id.as_str()) {
                return Err(err(at("id"), format!("service `{}` is listed twice", s.id)));
            }
            let mut chain = Vec::with_capacity(s.chain.len());
            for (j, inst) in s.chain.iter().enumerate() {
                let k = *index.get(inst.as_str()).ok_or_else(|| {
                    err(
                        at(&format!("chain[{j}]")),
                        format!("no instance `{inst}` in `instances`"),
                    )
                })?;
                if chain.contains(&k) {
                    return Err(err(
                        at(&format!("chain[{j}]")),
                        format!("instance `{inst}` is already in this chain"),
                    ));
                }
                chain.push(k);
            }
            let selector = compile_selector(&s.selector)
                .map_err(|(f, p)| err(at(&format!("selector.{f}")), p))?;
            services.push(ServiceDef {
                id: s.id.clone(),
                selector,
                chain,
            });
        }
        Ok(Self {
            instances,
            services,
            implicit: false,
        })
    }

    /// The instance ids, in [`Self::instances`] order.
    pub fn instance_ids(&self) -> Vec<String> {
        self.instances.iter().map(|i| i.id.clone()).collect()
    }

    /// The service ids, in classification order (none for the `chain:` form).
    pub fn service_ids(&self) -> Vec<String> {
        if self.implicit {
            return Vec::new();
        }
        self.services.iter().map(|s| s.id.clone()).collect()
    }
}

/// Turns a selector as written into its matching form; errors name the field.
pub fn compile_selector(c: &SelectorConfig) -> Result<Selector, (&'static str, String)> {
    let cidr = |f: &'static str, v: &Option<String>| {
        v.as_deref()
            .map(Cidr::parse)
            .transpose()
            .map_err(|e| (f, e))
    };
    let port = |f: &'static str, v: &Option<PortSpec>| {
        v.as_ref()
            .map(|p| match p {
                PortSpec::Number(n) => u16::try_from(*n)
                    .map(|p| PortRange { lo: p, hi: p })
                    .map_err(|_| format!("{n} is not a port (0..=65535)")),
                PortSpec::Range(s) => PortRange::parse(s),
            })
            .transpose()
            .map_err(|e| (f, e))
    };
    let proto = c
        .proto
        .as_ref()
        .map(|p| match p {
            ProtoSpec::Number(n) => {
                u8::try_from(*n).map_err(|_| format!("{n} is not a protocol number (0..=255)"))
            }
            ProtoSpec::Name(s) => parse_proto(s),
        })
        .transpose()
        .map_err(|e| ("proto", e))?;
    let s = Selector {
        src: cidr("src", &c.src)?,
        dst: cidr("dst", &c.dst)?,
        proto,
        sport: port("sport", &c.sport)?,
        dport: port("dport", &c.dport)?,
    };
    s.check()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(v: serde_json::Value) -> ServiceSet {
        serde_json::from_value(v).unwrap()
    }

    fn two_services() -> serde_json::Value {
        json!({
            "services": [
                {"id": "a", "selector": {"src": "10.153.1.0/24", "proto": "tcp", "dport": "5201-5202"},
                 "chain": ["fw", "nat"]},
                {"id": "b", "selector": {"src": "10.153.3.0/24", "dport": 53, "proto": 17}, "chain": ["nat"]}
            ],
            "instances": {
                "fw": {"function": "firewall", "config": {"default": "allow"}},
                "nat": {"function": "nat"}
            }
        })
    }

    #[test]
    fn services_become_instance_indices_and_selectors() {
        let t = Topology::from_services(&set(two_services())).unwrap();
        assert!(!t.implicit);
        assert_eq!(t.instance_ids(), ["fw", "nat"]);
        assert_eq!(t.service_ids(), ["a", "b"]);
        assert_eq!(t.services[0].chain, [0, 1]);
        assert_eq!(t.services[1].chain, [1]);
        assert_eq!(t.instances[1].spec, json!({"nat": {}}));
        let s = t.services[0].selector;
        assert_eq!(s.proto, Some(6));
        assert_eq!(s.dport, Some(PortRange { lo: 5201, hi: 5202 }));
        assert_eq!(
            t.services[1].selector.dport,
            Some(PortRange { lo: 53, hi: 53 })
        );
        let empty = Topology::from_services(&ServiceSet::default()).unwrap();
        assert!(empty.services.is_empty() && !empty.implicit);
    }

    #[test]
    fn the_chain_form_is_one_implicit_service_named_by_kind() {
        let t = Topology::from_chain(&[
            json!({"firewall": {}}),
            json!({"nat": {}}),
            json!({"firewall": {"default": "deny"}}),
        ])
        .unwrap();
        assert!(t.implicit);
        assert_eq!(t.instance_ids(), ["firewall", "nat", "firewall-2"]);
        assert_eq!(t.services.len(), 1);
        assert_eq!(t.services[0].chain, [0, 1, 2]);
        assert_eq!(t.services[0].selector, Selector::default());
        assert!(t.service_ids().is_empty());
        let e = Topology::from_chain(&[json!({"a": {}, "b": {}})]).unwrap_err();
        assert_eq!(e.field, "chain[0]");
    }

    #[test]
    fn invalid_sets_are_refused_naming_the_field() {
        let cases = [
            (
                json!({"services": [{"id": "a", "chain": ["nope"]}]}),
                "services[0].chain[0]",
                "no instance `nope`",
            ),
            (
                json!({"services": [{"id": "a"}, {"id": "a"}]}),
                "services[1].id",
                "twice",
            ),
            (
                json!({"services": [{"id": "a", "chain": ["x", "x"]}], "instances": {"x": {"function": "nat"}}}),
                "services[0].chain[1]",
                "already",
            ),
            (
                json!({"services": [{"id": "a b"}]}),
                "services[0].id",
                "characters",
            ),
            (
                json!({"instances": {"output": {"function": "nat"}}}),
                "instances.output",
                "built-in",
            ),
            (
                json!({"services": [{"id": "a", "selector": {"src": "10.0.0.1/8"}}]}),
                "services[0].selector.src",
                "host bits",
            ),
            (
                json!({"services": [{"id": "a", "selector": {"dport": 70000}}]}),
                "services[0].selector.dport",
                "not a port",
            ),
            (
                json!({"services": [{"id": "a", "selector": {"proto": "icmp", "dport": 1}}]}),
                "services[0].selector.proto",
                "TCP or UDP",
            ),
            (
                json!({"services": [{"id": "a", "selector": {"proto": 300}}]}),
                "services[0].selector.proto",
                "protocol number",
            ),
            (
                json!({"services": [{"id": "a", "selector": {"src": "10.0.0.0/8", "dst": "::/0"}}]}),
                "services[0].selector.dst",
                "families",
            ),
        ];
        for (v, field, needle) in cases {
            let e = Topology::from_services(&set(v.clone())).unwrap_err();
            assert_eq!(e.field, field, "{v}: {e}");
            assert!(e.problem.contains(needle), "{v}: {e}");
        }
        let many = ServiceSet {
            services: (0..=MAX_SERVICES)
                .map(|i| ServiceConfig {
                    id: format!("s{i}"),
                    selector: SelectorConfig::default(),
                    chain: vec![],
                })
                .collect(),
            ..ServiceSet::default()
        };
        assert_eq!(
            Topology::from_services(&many).unwrap_err().field,
            "services"
        );
    }

    #[test]
    fn unknown_fields_are_refused_by_serde() {
        let e = serde_json::from_value::<ServiceSet>(
            json!({"services": [{"id": "a", "selector": {"port": 1}}]}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("port"), "{e}");
    }

    #[test]
    fn build_error_fields_point_into_the_instance() {
        let t = Topology::from_services(&set(two_services())).unwrap();
        let fw = &t.instances[0];
        assert_eq!(
            fw.field("firewall.rules[0].dst"),
            "instances.fw.config.rules[0].dst"
        );
        assert_eq!(fw.field("firewall"), "instances.fw.config");
        assert_eq!(fw.field(""), "instances.fw.function");
        let c = Topology::from_chain(&[json!({"nat": {}})]).unwrap();
        assert_eq!(c.instances[0].field("nat.snat"), "chain[0].nat.snat");
        assert_eq!(c.instances[0].field(""), "chain[0]");
    }
}
