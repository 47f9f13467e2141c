//! NAT state export/import (live migration). One 24-byte record per mapping, little
//! endian: proto u8, flags u8 (shared flags), inside addr u32 + port u16, public
//! addr u32 + port u16, remote addr u32 + port u16, remaining lifetime in ms u32.

use super::{Mapping, Nat, FWD, PENDING, SHARED};
use crate::table::blob::{self, BlobKind};
use crate::StateError;
use nfx_packet::parse::IPPROTO_ICMP;

/// Bytes per exported mapping.
pub const RECORD_LEN: usize = 24;

/// How many records ahead the import starts loading a mapping's buckets (both keys), so
/// that the cache misses of a large import overlap.
const PREFETCH_AHEAD: usize = 16;

pub(super) fn export(nat: &Nat, out: &mut Vec<u8>) -> usize {
    let at = blob::write_header(out, BlobKind::Nat, RECORD_LEN);
    let mut n = 0;
    for (slot, e) in nat.table.iter() {
        if e.val.flags & FWD == 0 || e.val.flags & PENDING != 0 || e.expires_ns <= nat.now_ns {
            continue;
        }
        let m = nat.mapping_at(slot);
        out.extend_from_slice(&[m.proto, e.val.flags & SHARED]);
        for (addr, port) in [m.inside, m.public, m.remote] {
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&port.to_le_bytes());
        }
        out.extend_from_slice(&blob::remaining_ms(e.expires_ns, nat.now_ns).to_le_bytes());
        n += 1;
    }
    blob::patch_count(out, at, n);
    n
}

fn decode(i: usize, r: &[u8]) -> Result<(Mapping, u8, u64), StateError> {
    let ep = |at: usize| (blob::le32(r, at), blob::le16(r, at + 4));
    let m = Mapping {
        proto: r[0],
        inside: ep(2),
        public: ep(8),
        remote: ep(14),
    };
    let flags = r[1];
    if flags & !SHARED != 0 {
        return Err(StateError::Malformed(format!(
            "record {i}: unknown flag bits {flags:#x}"
        )));
    }
    if m.proto == IPPROTO_ICMP && m.remote.1 != m.inside.1 {
        return Err(StateError::Malformed(format!(
            "record {i}: ICMP mapping with two ids"
        )));
    }
    Ok((m, flags, u64::from(blob::le32(r, 20)) * 1_000_000))
}

pub(super) fn import(nat: &mut Nat, data: &[u8]) -> Result<usize, StateError> {
    let records = blob::records(data, BlobKind::Nat, RECORD_LEN)?;
    let decoded = records
        .iter()
        .enumerate()
        .map(|(i, r)| decode(i, r))
        .collect::<Result<Vec<_>, _>>()?;
    let base = nat.now_ns;
    let mut added: Vec<usize> = Vec::with_capacity(decoded.len() * 2);
    let mut count = 0;
    for (i, (m, flags, remaining)) in decoded.iter().enumerate() {
        if let Some((ahead, _, _)) = decoded.get(i + PREFETCH_AHEAD) {
            nat.table.prefetch_buckets(&ahead.fwd_key());
            nat.table.prefetch_buckets(&ahead.rev_key());
        }
        let (fk, rk) = (m.fwd_key(), m.rev_key());
        if nat.table.find(&fk).is_some() || nat.table.find(&rk).is_some() {
            continue;
        }
        let expires = base + remaining;
        let fwd = super::NatVal {
            addr: m.public.0,
            port: m.public.1,
            flags: FWD | flags,
            twin: 0,
        };
        let a = nat.table.insert_free(fk, expires, fwd);
        let b = a.and_then(|a| {
            let rev = super::NatVal {
                addr: m.inside.0,
                port: m.inside.1,
                flags: *flags,
                twin: a as u32,
            };
            nat.table.insert_free(rk, expires, rev)
        });
        match (a, b) {
            (Some(a), Some(b)) => {
                nat.table.get_mut(a).val.twin = b as u32;
                added.extend([a, b]);
                count += 1;
            }
            _ => {
                if let Some(a) = a {
                    nat.table.remove(a);
                }
                for slot in added {
                    nat.table.remove(slot);
                }
                return Err(StateError::TableFull(i));
            }
        }
    }
    if !nat.clock_seen {
        nat.rebase_pending = true;
    }
    Ok(count)
}
