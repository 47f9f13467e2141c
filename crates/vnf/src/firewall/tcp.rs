//! The TCP connection-tracking state machine, modelled on Linux
//! `nf_conntrack_proto_tcp` (the window is checked by [`super::window`]): states, transitions on
//! SYN / SYN-ACK / FIN / ACK / RST seen from the originator or the responder, and
//! the per-direction FIN bits that tell a retransmitted FIN from the second one.

/// Connection states (`None` = no packet seen yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TcpState {
    /// No state.
    None = 0,
    /// Originator sent SYN.
    SynSent = 1,
    /// Responder answered SYN-ACK (or simultaneous open).
    SynRecv = 2,
    /// Three-way handshake completed.
    Established = 3,
    /// One side sent FIN.
    FinWait = 4,
    /// The other side acknowledged the first FIN.
    CloseWait = 5,
    /// Both sides sent FIN; waiting for the last ACK.
    LastAck = 6,
    /// Closed normally; lingers for late segments.
    TimeWait = 7,
    /// Reset.
    Close = 8,
}

impl TcpState {
    /// Every state, by discriminant.
    pub const ALL: [TcpState; 9] = [
        TcpState::None,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::Established,
        TcpState::FinWait,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::TimeWait,
        TcpState::Close,
    ];

    /// The state with discriminant `v`.
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.get(usize::from(v)).copied()
    }

    /// snake_case name for stats.
    pub fn as_str(self) -> &'static str {
        match self {
            TcpState::None => "none",
            TcpState::SynSent => "syn_sent",
            TcpState::SynRecv => "syn_recv",
            TcpState::Established => "established",
            TcpState::FinWait => "fin_wait",
            TcpState::CloseWait => "close_wait",
            TcpState::LastAck => "last_ack",
            TcpState::TimeWait => "time_wait",
            TcpState::Close => "close",
        }
    }
}

/// TCP flag bits.
pub const FIN: u8 = 0x01;
/// SYN flag.
pub const SYN: u8 = 0x02;
/// RST flag.
pub const RST: u8 = 0x04;
/// ACK flag.
pub const ACK: u8 = 0x10;

/// FIN seen from the originator.
pub const FIN_ORIG: u8 = 1;
/// FIN seen from the responder.
pub const FIN_REPLY: u8 = 2;

/// What a segment does to the tracked connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Valid: the connection moves to this state with these FIN bits.
    Go(TcpState, u8),
    /// Valid but says nothing new (retransmitted SYN in ESTABLISHED, ...): pass it.
    Ignore,
    /// Not valid in this state: drop it.
    Invalid,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Seg {
    Syn,
    SynAck,
    Fin,
    Ack,
    Rst,
    Bare,
}

fn classify(flags: u8) -> Seg {
    if flags & RST != 0 {
        Seg::Rst
    } else if flags & SYN != 0 {
        if flags & ACK != 0 {
            Seg::SynAck
        } else {
            Seg::Syn
        }
    } else if flags & FIN != 0 {
        Seg::Fin
    } else if flags & ACK != 0 {
        Seg::Ack
    } else {
        Seg::Bare
    }
}

/// True for a segment that may open a connection (SYN without ACK, RST or FIN).
pub fn is_initial_syn(flags: u8) -> bool {
    classify(flags) == Seg::Syn
}

/// True for a segment that may pick up a connection mid-stream (`loose`): an ACK
/// without SYN, FIN or RST, as Linux's `nf_conntrack_tcp_loose`.
pub fn is_bare_ack(flags: u8) -> bool {
    classify(flags) == Seg::Ack
}

