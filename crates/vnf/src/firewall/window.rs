//! TCP window tracking: which sequence and acknowledgement numbers each side of a
//! connection may send, after Guido van Rooij's "Real Stateful TCP Packet Filtering in
//! IP Filter" with the bounds of Linux `nf_conntrack_proto_tcp` (`tcp_in_window`).
//!
//! Per direction (sender S, receiver R):
//! - `end`: highest `seq + len` S sent (SYN and FIN count one);
//! - `maxend`: highest `ack + window` R advertised, the right edge S may send up to;
//! - `maxwin`: largest window S advertised (scaled), at least 1;
//! - `maxack`: highest ack S sent.
//!
//! A segment (seq, end = seq + len, ack, window) from S is in window when
//! I. `seq ≤ S.maxend`, II. `end ≥ S.end − R.maxwin`, III. `ack ≤ R.end` and
//! IV. `ack ≥ R.end − max(S.maxwin, 66000)`, all in sequence-space (mod 2³²)
//! arithmetic. A segment without payload, SYN or FIN is checked on its ack only (its
//! seq is taken as `S.end`), except a RST, whose seq always counts. A segment without
//! ACK is checked as if it acknowledged `R.end`.
//!
//! A side seen for the first time is initialised from its segment: from a SYN (its
//! window unscaled, the window-scale option noted; scaling is on only when both SYNs
//! carry the option, RFC 7323), or mid-stream (a picked-up connection, or a flow handed
//! back by the table tier) from whatever the segment says.

use nfx_packet::tcp::TcpSeg;

/// Side flag: its SYN carried the window-scale option.
pub const WSCALE: u8 = 1;
/// Side flag: `maxack` holds an ack it sent.
pub const MAXACK_SET: u8 = 2;
/// Side flag: it sent data the other side has not acknowledged yet.
pub const DATA_UNACK: u8 = 4;
/// Side flag: picked up mid-stream, window scale unknown: only RSTs are held to the
/// window (Linux's `IP_CT_TCP_FLAG_BE_LIBERAL`).
pub const LIBERAL: u8 = 8;
/// Side flag: the fast path may forward this side's segments without the firewall
/// seeing them, so its view of both sequence spaces can fall behind; like Linux for a
/// flow it offloads to a flowtable (`nft_flow_offload` sets `IP_CT_TCP_FLAG_BE_LIBERAL`
/// on both sides), only RSTs are held to the window from then on.
pub const OFFLOADED: u8 = 16;
/// Side flag: copied from another firewall while that one still forwarded the flow
/// (a move to another host), so the copy's view lags behind by what was sent meanwhile.
/// The side is liberal like [`LIBERAL`] until both sides have been learnt again from
/// live segments and this side sent one in window; then it is held to the window again.
pub const BEHIND: u8 = 32;
/// Every side flag.
pub const ALL_FLAGS: u8 = WSCALE | MAXACK_SET | DATA_UNACK | LIBERAL | OFFLOADED | BEHIND;

/// Smallest window IV allows acks to lag behind by (Linux's `MAXACKWINCONST`).
const MAX_ACK_WIN_CONST: u32 = 66_000;

const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// What the firewall knows of one side's sequence space.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// Highest `seq + len` sent.
    pub end: u32,
    /// Right edge the other side allows.
    pub maxend: u32,
    /// Largest (scaled) window advertised; 0 = side not seen yet.
    pub maxwin: u32,
    /// Highest ack sent (with [`MAXACK_SET`]).
    pub maxack: u32,
}

/// Both sides: index 0 is the side that opened the flow, 1 the responder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Windows {
    /// Window-scale shift per side.
    pub scale: [u8; 2],
    /// Side flags ([`WSCALE`], [`MAXACK_SET`], [`DATA_UNACK`], [`LIBERAL`]).
    pub flags: [u8; 2],
    /// Sequence-space view per side.
    pub seen: [Seen; 2],
}

