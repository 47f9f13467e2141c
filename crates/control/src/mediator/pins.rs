//! Where each function of a service may go: the tier it pins (`tier:` in its chain) and
//! what it takes on the table tier. Every function some table device offers is checked
//! against the table tier at plan time with `nfx_fastpath::table::check` and takes its
//! table entries (rules + flow rows) as its capacity on a table device, as the agent that
//! deploys it counts them — pinned or placed there as the faster tier. A function pinned
//! to the table tier that the tier cannot run (DPI, an ACL larger than every table
//! device) is refused with the check's reason; an unpinned one is kept off table devices.

use super::PlanError;
use nfx_model::service::{ChainFunction, Service};
use nfx_model::{Infrastructure, Tier};
use std::collections::BTreeMap;
use std::path::Path;

/// Where one function of a service may go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pin {
    /// The only tier it may be placed on; `None`: software when it meets the budget,
    /// else a faster tier.
    pub tier: Option<Tier>,
    /// The table entries it takes on a table device; `None`: it does not go on one.
    pub table_entries: Option<f64>,
}

impl Pin {
    /// May the function be placed on a device of `tier`?
    pub fn allows(&self, tier: Tier) -> bool {
        self.tier.is_none_or(|t| t == tier) && (tier != Tier::Table || self.table_entries.is_some())
    }

    /// The capacity it takes on a device of `tier`: its table entries on the table tier,
    /// else the chain's `capacity_need`.
    pub fn capacity(&self, tier: Tier, capacity_need: f64) -> f64 {
        match (tier, self.table_entries) {
            (Tier::Table, Some(e)) => e,
            _ => capacity_need,
        }
    }
}

/// The pins of `svc`'s chain by function; a function pinned to a tier where no device
/// of `infra` runs it, or to the table tier that cannot run it, is refused with the
/// reason.
pub fn pins(svc: &Service, infra: &Infrastructure) -> Result<BTreeMap<String, Pin>, PlanError> {
    let mut out = BTreeMap::new();
    for (k, c) in svc.chain.iter().enumerate() {
        let table_entries = match table_need(k, c, infra) {
            Ok(e) => e,
            Err(e) if c.tier == Some(Tier::Table) => return Err(e),
            Err(_) => None,
        };
        if let Some(tier) = c.tier {
            if !infra
                .devices
                .iter()
                .any(|d| d.tier == tier && d.functions.contains(&c.function))
            {
                return Err(PlanError::Invalid(format!(
                    "chain[{k}] ({}) is pinned to the {} tier, where no device runs it",
                    c.function,
                    tier.as_str()
                )));
            }
        }
        let pin = Pin {
            tier: c.tier,
            table_entries,
        };
        out.insert(c.function.clone(), pin);
    }
    Ok(out)
}

/// The table entries chain function `k` takes on the table tier; `None` when no table
/// device offers it (and it is not pinned there); an error with the table check's reason
/// when the tier cannot run it. A function nfx has no VNF of (its configuration is opaque
/// to the controller) takes its `capacity_need`.
fn table_need(
    k: usize,
    c: &ChainFunction,
    infra: &Infrastructure,
) -> Result<Option<f64>, PlanError> {
    if !nfx_vnf::NodeSpec::KINDS.contains(&c.function.as_str()) {
        return Ok(Some(c.capacity_need));
    }
    let tables = || infra.devices.iter().filter(|d| d.tier == Tier::Table);
    let offering = tables()
        .filter(|d| d.functions.contains(&c.function))
        .filter_map(|d| d.table_entries)
        .max();
    let largest = match (offering, c.tier) {
        (Some(n), _) => n,
        (None, Some(Tier::Table)) => tables().filter_map(|d| d.table_entries).max().unwrap_or(0),
        (None, _) => return Ok(None),
    };
    let spec = node_spec(&c.function, &c.config)
        .map_err(|e| PlanError::Invalid(format!("chain[{k}] ({}): {e}", c.function)))?;
    let need = nfx_fastpath::table::check(&spec, largest, Path::new(NO_FILES)).map_err(|e| {
        PlanError::Invalid(format!(
            "chain[{k}] ({}) cannot run on the table tier: {e}",
            c.function
        ))
    })?;
    Ok(Some(need.entries as f64))
}

