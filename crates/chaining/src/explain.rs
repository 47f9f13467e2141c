//! Human-readable reasons for an answer: which stage, which bound, by how much.

use crate::dp::{Outcome, Status};
use crate::network::{to_us, Network, Query};
use std::fmt::Write;

/// Explains `o` (with `path`, the best path when one exists) in one or two sentences.
/// Stages are numbered from 1 in the text.
pub fn explain(net: &Network, q: &Query, o: &Outcome, path: &[u32]) -> String {
    match o.status {
        Status::InfeasibleResources => resources(net, q, o.stage.unwrap_or(0)),
        Status::Ok | Status::InfeasibleLatency => latency(net, q, o, path),
    }
}

fn resources(net: &Network, q: &Query, first: usize) -> String {
    let mut s = String::new();
    for (k, &f) in q.chain.iter().enumerate().skip(first) {
        let list = net.instances_of(f);
        let needs = q.needs_at(k);
        if list.iter().any(|&x| net.inst(x).serves(&needs)) {
            continue;
        }
        if !s.is_empty() {
            s.push_str("; also ");
        }
        let name = &q.names[k];
        if list.is_empty() {
            let _ = write!(s, "stage {} ({name}): no instance of {name} exists", k + 1);
            continue;
        }
        let short_gbps = list
            .iter()
            .filter(|&&x| net.inst(x).free_gbps < needs.throughput_gbps)
            .count();
        let short_cap = list
            .iter()
            .filter(|&&x| net.inst(x).free_capacity < needs.capacity)
            .count();
        let best = list
            .iter()
            .copied()
            .max_by(|&a, &b| net.inst(a).free_gbps.total_cmp(&net.inst(b).free_gbps))
            .expect("list is not empty");
        let bi = net.inst(best);
        let _ = write!(
            s,
            "stage {} ({name}): none of its {} instances has {} Gbit/s free throughput and {} \
             capacity free ({short_gbps} lack throughput, {short_cap} lack capacity; most free: \
             {} with {:.3} Gbit/s and {:.3} capacity)",
            k + 1,
            list.len(),
            needs.throughput_gbps,
            needs.capacity,
            net.inst_id(best),
            bi.free_gbps,
            bi.free_capacity
        );
    }
    s
}

fn latency(net: &Network, q: &Query, o: &Outcome, path: &[u32]) -> String {
    let lat = o.latency_ns.unwrap_or(0);
    let proc_ns: u64 = path.iter().map(|&x| net.inst(x).proc_ns).sum();
    let ids: Vec<&str> = path.iter().map(|&x| net.inst_id(x)).collect();
    let head = format!(
        "path {} takes {:.3} µs ({:.3} processing + {:.3} transfer)",
        if ids.is_empty() {
            "(direct)".to_string()
        } else {
            ids.join(" → ")
        },
        to_us(lat),
        to_us(proc_ns),
        to_us(lat - proc_ns)
    );
    if o.status == Status::Ok {
        return format!("{head} <= bound {:.3} µs", to_us(q.bound_ns));
    }
    let mut at = q.src;
    let mut worst = (0, 0u64, 0u64);
    for (k, &x) in path.iter().enumerate() {
        let i = net.inst(x);
        let t = net.transfer_ns(at, i.node);
        if t + i.proc_ns > worst.1 + worst.2 {
            worst = (k, t, i.proc_ns);
        }
        at = i.node;
    }
    let min_proc: u64 = q
        .chain
        .iter()
        .enumerate()
        .map(|(k, &f)| {
            net.instances_of(f)
                .iter()
                .filter(|&&x| net.inst(x).serves(&q.needs_at(k)))
                .map(|&x| net.inst(x).proc_ns)
                .min()
                .unwrap_or(0)
        })
        .sum();
    let mut s = format!(
        "{head}, the fastest usable chain, exceeding bound {:.3} µs by {:.3} µs",
        to_us(q.bound_ns),
        to_us(lat - q.bound_ns)
    );
    if let Some(&x) = path.get(worst.0) {
        let _ = write!(
            s,
            "; the costliest stage is {} ({}) at {}: {:.3} µs transfer in + {:.3} µs processing",
            worst.0 + 1,
            q.names[worst.0],
            net.inst_id(x),
            to_us(worst.1),
            to_us(worst.2)
        );
    }
    if min_proc > q.bound_ns {
        let _ = write!(
            s,
            "; processing alone on the fastest usable instance of each function needs {:.3} µs",
            to_us(min_proc)
        );
    }
    s
}
