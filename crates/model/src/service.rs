//! The service descriptor: tenants' chains of functions with an SLA.

use crate::check::{ident, non_negative, positive, Unique};
use crate::error::{parse_yaml, read_file, ModelError};
use crate::infra::{Infrastructure, Tier};
use crate::selector::Selector;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A file of service requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSet {
    /// The services, each chained independently.
    pub services: Vec<Service>,
}

/// One tenant's service: traffic enters at `ingress`, crosses `chain` in order, leaves at `egress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Unique service id.
    pub id: String,
    /// Tenant that owns the service.
    pub tenant: String,
    /// Host where the service's traffic enters.
    pub ingress: String,
    /// Host where the service's traffic leaves.
    pub egress: String,
    /// Functions in traversal order.
    pub chain: Vec<ChainFunction>,
    /// Performance the chain must deliver.
    pub sla: Sla,
    /// Which packets belong to the service; real hosts forward exactly these along its
    /// path (no selector: the service cannot be steered on hosts run by agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Selector>,
    /// An ESP tunnel the service's traffic crosses between two neighbouring hosts of its
    /// path, each end on a queue pair of its host's accelerator-tier device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelSpec>,
}

/// An IPsec ESP tunnel (IKEv2-keyed) between two linked hosts: the service's packets
/// leave `from` encrypted towards `to`, and its replies the other way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelSpec {
    /// Host of the endpoint the forward traffic enters the tunnel at.
    pub from: String,
    /// Host of the endpoint it leaves the tunnel at (a link away from `from`).
    pub to: String,
    /// ESP transform offered in IKEv2 (`aes-128-gcm`, `aes-256-gcm`,
    /// `chacha20-poly1305`).
    #[serde(default = "default_tunnel_alg")]
    pub alg: String,
}

/// The ESP transforms a controller-placed tunnel may negotiate.
pub const TUNNEL_ALGS: [&str; 3] = ["aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"];

fn default_tunnel_alg() -> String {
    TUNNEL_ALGS[0].to_string()
}

