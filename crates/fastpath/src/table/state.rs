//! Flow-state export and import (live migration) and the idle sweep, with batch map
//! operations. Blobs use the software nodes' framing (`nfx_vnf::table::blob`); when
//! every flow is IPv4 the firewall and NAT write the software's own record formats, so
//! state moves between the tiers; with IPv6 flows they write the wide kinds, which only
//! the table tier reads. Records:
//!
//! | kind | record | bytes |
//! |---|---|---|
//! | firewall (1) | software format: canonical key, state, flags, 0, remaining ms, TCP windows | 56 |
//! | firewall-wide (3) | family, proto, state, flags, src\[16\], dst\[16\], sport, dport, remaining ms, 0 | 48 |
//! | nat (2) | software format: proto, flags, inside, public, remote (addr u32, port), remaining ms | 24 |
//! | nat-wide (4) | proto, flags, family, 0, inside, public, remote (addr\[16\], port), remaining ms, 0 | 64 |
//! | elephant (5) | family, proto, elephant, 0, src\[16\], dst\[16\], sport, dport, bytes, packets, window bytes, window age ms, idle ms | 72 |
//!
//! The table tier does not track TCP windows: it writes the software record's 36
//! window bytes as zero ("side not seen yet"), and the software firewall re-learns
//! each side's window from that side's next segment, as for a flow it picked up. It
//! reads a software record's first 20 bytes and ignores the windows. The entry flags
//! are the software's own (`SWAPPED`, `REV_OPEN`, `SEEN_REPLY`, `ASSURED`, the FIN
//! bits): the eBPF firewall keeps them as the software does.
//!
//! Integers little endian, addresses as in the frame (wide) or as host-order integers
//! (software formats); lifetimes are remaining milliseconds, so clocks need not agree.
//! Import validates every record first, skips flows already present, and is all or
//! nothing.

use super::raw::*;
use super::{Function, TableChain, TableError};
use nfx_vnf::table::blob::{self, BlobKind};
use nfx_vnf::StateError;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

const FW_STATES: u8 = 11;
const FW_SWAPPED: u8 = 0x80;
const FW_FINS: u8 = 3;
/// The software firewall's other entry flags: opened by a Reverse packet (0x40),
/// reply seen (0x08), assured (0x04).
const FW_TRACKED: u8 = 0x40 | 0x08 | 0x04;
/// The software firewall's record: 20 bytes of key, state, flags and lifetime, then
/// 36 bytes of TCP windows.
const FW_RECORD: usize = nfx_vnf::firewall::STATE_RECORD_LEN;
const FW_WINDOWS: usize = FW_RECORD - 20;
const NAT_FWD: u32 = 1;
const NAT_SHARED: u32 = 2 | 4 | 8 | 16 | 32;
const MS: u64 = 1_000_000;

fn malformed(i: usize, what: &str) -> StateError {
    StateError::Malformed(format!("record {i}: {what}"))
}

fn v4(w: &[u32; 4]) -> u32 {
    u32::from_be(w[0])
}

fn from_v4(a: u32) -> [u32; 4] {
    [a.to_be(), 0, 0, 0]
}

fn put_wide(out: &mut Vec<u8>, w: &[u32; 4]) {
    for x in w {
        out.extend_from_slice(&x.to_ne_bytes());
    }
}

fn wide_at(r: &[u8], at: usize) -> [u32; 4] {
    let w = |i: usize| u32::from_ne_bytes([r[at + i], r[at + i + 1], r[at + i + 2], r[at + i + 3]]);
    [w(0), w(4), w(8), w(12)]
}

fn check_family(i: usize, family: u8, addrs: &[[u32; 4]]) -> Result<(), StateError> {
    match family {
        6 => Ok(()),
        4 if addrs.iter().all(|a| a[1..] == [0, 0, 0]) => Ok(()),
        4 => Err(malformed(i, "IPv4 flow with a wide address")),
        f => Err(malformed(i, &format!("address family {f}"))),
    }
}

fn check_fw(i: usize, k: &RawKey, state: u8, flags: u8) -> Result<(), StateError> {
    if state == 0 || state >= FW_STATES {
        return Err(malformed(i, &format!("state code {state}")));
    }
    if (k.proto == 6) != (state < 9) {
        return Err(malformed(
            i,
            &format!("state code {state} for protocol {}", k.proto),
        ));
    }
    if flags & !(FW_SWAPPED | FW_TRACKED | FW_FINS) != 0 {
        return Err(malformed(i, "unknown flag bits"));
    }
    if !k.is_canonical() {
        return Err(malformed(i, "key is not in canonical order"));
    }
    Ok(())
}

