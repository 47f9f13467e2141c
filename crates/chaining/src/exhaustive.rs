//! Reference oracle: tries every combination of usable instances. Exponential; used by
//! tests (and available to tools) to prove the DP exact on small networks.

use crate::dp::{classify, Outcome};
use crate::network::{Network, Query};

/// Answers `q` by enumerating every path; the same [`Outcome`] the exact DP must give.
pub fn solve(net: &Network, q: &Query) -> (Outcome, Vec<u32>) {
    let stages: Vec<Vec<u32>> = q
        .chain
        .iter()
        .enumerate()
        .map(|(k, &f)| {
            net.instances_of(f)
                .iter()
                .copied()
                .filter(|&x| net.inst(x).serves(&q.needs_at(k)))
                .collect()
        })
        .collect();
    if let Some(k) = stages.iter().position(Vec::is_empty) {
        return (classify(q, Err(k)), Vec::new());
    }
    let mut best: Option<(u64, Vec<u32>)> = None;
    let mut pick = vec![0usize; stages.len()];
    loop {
        let path: Vec<u32> = pick.iter().zip(&stages).map(|(&p, s)| s[p]).collect();
        let lat = net.path_latency_ns(q, &path);
        if best.as_ref().is_none_or(|(b, _)| lat < *b) {
            best = Some((lat, path));
        }
        let mut k = 0;
        loop {
            if k == stages.len() {
                let (lat, path) = best.expect("at least one path was tried");
                return (classify(q, Ok(lat)), path);
            }
            pick[k] += 1;
            if pick[k] < stages[k].len() {
                break;
            }
            pick[k] = 0;
            k += 1;
        }
    }
}
