//! Firewall state export/import (live migration). Record: 20 bytes, little endian:
//! canonical key (src u32, dst u32, sport u16, dport u16, proto u8), state u8,
//! flags u8, reserved u8 (0), remaining lifetime in ms u32.

use super::{canonical, Firewall, FwVal, FINS, NSTATES, STATE_NEW, SWAPPED};
use crate::table::blob::{self, BlobKind};
use crate::StateError;
use nfx_packet::parse::IPPROTO_TCP;
use nfx_packet::FlowKey;

/// Bytes per exported flow.
pub const RECORD_LEN: usize = 20;

/// How many records ahead the import starts loading a record's buckets, so that the
/// cache misses of a large import overlap instead of queueing one after another.
const PREFETCH_AHEAD: usize = 16;

pub(super) fn export(fw: &Firewall, out: &mut Vec<u8>) -> usize {
    let at = blob::write_header(out, BlobKind::Firewall, RECORD_LEN);
    let mut n = 0;
    for (_, e) in fw.table.iter().filter(|(_, e)| e.expires_ns > fw.now_ns) {
        let k = e.key;
        out.extend_from_slice(&k.src.to_le_bytes());
        out.extend_from_slice(&k.dst.to_le_bytes());
        out.extend_from_slice(&k.sport.to_le_bytes());
        out.extend_from_slice(&k.dport.to_le_bytes());
        out.extend_from_slice(&[k.proto, e.val.state, e.val.flags, 0]);
        out.extend_from_slice(&blob::remaining_ms(e.expires_ns, fw.now_ns).to_le_bytes());
        n += 1;
    }
    blob::patch_count(out, at, n);
    n
}

fn decode(i: usize, r: &[u8]) -> Result<(FlowKey, FwVal, u64), StateError> {
    let bad = |what: &str| StateError::Malformed(format!("record {i}: {what}"));
    let key = FlowKey {
        src: blob::le32(r, 0),
        dst: blob::le32(r, 4),
        sport: blob::le16(r, 8),
        dport: blob::le16(r, 10),
        proto: r[12],
    };
    let (state, flags) = (r[13], r[14]);
    if usize::from(state) >= NSTATES || state == 0 {
        return Err(bad(&format!("state code {state}")));
    }
    if (key.proto == IPPROTO_TCP) != (state < STATE_NEW) {
        return Err(bad(&format!(
            "state code {state} for protocol {}",
            key.proto
        )));
    }
    if flags & !(SWAPPED | FINS) != 0 || r[15] != 0 {
        return Err(bad("unknown flag bits"));
    }
    if canonical(&key).1 {
        return Err(bad("key is not in canonical order"));
    }
    Ok((
        key,
        FwVal { state, flags },
        u64::from(blob::le32(r, 16)) * 1_000_000,
    ))
}

pub(super) fn import(fw: &mut Firewall, data: &[u8]) -> Result<usize, StateError> {
    let records = blob::records(data, BlobKind::Firewall, RECORD_LEN)?;
    let decoded = records
        .iter()
        .enumerate()
        .map(|(i, r)| decode(i, r))
        .collect::<Result<Vec<_>, _>>()?;
    let base = fw.now_ns;
    let mut added = Vec::with_capacity(decoded.len());
    let mut by_state = [0u64; NSTATES];
    for (i, (key, val, remaining)) in decoded.iter().enumerate() {
        if let Some((ahead, _, _)) = decoded.get(i + PREFETCH_AHEAD) {
            fw.table.prefetch_buckets(ahead);
        }
        if fw.table.find(key).is_some() {
            continue;
        }
        match fw.table.insert_free(*key, base + remaining, *val) {
            Some(slot) => {
                added.push(slot);
                by_state[usize::from(val.state)] += 1;
            }
            None => {
                for slot in added {
                    fw.table.remove(slot);
                }
                return Err(StateError::TableFull(i));
            }
        }
    }
    for (total, n) in fw.by_state.iter_mut().zip(by_state) {
        *total += n;
    }
    if !fw.clock_seen {
        fw.rebase_pending = true;
    }
    Ok(added.len())
}