/// The blob kind of `data` (0 when it has no header).
fn kind_of(data: &[u8]) -> u8 {
    data.get(5).copied().unwrap_or(0)
}

impl TableChain {
    pub(super) fn function_index(&self, index: usize) -> Result<&Function, TableError> {
        self.functions
            .get(index)
            .ok_or_else(|| TableError::Request(format!("no function {index}")))
    }

    /// Writes function `index`'s live flows to `out` and returns how many.
    pub fn export_state(&self, index: usize, out: &mut Vec<u8>) -> Result<usize, TableError> {
        let now = self.now_ns();
        match self.function_index(index)? {
            Function::Firewall(_) => self.export_fw(now, out),
            Function::Nat(_) => self.export_nat(now, out),
            Function::Elephant(_) => self.export_ele(now, out),
        }
    }

    fn export_fw(&self, now: u64, out: &mut Vec<u8>) -> Result<usize, TableError> {
        let live: Vec<(RawKey, RawFwVal)> = self
            .fw_ct
            .entries::<RawKey, RawFwVal>()?
            .into_iter()
            .filter(|(_, v)| v.expires_ns > now)
            .collect();
        let wide = live.iter().any(|(k, _)| k.family == 6);
        let (kind, len) = if wide {
            (BlobKind::FirewallWide, 48)
        } else {
            (BlobKind::Firewall, FW_RECORD)
        };
        let at = blob::write_header(out, kind, len);
        for (k, v) in &live {
            let (state, flags) = ((v.sf & 0xff) as u8, (v.sf >> 8) as u8);
            let ms = blob::remaining_ms(v.expires_ns, now);
            if wide {
                out.extend_from_slice(&[k.family, k.proto, state, flags]);
                put_wide(out, &k.src);
                put_wide(out, &k.dst);
                out.extend_from_slice(&k.sport().to_le_bytes());
                out.extend_from_slice(&k.dport().to_le_bytes());
                out.extend_from_slice(&ms.to_le_bytes());
                out.extend_from_slice(&[0; 4]);
            } else {
                out.extend_from_slice(&v4(&k.src).to_le_bytes());
                out.extend_from_slice(&v4(&k.dst).to_le_bytes());
                out.extend_from_slice(&k.sport().to_le_bytes());
                out.extend_from_slice(&k.dport().to_le_bytes());
                out.extend_from_slice(&[k.proto, state, flags, 0]);
                out.extend_from_slice(&ms.to_le_bytes());
                out.extend_from_slice(&[0; FW_WINDOWS]);
            }
        }
        blob::patch_count(out, at, live.len());
        Ok(live.len())
    }

    fn decode_fw(data: &[u8]) -> Result<Vec<(RawKey, RawFwVal, u64)>, StateError> {
        let wide = kind_of(data) == BlobKind::FirewallWide as u8;
        let (kind, len) = if wide {
            (BlobKind::FirewallWide, 48)
        } else {
            (BlobKind::Firewall, FW_RECORD)
        };
        let recs = blob::records(data, kind, len)?;
        let mut rows = Vec::with_capacity(recs.len());
        for (i, r) in recs.iter().enumerate() {
            let (k, state, flags, ms) = if wide {
                let (src, dst) = (wide_at(r, 4), wide_at(r, 20));
                check_family(i, r[0], &[src, dst])?;
                if r[44..48] != [0; 4] {
                    return Err(malformed(i, "reserved bytes set"));
                }
                let k = RawKey {
                    src,
                    dst,
                    sport: blob::le16(r, 36).to_be(),
                    dport: blob::le16(r, 38).to_be(),
                    proto: r[1],
                    family: r[0],
                    pad: [0; 2],
                };
                (k, r[2], r[3], blob::le32(r, 40))
            } else {
                if r[15] != 0 {
                    return Err(malformed(i, "unknown flag bits"));
                }
                let k = RawKey {
                    src: from_v4(blob::le32(r, 0)),
                    dst: from_v4(blob::le32(r, 4)),
                    sport: blob::le16(r, 8).to_be(),
                    dport: blob::le16(r, 10).to_be(),
                    proto: r[12],
                    family: 4,
                    pad: [0; 2],
                };
                (k, r[13], r[14], blob::le32(r, 16))
            };
            check_fw(i, &k, state, flags)?;
            let v = RawFwVal {
                expires_ns: 0,
                sf: u32::from(state) | u32::from(flags) << 8,
                pad: 0,
            };
            rows.push((k, v, u64::from(ms) * MS));
        }
        Ok(rows)
    }

