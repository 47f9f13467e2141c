//! One TCP segment against a tracked connection: the state machine ([`tcp::step`]),
//! the window ([`Windows::check`]), the RST rules and what the segment does to the
//! connection's flags. Pure functions over [`FwVal`], so they can be tested (and
//! mirrored by the table tier) without a table.

use super::tcp::{self, Step, TcpState};
use super::window::Windows;
use super::{FwDrop, FwVal, ASSURED, FINS, SEEN_REPLY};
use nfx_packet::tcp::TcpSeg;

/// What a segment does to its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Passes; the connection took the new value. `refresh`: restart its timer.
    Pass {
        /// Whether the segment restarts the connection's timer.
        refresh: bool,
    },
    /// Passes and ends the tracking (a RST before any reply: nothing was established).
    Kill,
    /// Dropped for this reason; the connection is unchanged.
    Reject(FwDrop),
}

/// Runs segment `seg`, seen from the opener (`from_orig`) or the responder, against
/// the connection `v`. On [`Verdict::Pass`] `v` holds the new state.
pub fn segment(v: &mut FwVal, seg: &TcpSeg, from_orig: bool) -> Verdict {
    let Some(old) = TcpState::from_u8(v.state) else {
        return Verdict::Reject(FwDrop::InvalidState);
    };
    let d = usize::from(!from_orig);
    let (new, fins) = match tcp::step(old, v.flags & FINS, seg.flags, from_orig) {
        Step::Go(s, f) => (s, f),
        // Linux's "ignore": possibly valid, possibly not; the receiver's answer tells.
        Step::Ignore => return Verdict::Pass { refresh: false },
        Step::Invalid => return Verdict::Reject(FwDrop::InvalidState),
    };
    if new == TcpState::SynSent && matches!(old, TcpState::TimeWait | TcpState::Close) {
        // A new connection on the same ports (RFC 1122 4.2.2.13): start afresh.
        v.state = new as u8;
        v.flags &= !(FINS | ASSURED | SEEN_REPLY);
        v.win = Windows::from_syn(seg);
        return Verdict::Pass { refresh: true };
    }
    let mut next = *v;
    let rst = seg.flags & tcp::RST != 0;
    let mut keep_state = false;
    if rst {
        match rst_check(&next, seg, d, old) {
            Ok(exact) => keep_state = !exact,
            Err(why) => return Verdict::Reject(why),
        }
    }
    let reinit = (old == TcpState::SynSent && from_orig)
        || (old == TcpState::SynRecv && !from_orig && seg.flags & tcp::SYN != 0);
    let in_window = next.win.check(d, seg, reinit, old == TcpState::SynSent);
    if !in_window && (rst || !next.win.liberal(d)) {
        return Verdict::Reject(if rst {
            FwDrop::InvalidRst
        } else {
            FwDrop::OutOfWindow
        });
    }
    if rst && next.flags & SEEN_REPLY == 0 {
        return Verdict::Kill;
    }
    if !from_orig {
        next.flags |= SEEN_REPLY;
    }
    if !keep_state {
        next.state = new as u8;
        next.flags = (next.flags & !FINS) | fins;
    }
    if next.state == TcpState::Established as u8
        && matches!(old, TcpState::SynRecv | TcpState::Established)
        && next.flags & SEEN_REPLY != 0
    {
        next.flags |= ASSURED;
    }
    // A retransmitted SYN does not keep a half-open connection alive (as Linux).
    let refresh = !(old == TcpState::SynSent && new == TcpState::SynSent && from_orig);
    *v = next;
    Verdict::Pass { refresh }
}