impl TunnelSpec {
    /// Checks the tunnel against `infra`: known, distinct, linked hosts, a known
    /// transform, and on each end a device of the accelerator tier that runs `esp` with
    /// that transform. `field` names the block in errors.
    pub fn validate(
        &self,
        file: &str,
        field: &str,
        infra: &Infrastructure,
    ) -> Result<(), ModelError> {
        for (name, host) in [("from", &self.from), ("to", &self.to)] {
            if infra.host_index(host).is_none() {
                return Err(ModelError::new(
                    file,
                    format!("{field}.{name}"),
                    format!("unknown host {host:?}"),
                ));
            }
        }
        if self.from == self.to {
            return Err(ModelError::new(
                file,
                format!("{field}.to"),
                "a tunnel joins two different hosts",
            ));
        }
        let linked = infra
            .links
            .iter()
            .any(|l| (l.a == self.from && l.b == self.to) || (l.a == self.to && l.b == self.from));
        if !linked {
            return Err(ModelError::new(
                file,
                field.to_string(),
                format!(
                    "hosts {:?} and {:?} share no link: a tunnel's ends must be neighbours",
                    self.from, self.to
                ),
            ));
        }
        if !TUNNEL_ALGS.contains(&self.alg.as_str()) {
            return Err(ModelError::new(
                file,
                format!("{field}.alg"),
                format!("{:?} is not one of {}", self.alg, TUNNEL_ALGS.join(", ")),
            ));
        }
        for (name, host) in [("from", &self.from), ("to", &self.to)] {
            let has = infra.devices.iter().any(|d| {
                d.host == *host
                    && d.tier == Tier::Accelerator
                    && d.supports("esp")
                    && d.algorithms.contains(&self.alg)
            });
            if !has {
                return Err(ModelError::new(
                    file,
                    format!("{field}.{name}"),
                    format!(
                        "host {host:?} has no accelerator-tier device running esp with {}",
                        self.alg
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// One step of a chain with its VNF configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainFunction {
    /// Function name (must be supported by some device).
    pub function: String,
    /// Opaque configuration handed to the VNF (e.g. firewall rules); null when absent.
    #[serde(default)]
    pub config: serde_yaml_ng::Value,
    /// Capacity the function needs on its instance, in the tier's unit (cores, entries,
    /// queue pairs).
    #[serde(default = "one")]
    pub capacity_need: f64,
    /// Pins the function to one tier (`software`, `table`, `accelerator`): the mediator
    /// places it on a device of that tier only, whatever the latency budget; absent, the
    /// mediator chooses (software when it meets the SLA, else a faster tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
}

fn one() -> f64 {
    1.0
}

/// A service-level agreement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sla {
    /// Largest acceptable ingress-to-egress latency, µs.
    pub max_latency_us: f64,
    /// Smallest throughput the chain must sustain, Gbit/s.
    pub min_throughput_gbps: f64,
}

impl ServiceSet {
    /// Reads a service file and validates it on its own and against `infra`.
    pub fn load(path: &Path, infra: &Infrastructure) -> Result<Self, ModelError> {
        let text = read_file(path)?;
        Self::from_yaml(&path.display().to_string(), &text, infra)
    }

    /// Parses and validates service text; `file` names it in errors.
    pub fn from_yaml(file: &str, text: &str, infra: &Infrastructure) -> Result<Self, ModelError> {
        let set: ServiceSet = parse_yaml(file, text)?;
        set.validate(file, infra)?;
        Ok(set)
    }

    /// Semantic checks: ids, SLA ranges, and references into the infrastructure.
    pub fn validate(&self, file: &str, infra: &Infrastructure) -> Result<(), ModelError> {
        let mut ids = Unique::new("service");
        for (i, s) in self.services.iter().enumerate() {
            let f = format!("services[{i}]");
            ids.insert(file, &format!("{f}.id"), &s.id)?;
            ident(file, &format!("{f}.tenant"), &s.tenant)?;
            for (name, host) in [("ingress", &s.ingress), ("egress", &s.egress)] {
                if infra.host_index(host).is_none() {
                    return Err(ModelError::new(
                        file,
                        format!("{f}.{name}"),
                        format!("unknown host {host:?}"),
                    ));
                }
            }
            if s.chain.is_empty() {
                return Err(ModelError::new(
                    file,
                    format!("{f}.chain"),
                    "a chain needs at least one function",
                ));
            }
            for (j, c) in s.chain.iter().enumerate() {
                let ff = format!("{f}.chain[{j}]");
                ident(file, &format!("{ff}.function"), &c.function)?;
                if !infra.supports(&c.function) {
                    return Err(ModelError::new(
                        file,
                        format!("{ff}.function"),
                        format!("no device supports function {:?}", c.function),
                    ));
                }
                if let Some(t) = c.tier {
                    let offered = infra
                        .devices
                        .iter()
                        .any(|d| d.tier == t && d.functions.contains(&c.function));
                    if !offered {
                        return Err(ModelError::new(
                            file,
                            format!("{ff}.tier"),
                            format!(
                                "no {} device supports function {:?}",
                                t.as_str(),
                                c.function
                            ),
                        ));
                    }
                }
                non_negative(file, &format!("{ff}.capacity_need"), c.capacity_need)?;
            }
            if let Some(sel) = &s.selector {
                sel.validate()
                    .map_err(|m| ModelError::new(file, format!("{f}.selector"), m))?;
            }
            if let Some(t) = &s.tunnel {
                t.validate(file, &format!("{f}.tunnel"), infra)?;
            }
            positive(
                file,
                &format!("{f}.sla.max_latency_us"),
                s.sla.max_latency_us,
            )?;
            positive(
                file,
                &format!("{f}.sla.min_throughput_gbps"),
                s.sla.min_throughput_gbps,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFRA: &str = "
hosts: [{ id: edge, cores: 4 }, { id: cloud, cores: 4 }]
devices:
  - { id: sw, host: edge, tier: software, functions: [firewall, nat], latency_us: 30, throughput_gbps: 10, cpu_cores: 2 }
links: [{ a: edge, b: cloud, latency_us: 20 }]
";

    const GOOD: &str = "
services:
  - id: web
    tenant: acme
    ingress: edge
    egress: cloud
    chain:
      - function: firewall
        config: { rules: [{ action: allow, dport: 80 }] }
      - { function: nat, capacity_need: 0.5 }
    sla: { max_latency_us: 500, min_throughput_gbps: 1 }
  - id: mail
    tenant: acme
    ingress: cloud
    egress: edge
    chain: [{ function: nat }]
    sla: { max_latency_us: 900, min_throughput_gbps: 0.5 }
";

    fn infra() -> Infrastructure {
        Infrastructure::from_yaml("infra.yaml", INFRA).unwrap()
    }

    fn mutate(from: &str, to: &str) -> ModelError {
        assert!(GOOD.contains(from), "{from}");
        ServiceSet::from_yaml("svc.yaml", &GOOD.replacen(from, to, 1), &infra()).unwrap_err()
    }

    #[test]
    fn good_services_load_with_opaque_config() {
        let s = ServiceSet::from_yaml("svc.yaml", GOOD, &infra()).unwrap();
        assert_eq!(s.services.len(), 2);
        let rules = &s.services[0].chain[0].config["rules"];
        assert_eq!(rules[0]["dport"].as_u64(), Some(80));
        assert_eq!(s.services[0].chain[1].capacity_need, 0.5);
        assert_eq!(s.services[1].chain[0].capacity_need, 1.0);
    }

    #[test]
    fn sla_errors_name_the_field() {
        let e = mutate("max_latency_us: 900", "max_latency_us: -900");
        assert_eq!(e.file, "svc.yaml");
        assert_eq!(e.field, "services[1].sla.max_latency_us");
        assert!(e.message.contains("> 0"));
        let e = mutate("min_throughput_gbps: 1", "min_throughput_gbps: 0");
        assert_eq!(e.field, "services[0].sla.min_throughput_gbps");
        let e = mutate("max_latency_us: 500,", "max_latency_us: 500, jitter_us: 3,");
        assert_eq!(e.field, "services[0].sla.jitter_us");
    }

    #[test]
    fn tunnels_are_checked_against_the_infrastructure() {
        let infra = Infrastructure::from_yaml(
            "infra.yaml",
            &INFRA.replace(
                "links:",
                "  - { id: acc-e, host: edge, tier: accelerator, functions: [esp], latency_us: 5, throughput_gbps: 10, queue_pairs: 2, algorithms: [aes-128-gcm] }\n\
                 \x20 - { id: acc-c, host: cloud, tier: accelerator, functions: [esp], latency_us: 5, throughput_gbps: 10, queue_pairs: 2, algorithms: [aes-128-gcm, aes-256-gcm] }\n\
                 links:",
            ),
        )
        .unwrap();
        let with = |t: &str| {
            GOOD.replacen(
                "    sla: { max_latency_us: 500,",
                &format!("    tunnel: {t}\n    sla: {{ max_latency_us: 500,"),
                1,
            )
        };
        let ok =
            ServiceSet::from_yaml("svc.yaml", &with("{ from: edge, to: cloud }"), &infra).unwrap();
        let t = ok.services[0].tunnel.as_ref().unwrap();
        assert_eq!((t.from.as_str(), t.alg.as_str()), ("edge", "aes-128-gcm"));
        let bad = |t: &str, i: &Infrastructure| {
            ServiceSet::from_yaml("svc.yaml", &with(t), i).unwrap_err()
        };
        let e = bad("{ from: edge, to: moon }", &infra);
        assert_eq!(e.field, "services[0].tunnel.to");
        let e = bad("{ from: edge, to: edge }", &infra);
        assert!(e.message.contains("two different hosts"), "{e}");
        let e = bad("{ from: edge, to: cloud, alg: des }", &infra);
        assert_eq!(e.field, "services[0].tunnel.alg");
        let e = bad("{ from: edge, to: cloud, alg: aes-256-gcm }", &infra);
        assert_eq!(e.field, "services[0].tunnel.from");
        assert!(e.message.contains("no accelerator-tier device"), "{e}");
        let e = bad("{ from: edge, to: cloud }", &self::infra());
        assert_eq!(e.field, "services[0].tunnel.from");
        let e = bad("{ from: edge, to: cloud, key: 00 }", &infra);
        assert!(e.field.contains("tunnel"), "{e}");
    }

    #[test]
    fn a_pinned_tier_must_offer_the_function() {
        let s = ServiceSet::from_yaml(
            "svc.yaml",
            &GOOD.replacen(
                "capacity_need: 0.5 }",
                "capacity_need: 0.5, tier: software }",
                1,
            ),
            &infra(),
        )
        .unwrap();
        assert_eq!(s.services[0].chain[1].tier, Some(Tier::Software));
        let e = mutate("capacity_need: 0.5 }", "capacity_need: 0.5, tier: table }");
        assert_eq!(e.field, "services[0].chain[1].tier");
        assert!(e.message.contains("no table device"), "{e}");
        let e = mutate("capacity_need: 0.5 }", "capacity_need: 0.5, tier: fpga }");
        assert!(e.field.contains("tier"), "{e}");
    }

    #[test]
    fn unsupported_function() {
        let e = mutate("function: nat }]", "function: dpi }]");
        assert_eq!(e.field, "services[1].chain[0].function");
        assert!(e.message.contains("no device supports"));
    }

    #[test]
    fn dangling_hosts_and_duplicates() {
        let e = mutate("egress: cloud", "egress: moon");
        assert_eq!(e.field, "services[0].egress");
        let e = mutate("id: mail", "id: web");
        assert_eq!(e.field, "services[1].id");
        assert!(e.message.contains("duplicate service"));
    }

    #[test]
    fn empty_chain_and_missing_sla() {
        let e = mutate("chain: [{ function: nat }]", "chain: []");
        assert_eq!(e.field, "services[1].chain");
        let e = mutate(
            "    sla: { max_latency_us: 900, min_throughput_gbps: 0.5 }\n",
            "",
        );
        assert_eq!(e.field, "services[1]");
        assert!(e.message.contains("sla"), "{e}");
        let e = mutate("capacity_need: 0.5", "capacity_need: -1");
        assert_eq!(e.field, "services[0].chain[1].capacity_need");
    }
}