    /// Every live NAT mapping at `now`: its Forward key and entry, and its expiry (the
    /// later of its two entries').
    pub(super) fn nat_live(&self, now: u64) -> Result<Vec<(RawKey, RawNatVal, u64)>, TableError> {
        let all = self.nat_map.entries::<RawKey, RawNatVal>()?;
        let expiry: HashMap<RawKey, u64> = all.iter().map(|(k, v)| (*k, v.expires_ns)).collect();
        Ok(all
            .iter()
            .filter(|(_, v)| v.flags & NAT_FWD != 0)
            .filter_map(|(k, v)| {
                let exp = v.expires_ns.max(expiry.get(&v.twin).copied().unwrap_or(0));
                (exp > now && expiry.contains_key(&v.twin)).then_some((*k, *v, exp))
            })
            .collect())
    }

    fn export_nat(&self, now: u64, out: &mut Vec<u8>) -> Result<usize, TableError> {
        let live = self.nat_live(now)?;
        let wide = live.iter().any(|(k, _, _)| k.family == 6);
        let (kind, len) = if wide {
            (BlobKind::NatWide, 64)
        } else {
            (BlobKind::Nat, 24)
        };
        let at = blob::write_header(out, kind, len);
        for (fk, fv, exp) in &live {
            let flags = (fv.flags & NAT_SHARED) as u8;
            let ends = [(fk.src, fk.sport), (fv.addr, fv.port), (fk.dst, fk.dport)];
            let ms = blob::remaining_ms(*exp, now);
            if wide {
                out.extend_from_slice(&[fk.proto, flags, fk.family, 0]);
                for (a, p) in ends {
                    put_wide(out, &a);
                    out.extend_from_slice(&u16::from_be(p).to_le_bytes());
                }
                out.extend_from_slice(&ms.to_le_bytes());
                out.extend_from_slice(&[0; 2]);
            } else {
                out.extend_from_slice(&[fk.proto, flags]);
                for (a, p) in ends {
                    out.extend_from_slice(&v4(&a).to_le_bytes());
                    out.extend_from_slice(&u16::from_be(p).to_le_bytes());
                }
                out.extend_from_slice(&ms.to_le_bytes());
            }
        }
        blob::patch_count(out, at, live.len());
        Ok(live.len())
    }

    /// Both entries of each mapping in a NAT blob, with its remaining lifetime.
    fn decode_nat(data: &[u8]) -> Result<Vec<[(RawKey, RawNatVal); 2]>, StateError> {
        let wide = kind_of(data) == BlobKind::NatWide as u8;
        let (kind, len) = if wide {
            (BlobKind::NatWide, 64)
        } else {
            (BlobKind::Nat, 24)
        };
        let recs = blob::records(data, kind, len)?;
        let mut rows = Vec::with_capacity(recs.len());
        for (i, r) in recs.iter().enumerate() {
            let (proto, flags) = (r[0], u32::from(r[1]));
            let (family, ends, ms) = if wide {
                let end = |at: usize| (wide_at(r, at), blob::le16(r, at + 16).to_be());
                let ends = [end(4), end(22), end(40)];
                check_family(i, r[2], &[ends[0].0, ends[1].0, ends[2].0])?;
                if r[3] != 0 || r[62..64] != [0; 2] {
                    return Err(malformed(i, "reserved bytes set"));
                }
                (r[2], ends, blob::le32(r, 58))
            } else {
                let end = |at: usize| (from_v4(blob::le32(r, at)), blob::le16(r, at + 4).to_be());
                (4, [end(2), end(8), end(14)], blob::le32(r, 20))
            };
            if flags & !NAT_SHARED != 0 {
                return Err(malformed(i, &format!("unknown flag bits {flags:#x}")));
            }
            let icmp = proto == if family == 6 { 58 } else { 1 };
            let [inside, public, remote] = ends;
            if icmp && remote.1 != inside.1 {
                return Err(malformed(i, "ICMP mapping with two ids"));
            }
            let fk = RawKey {
                src: inside.0,
                dst: remote.0,
                sport: inside.1,
                dport: remote.1,
                proto,
                family,
                pad: [0; 2],
            };
            let rk = RawKey {
                src: remote.0,
                dst: public.0,
                sport: if icmp { public.1 } else { remote.1 },
                dport: public.1,
                proto,
                family,
                pad: [0; 2],
            };
            let exp = u64::from(ms) * MS;
            let fv = RawNatVal {
                twin: rk,
                addr: public.0,
                expires_ns: exp,
                flags: NAT_FWD | flags,
                port: public.1,
                pad: 0,
            };
            let rv = RawNatVal {
                twin: fk,
                addr: inside.0,
                expires_ns: exp,
                flags,
                port: inside.1,
                pad: 0,
            };
            rows.push([(fk, fv), (rk, rv)]);
        }
        Ok(rows)
    }