/// The transition for a segment with `flags`, seen from the originator
/// (`from_orig`) or the responder, in `state` with FIN bits `fins`.
pub fn step(state: TcpState, fins: u8, flags: u8, from_orig: bool) -> Step {
    use Seg::*;
    use TcpState as S;
    let seg = classify(flags);
    let me = if from_orig { FIN_ORIG } else { FIN_REPLY };
    if seg == Bare {
        return Step::Invalid;
    }
    if seg == Rst {
        return if state == S::None {
            Step::Invalid
        } else {
            Step::Go(S::Close, fins)
        };
    }
    let go = |s| Step::Go(s, fins);
    match (state, seg, from_orig) {
        (S::None, Syn, true) => go(S::SynSent),
        (S::None, _, _) => Step::Invalid,
        (S::SynSent, Syn, true) => go(S::SynSent),
        (S::SynSent, SynAck | Syn, false) => go(S::SynRecv),
        (S::SynSent, _, _) => Step::Invalid,
        (S::SynRecv, Ack, true) => go(S::Established),
        (S::SynRecv, Fin, true) => Step::Go(S::FinWait, fins | me),
        (S::SynRecv, SynAck, _) | (S::SynRecv, Ack, false) | (S::SynRecv, Syn, _) => Step::Ignore,
        (S::SynRecv, Fin, false) => Step::Invalid,
        (S::Established, Fin, _) => Step::Go(S::FinWait, fins | me),
        (S::Established, Ack, _) => go(S::Established),
        (S::Established | S::FinWait | S::CloseWait | S::LastAck, Syn | SynAck, _) => Step::Ignore,
        (S::FinWait | S::CloseWait, Fin, _) => {
            let f = fins | me;
            if f == FIN_ORIG | FIN_REPLY {
                Step::Go(S::LastAck, f)
            } else {
                Step::Go(state, f)
            }
        }
        (S::FinWait, Ack, _) => {
            if fins & me == 0 {
                go(S::CloseWait)
            } else {
                go(S::FinWait)
            }
        }
        (S::CloseWait, Ack, _) => go(S::CloseWait),
        (S::LastAck, Ack, _) => go(S::TimeWait),
        (S::LastAck, Fin, _) => go(S::LastAck),
        (S::TimeWait | S::Close, Syn, true) => Step::Go(S::SynSent, 0),
        (S::TimeWait, Ack | Fin, _) => go(S::TimeWait),
        (S::Close, Ack | Fin, _) => go(S::Close),
        (S::TimeWait | S::Close, _, _) => Step::Invalid,
        (_, Bare | Rst, _) => Step::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TcpState as S;

    /// Runs segments (flags, from originator) from NONE; returns the final state.
    fn run(segs: &[(u8, bool)]) -> (TcpState, u8) {
        let (mut s, mut f) = (S::None, 0);
        for &(flags, orig) in segs {
            match step(s, f, flags, orig) {
                Step::Go(ns, nf) => (s, f) = (ns, nf),
                Step::Ignore => {}
                Step::Invalid => panic!("invalid {flags:#x} from_orig={orig} in {s:?}"),
            }
        }
        (s, f)
    }

    #[test]
    fn handshake_and_normal_close() {
        let hs = [(SYN, true), (SYN | ACK, false), (ACK, true)];
        assert_eq!(run(&hs[..1]).0, S::SynSent);
        assert_eq!(run(&hs[..2]).0, S::SynRecv);
        assert_eq!(run(&hs).0, S::Established);
        let mut c = hs.to_vec();
        c.push((FIN | ACK, true));
        assert_eq!(run(&c).0, S::FinWait);
        c.push((ACK, false));
        assert_eq!(run(&c).0, S::CloseWait);
        c.push((FIN | ACK, false));
        assert_eq!(run(&c), (S::LastAck, FIN_ORIG | FIN_REPLY));
        c.push((ACK, true));
        assert_eq!(run(&c).0, S::TimeWait);
        // Port reuse after TIME_WAIT.
        c.push((SYN, true));
        assert_eq!(run(&c), (S::SynSent, 0));
    }

    #[test]
    fn simultaneous_close() {
        let c = [
            (SYN, true),
            (SYN | ACK, false),
            (ACK, true),
            (FIN | ACK, true),
            (FIN | ACK, false),
        ];
        assert_eq!(run(&c).0, S::LastAck);
        let mut d = c.to_vec();
        d.push((ACK, true));
        d.push((ACK, false));
        assert_eq!(run(&d).0, S::TimeWait);
    }

    #[test]
    fn retransmitted_fin_is_not_the_second_fin() {
        let c = [
            (SYN, true),
            (SYN | ACK, false),
            (ACK, true),
            (FIN | ACK, true),
            (FIN | ACK, true),
        ];
        assert_eq!(run(&c), (S::FinWait, FIN_ORIG));
        // The FIN sender's own ACKs do not mean the peer acknowledged.
        let mut d = c.to_vec();
        d.push((ACK, true));
        assert_eq!(run(&d).0, S::FinWait);
    }

    #[test]
    fn simultaneous_open() {
        let c = [
            (SYN, true),
            (SYN, false),
            (SYN | ACK, true),
            (SYN | ACK, false),
            (ACK, true),
        ];
        assert_eq!(run(&c).0, S::Established);
    }

    #[test]
    fn rst_closes_from_any_state() {
        for n in 1..=3 {
            let mut c = [(SYN, true), (SYN | ACK, false), (ACK, true)][..n].to_vec();
            c.push((RST, n % 2 == 0));
            assert_eq!(run(&c).0, S::Close);
        }
        assert_eq!(step(S::None, 0, RST, true), Step::Invalid);
    }

    #[test]
    fn invalid_segments() {
        assert_eq!(
            step(S::None, 0, ACK, true),
            Step::Invalid,
            "no state, not a SYN"
        );
        assert_eq!(step(S::None, 0, SYN | ACK, false), Step::Invalid);
        assert_eq!(
            step(S::SynSent, 0, ACK, false),
            Step::Invalid,
            "ACK before SYN-ACK"
        );
        assert_eq!(step(S::SynSent, 0, ACK, true), Step::Invalid);
        assert_eq!(step(S::Established, 0, 0, true), Step::Invalid, "no flags");
        assert_eq!(step(S::TimeWait, 3, SYN, false), Step::Invalid);
        assert_eq!(step(S::Established, 0, SYN, true), Step::Ignore);
        assert!(is_initial_syn(SYN) && !is_initial_syn(SYN | ACK) && !is_initial_syn(SYN | RST));
    }

    #[test]
    fn state_codes_round_trip() {
        for s in TcpState::ALL {
            assert_eq!(TcpState::from_u8(s as u8), Some(s));
        }
        assert_eq!(TcpState::from_u8(9), None);
    }
}
