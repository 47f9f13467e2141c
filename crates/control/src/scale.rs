//! A synthetic large infrastructure (HYPER-style: software everywhere, a table-tier device
//! on every 5th host, an accelerator on every 10th) and the measurement of how long the
//! mediator takes to chain and place a 6-function service on it.

use crate::enforcer::Enforcer;
use crate::mediator::{Mediator, VnfmMap};
use crate::vnfm::sim::{SimConfig, SimVnfm};
use nfx_model::service::Service;
use nfx_model::Infrastructure;
use std::sync::Arc;
use std::time::Instant;

/// The six functions of the benchmark chain.
pub const CHAIN6: [&str; 6] = ["firewall", "nat", "elephant", "dpi", "ipsec", "lb"];

/// `hosts` hosts on a ring (10 µs links) with chords (25 µs), deterministic.
pub fn synthetic_infra(hosts: usize) -> anyhow::Result<Infrastructure> {
    let mut y = String::from("hosts:\n");
    for i in 0..hosts {
        y.push_str(&format!("  - {{ id: h{i}, cores: 16 }}\n"));
    }
    y.push_str("devices:\n");
    for i in 0..hosts {
        let lat = 25 + (i * 37) % 21;
        y.push_str(&format!(
            "  - {{ id: sw{i}, host: h{i}, tier: software, functions: [firewall, nat, elephant, dpi, ipsec, lb], latency_us: {lat}, throughput_gbps: 20, cpu_cores: 16, cost: 1 }}\n"
        ));
        if i % 5 == 0 {
            y.push_str(&format!(
                "  - {{ id: tt{i}, host: h{i}, tier: table, functions: [firewall, nat, elephant, lb], latency_us: 2, throughput_gbps: 100, table_entries: 4096, cost: 5 }}\n"
            ));
        }
        if i % 10 == 0 {
            y.push_str(&format!(
                "  - {{ id: ax{i}, host: h{i}, tier: accelerator, functions: [ipsec], latency_us: 4, throughput_gbps: 40, queue_pairs: 8, algorithms: [aes-128-gcm], cost: 8 }}\n"
            ));
        }
    }
    y.push_str("links:\n");
    for i in 0..hosts {
        let j = (i + 1) % hosts;
        if hosts > 1 && i != j && !(hosts == 2 && i == 1) {
            y.push_str(&format!("  - {{ a: h{i}, b: h{j}, latency_us: 10 }}\n"));
        }
        let k = (i * 7 + 3) % hosts;
        if hosts > 3
            && k != i
            && k != j
            && (k + 1) % hosts != i
            && ((i * 7 + 3) / hosts).is_multiple_of(2)
        {
            y.push_str(&format!("  - {{ a: h{i}, b: h{k}, latency_us: 25 }}\n"));
        }
    }
    Ok(Infrastructure::from_yaml("<synthetic>", &dedup_links(&y))?)
}

/// Drops repeated links (a chord can coincide with another host's chord).
fn dedup_links(y: &str) -> String {
    let mut seen = std::collections::HashSet::new();
    y.lines()
        .filter(|l| {
            let Some(rest) = l.strip_prefix("  - { a: ") else {
                return true;
            };
            let mut it = rest.split(", b: ");
            let a = it.next().unwrap_or_default().to_string();
            let b = it
                .next()
                .and_then(|s| s.split(',').next())
                .unwrap_or_default()
                .to_string();
            let key = if a < b { (a, b) } else { (b, a) };
            seen.insert(key)
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A 6-function service between two hosts.
pub fn chain6_service(
    id: &str,
    ingress: &str,
    egress: &str,
    max_latency_us: f64,
) -> anyhow::Result<Service> {
    let chain = CHAIN6
        .iter()
        .map(|f| format!("{{ function: {f} }}"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(serde_yaml_ng::from_str(&format!(
        "{{ id: {id:?}, tenant: bench, ingress: {ingress:?}, egress: {egress:?}, chain: [{chain}], sla: {{ max_latency_us: {max_latency_us}, min_throughput_gbps: 1 }} }}"
    ))?)
}

/// Times `services` successive 6-function chain placements on `hosts` simulated hosts;
/// returns setup and per-service figures (ms) and how the tiers were used.
pub fn bench_chain_placement(hosts: usize, services: usize) -> anyhow::Result<serde_json::Value> {
    let t0 = Instant::now();
    let infra = synthetic_infra(hosts)?;
    let t_infra = t0.elapsed();
    let t1 = Instant::now();
    let sim = Arc::new(SimVnfm::new(&infra, SimConfig::default())?);
    let mut med = Mediator::new(infra, VnfmMap::new(sim), Arc::new(Enforcer::default()))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let t_setup = t1.elapsed();
    let mut times = Vec::with_capacity(services);
    let mut tiers = std::collections::BTreeMap::<String, u64>::new();
    let mut infeasible = 0;
    for s in 0..services {
        let (a, b) = ((s * 131) % hosts, (s * 131 + hosts / 2) % hosts);
        let bound = if s % 2 == 0 { 600.0 } else { 200.0 };
        let svc = chain6_service(&format!("s{s}"), &format!("h{a}"), &format!("h{b}"), bound)?;
        let t = Instant::now();
        let plan = med.plan_deploy(&svc);
        let plan = match plan {
            Ok(p) => p,
            Err(_) => {
                infeasible += 1;
                times.push(t.elapsed().as_secs_f64() * 1e3);
                continue;
            }
        };
        med.apply_rows(&plan.instances, &plan.paths)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        for p in &plan.placements {
            *tiers.entry(p.tier.as_str().into()).or_default() += 1;
        }
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    Ok(serde_json::json!({
        "hosts": hosts,
        "devices": med.infra().devices.len(),
        "services": services,
        "infeasible": infeasible,
        "build_infra_ms": t_infra.as_secs_f64() * 1e3,
        "mediator_setup_ms": t_setup.as_secs_f64() * 1e3,
        "place_and_chain_ms": {"mean": mean, "p50": sorted.get(sorted.len() / 2), "max": sorted.last()},
        "placements_by_tier": tiers,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_infra_is_valid_and_connected() {
        let i = synthetic_infra(50).unwrap();
        assert_eq!(i.hosts.len(), 50);
        assert_eq!(i.devices.len(), 50 + 10 + 5);
        let m = crate::topology::transfer_matrix(&i, f64::INFINITY);
        assert!(m.iter().flatten().all(|d| d.is_finite()));
        let r = bench_chain_placement(20, 4).unwrap();
        assert_eq!(r["services"], 4);
        assert!(
            r["placements_by_tier"]
                .as_object()
                .unwrap()
                .values()
                .count()
                > 0
        );
    }
}
