//! The two built-in graph nodes: `parse` (first: header parsing, malformed and non-IPv4
//! frames dropped with their reason) and `output` (last: TTL decrement with incremental
//! checksum update, Ethernet rewrite towards the next hop).

use nfx_packet::rewrite::{decrement_ttl, set_macs};
use nfx_packet::{parse, Direction, Packet};
use nfx_vnf::{Node, NodeCtx};

/// Parses every frame into `Packet::meta`; frames that do not parse are dropped with the
/// parser's reason.
#[derive(Debug, Default)]
pub struct ParseNode;

impl Node for ParseNode {
    fn name(&self) -> &str {
        "parse"
    }

    fn process(&mut self, pkts: &mut [Packet], _ctx: &mut NodeCtx<'_>) {
        for p in pkts.iter_mut().filter(|p| p.alive()) {
            match parse(p.buf.frame()) {
                Ok(meta) => {
                    p.meta = meta;
                    p.in_key = meta.key;
                }
                Err(reason) => p.drop = Some(reason),
            }
        }
    }
}

/// The Ethernet addresses written into frames leaving one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Rewrite {
    /// Next hop's MAC (destination).
    pub dst: [u8; 6],
    /// Egress interface's MAC (source).
    pub src: [u8; 6],
}

/// Prepares packets for transmission: decrements the IPv4 TTL (dropping at 1 or 0, as a
/// router does) with an RFC 1624 checksum update, and rewrites the Ethernet addresses
/// for the egress port of the packet's direction.
#[derive(Debug, Clone)]
pub struct OutputNode {
    /// Rewrite for Forward packets (they leave on the outside port).
    pub forward: L2Rewrite,
    /// Rewrite for Reverse packets (they leave on the inside port).
    pub reverse: L2Rewrite,
}

impl Node for OutputNode {
    fn name(&self) -> &str {
        "output"
    }

    fn process(&mut self, pkts: &mut [Packet], _ctx: &mut NodeCtx<'_>) {
        for p in pkts.iter_mut().filter(|p| p.alive()) {
            let l2 = match p.dir {
                Direction::Forward => self.forward,
                Direction::Reverse => self.reverse,
            };
            match decrement_ttl(p) {
                Ok(()) => set_macs(p, l2.src, l2.dst),
                Err(reason) => p.drop = Some(reason),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_packet::checksum::checksum;
    use nfx_packet::DropReason;
    use nfx_packet::PacketBuf;
    use nfx_vnf::EventSink;

    fn ipv4_frame(ttl: u8, tos: u8, id: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[1] = tos;
        ip[2..4].copy_from_slice(&28u16.to_be_bytes());
        ip[4..6].copy_from_slice(&id.to_be_bytes());
        ip[8] = ttl;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 1, 1]);
        let c = checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f[34..36].copy_from_slice(&1000u16.to_be_bytes());
        f[36..38].copy_from_slice(&2000u16.to_be_bytes());
        f[38..40].copy_from_slice(&8u16.to_be_bytes());
        f
    }

    fn run(node: &mut dyn Node, pkts: &mut [Packet]) {
        let mut sink = EventSink::default();
        node.process(
            pkts,
            &mut NodeCtx {
                now_ns: 0,
                events: &mut sink,
            },
        );
    }

    #[test]
    fn parse_fills_meta_and_drops_with_reasons() {
        let mut arp = ipv4_frame(64, 0, 1);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let mut pkts = vec![
            Packet::new(
                PacketBuf::from_frame(&ipv4_frame(64, 0, 1)),
                Direction::Forward,
            ),
            Packet::new(PacketBuf::from_frame(&arp), Direction::Forward),
            Packet::new(PacketBuf::from_frame(&[0u8; 10]), Direction::Forward),
        ];
        run(&mut ParseNode, &mut pkts);
        assert!(pkts[0].alive());
        assert_eq!(pkts[0].meta.key.sport, 1000);
        assert_eq!(pkts[1].drop, Some(DropReason::NonIp));
        assert_eq!(pkts[2].drop, Some(DropReason::Truncated));
    }

    #[test]
    fn output_rewrites_macs_by_direction() {
        let fwd = L2Rewrite {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 0x20],
        };
        let rev = L2Rewrite {
            dst: [2, 0, 0, 0, 0, 1],
            src: [2, 0, 0, 0, 0, 0x10],
        };
        let mut out = OutputNode {
            forward: fwd,
            reverse: rev,
        };
        let mut pkts = vec![
            Packet::new(
                PacketBuf::from_frame(&ipv4_frame(64, 0, 1)),
                Direction::Forward,
            ),
            Packet::new(
                PacketBuf::from_frame(&ipv4_frame(64, 0, 1)),
                Direction::Reverse,
            ),
            Packet::new(
                PacketBuf::from_frame(&ipv4_frame(1, 0, 1)),
                Direction::Forward,
            ),
        ];
        run(&mut ParseNode, &mut pkts);
        run(&mut out, &mut pkts);
        assert_eq!(
            &pkts[0].buf.frame()[0..12],
            &[fwd.dst, fwd.src].concat()[..]
        );
        assert_eq!(
            &pkts[1].buf.frame()[0..12],
            &[rev.dst, rev.src].concat()[..]
        );
        assert_eq!(pkts[0].buf.frame()[14 + 8], 63);
        assert_eq!(pkts[0].meta.ttl, 63);
        assert_eq!(
            checksum(&pkts[0].buf.frame()[14..34]),
            0,
            "IP checksum broken by the TTL update"
        );
        assert_eq!(pkts[2].drop, Some(DropReason::TtlExpired));
    }
}
