//! Firewall state export/import (live migration). Record: 56 bytes, little endian:
//! canonical key (src u32, dst u32, sport u16, dport u16, proto u8), state u8, flags u8,
//! reserved u8 (0), remaining lifetime in ms u32, then the TCP windows (zero for other
//! protocols): scale u8 ×2, side flags u8 ×2, and per side end, maxend, maxwin, maxack
//! (u32 each), opener's side first.
//!
//! A blob comes from another host and may be forged, so each record is checked
//! against this firewall's own configuration before it is tracked: it must decode, its
//! flow must be one this ACL admits (opened from the side `reverse_new` allows), it
//! must not be tracked already, its lifetime is cut to what this firewall would give
//! the flow, and its source must be under `max_flows_per_source`. A record that fails
//! is counted by reason and left out; the rest are imported.

use super::window::{Seen, Windows, ALL_FLAGS as SIDE_FLAGS};
use super::{
    canonical, opener, Firewall, FwVal, ALL_FLAGS, ASSURED, FINS, NSTATES, REV_OPEN, STATE_NEW,
    SWAPPED,
};
use crate::table::blob::{self, BlobKind};
use crate::{ImportReport, SkipReason, StateError};
use nfx_packet::parse::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use nfx_packet::tcp::MAX_WSCALE;
use nfx_packet::FlowKey;

/// Bytes per exported flow.
pub const RECORD_LEN: usize = 56;

/// How many records ahead the import starts loading a record's buckets, so that the
/// cache misses of a large import overlap instead of queueing one after another.
const PREFETCH_AHEAD: usize = 16;

