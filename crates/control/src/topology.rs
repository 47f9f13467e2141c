//! Host-to-host transfer latencies for chaining, computed once per infrastructure with one
//! Dijkstra per host (sparse links: thousands of hosts stay in milliseconds, where an
//! all-pairs cubic pass would take seconds).

use nfx_model::Infrastructure;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Shortest one-way latency (µs) between every pair of hosts, indexed like `infra.hosts`;
/// unreachable pairs get `unreachable_us`.
pub fn transfer_matrix(infra: &Infrastructure, unreachable_us: f64) -> Vec<Vec<f64>> {
    let n = infra.hosts.len();
    let index: std::collections::HashMap<&str, usize> = infra
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.id.as_str(), i))
        .collect();
    let mut adj: Vec<Vec<(usize, u64)>> = vec![Vec::new(); n];
    for l in &infra.links {
        if let (Some(&a), Some(&b)) = (index.get(l.a.as_str()), index.get(l.b.as_str())) {
            let w = (l.latency_us * 1000.0).round() as u64;
            adj[a].push((b, w));
            adj[b].push((a, w));
        }
    }
    let mut out = vec![vec![unreachable_us; n]; n];
    let mut dist = vec![u64::MAX; n];
    let mut heap = BinaryHeap::new();
    for (s, row) in out.iter_mut().enumerate() {
        dist.iter_mut().for_each(|d| *d = u64::MAX);
        dist[s] = 0;
        heap.push(Reverse((0u64, s)));
        while let Some(Reverse((d, u))) = heap.pop() {
            if d > dist[u] {
                continue;
            }
            for &(v, w) in &adj[u] {
                let nd = d + w;
                if nd < dist[v] {
                    dist[v] = nd;
                    heap.push(Reverse((nd, v)));
                }
            }
        }
        for (v, &d) in dist.iter().enumerate() {
            if d != u64::MAX {
                row[v] = d as f64 / 1000.0;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_model_floyd_warshall() {
        let infra = Infrastructure::from_yaml(
            "i.yaml",
            "
hosts: [{id: a, cores: 1}, {id: b, cores: 1}, {id: c, cores: 1}, {id: d, cores: 1}]
links: [{a: a, b: b, latency_us: 5}, {a: b, b: c, latency_us: 7.5}, {a: a, b: c, latency_us: 20}]
",
        )
        .unwrap();
        let m = transfer_matrix(&infra, 1e9);
        let fw = infra.transfer_latency_us();
        for i in 0..3 {
            for j in 0..3 {
                assert_eq!(m[i][j], fw[i][j], "{i}->{j}");
            }
        }
        assert_eq!(m[0][2], 12.5);
        assert_eq!(m[0][3], 1e9);
        assert_eq!(m[3][3], 0.0);
    }
}
