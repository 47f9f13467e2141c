//! Counters per node and per drop reason (per-CPU arrays summed), function gauges, and
//! the elephant events from the ring buffer, in the shapes the software nodes report.

use super::raw::*;
use super::{Function, TableChain, TableError};
use aya::maps::PerCpuArray;
use nfx_packet::DropReason;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Counters of one node (parse, a function, output), summed over CPUs.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct NodeCounters {
    /// Node name: `parse`, the function's instance name, `output`.
    pub name: String,
    /// Frames that entered the node.
    pub packets: u64,
    /// Their bytes (Ethernet frame length).
    pub bytes: u64,
    /// Frames handed to the kernel untouched (`parse` only: ARP, neighbour discovery, …).
    pub to_kernel: u64,
    /// Drops by reason (every reason, as the software nodes list them).
    pub drops: BTreeMap<&'static str, u64>,
}

/// What one function holds.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct FunctionStats {
    /// Instance name.
    pub name: String,
    /// `firewall`, `nat` or `elephant`.
    pub kind: &'static str,
    /// Flows held now (NAT: mappings).
    pub flows: u64,
    /// Flows the table can hold.
    pub capacity: u64,
    /// Table entries the function takes (rules + flow rows), as placement counts them.
    pub entries: u64,
    /// Kernel memory of its tables, bytes (elements and hash headers, approximate).
    pub memory_bytes: u64,
    /// Flows created (firewall, NAT: source + destination NAT; elephant: elephants).
    pub created: u64,
    /// Flows freed after their timeout (by the program or the sweep).
    pub expired: u64,
    /// Elephant only: flows not tracked because the table was full.
    pub untracked: u64,
    /// Elephant only: IP bytes and packets accounted.
    pub accounted_bytes: u64,
    /// Elephant only: packets accounted (GSO segments one by one).
    pub accounted_packets: u64,
}

/// The whole chain's counters.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct TableStats {
    /// parse, each function in forward order, output.
    pub nodes: Vec<NodeCounters>,
    /// Each function's tables.
    pub functions: Vec<FunctionStats>,
    /// Events the ring buffer had no room for.
    pub events_lost: u64,
}

/// Hash-table element overhead the kernel adds (htab_elem header), for memory figures.
const HTAB_ELEM: u64 = 48;

/// One elephant event, in the software detector's JSON shape.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TableEvent {
    /// CLOCK_MONOTONIC ns when raised.
    pub ts_ns: u64,
    /// Instance name.
    pub node: String,
    /// `elephant`.
    pub kind: &'static str,
    /// The flow.
    pub flow: EventFlow,
    /// As the software detector's `detail`.
    pub detail: ElephantDetail,
}

/// A flow as events print it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct EventFlow {
    /// Source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
}

/// The detail of an elephant event.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ElephantDetail {
    /// Bytes of the flow so far.
    pub bytes: u64,
    /// Packets so far.
    pub packets: u64,
    /// Rate over the current window, bit/s.
    pub rate_bps: u64,
    /// Window length.
    pub window_ms: u64,
    /// Byte threshold.
    pub min_bytes: u64,
    /// Rate threshold.
    pub min_rate_bps: u64,
}

impl TableChain {
    pub(super) fn node_row(&self, n: u32) -> Result<RawCounters, TableError> {
        let view: PerCpuArray<_, RawCounters> = PerCpuArray::try_from(self.counters.map())
            .map_err(|e| TableError::Map(format!("counters: {e}")))?;
        let per = view
            .get(&n, 0)
            .map_err(|e| TableError::Map(format!("counters: {e}")))?;
        let mut sum = RawCounters::default();
        for c in per.iter() {
            sum.packets += c.packets;
            sum.bytes += c.bytes;
            sum.to_kernel += c.to_kernel;
            for (a, b) in sum.drops.iter_mut().zip(c.drops) {
                *a += b;
            }
        }
        Ok(sum)
    }

    fn gauges_sum(&self) -> Result<RawGauges, TableError> {
        let view: PerCpuArray<_, RawGauges> = PerCpuArray::try_from(self.gauges.map())
            .map_err(|e| TableError::Map(format!("gauges: {e}")))?;
        let per = view
            .get(&0, 0)
            .map_err(|e| TableError::Map(format!("gauges: {e}")))?;
        let mut g = RawGauges::default();
        for x in per.iter() {
            g.fw_created += x.fw_created;
            g.fw_expired += x.fw_expired;
            g.nat_snat_created += x.nat_snat_created;
            g.nat_dnat_created += x.nat_dnat_created;
            g.nat_expired += x.nat_expired;
            g.ele_elephants += x.ele_elephants;
            g.ele_untracked += x.ele_untracked;
            g.ele_packets += x.ele_packets;
            g.ele_bytes += x.ele_bytes;
            g.events_lost += x.events_lost;
        }
        Ok(g)
    }