/// The RST rules before the window check: in SYN_SENT only the responder's RST that
/// acknowledges the SYN (RFC 793); later, a RST whose seq lies before the ack the
/// other side last sent is refused (Linux's "invalid rst"). `Ok(true)`: the RST is
/// exact and closes; `Ok(false)`: it is later than that ack and passes without closing
/// (RFC 5961: the endpoint answers with a challenge ACK).
fn rst_check(v: &FwVal, seg: &TcpSeg, d: usize, old: TcpState) -> Result<bool, FwDrop> {
    if old == TcpState::SynSent {
        let answers_syn = d == 1 && seg.flags & tcp::ACK != 0 && seg.ack == v.win.seen[0].end;
        return if answers_syn || d == 0 {
            Ok(true)
        } else {
            Err(FwDrop::InvalidRst)
        };
    }
    match v.win.rst_exact(d, seg.seq) {
        None => Err(FwDrop::InvalidRst),
        Some(exact) => Ok(exact || old != TcpState::Established),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcp::{ACK, FIN, RST, SYN};

    fn seg(seq: u32, ack: u32, len: u32, flags: u8) -> TcpSeg {
        TcpSeg {
            seq,
            ack,
            win: 1000,
            len,
            flags,
            wscale: None,
        }
    }

    fn open() -> FwVal {
        let mut v = FwVal {
            state: TcpState::SynSent as u8,
            win: Windows::from_syn(&seg(100, 0, 0, SYN)),
            ..FwVal::default()
        };
        assert_eq!(
            segment(&mut v, &seg(900, 101, 0, SYN | ACK), false),
            Verdict::Pass { refresh: true }
        );
        assert_eq!(
            segment(&mut v, &seg(101, 901, 0, ACK), true),
            Verdict::Pass { refresh: true }
        );
        v
    }

    #[test]
    fn handshake_assures_and_refreshes() {
        let v = open();
        assert_eq!(v.state, TcpState::Established as u8);
        assert!(v.flags & ASSURED != 0 && v.flags & SEEN_REPLY != 0);
    }

    #[test]
    fn exact_rst_closes_later_rst_passes_old_rst_is_refused() {
        let mut v = open();
        let before = v;
        assert_eq!(
            segment(&mut v, &seg(850, 0, 0, RST), false),
            Verdict::Reject(FwDrop::InvalidRst)
        );
        assert_eq!(v, before, "a refused RST changes nothing");
        assert_eq!(
            segment(&mut v, &seg(950, 0, 0, RST), false),
            Verdict::Pass { refresh: true }
        );
        assert_eq!(v.state, TcpState::Established as u8, "in window, not exact");
        assert_eq!(
            segment(&mut v, &seg(901, 0, 0, RST), false),
            Verdict::Pass { refresh: true }
        );
        assert_eq!(v.state, TcpState::Close as u8);
    }

    #[test]
    fn syn_sent_rst_must_answer_the_syn() {
        let mut v = FwVal {
            state: TcpState::SynSent as u8,
            win: Windows::from_syn(&seg(100, 0, 0, SYN)),
            ..FwVal::default()
        };
        assert_eq!(
            segment(&mut v, &seg(0, 55, 0, RST | ACK), false),
            Verdict::Reject(FwDrop::InvalidRst)
        );
        assert_eq!(
            segment(&mut v, &seg(0, 101, 0, RST | ACK), false),
            Verdict::Kill
        );
    }

    #[test]
    fn retransmitted_syn_does_not_refresh_and_data_out_of_window_is_refused() {
        let mut v = FwVal {
            state: TcpState::SynSent as u8,
            win: Windows::from_syn(&seg(100, 0, 0, SYN)),
            ..FwVal::default()
        };
        assert_eq!(
            segment(&mut v, &seg(100, 0, 0, SYN), true),
            Verdict::Pass { refresh: false }
        );
        let mut v = open();
        assert_eq!(
            segment(&mut v, &seg(101 + 5000, 901, 10, ACK), true),
            Verdict::Reject(FwDrop::OutOfWindow)
        );
        assert_eq!(
            segment(&mut v, &seg(101, 901, 10, FIN | ACK), true),
            Verdict::Pass { refresh: true }
        );
        assert_eq!(v.state, TcpState::FinWait as u8);
    }

    #[test]
    fn picked_up_connections_are_liberal_but_not_for_resets() {
        let mut v = FwVal {
            state: TcpState::Established as u8,
            win: Windows::picked_up(&seg(5000, 700, 10, ACK)),
            ..FwVal::default()
        };
        assert!(v.flags & ASSURED == 0);
        assert_eq!(
            segment(&mut v, &seg(700, 5010, 0, ACK), false),
            Verdict::Pass { refresh: true }
        );
        assert!(v.flags & ASSURED != 0, "traffic seen both ways");
        // Liberal: data out of window passes (window scale unknown), unrecorded.
        assert_eq!(
            segment(&mut v, &seg(9_000_000, 700, 10, ACK), true),
            Verdict::Pass { refresh: true }
        );
        assert_eq!(v.win.seen[0].end, 5010);
        assert_eq!(
            segment(&mut v, &seg(80_000_000, 0, 0, RST), false),
            Verdict::Reject(FwDrop::InvalidRst)
        );
    }

    #[test]
    fn offloaded_connections_take_acks_of_unseen_data_but_not_blind_resets() {
        let mut v = open();
        let before = v;
        // The responder acknowledges data the fast path carried past the firewall.
        assert_eq!(
            segment(&mut v, &seg(901, 101 + 200_000, 0, ACK), false),
            Verdict::Reject(FwDrop::OutOfWindow),
            "without offload the ack is beyond what the opener sent"
        );
        assert_eq!(v, before);
        v.win.offload();
        assert_eq!(
            segment(&mut v, &seg(901, 101 + 200_000, 0, ACK), false),
            Verdict::Pass { refresh: true }
        );
        assert_eq!(v.state, TcpState::Established as u8);
        assert_eq!(
            segment(&mut v, &seg(80_000_000, 0, 0, RST), true),
            Verdict::Reject(FwDrop::InvalidRst)
        );
    }
}