    fn export_ele(&self, now: u64, out: &mut Vec<u8>) -> Result<usize, TableError> {
        let rows = self.ele_flows.entries::<RawKey, RawEleVal>()?;
        let at = blob::write_header(out, BlobKind::Elephant, 72);
        let ms = |ns: u64| (ns / MS).min(u64::from(u32::MAX)) as u32;
        for (k, v) in &rows {
            out.extend_from_slice(&[k.family, k.proto, u8::from(v.elephant != 0), 0]);
            put_wide(out, &k.src);
            put_wide(out, &k.dst);
            out.extend_from_slice(&k.sport().to_le_bytes());
            out.extend_from_slice(&k.dport().to_le_bytes());
            for x in [v.bytes, v.packets, v.window_bytes] {
                out.extend_from_slice(&x.to_le_bytes());
            }
            out.extend_from_slice(&ms(now.saturating_sub(v.window_start_ns)).to_le_bytes());
            out.extend_from_slice(&ms(now.saturating_sub(v.last_ns)).to_le_bytes());
        }
        blob::patch_count(out, at, rows.len());
        Ok(rows.len())
    }

    fn decode_ele(data: &[u8], now: u64) -> Result<Vec<(RawKey, RawEleVal)>, StateError> {
        let recs = blob::records(data, BlobKind::Elephant, 72)?;
        let mut rows = Vec::with_capacity(recs.len());
        for (i, r) in recs.iter().enumerate() {
            let (src, dst) = (wide_at(r, 4), wide_at(r, 20));
            check_family(i, r[0], &[src, dst])?;
            if r[2] > 1 || r[3] != 0 {
                return Err(malformed(i, "unknown flag bits"));
            }
            let le64 = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes"));
            let k = RawKey {
                src,
                dst,
                sport: blob::le16(r, 36).to_be(),
                dport: blob::le16(r, 38).to_be(),
                proto: r[1],
                family: r[0],
                pad: [0; 2],
            };
            let v = RawEleVal {
                bytes: le64(40),
                packets: le64(48),
                window_bytes: le64(56),
                window_start_ns: now.saturating_sub(u64::from(blob::le32(r, 64)) * MS),
                last_ns: now.saturating_sub(u64::from(blob::le32(r, 68)) * MS),
                elephant: u32::from(r[2]),
                pad: 0,
            };
            rows.push((k, v));
        }
        Ok(rows)
    }

    /// Loads flows written by [`TableChain::export_state`] of the same kind of function
    /// (or by the software firewall / NAT) into function `index`. Flows already present
    /// are skipped; all or nothing.
    pub fn import_state(&mut self, index: usize, data: &[u8]) -> Result<usize, StateError> {
        let now = self.now_ns();
        let kind = self
            .functions
            .get(index)
            .map(Function::kind)
            .ok_or_else(|| StateError::Unsupported(format!("function {index}")))?;
        let expected = match kind {
            "firewall" => [BlobKind::Firewall as u8, BlobKind::FirewallWide as u8],
            "nat" => [BlobKind::Nat as u8, BlobKind::NatWide as u8],
            _ => [BlobKind::Elephant as u8; 2],
        };
        if data.len() >= blob::HEADER_LEN
            && data[..4] == blob::MAGIC
            && !expected.contains(&kind_of(data))
        {
            return Err(StateError::WrongKind {
                expected: expected[0],
                found: kind_of(data),
            });
        }
        let map_err = |e: TableError| StateError::Malformed(e.to_string());
        match kind {
            "firewall" => {
                let rows: Vec<(RawKey, RawFwVal)> = Self::decode_fw(data)?
                    .into_iter()
                    .map(|(k, v, rem)| {
                        (
                            k,
                            RawFwVal {
                                expires_ns: now + rem,
                                ..v
                            },
                        )
                    })
                    .collect();
                self.insert_new(0, rows.into_iter().map(|r| vec![r]).collect())
            }
            "nat" => {
                let rows = Self::decode_nat(data)?
                    .into_iter()
                    .map(|pair| {
                        pair.map(|(k, v)| {
                            (
                                k,
                                RawNatVal {
                                    expires_ns: now + v.expires_ns,
                                    ..v
                                },
                            )
                        })
                        .to_vec()
                    })
                    .collect();
                self.insert_new(1, rows)
            }
            _ => {
                let rows = Self::decode_ele(data, now)?;
                self.insert_new(2, rows.into_iter().map(|r| vec![r]).collect())
            }
        }
        .map_err(|e| match e {
            ImportFailure::Full(n) => StateError::TableFull(n),
            ImportFailure::Map(e) => map_err(e),
        })
    }

