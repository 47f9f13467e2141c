//! ICMP other than echo. An error (unreachable, time exceeded, ...) that quotes a
//! tracked flow is related to it and passes only when it fits that flow: it travels
//! back towards the quoted packet's sender (outer destination = the quoted source),
//! against the direction the quoted packet went, and, for TCP, quotes a sequence
//! number the sender can still have in flight (RFC 5927 §4.1). Everything else is
//! stateless: filtered by the ACL when it may create state.

use super::{canonical, Firewall, FwDrop, REV_OPEN, SWAPPED};
use nfx_packet::parse::{icmp_is_error, IPPROTO_TCP};
use nfx_packet::{Direction, Packet};

/// The verdict for an ICMP packet that is not an echo.
pub(super) fn other(fw: &Firewall, p: &Packet, now: u64) -> Result<(), FwDrop> {
    let m = &p.meta;
    if icmp_is_error(m.icmp_type) && m.has_inner() {
        let (ck, swapped) = canonical(&m.inner_key);
        let live = fw
            .table
            .find(&ck)
            .map(|s| fw.table.get(s))
            .filter(|e| e.expires_ns > now);
        if let Some(e) = live {
            let quoted_from_orig = swapped == (e.val.flags & SWAPPED != 0);
            let opener_forward = e.val.flags & REV_OPEN == 0;
            let quoted_went_forward = opener_forward == quoted_from_orig;
            let error_goes_back = (p.dir == Direction::Forward) != quoted_went_forward;
            let seq_fits = m.inner_key.proto != IPPROTO_TCP
                || nfx_packet::tcp::quoted_seq(p.buf.frame(), m).is_some_and(|seq| {
                    e.val
                        .win
                        .quoted_in_window(usize::from(!quoted_from_orig), seq)
                });
            return if m.key.dst == m.inner_key.src && error_goes_back && seq_fits {
                Ok(())
            } else {
                Err(FwDrop::IcmpMismatch)
            };
        }
    }
    if p.dir == Direction::Reverse && !fw.reverse_acl {
        Err(FwDrop::InvalidState)
    } else if fw.acl.allows(&m.key) {
        Ok(())
    } else {
        Err(FwDrop::AclDeny)
    }
}