/// The directory the plan-time check reads a firewall's `rules_file` from: none. A rules
/// file lives on the agent's host (within its allowed directories), not beside the
/// controller, and a body sent to the controller must not make it read its own files;
/// the file's rules are counted by the agent when it deploys the function.
const NO_FILES: &str = "/nonexistent/nfx-controller-reads-no-rules-files";

/// The VNF configuration of `function` (a null config: the defaults) as the controller
/// checks it: a firewall's `rules_file` left to the agent (see [`NO_FILES`]).
fn node_spec(function: &str, config: &serde_yaml_ng::Value) -> Result<nfx_vnf::NodeSpec, String> {
    let config =
        serde_json::to_value(config).map_err(|e| format!("config not representable: {e}"))?;
    let mut spec = nfx_vnf::NodeSpec::from_function(function, &config)
        .map_err(|e| format!("not a {function} the table tier knows: {e}"))?;
    if let nfx_vnf::NodeSpec::Firewall(f) = &mut spec {
        f.rules_file = None;
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFRA: &str = "
hosts: [{ id: h1, cores: 2 }]
devices:
  - { id: sw, host: h1, tier: software, functions: [firewall, nat, dpi], latency_us: 30, throughput_gbps: 10, cpu_cores: 2 }
  - { id: tt, host: h1, tier: table, functions: [firewall, nat], latency_us: 5, throughput_gbps: 40, table_entries: 4096 }
links: []
";

    fn svc(chain: &str) -> Service {
        let text = format!(
            "services:\n  - id: s\n    tenant: t\n    ingress: h1\n    egress: h1\n    chain: {chain}\n    sla: {{ max_latency_us: 100, min_throughput_gbps: 1 }}\n"
        );
        let infra = Infrastructure::from_yaml("i.yaml", INFRA).unwrap();
        nfx_model::ServiceSet::from_yaml("s.yaml", &text, &infra)
            .unwrap()
            .services
            .remove(0)
    }

    #[test]
    fn a_pinned_table_function_takes_its_entries_or_is_refused_with_the_reason() {
        let infra = Infrastructure::from_yaml("i.yaml", INFRA).unwrap();
        let p = pins(
            &svc("[{ function: firewall, tier: table, config: { max_flows: 1000, rules: [{ action: allow }] } }, { function: dpi }]"),
            &infra,
        )
        .unwrap();
        assert_eq!(
            p["firewall"],
            Pin {
                tier: Some(Tier::Table),
                table_entries: Some(1001.0)
            }
        );
        assert_eq!(
            p["dpi"],
            Pin {
                tier: None,
                table_entries: None
            }
        );
        let e = pins(
            &svc("[{ function: nat, tier: table, config: { snat: { public_ip: 192.0.2.1 }, max_flows: 4000 } }]"),
            &infra,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("cannot run on the table tier")
                && e.to_string().contains("4096"),
            "{e}"
        );
        let e = pins(
            &svc("[{ function: firewall, tier: table, config: { max_flows_per_source: 5 } }]"),
            &infra,
        )
        .unwrap_err();
        assert!(e.to_string().contains("max_flows_per_source"), "{e}");
    }

    #[test]
    fn the_controller_reads_no_rules_file_at_plan_time() {
        let infra = Infrastructure::from_yaml("i.yaml", INFRA).unwrap();
        for file in ["/etc/passwd", "rules.txt", "../../x"] {
            let p = pins(
                &svc(&format!("[{{ function: firewall, tier: table, config: {{ max_flows: 100, rules_file: \"{file}\", rules: [{{ action: allow }}] }} }}]")),
                &infra,
            )
            .unwrap();
            assert_eq!(p["firewall"].table_entries, Some(101.0), "{file}");
        }
    }
}