    /// Inserts the groups (a flow's entries) none of whose keys exist yet, all or none;
    /// returns the groups inserted.
    fn insert_new<V: Raw>(
        &mut self,
        table: u32,
        groups: Vec<Vec<(RawKey, V)>>,
    ) -> Result<usize, ImportFailure> {
        let map = match table {
            0 => &self.fw_ct,
            1 => &self.nat_map,
            _ => &self.ele_flows,
        };
        let present: HashSet<RawKey> = map
            .entries::<RawKey, V>()
            .map_err(ImportFailure::Map)?
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let mut seen = HashSet::new();
        let fresh: Vec<Vec<(RawKey, V)>> = groups
            .into_iter()
            .filter(|g| {
                g.iter()
                    .all(|(k, _)| !present.contains(k) && seen.insert(*k))
            })
            .collect();
        let rows: Vec<(RawKey, V)> = fresh.iter().flatten().copied().collect();
        // Reserve the entries against the function's limit, as the program does.
        let limit = self.raw.limits[table as usize];
        let occ = self.occupancy.word(table, 0);
        let before = occ.fetch_add(rows.len() as u64, Ordering::SeqCst);
        if before + rows.len() as u64 > limit {
            occ.fetch_sub(rows.len() as u64, Ordering::SeqCst);
            let per = fresh.first().map_or(1, Vec::len) as u64;
            return Err(ImportFailure::Full(
                (limit.saturating_sub(before) / per) as usize,
            ));
        }
        if let Err((_, e)) = map.insert_all(&rows) {
            occ.fetch_sub(rows.len() as u64, Ordering::SeqCst);
            return Err(ImportFailure::Map(e));
        }
        Ok(fresh.len())
    }

    /// Frees expired flows (firewall, NAT: both entries of a mapping past its lifetime)
    /// and idle ones (elephant); returns how many flows went. Call it about once a
    /// second: the program frees an expired flow it meets by itself, this frees the rest.
    pub fn expire(&mut self) -> Result<usize, TableError> {
        let now = self.now_ns();
        let mut freed = 0;
        if self.index_of("firewall").is_some() {
            let dead: Vec<(RawKey, RawFwVal)> = self
                .fw_ct
                .entries::<RawKey, RawFwVal>()?
                .into_iter()
                .filter(|(_, v)| v.expires_ns <= now)
                .collect();
            let n = self.fw_ct.remove_all(&dead)?;
            self.account_freed(0, n as u64, n as u64)?;
            freed += n;
        }
        if self.index_of("nat").is_some() {
            let all = self.nat_map.entries::<RawKey, RawNatVal>()?;
            let expiry: HashMap<RawKey, u64> =
                all.iter().map(|(k, v)| (*k, v.expires_ns)).collect();
            let dead: Vec<(RawKey, RawNatVal)> = all
                .into_iter()
                .filter(|(_, v)| v.expires_ns.max(expiry.get(&v.twin).copied().unwrap_or(0)) <= now)
                .collect();
            let n = self.nat_map.remove_all(&dead)?;
            self.account_freed(1, n as u64, n as u64 / 2)?;
            freed += n / 2;
        }
        if let Some(Function::Elephant(p)) = self.functions.iter().find(|f| f.kind() == "elephant")
        {
            let idle = p.config.idle_timeout_ms.saturating_mul(MS);
            let dead: Vec<(RawKey, RawEleVal)> = self
                .ele_flows
                .entries::<RawKey, RawEleVal>()?
                .into_iter()
                .filter(|(_, v)| now.saturating_sub(v.last_ns) > idle)
                .collect();
            let n = self.ele_flows.remove_all(&dead)?;
            self.account_freed(2, n as u64, n as u64)?;
            freed += n;
        }
        Ok(freed)
    }

    fn account_freed(&mut self, table: u32, entries: u64, flows: u64) -> Result<(), TableError> {
        self.occupancy
            .word(table, 0)
            .fetch_sub(entries, Ordering::SeqCst);
        self.swept[table as usize] += flows;
        Ok(())
    }
}

/// Why an import stopped.
enum ImportFailure {
    /// The table cannot take every flow: how many could have been taken.
    Full(usize),
    /// The kernel refused.
    Map(TableError),
}