pub(super) fn export(fw: &Firewall, out: &mut Vec<u8>) -> usize {
    let at = blob::write_header(out, BlobKind::Firewall, RECORD_LEN);
    let mut n = 0;
    for (_, e) in fw.table.iter().filter(|(_, e)| e.expires_ns > fw.now_ns) {
        let (k, v) = (e.key, e.val);
        out.extend_from_slice(&k.src.to_le_bytes());
        out.extend_from_slice(&k.dst.to_le_bytes());
        out.extend_from_slice(&k.sport.to_le_bytes());
        out.extend_from_slice(&k.dport.to_le_bytes());
        out.extend_from_slice(&[k.proto, v.state, v.flags, 0]);
        out.extend_from_slice(&blob::remaining_ms(e.expires_ns, fw.now_ns).to_le_bytes());
        out.extend_from_slice(&[
            v.win.scale[0],
            v.win.scale[1],
            v.win.flags[0],
            v.win.flags[1],
        ]);
        for s in v.win.seen {
            for x in [s.end, s.maxend, s.maxwin, s.maxack] {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        n += 1;
    }
    blob::patch_count(out, at, n);
    n
}

/// Marks both sides of every TCP connection in firewall blob `data` as fallen behind
/// ([`BEHIND`](super::window::BEHIND), both windows forgotten so that each is learnt
/// again from its side's next live segment): for a copy taken while the exporting
/// firewall still forwarded the connections, whose windows lag behind by whatever was
/// sent until the traffic reached the importer (a move to another host,
/// docs/migration.md). Returns the TCP records marked; a blob that is not a firewall
/// blob is refused unchanged.
pub fn mark_windows_behind(data: &mut [u8]) -> Result<usize, StateError> {
    blob::records(data, BlobKind::Firewall, RECORD_LEN)?;
    let mut n = 0;
    for r in data[blob::HEADER_LEN..].chunks_exact_mut(RECORD_LEN) {
        if r[12] == IPPROTO_TCP {
            r[22] |= super::window::BEHIND;
            r[23] |= super::window::BEHIND;
            for maxwin in [32, 48] {
                r[maxwin..maxwin + 4].fill(0);
            }
            n += 1;
        }
    }
    Ok(n)
}

fn key_of(r: &[u8]) -> FlowKey {
    FlowKey {
        src: blob::le32(r, 0),
        dst: blob::le32(r, 4),
        sport: blob::le16(r, 8),
        dport: blob::le16(r, 10),
        proto: r[12],
    }
}

/// Decodes a record; `None` when a field holds a value no firewall writes.
fn decode(r: &[u8]) -> Option<(FlowKey, FwVal, u64)> {
    let key = key_of(r);
    let (state, flags) = (r[13], r[14]);
    let tcp = key.proto == IPPROTO_TCP;
    let side = |at: usize| Seen {
        end: blob::le32(r, at),
        maxend: blob::le32(r, at + 4),
        maxwin: blob::le32(r, at + 8),
        maxack: blob::le32(r, at + 12),
    };
    let win = Windows {
        scale: [r[20], r[21]],
        flags: [r[22], r[23]],
        seen: [side(24), side(40)],
    };
    let ports_ok = match key.proto {
        IPPROTO_TCP | IPPROTO_UDP => true,
        IPPROTO_ICMP => key.sport == key.dport,
        _ => key.sport == 0 && key.dport == 0,
    };
    let valid = state != 0
        && usize::from(state) < NSTATES
        && tcp == (state < STATE_NEW)
        && flags & !ALL_FLAGS == 0
        && r[15] == 0
        && !canonical(&key).1
        && ports_ok
        && (tcp || (flags & FINS == 0 && win == Windows::default()))
        && !(key.proto == IPPROTO_ICMP && flags & ASSURED != 0)
        && win.scale.iter().all(|&s| s <= MAX_WSCALE)
        && win.flags.iter().all(|&f| f & !SIDE_FLAGS == 0);
    valid.then(|| {
        (
            key,
            FwVal { state, flags, win },
            u64::from(blob::le32(r, 16)) * 1_000_000,
        )
    })
}

/// Whether this firewall would have let the flow of `key`/`val` in.
fn admissible(fw: &Firewall, key: &FlowKey, val: &FwVal) -> Result<(), SkipReason> {
    let opener = if val.flags & SWAPPED != 0 {
        key.reversed()
    } else {
        *key
    };
    if val.flags & REV_OPEN != 0 && !fw.reverse_acl {
        Err(SkipReason::ReverseNew)
    } else if !fw.acl.allows(&opener) {
        Err(SkipReason::AclDeny)
    } else {
        Ok(())
    }
}

pub(super) fn import(fw: &mut Firewall, data: &[u8]) -> Result<ImportReport, StateError> {
    let records = blob::records(data, BlobKind::Firewall, RECORD_LEN)?;
    let base = fw.now_ns;
    let mut report = ImportReport::default();
    let mut added = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if let Some(ahead) = records.get(i + PREFETCH_AHEAD) {
            fw.table.prefetch_buckets(&key_of(ahead));
        }
        let Some((key, val, remaining)) = decode(r) else {
            report.skip(SkipReason::Malformed);
            continue;
        };
        if let Err(why) = admissible(fw, &key, &val) {
            report.skip(why);
            continue;
        }
        if fw.table.find(&key).is_some() {
            report.skip(SkipReason::Duplicate);
            continue;
        }
        let life = remaining.min(fw.timeouts.of(key.proto, &val));
        if life == 0 {
            report.skip(SkipReason::Expired);
            continue;
        }
        let src = opener(&key, val.flags);
        if fw
            .sources
            .as_ref()
            .is_some_and(|t| t.count(src) >= fw.per_source)
        {
            report.skip(SkipReason::SourceLimit);
            continue;
        }
        let Some(slot) = fw.table.insert_free(key, base + life, val) else {
            for slot in added {
                fw.remove(slot);
            }
            return Err(StateError::TableFull(i));
        };
        added.push(slot);
        fw.by_state[usize::from(val.state)] += 1;
        if let Some(t) = &mut fw.sources {
            t.increment(src, 0);
        }
    }
    if !fw.clock_seen {
        fw.rebase_pending = true;
    }
    report.imported = added.len();
    Ok(report)
}
