//! The stats document (`{"cmd":"stats"}`, `nfx stats --json`, final output of `nfx run`):
//! its types are the protocol's ([`nfx_proto::stats`]); here is how a worker fills in
//! its drop counters.

use nfx_packet::DropReason;
use std::collections::BTreeMap;

pub use nfx_proto::stats::*;

/// Turns a dense drop-counter array into the by-name map of the stats document.
pub fn drops_map(drops: &[u64; DropReason::COUNT]) -> BTreeMap<String, u64> {
    DropReason::ALL
        .iter()
        .map(|r| (r.as_str().to_string(), drops[*r as usize]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_map_lists_every_reason_by_name() {
        let mut d = [0u64; DropReason::COUNT];
        d[DropReason::AclDeny as usize] = 3;
        let m = drops_map(&d);
        assert_eq!(m.len(), DropReason::COUNT);
        assert_eq!(m["acl_deny"], 3);
        assert_eq!(m["tx_error"], 0);
    }
}
