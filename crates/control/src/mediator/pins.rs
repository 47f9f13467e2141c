//! Functions a service pins to a tier (`tier:` in its chain). A function pinned to the
//! table tier is checked against the table tier at plan time with
//! `nfx_fastpath::table::check` — what the tier cannot run (DPI, an ACL larger than
//! every table device) is refused with the check's reason — and takes its table entries
//! (rules + flow rows) as its capacity on the device, as the agent that deploys it
//! counts them.

use super::PlanError;
use nfx_model::service::Service;
use nfx_model::{Infrastructure, Tier};
use std::collections::BTreeMap;
use std::path::Path;

/// Where one function of a service must go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pin {
    /// The only tier it may be placed on.
    pub tier: Tier,
    /// The capacity it takes on a device of that tier, when the tier counts it itself
    /// (table entries); `None`: the chain's `capacity_need`.
    pub capacity: Option<f64>,
}

/// The pins of `svc`'s chain by function; a function pinned to the table tier that no
/// table device of `infra` can run is refused with the reason.
pub fn pins(svc: &Service, infra: &Infrastructure) -> Result<BTreeMap<String, Pin>, PlanError> {
    let mut out = BTreeMap::new();
    for (k, c) in svc.chain.iter().enumerate() {
        let Some(tier) = c.tier else { continue };
        let capacity = if tier == Tier::Table {
            let largest = infra
                .devices
                .iter()
                .filter(|d| d.tier == Tier::Table)
                .filter_map(|d| d.table_entries)
                .max()
                .unwrap_or(0);
            let spec = node_spec(&c.function, &c.config)
                .map_err(|e| PlanError::Invalid(format!("chain[{k}] ({}): {e}", c.function)))?;
            let need =
                nfx_fastpath::table::check(&spec, largest, Path::new(NO_FILES)).map_err(|e| {
                    PlanError::Invalid(format!(
                        "chain[{k}] ({}) is pinned to the table tier: {e}",
                        c.function
                    ))
                })?;
            Some(need.entries as f64)
        } else {
            None
        };
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
        out.insert(c.function.clone(), Pin { tier, capacity });
    }
    Ok(out)
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
                tier: Tier::Table,
                capacity: Some(1001.0)
            }
        );
        assert!(!p.contains_key("dpi"));
        let e = pins(
            &svc("[{ function: nat, tier: table, config: { snat: { public_ip: 192.0.2.1 }, max_flows: 4000 } }]"),
            &infra,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("pinned to the table tier") && e.to_string().contains("4096"),
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
            assert_eq!(p["firewall"].capacity, Some(101.0), "{file}");
        }
    }
}
