//! The stats document (`{"cmd":"stats"}`, `nfx stats --json`, final output of `nfx run`):
//! its types are the protocol's ([`nfx_proto::stats`]); here is how a worker fills in
//! its drop counters.

use nfx_packet::DropReason;
use std::collections::BTreeMap;

pub use nfx_proto::stats::*;

/// Every reason, sorted by name: the by-name map is built from it without a sort (a
/// stats document holds one per port, node and service).
const BY_NAME: [DropReason; DropReason::COUNT] = [
    DropReason::AclDeny,
    DropReason::AuthFailed,
    DropReason::BadEncap,
    DropReason::BadIpChecksum,
    DropReason::BadIpHeader,
    DropReason::BadL4Header,
    DropReason::DpiDrop,
    DropReason::Fragment,
    DropReason::InvalidState,
    DropReason::NatNoMapping,
    DropReason::NatNoPort,
    DropReason::NoService,
    DropReason::NonIp,
    DropReason::Replay,
    DropReason::TableFull,
    DropReason::TooBig,
    DropReason::Truncated,
    DropReason::TtlExpired,
    DropReason::TxError,
];

/// Turns a dense drop-counter array into the by-name map of the stats document.
pub fn drops_map(drops: &[u64; DropReason::COUNT]) -> BTreeMap<String, u64> {
    BY_NAME
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

    #[test]
    fn by_name_is_every_reason_in_name_order() {
        let names: Vec<&str> = BY_NAME.iter().map(|r| r.as_str()).collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
        let mut seen = [false; DropReason::COUNT];
        for r in BY_NAME {
            seen[r as usize] = true;
        }
        assert!(seen.iter().all(|s| *s), "a reason is missing from BY_NAME");
    }
}
