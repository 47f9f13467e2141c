//! The `classify` stage of a worker that runs services: it picks the service of every
//! frame, right after `parse`, and remembers each flow's service for its return frames.
//!
//! * A frame from the **inside** port (Forward) gets the first service whose selector
//!   matches its 5-tuple ([`Classifier`], the order of `services:`).
//! * When a Forward frame leaves its service's chain alive, its 5-tuple *as it leaves*
//!   (after NAT) is recorded, reversed, in a bounded flow table with the service. A
//!   frame from the **outside** port (Reverse) looks its own 5-tuple up there: a reply
//!   finds its service whatever NAT rewrote. A Reverse frame whose flow is not in the
//!   table is classified by the selectors on its reversed 5-tuple (as if it came from
//!   inside): a connection opened from outside, or one whose entry expired, goes to the
//!   service whose traffic it is, and that service's functions decide.
//! * An ICMP error is classified by the flow it reports on (its embedded header), so
//!   it travels through the service of that flow.
//! * A frame no service takes is dropped as `no_service`: closed by default.
//!
//! The table is [`nfx_vnf::table::FlowTable`]: fixed capacity, entries expire after
//! `timeout_s` without a frame in either direction (a budgeted sweep every tick); when
//! full, a new flow replaces the entry closest to expiry in its neighbourhood.

use crate::classify::{Classifier, Selector, Tuple};
use crate::config::ClassifierConfig;
use crate::graph::{compact, cycles, NodeCounters};
use crate::stats::NodeStats;
use nfx_packet::{Direction, DropReason, FlowKey, Packet};
use nfx_vnf::table::{FlowTable, Insert, TableValue};

/// What the flow table stores per flow: the service index.
#[derive(Debug, Clone, Copy, Default)]
struct FlowService {
    service: u16,
}

// SAFETY: a plain integer; all-zero is service 0.
unsafe impl TableValue for FlowService {
    fn evictable(&self) -> bool {
        // The table is a cache of the selectors' answer and of NAT'd replies: losing an
        // entry to a new flow is better than refusing the new flow.
        true
    }
}

/// Counters of the flow table (the `stats` of the `classify` node).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TableCounters {
    new_flows: u64,
    evictions: u64,
    table_full: u64,
    expired: u64,
    reverse_by_flow: u64,
    reverse_by_selector: u64,
}

/// The classifier stage: selectors, flow table and the stage's counters.
pub struct Steering {
    classifier: Classifier,
    flows: FlowTable<FlowService>,
    timeout_ns: u64,
    counters: NodeCounters,
    table: TableCounters,
}

/// The 5-tuple a frame is classified by, in its direction of travel: its own, or for
/// an ICMP error the reported packet's flow turned round (the error travels against it).
#[inline]
fn flow_key(p: &Packet) -> FlowKey {
    if p.meta.has_inner() {
        p.meta.inner_key.reversed()
    } else {
        p.meta.key
    }
}

impl Steering {
    /// A classifier trying `selectors` in order (index = service index), with the flow
    /// table of `cfg`.
    pub fn new(selectors: Vec<Selector>, cfg: &ClassifierConfig) -> Self {
        Self {
            classifier: Classifier::new(selectors),
            flows: FlowTable::new(cfg.flows),
            timeout_ns: cfg.timeout_s.saturating_mul(1_000_000_000),
            counters: NodeCounters::default(),
            table: TableCounters::default(),
        }
    }

