//! Fuzz target: flow-state blobs of any bytes offered to a firewall, a NAT, a DPI or
//! an elephant node. An unreadable blob fails and leaves the node's state exactly as
//! it was; a readable one accounts for every record (imported or skipped by reason);
//! what is imported fits this node's configuration (ACL, pool, forwards, timeouts);
//! an imported blob offered again adds nothing; the tables stay within their bounds.
//!
//! Input: byte 0 picks the node (bits 0..1: firewall, NAT, DPI, elephant) and the
//! firewall/NAT configuration (bits 2..4, as in `fw_nat`); byte 1 is where the first
//! blob ends. The first blob gives the node some state, the second is offered on top.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_vnf::Node;
use nfx_vnf_fuzz::{announced, check_bounds, exported, fw_nat, node};

/// Longest lifetime any record may keep: the firewall's established timeout (5 days)
/// and the NAT's answered-TCP timeout, in ms.
const FW_MAX_MS: u32 = 432_000_000;
const NAT_MAX_MS: u32 = 7_440_000;

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Every flow the node holds fits its configuration (see `fw_nat_yaml`).
fn check_state(kind: u8, n: &dyn Node) {
    let (_, blob) = exported(n);
    match kind {
        0 => {
            for r in blob[12..].chunks_exact(56) {
                assert!(le32(r, 16) <= FW_MAX_MS, "lifetime not capped");
                let (sport, dport) = (u16::from_le_bytes([r[8], r[9]]), u16::from_le_bytes([r[10], r[11]]));
                let opener_dport = if r[14] & 0x80 != 0 { sport } else { dport };
                let opener_src = if r[14] & 0x80 != 0 { le32(r, 4) } else { le32(r, 0) };
                if r[12] == 6 {
                    let web = opener_src >> 24 == 10 && (1..=1024).contains(&opener_dport);
                    assert!(opener_dport == 5201 || web, "TCP flow the ACL denies");
                    assert_ne!(opener_src, 0x0a00_0042, "denied source");
                } else {
                    assert!(r[12] == 17 || r[12] == 1, "protocol the ACL denies");
                }
            }
        }
        _ => {
            for r in blob[12..].chunks_exact(24) {
                assert!(le32(r, 20) <= NAT_MAX_MS, "lifetime not capped");
                let public = (le32(r, 8), u16::from_le_bytes([r[12], r[13]]));
                let inside = (le32(r, 2), u16::from_le_bytes([r[6], r[7]]));
                assert_eq!(public.0, 0x0ac8_0264, "public address");
                if r[1] & 2 != 0 {
                    let fwd = [(6, 40010, 0x0a00_0009, 22), (17, 53, 0x0a00_0035, 53)];
                    assert!(fwd.contains(&(r[0], public.1, inside.0, inside.1)), "unconfigured forward");
                } else {
                    assert!(inside.0 >> 24 == 10, "inside host outside the inside networks");
                    let pooled = (40000..=40063).contains(&public.1) && (r[0], public.1) != (6, 40010);
                    let ports = matches!(r[0], 1 | 6 | 17);
                    assert!(if ports { pooled } else { public.1 == 0 }, "port outside the pool");
                }
            }
        }
    }
}

/// Offers `blob` to `n` and checks the contract.
fn offer(kind: u8, n: &mut dyn Node, blob: &[u8]) {
    let before = exported(n);
    match n.import_report(blob) {
        Err(_) => assert_eq!(exported(n), before, "a failed import changed state"),
        Ok(r) => {
            if !blob.is_empty() && kind < 2 {
                assert_eq!(Some(r.imported + r.skipped_total()), announced(blob), "{r:?}");
                check_state(kind, n);
            }
            assert_eq!(n.import_report(blob).map(|r| r.imported), Ok(0), "a second import added flows");
        }
    }
    check_bounds(n);
}

fuzz_target!(|data: &[u8]| {
    let [which, cut, rest @ ..] = data else {
        return;
    };
    let kind = which & 3;
    let (first, second) = rest.split_at(usize::from(*cut).min(rest.len()));
    let mut n = match kind {
        0 | 1 => fw_nat(which >> 2, usize::from(kind)),
        k => node(usize::from(k)),
    };
    offer(kind, n.as_mut(), first);
    offer(kind, n.as_mut(), second);
});