/// `a` comes before `b` in sequence space.
#[inline]
pub fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` comes after `b` in sequence space.
#[inline]
pub fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

impl Windows {
    /// The windows of a flow opened by `syn` (side 0).
    pub fn from_syn(syn: &TcpSeg) -> Self {
        let mut w = Windows::default();
        w.init_from_syn(0, syn);
        w
    }

    /// The windows of a connection picked up mid-stream from `seg` of side 0: both
    /// sides liberal (see [`LIBERAL`]).
    pub fn picked_up(seg: &TcpSeg) -> Self {
        let mut w = Windows {
            flags: [LIBERAL; 2],
            ..Windows::default()
        };
        w.init_mid_stream(0, seg);
        w.check(0, seg, false, false);
        w
    }

    fn init_from_syn(&mut self, d: usize, seg: &TcpSeg) {
        let end = seg.end();
        self.seen[d].end = end;
        self.seen[d].maxend = end;
        self.seen[d].maxwin = u32::from(seg.win).max(1);
        self.scale[d] = seg.wscale.unwrap_or(0);
        self.flags[d] &= !WSCALE;
        if seg.wscale.is_some() {
            self.flags[d] |= WSCALE;
        }
    }

    fn init_mid_stream(&mut self, d: usize, seg: &TcpSeg) {
        let end = seg.end();
        let maxwin = (u32::from(seg.win) << self.scale[d]).max(1);
        self.seen[d] = Seen {
            end,
            maxend: end.wrapping_add(maxwin),
            maxwin,
            ..self.seen[d]
        };
        let r = 1 - d;
        if self.seen[r].maxwin == 0 {
            self.seen[r].end = seg.ack;
            self.seen[r].maxend = seg.ack;
        }
    }

    /// True when side `d` is in sync (seen since the flow started or was handed back).
    pub fn synced(&self, d: usize) -> bool {
        self.seen[d].maxwin != 0
    }

    /// Forgets side `d`'s window so that its next segment re-initialises it (the
    /// table tier forwarded segments this node did not see); its scale is kept.
    pub fn resync(&mut self, d: usize) {
        self.seen[d].maxwin = 0;
    }

    /// True when some side has data outstanding or was picked up mid-stream: such a
    /// connection gets at most the `unacknowledged` timeout.
    pub fn doubtful(&self) -> bool {
        (self.flags[0] | self.flags[1]) & (DATA_UNACK | LIBERAL) != 0
    }

    /// True when side `d` is liberal (only its RSTs are checked): picked up mid-stream,
    /// offloaded, or copied behind and not learnt again yet.
    pub fn liberal(&self, d: usize) -> bool {
        self.flags[d] & (LIBERAL | OFFLOADED | BEHIND) != 0
    }

    /// True when side `d` was picked up mid-stream (its window scale is unknown).
    pub fn is_picked_up(&self, d: usize) -> bool {
        self.flags[d] & LIBERAL != 0
    }

    /// Marks both sides [`OFFLOADED`]: the fast path may carry the flow from now on.
    pub fn offload(&mut self) {
        self.flags[0] |= OFFLOADED;
        self.flags[1] |= OFFLOADED;
    }

    /// Checks a segment from side `d` against the windows and, when it is in window,
    /// records what it says. `reinit` (a SYN from the opener in SYN_SENT, or a SYN-ACK
    /// from the responder in SYN_RECV) lets a segment with a later end restart its
    /// side, as RFC 793 allows a reinitialised TCP. Returns whether it is in window.
    pub fn check(&mut self, d: usize, seg: &TcpSeg, reinit: bool, syn_sent: bool) -> bool {
        let r = 1 - d;
        let flags = seg.flags;
        let mut end = seg.end();
        if !self.synced(d) {
            if flags & SYN != 0 {
                self.init_from_syn(d, seg);
                if self.flags[d] & self.flags[r] & WSCALE == 0 {
                    self.scale = [0, 0];
                }
                if flags & ACK == 0 {
                    return true;
                }
            } else {
                self.init_mid_stream(d, seg);
            }
        } else if reinit && after(end, self.seen[d].end) {
            self.init_from_syn(d, seg);
        }
        let mut ack = seg.ack;
        if flags & ACK == 0 || (flags & RST != 0 && ack == 0) {
            ack = self.seen[r].end;
        }
        let mut seq = seg.seq;
        if seq == end && (flags & RST == 0 || (seq == 0 && syn_sent)) {
            seq = self.seen[d].end;
            end = seq;
        }
        let s = self.seen[d];
        let rv = self.seen[r];
        let max_ack_win = s.maxwin.max(MAX_ACK_WIN_CONST);
        let ok = !after(seq, s.maxend)
            && !before(end, s.end.wrapping_sub(rv.maxwin))
            && !after(ack, rv.end)
            && !before(ack, rv.end.wrapping_sub(max_ack_win));
        if ok {
            self.update(d, seg, end, ack);
            if self.synced(r) {
                self.flags[d] &= !BEHIND;
            }
        }
        ok
    }

    /// Records an in-window segment (Linux's update of sender and receiver data).
    fn update(&mut self, d: usize, seg: &TcpSeg, end: u32, ack: u32) {
        let r = 1 - d;
        let win = if seg.flags & SYN == 0 {
            u32::from(seg.win) << self.scale[d]
        } else {
            u32::from(seg.win)
        };
        let s = &mut self.seen[d];
        s.maxwin = s.maxwin.max(win);
        if after(end, s.end) {
            s.end = end;
            self.flags[d] |= DATA_UNACK;
        }
        if seg.flags & ACK != 0 {
            if self.flags[d] & MAXACK_SET == 0 || after(ack, s.maxack) {
                s.maxack = ack;
            }
            self.flags[d] |= MAXACK_SET;
        }
        let s_maxend = s.maxend;
        let rv = &mut self.seen[r];
        if rv.maxwin != 0 && after(end, s_maxend) {
            rv.maxwin = rv.maxwin.wrapping_add(end.wrapping_sub(s_maxend));
        }
        if after(ack.wrapping_add(win), rv.maxend.wrapping_sub(1)) {
            rv.maxend = ack.wrapping_add(win).wrapping_add(u32::from(win == 0));
        }
        if ack == rv.end {
            self.flags[r] &= !DATA_UNACK;
        }
    }

    /// For a RST from side `d` in a synchronised state: `Some(true)` when its seq is
    /// exactly the ack the other side last sent (the connection is reset),
    /// `Some(false)` when it is later but in window (passed on without closing: the
    /// endpoint answers a challenge ACK, RFC 5961), `None` when it lies before that
    /// ack (an old or blind RST). Without a recorded ack any seq is exact.
    pub fn rst_exact(&self, d: usize, seq: u32) -> Option<bool> {
        let r = 1 - d;
        if self.flags[r] & MAXACK_SET == 0 {
            return Some(true);
        }
        let maxack = self.seen[r].maxack;
        if before(seq, maxack) {
            None
        } else {
            Some(seq == maxack)
        }
    }

    /// True when `seq`, quoted by an ICMP error about a segment side `d` sent, lies in
    /// the part of `d`'s sequence space that can still be in flight:
    /// `[end − max(receiver's maxwin, 1), end]` (RFC 5927 §4.1). Unsynced sides pass.
    pub fn quoted_in_window(&self, d: usize, seq: u32) -> bool {
        if !self.synced(d) {
            return true;
        }
        let end = self.seen[d].end;
        let lo = end.wrapping_sub(self.seen[1 - d].maxwin.max(1));
        !after(seq, end) && !before(seq, lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FIN: u8 = 0x01;

    fn seg(seq: u32, ack: u32, win: u16, len: u32, flags: u8) -> TcpSeg {
        TcpSeg {
            seq,
            ack,
            win,
            len,
            flags,
            wscale: None,
        }
    }

    /// Windows after a handshake: client ISN `c`, server ISN `s`, windows `wc`/`ws`.
    fn handshake(c: u32, s: u32, wc: u16, ws: u16) -> Windows {
        let mut w = Windows::from_syn(&seg(c, 0, wc, 0, SYN));
        assert!(w.check(1, &seg(s, c.wrapping_add(1), ws, 0, SYN | ACK), false, true));
        assert!(w.check(
            0,
            &seg(c.wrapping_add(1), s.wrapping_add(1), wc, 0, ACK),
            false,
            false
        ));
        w
    }

    #[test]
    fn handshake_sets_both_sides() {
        let w = handshake(1000, 5000, 1000, 2000);
        assert_eq!(w.seen[0].end, 1001);
        assert_eq!(w.seen[1].end, 5001);
        assert_eq!(
            w.seen[0].maxend,
            1001 + 2000,
            "client may send up to the server's window"
        );
        assert_eq!(w.seen[1].maxend, 5001 + 1000);
        assert_eq!(w.seen[0].maxack, 5001);
        assert_eq!(w.seen[1].maxack, 1001);
    }

    #[test]
    fn data_beyond_the_window_and_acks_of_unsent_data_are_refused() {
        let mut w = handshake(1000, 5000, 1000, 2000);
        assert!(w.check(0, &seg(1001, 5001, 1000, 500, ACK), false, false));
        assert!(w.flags[0] & DATA_UNACK != 0);
        // Starts past the right edge (1001 + 2000).
        assert!(!w.check(0, &seg(3002, 5001, 1000, 10, ACK), false, false));
        // Far behind everything acknowledged.
        assert!(!w.check(
            0,
            &seg(1001u32.wrapping_sub(3000), 5001, 1000, 10, ACK),
            false,
            false
        ));
        // Acknowledges server data never sent.
        assert!(!w.check(0, &seg(1501, 6000, 1000, 0, ACK), false, false));
        // The server acknowledges the data: no longer outstanding.
        assert!(w.check(1, &seg(5001, 1501, 2000, 0, ACK), false, false));
        assert!(w.flags[0] & DATA_UNACK == 0);
        // A retransmission of old data still intersects the window.
        assert!(w.check(0, &seg(1001, 5001, 1000, 500, ACK), false, false));
    }

    #[test]
    fn window_scaling_needs_both_syns() {
        let mut syn = seg(1, 0, 100, 0, SYN);
        syn.wscale = Some(4);
        let mut w = Windows::from_syn(&syn);
        let mut sa = seg(9, 2, 100, 0, SYN | ACK);
        sa.wscale = Some(2);
        assert!(w.check(1, &sa, false, true));
        assert_eq!(w.scale, [4, 2]);
        assert!(w.check(0, &seg(2, 10, 100, 0, ACK), false, false));
        assert_eq!(
            w.seen[1].maxend,
            10 + (100 << 4),
            "client window scaled by 16"
        );
        let mut w = Windows::from_syn(&syn);
        assert!(w.check(1, &seg(9, 2, 100, 0, SYN | ACK), false, true));
        assert_eq!(w.scale, [0, 0], "the server did not scale: nobody does");
    }

    #[test]
    fn rst_lower_bound_is_the_last_ack() {
        let mut w = handshake(1000, 5000, 1000, 2000);
        assert!(w.check(1, &seg(5001, 1001, 2000, 100, ACK), false, false));
        assert!(w.check(0, &seg(1001, 5101, 1000, 0, ACK), false, false));
        assert_eq!(w.rst_exact(1, 5101), Some(true));
        assert_eq!(w.rst_exact(1, 5150), Some(false));
        assert_eq!(w.rst_exact(1, 5100), None);
        assert_eq!(w.rst_exact(1, 5101u32.wrapping_add(1 << 31)), None);
    }

    #[test]
    fn mid_stream_pickup_and_resync() {
        let mut w = Windows::picked_up(&seg(7000, 3000, 500, 10, ACK));
        assert!(w.liberal(0) && w.liberal(1));
        assert_eq!(
            (w.seen[0].end, w.seen[1].end, w.seen[1].maxwin),
            (7010, 3000, 0)
        );
        assert!(w.check(1, &seg(3000, 7010, 800, 0, ACK), false, false));
        assert!(w.synced(1));
        let mut w = handshake(1000, 5000, 1000, 2000);
        w.resync(0);
        // Far ahead after the table tier carried the flow: learnt again.
        assert!(w.check(0, &seg(900_000, 5001, 1000, 100, ACK), false, false));
        assert_eq!(w.seen[0].end, 900_100);
    }

    #[test]
    fn reinitialised_syn_and_fin() {
        let mut w = Windows::from_syn(&seg(100, 0, 10, 0, SYN));
        assert!(w.check(0, &seg(500, 0, 10, 0, SYN), true, true), "new ISN");
        assert_eq!(w.seen[0].end, 501);
        let mut w = handshake(1, 1, 100, 100);
        assert!(w.check(0, &seg(2, 2, 100, 0, FIN | ACK), false, false));
        assert_eq!(w.seen[0].end, 3, "FIN takes a sequence number");
    }

    #[test]
    fn quoted_seq_window() {
        let mut w = handshake(1000, 5000, 1000, 2000);
        assert!(w.check(0, &seg(1001, 5001, 1000, 500, ACK), false, false));
        assert!(w.quoted_in_window(0, 1001));
        assert!(w.quoted_in_window(0, 1501));
        assert!(!w.quoted_in_window(0, 1502));
        assert!(!w.quoted_in_window(0, 1501u32.wrapping_sub(2001)));
        let syn_only = Windows::from_syn(&seg(77, 0, 10, 0, SYN));
        assert!(syn_only.quoted_in_window(0, 77), "a SYN's own ISN");
        assert!(!syn_only.quoted_in_window(0, 70));
    }

    proptest! {
        /// Two well-behaved TCPs exchange data of random sizes, windows, scales and
        /// ISNs (across the 2³² wrap), with delayed ACKs and retransmissions: none of
        /// their segments is ever out of window. A blind RST whose seq lies beyond the
        /// window the client offers, or before what it last acknowledged, never is.
        #[test]
        fn real_conversations_pass_blind_resets_do_not(
            c_isn in any::<u32>(), s_isn in any::<u32>(),
            wc in 1u16..=65535, ws in 1u16..=65535,
            sc in proptest::option::of(0u8..=14), ss in proptest::option::of(0u8..=14),
            steps in proptest::collection::vec((0u8..6, 0u32..1460), 1..200),
            blind in any::<u32>(),
        ) {
            let mut syn = seg(c_isn, 0, wc, 0, SYN);
            syn.wscale = sc;
            let mut w = Windows::from_syn(&syn);
            let mut sa = seg(s_isn, c_isn.wrapping_add(1), ws, 0, SYN | ACK);
            sa.wscale = ss;
            prop_assert!(w.check(1, &sa, false, true));
            let shift = match (sc, ss) {
                (Some(a), Some(b)) => [a, b],
                _ => [0, 0],
            };
            let raw = [wc, ws];
            let window = |side: usize| (u32::from(raw[side]) << shift[side]).max(1);
            // nxt[side]: next seq it sends; acked[side]: the ack it sent last;
            // adv[side]: the window it last advertised (a SYN's is not scaled).
            let mut nxt = [c_isn.wrapping_add(1), s_isn.wrapping_add(1)];
            let mut acked = [s_isn.wrapping_add(1), c_isn.wrapping_add(1)];
            let mut adv = [u32::from(wc), u32::from(ws)];
            prop_assert!(w.check(0, &seg(nxt[0], acked[0], wc, 0, ACK), false, false));
            adv[0] = window(0);
            for (kind, len) in steps {
                let d = usize::from(kind % 2);
                let p = 1 - d;
                let (start, len) = match kind / 2 {
                    // New data, no more than the peer's window allows in flight.
                    0 => {
                        let in_flight = nxt[d].wrapping_sub(acked[p]);
                        (nxt[d], len.min(adv[p].saturating_sub(in_flight)))
                    }
                    // A bare ACK of everything received.
                    1 => (nxt[d], 0),
                    // Retransmission of what the peer has not acknowledged.
                    _ => (acked[p], nxt[d].wrapping_sub(acked[p]).min(len)),
                };
                acked[d] = nxt[p];
                let s = seg(start, acked[d], raw[d], len, ACK);
                prop_assert!(w.check(d, &s, false, false), "segment {:?} from {} refused", s, d);
                adv[d] = window(d);
                if start == nxt[d] {
                    nxt[d] = nxt[d].wrapping_add(len);
                }
            }
            // A blind RST towards the client, pretending to be the server.
            if blind.wrapping_sub(acked[0]) > adv[0] {
                let rst = seg(blind, 0, 0, 0, RST);
                let refused = w.rst_exact(1, blind).is_none() || !w.clone().check(1, &rst, false, false);
                prop_assert!(refused, "blind RST {} passed", blind);
            }
        }
    }
}