    /// How long a flow's service is remembered without traffic.
    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ns
    }

    /// The stage's packet, byte, cycle and drop counters.
    pub fn counters_mut(&mut self) -> &mut NodeCounters {
        &mut self.counters
    }

    /// Sets [`Packet::service`] of every packet of `pkts` (all alive, parsed) travelling
    /// in `dir`, or drops it as `no_service`; compacts the survivors to the front in
    /// their order and returns how many there are.
    pub fn classify(&mut self, pkts: &mut [Packet], dir: Direction, now_ns: u64) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        self.counters.packets += pkts.len() as u64;
        self.counters.bytes += pkts.iter().map(|p| p.buf.len() as u64).sum::<u64>();
        let t0 = cycles();
        if dir == Direction::Reverse && !self.flows.is_empty() {
            // Start loading every packet's buckets; the lookups below overlap the misses.
            for p in pkts.iter() {
                self.flows.prefetch_buckets(&flow_key(p));
            }
        }
        for p in pkts.iter_mut() {
            let key = flow_key(p);
            let service = match dir {
                Direction::Forward => self.classifier.first_match_v4(&Tuple::from(&key)),
                Direction::Reverse => self.reverse(&key, now_ns),
            };
            match service {
                Some(s) => p.service = s as u16,
                None => p.drop = Some(DropReason::NoService),
            }
        }
        self.counters.cycles += cycles().wrapping_sub(t0);
        compact(pkts, &mut self.counters.drops)
    }

    /// The service of a frame from the outside port: its flow's, else the selectors'
    /// answer for the reversed 5-tuple.
    #[inline]
    fn reverse(&mut self, key: &FlowKey, now_ns: u64) -> Option<usize> {
        let found = if self.flows.is_empty() {
            None
        } else {
            self.flows.find(key)
        };
        if let Some(slot) = found {
            let e = self.flows.get_mut(slot);
            e.expires_ns = now_ns.saturating_add(self.timeout_ns);
            self.table.reverse_by_flow += 1;
            return Some(usize::from(e.val.service));
        }
        let s = self
            .classifier
            .first_match_v4(&Tuple::from(&key.reversed()));
        if s.is_some() {
            self.table.reverse_by_selector += 1;
        }
        s
    }

    /// Remembers the service of every Forward packet in `pkts` (the survivors of their
    /// chains, headers as they leave), keyed by the 5-tuple their replies carry. A flow
    /// whose 5-tuple left the chain as it came is not stored: the selectors give its
    /// replies (reversed) the same service; the table holds the flows a NAT rewrote.
    /// Its cycles count as the stage's.
    pub fn record(&mut self, pkts: &[Packet], now_ns: u64) {
        let t0 = cycles();
        self.remember(pkts, now_ns);
        self.counters.cycles += cycles().wrapping_sub(t0);
    }

    fn remember(&mut self, pkts: &[Packet], now_ns: u64) {
        let expires = now_ns.saturating_add(self.timeout_ns);
        let translated = |p: &Packet| p.meta.key != p.in_key && !p.meta.has_inner();
        if !pkts.iter().any(translated) {
            return;
        }
        for p in pkts.iter().filter(|p| translated(p)) {
            self.flows.prefetch_buckets(&p.meta.key.reversed());
        }
        let mut last: Option<(FlowKey, u16)> = None;
        for p in pkts.iter().filter(|p| translated(p)) {
            let key = p.meta.key.reversed();
            // Runs of one flow (a burst, GSO super-packets) touch the table once.
            if last == Some((key, p.service)) {
                continue;
            }
            last = Some((key, p.service));
            let val = FlowService { service: p.service };
            if let Some(slot) = self.flows.find(&key) {
                let e = self.flows.get_mut(slot);
                e.expires_ns = expires;
                e.val = val;
                continue;
            }
            match self.flows.insert(key, expires, val, now_ns) {
                Insert::New(_) => self.table.new_flows += 1,
                Insert::Evicted { .. } => {
                    self.table.new_flows += 1;
                    self.table.evictions += 1;
                }
                Insert::Full => self.table.table_full += 1,
            }
        }
    }

    /// Forgets flows idle for the timeout (a budgeted sweep, like the VNFs' tables).
    pub fn expire(&mut self, now_ns: u64) {
        let mut budget = self.flows.sweep_budget();
        while let Some(slot) = self.flows.next_expired(now_ns, &mut budget) {
            self.flows.remove(slot);
            self.table.expired += 1;
        }
    }

    /// Takes a new service list: `selectors` in the new order, and `map[old index]` the
    /// new index of each old service (`None`: removed, its flows are forgotten).
    pub fn retarget(&mut self, selectors: Vec<Selector>, map: &[Option<u16>]) {
        self.classifier = Classifier::new(selectors);
        if map.iter().enumerate().all(|(i, m)| *m == Some(i as u16)) {
            return;
        }
        let changes: Vec<(usize, Option<u16>)> = self
            .flows
            .iter()
            .map(|(slot, e)| (slot, map.get(usize::from(e.val.service)).copied().flatten()))
            .collect();
        for (slot, to) in changes {
            match to {
                Some(s) => self.flows.get_mut(slot).val.service = s,
                None => {
                    self.flows.remove(slot);
                }
            }
        }
    }

    /// Flows remembered now.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// The stage's node stats (`classify`).
    pub fn stats(&self) -> NodeStats {
        let t = &self.table;
        self.counters.stats(
            "classify",
            serde_json::json!({
                "flows": self.flows.len(),
                "capacity": self.flows.capacity(),
                "memory_bytes": self.flows.memory_bytes(),
                "new_flows": t.new_flows,
                "evictions": t.evictions,
                "table_full": t.table_full,
                "expired": t.expired,
                "reverse_by_flow": t.reverse_by_flow,
                "reverse_by_selector": t.reverse_by_selector,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Cidr, PortRange};
    use crate::testkit::udp_frame_between;
    use nfx_packet::rewrite::{set_addr, set_port, End};
    use nfx_packet::PacketBuf;

    fn packet(frame: &[u8], dir: Direction) -> Packet {
        let mut p = Packet::new(PacketBuf::from_frame(frame), dir);
        p.meta = nfx_packet::parse(frame).unwrap();
        p.in_key = p.meta.key;
        p
    }

    fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, dir: Direction) -> Packet {
        packet(&udp_frame_between(src, dst, sport, dport, 0), dir)
    }

    fn from_subnet(net: &str) -> Selector {
        Selector {
            src: Some(Cidr::parse(net).unwrap()),
            ..Selector::default()
        }
    }

    fn steering(flows: usize) -> Steering {
        Steering::new(
            vec![
                from_subnet("10.153.1.0/24"),
                Selector {
                    dport: Some(PortRange { lo: 53, hi: 53 }),
                    ..from_subnet("10.153.3.0/24")
                },
            ],
            &ClassifierConfig {
                flows,
                timeout_s: 10,
            },
        )
    }

    const SEC: u64 = 1_000_000_000;

    /// What a source NAT to 10.153.2.100:`port` makes of `p`.
    fn translate(mut p: Packet, port: u16) -> Packet {
        set_addr(&mut p, End::Src, u32::from_be_bytes([10, 153, 2, 100]));
        set_port(&mut p, End::Src, port);
        p
    }

    #[test]
    fn forward_frames_take_the_first_matching_service_or_are_dropped() {
        let mut s = steering(64);
        let mut v = vec![
            udp([10, 153, 3, 5], [8, 8, 8, 8], 999, 53, Direction::Forward),
            udp([10, 153, 9, 5], [8, 8, 8, 8], 999, 53, Direction::Forward),
            udp([10, 153, 1, 5], [8, 8, 8, 8], 999, 53, Direction::Forward),
            udp([10, 153, 3, 5], [8, 8, 8, 8], 999, 54, Direction::Forward),
        ];
        let live = s.classify(&mut v, Direction::Forward, SEC);
        assert_eq!(live, 2);
        assert_eq!(v[0].service, 1);
        assert_eq!(v[1].service, 0);
        assert!(v[2..].iter().all(|p| p.drop == Some(DropReason::NoService)));
        let st = s.stats();
        assert_eq!(st.name, "classify");
        assert_eq!(st.packets, 4);
        assert_eq!(st.drops["no_service"], 2);
    }

    #[test]
    fn replies_find_their_service_after_nat_rewrote_the_flow() {
        let mut s = steering(64);
        // Service 0's frame leaves its chain with a translated source.
        let mut out = vec![udp(
            [10, 153, 1, 5],
            [10, 153, 2, 2],
            40000,
            5201,
            Direction::Forward,
        )];
        assert_eq!(s.classify(&mut out, Direction::Forward, SEC), 1);
        set_addr(&mut out[0], End::Src, u32::from_be_bytes([10, 153, 2, 100]));
        set_port(&mut out[0], End::Src, 61000);
        s.record(&out, SEC);
        // The reply is addressed to the public address: no selector matches it.
        let from_server =
            |to: [u8; 4], port| udp([10, 153, 2, 2], to, 5201, port, Direction::Reverse);
        let mut back = vec![
            from_server([10, 153, 2, 100], 61000),
            from_server([10, 153, 2, 100], 61001),
            // Not translated, from a flow never seen: the selectors on its reversed
            // 5-tuple say it is service 0's traffic.
            from_server([10, 153, 1, 7], 40001),
        ];
        assert_eq!(s.classify(&mut back, Direction::Reverse, 2 * SEC), 2);
        assert_eq!((back[0].service, back[0].meta.key.dport), (0, 61000));
        assert_eq!((back[1].service, back[1].meta.key.dport), (0, 40001));
        assert_eq!(back[2].drop, Some(DropReason::NoService));
        let st = s.stats().stats;
        assert_eq!(st["reverse_by_flow"], 1);
        assert_eq!(st["reverse_by_selector"], 1);
        assert_eq!(st["flows"], 1);
    }

    #[test]
    fn icmp_errors_follow_the_flow_they_report_on() {
        let mut s = steering(64);
        let mut out = vec![udp(
            [10, 153, 3, 5],
            [8, 8, 8, 8],
            999,
            53,
            Direction::Forward,
        )];
        s.classify(&mut out, Direction::Forward, SEC);
        set_addr(&mut out[0], End::Src, u32::from_be_bytes([10, 153, 2, 100]));
        s.record(&out, SEC);
        // A router beyond reports the translated datagram unreachable.
        let inner = &out[0].buf.frame()[14..out[0].meta.ip_end];
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4([9, 9, 9, 9], [10, 153, 2, 100], 64)
            .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::Port,
            ))
            .write(&mut f, inner)
            .unwrap();
        let mut back = vec![packet(&f, Direction::Reverse)];
        assert!(back[0].meta.has_inner());
        assert_eq!(s.classify(&mut back, Direction::Reverse, SEC), 1);
        assert_eq!(back[0].service, 1);
        // Errors make no flow of their own.
        let before = s.flows();
        s.record(&back, SEC);
        assert_eq!(s.flows(), before);
    }

    #[test]
    fn only_translated_flows_are_stored() {
        let mut s = steering(64);
        let mut v = vec![udp([10, 153, 1, 5], [1, 1, 1, 1], 7, 9, Direction::Forward)];
        s.classify(&mut v, Direction::Forward, SEC);
        s.record(&v, SEC);
        assert_eq!(
            s.flows(),
            0,
            "the selectors already know this flow's replies"
        );
        let mut back = vec![udp([1, 1, 1, 1], [10, 153, 1, 5], 9, 7, Direction::Reverse)];
        assert_eq!(s.classify(&mut back, Direction::Reverse, SEC), 1);
        assert_eq!(back[0].service, 0);
        let v = vec![translate(v.remove(0), 20000)];
        s.record(&v, SEC);
        assert_eq!(s.flows(), 1);
    }

    #[test]
    fn the_flow_table_is_bounded_expires_and_forgets_removed_services() {
        let mut s = steering(16);
        for i in 0..200u16 {
            let mut v = vec![udp(
                [10, 153, 1, 5],
                [1, 1, 1, 1],
                1000 + i,
                9,
                Direction::Forward,
            )];
            s.classify(&mut v, Direction::Forward, SEC);
            let v = vec![translate(v.remove(0), 20000 + i)];
            s.record(&v, SEC + u64::from(i));
        }
        assert!(s.flows() <= 16, "{} flows", s.flows());
        let st = s.stats().stats;
        assert_eq!(st["new_flows"], 200);
        assert!(st["evictions"].as_u64().unwrap() >= 184, "{st}");
        // A run of one flow's frames touches the table once and keeps one entry.
        let mut s = steering(16);
        let burst: Vec<Packet> = (0..50)
            .map(|_| {
                translate(
                    udp([10, 153, 1, 5], [1, 1, 1, 1], 7, 9, Direction::Forward),
                    20000,
                )
            })
            .collect();
        s.record(&burst, SEC);
        assert_eq!(
            (s.flows(), s.stats().stats["new_flows"].as_u64()),
            (1, Some(1))
        );
        // Idle past the timeout: gone.
        s.expire(SEC + 5 * SEC);
        assert_eq!(s.flows(), 1);
        s.expire(SEC + 11 * SEC);
        assert_eq!(s.flows(), 0);
        assert_eq!(s.stats().stats["expired"], 1);
        // A new service list: flows of a service that stays follow it to its new
        // index, flows of a removed one are forgotten.
        let mut s = steering(64);
        let mut a = vec![udp([10, 153, 1, 5], [1, 1, 1, 1], 7, 9, Direction::Forward)];
        let mut b = vec![udp(
            [10, 153, 3, 5],
            [1, 1, 1, 1],
            7,
            53,
            Direction::Forward,
        )];
        s.classify(&mut a, Direction::Forward, SEC);
        s.classify(&mut b, Direction::Forward, SEC);
        s.record(&[translate(a.remove(0), 20000)], SEC);
        s.record(&[translate(b.remove(0), 20001)], SEC);
        assert_eq!(s.flows(), 2);
        s.retarget(
            vec![Selector::default(), from_subnet("10.153.3.0/24")],
            &[None, Some(1)],
        );
        assert_eq!(s.flows(), 1);
        let mut reply = vec![udp(
            [1, 1, 1, 1],
            [10, 153, 2, 100],
            53,
            20001,
            Direction::Reverse,
        )];
        s.classify(&mut reply, Direction::Reverse, SEC);
        assert_eq!(reply[0].service, 1);
        assert_eq!(s.stats().stats["reverse_by_flow"], 1);
    }
}
