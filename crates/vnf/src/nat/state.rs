//! NAT state export/import (live migration). One 24-byte record per mapping, little
//! endian: proto u8, flags u8 (shared flags), inside addr u32 + port u16, public
//! addr u32 + port u16, remote addr u32 + port u16, remaining lifetime in ms u32.
//!
//! A blob comes from another host and may be forged, so each record is checked
//! against this NAT's own configuration before it is mapped: a source-NAT mapping must
//! use this NAT's public address and a port of its pool (not a forwarded one) and
//! translate a host of its inside networks; a port-forward mapping must be one of its
//! configured forwards; neither direction may be mapped already; its lifetime is cut
//! to what this NAT would give it; its opener must be under `max_flows_per_source`. A
//! record that fails is counted by reason and left out; the rest are imported.

use super::ports::has_ports;
use super::{Mapping, Nat, DNAT, FWD, PENDING, SHARED};
use crate::table::blob::{self, BlobKind};
use crate::{ImportReport, SkipReason, StateError};
use nfx_packet::parse::IPPROTO_ICMP;

/// Bytes per exported mapping.
pub const RECORD_LEN: usize = 24;

/// How many records ahead the import starts loading a mapping's buckets (both keys), so
/// that the cache misses of a large import overlap.
const PREFETCH_AHEAD: usize = 16;

pub(super) fn export(nat: &Nat, out: &mut Vec<u8>) -> usize {
    let at = blob::write_header(out, BlobKind::Nat, RECORD_LEN);
    let mut n = 0;
    for (_, e) in nat.table.iter() {
        if e.val.flags & FWD == 0 || e.val.flags & PENDING != 0 || e.expires_ns <= nat.now_ns {
            continue;
        }
        let m = Mapping::of_entry(e);
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

fn mapping(r: &[u8]) -> Mapping {
    let ep = |at: usize| (blob::le32(r, at), blob::le16(r, at + 4));
    Mapping {
        proto: r[0],
        inside: ep(2),
        public: ep(8),
        remote: ep(14),
    }
}

/// Decodes a record; `None` when a field holds a value no NAT writes.
fn decode(r: &[u8]) -> Option<(Mapping, u8, u64)> {
    let m = mapping(r);
    let flags = r[1];
    let ports_ok = if has_ports(m.proto) {
        m.proto != IPPROTO_ICMP || m.remote.1 == m.inside.1
    } else {
        m.inside.1 == 0 && m.public.1 == 0 && m.remote.1 == 0
    };
    (flags & !SHARED == 0 && ports_ok).then(|| (m, flags, u64::from(blob::le32(r, 20)) * 1_000_000))
}

/// Whether this NAT would have made mapping `m` (`dnat`: a port forward).
fn admissible(nat: &Nat, m: &Mapping, dnat: bool) -> Result<(), SkipReason> {
    if dnat {
        let configured = nat.dnat.iter().any(|d| {
            (d.proto, d.public_ip, d.public_port, d.to_ip, d.to_port)
                == (m.proto, m.public.0, m.public.1, m.inside.0, m.inside.1)
        });
        return if configured {
            Ok(())
        } else {
            Err(SkipReason::NotConfigured)
        };
    }
    let (Some(s), Some(pool)) = (nat.snat, &nat.pool) else {
        return Err(SkipReason::OutsidePool);
    };
    let port_ok = if has_ports(m.proto) {
        pool.contains(m.public.1) && !pool.reserved(m.proto, m.public.1)
    } else {
        true
    };
    if m.public.0 != s.public_ip || !port_ok {
        Err(SkipReason::OutsidePool)
    } else if !nat.is_inside(m.inside.0) {
        Err(SkipReason::NotInside)
    } else {
        Ok(())
    }
}

pub(super) fn import(nat: &mut Nat, data: &[u8]) -> Result<ImportReport, StateError> {
    let records = blob::records(data, BlobKind::Nat, RECORD_LEN)?;
    let base = nat.now_ns;
    let mut report = ImportReport::default();
    let mut added: Vec<usize> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if let Some(ahead) = records.get(i + PREFETCH_AHEAD).map(|r| mapping(r)) {
            nat.table.prefetch_buckets(&ahead.fwd_key());
            nat.table.prefetch_buckets(&ahead.rev_key());
        }
        let Some((m, flags, remaining)) = decode(r) else {
            report.skip(SkipReason::Malformed);
            continue;
        };
        let dnat = flags & DNAT != 0;
        if let Err(why) = admissible(nat, &m, dnat) {
            report.skip(why);
            continue;
        }
        if nat.table.find(&m.fwd_key()).is_some() || nat.table.find(&m.rev_key()).is_some() {
            report.skip(SkipReason::Duplicate);
            continue;
        }
        let life = remaining.min(nat.timeouts.of(m.proto, flags));
        if life == 0 {
            report.skip(SkipReason::Expired);
            continue;
        }
        if nat.at_source_limit(m.opener(dnat)) {
            report.skip(SkipReason::SourceLimit);
            continue;
        }
        let Ok(slot) = nat.insert_mapping(&m, flags, base + life, false) else {
            for slot in added {
                nat.remove_pair(slot);
            }
            return Err(StateError::TableFull(i));
        };
        nat.count(&m, dnat, 0);
        added.push(slot);
    }
    if !nat.clock_seen {
        nat.rebase_pending = true;
    }
    report.imported = added.len();
    Ok(report)
}