    /// Every counter of the chain.
    pub fn stats(&self) -> Result<TableStats, TableError> {
        let g = self.gauges_sum()?;
        let counters = |name: &str, n: u32| -> Result<NodeCounters, TableError> {
            let c = self.node_row(n)?;
            Ok(NodeCounters {
                name: name.to_string(),
                packets: c.packets,
                bytes: c.bytes,
                to_kernel: c.to_kernel,
                drops: DropReason::ALL
                    .iter()
                    .map(|r| (r.as_str(), c.drops[*r as usize]))
                    .collect(),
            })
        };
        let mut nodes = vec![counters("parse", 0)?];
        let mut functions = Vec::new();
        for (f, name) in self.functions.iter().zip(&self.names) {
            let row = u32::from(match f {
                Function::Firewall(_) => K_FW,
                Function::Nat(_) => K_NAT,
                Function::Elephant(_) => K_ELE,
            });
            nodes.push(counters(name, row)?);
            functions.push(self.function_stats(f, name, &g));
        }
        nodes.push(counters("output", N_NODES as u32 - 1)?);
        Ok(TableStats {
            nodes,
            functions,
            events_lost: g.events_lost,
        })
    }

    fn function_stats(&self, f: &Function, name: &str, g: &RawGauges) -> FunctionStats {
        let occ = |t: u32| self.occupancy.word(t, 0).load(Ordering::Relaxed);
        let key = std::mem::size_of::<RawKey>() as u64;
        let base = FunctionStats {
            name: name.to_string(),
            kind: f.kind(),
            entries: f.need().entries,
            ..Default::default()
        };
        match f {
            Function::Firewall(p) => FunctionStats {
                flows: occ(0),
                capacity: u64::from(p.max_flows),
                memory_bytes: u64::from(self.fw_ct.capacity) * (key + 16 + HTAB_ELEM)
                    + u64::from(self.fw_rules.capacity) * std::mem::size_of::<RawRule>() as u64,
                created: g.fw_created,
                expired: g.fw_expired + self.swept[0],
                ..base
            },
            Function::Nat(p) => FunctionStats {
                flows: occ(1) / 2,
                capacity: u64::from(p.max_flows),
                memory_bytes: u64::from(self.nat_map.capacity) * (key + 72 + HTAB_ELEM),
                created: g.nat_snat_created + g.nat_dnat_created,
                expired: g.nat_expired + self.swept[1],
                ..base
            },
            Function::Elephant(p) => FunctionStats {
                flows: occ(2),
                capacity: u64::from(p.max_flows),
                memory_bytes: u64::from(self.ele_flows.capacity) * (key + 48 + HTAB_ELEM),
                created: g.ele_elephants,
                expired: self.swept[2],
                untracked: g.ele_untracked,
                accounted_bytes: g.ele_bytes,
                accounted_packets: g.ele_packets,
                ..base
            },
        }
    }

    /// Takes the events raised since the last call (elephant flows).
    pub fn events(&mut self) -> Vec<TableEvent> {
        let Some((name, plan)) =
            self.functions
                .iter()
                .zip(&self.names)
                .find_map(|(f, n)| match f {
                    Function::Elephant(p) => Some((n.clone(), p.config.clone())),
                    _ => None,
                })
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while let Some(item) = self.events.next() {
            if item.len() < std::mem::size_of::<RawEvent>() {
                continue;
            }
            let e = RawEvent::read(&item);
            let elapsed = e.ts_ns.saturating_sub(e.window_start_ns).max(1_000_000);
            let rate = u128::from(e.window_bytes) * 8 * 1_000_000_000 / u128::from(elapsed);
            out.push(TableEvent {
                ts_ns: e.ts_ns,
                node: name.clone(),
                kind: "elephant",
                flow: EventFlow {
                    src: e.key.src_addr().to_string(),
                    dst: e.key.dst_addr().to_string(),
                    sport: e.key.sport(),
                    dport: e.key.dport(),
                    proto: e.key.proto,
                },
                detail: ElephantDetail {
                    bytes: e.bytes,
                    packets: e.packets,
                    rate_bps: rate as u64,
                    window_ms: plan.window_ms,
                    min_bytes: plan.min_bytes,
                    min_rate_bps: plan.min_rate_bps,
                },
            });
        }
        out
    }
}
