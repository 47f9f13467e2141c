//! The TCP header fields that stateful nodes track beyond the flow key: sequence and
//! acknowledgement numbers, the window, the payload length and the window-scale option
//! (RFC 7323), read from a frame that [`crate::parse`] accepted.

use crate::parse::{Meta, IPPROTO_TCP};

/// Option kind: end of the option list.
const OPT_EOL: u8 = 0;
/// Option kind: no operation (padding).
const OPT_NOP: u8 = 1;
/// Option kind: window scale (length 3).
const OPT_WSCALE: u8 = 3;
/// Largest window-scale shift (RFC 7323 §2.3).
pub const MAX_WSCALE: u8 = 14;

/// One TCP segment's sequence-space view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpSeg {
    /// Sequence number of the first byte (of the SYN, if set).
    pub seq: u32,
    /// Acknowledgement number (meaningful with ACK).
    pub ack: u32,
    /// Advertised window, unscaled.
    pub win: u16,
    /// Payload bytes (for a GSO super-packet, the whole payload).
    pub len: u32,
    /// Flags byte.
    pub flags: u8,
    /// The window-scale option's shift (capped at [`MAX_WSCALE`]), if present.
    pub wscale: Option<u8>,
}

impl TcpSeg {
    /// Sequence number just past the segment: payload plus one each for SYN and FIN.
    pub fn end(&self) -> u32 {
        self.seq
            .wrapping_add(self.len)
            .wrapping_add(u32::from(self.flags & 0x02 != 0))
            .wrapping_add(u32::from(self.flags & 0x01 != 0))
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The segment fields of a parsed TCP frame; `None` when `m` is not TCP or the frame
/// does not hold the header `m` describes.
pub fn segment(frame: &[u8], m: &Meta) -> Option<TcpSeg> {
    if m.key.proto != IPPROTO_TCP {
        return None;
    }
    let h = frame.get(m.l4..m.payload)?;
    if h.len() < 20 {
        return None;
    }
    let len = m.ip_end.checked_sub(m.payload)?;
    Some(TcpSeg {
        seq: be32(&h[4..8]),
        ack: be32(&h[8..12]),
        win: u16::from_be_bytes([h[14], h[15]]),
        len: u32::try_from(len).ok()?,
        flags: h[13],
        wscale: wscale(&h[20..]),
    })
}

/// The window-scale option among `opts`; a malformed option list ends the walk.
fn wscale(opts: &[u8]) -> Option<u8> {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            OPT_EOL => return None,
            OPT_NOP => i += 1,
            kind => {
                let len = usize::from(*opts.get(i + 1)?);
                if len < 2 || i + len > opts.len() {
                    return None;
                }
                if kind == OPT_WSCALE && len == 3 {
                    return Some(opts[i + 2].min(MAX_WSCALE));
                }
                i += len;
            }
        }
    }
    None
}

/// The sequence number of a TCP frame's first payload byte (`None` when not TCP).
pub fn payload_seq(frame: &[u8], m: &Meta) -> Option<u32> {
    let s = segment(frame, m)?;
    Some(s.seq.wrapping_add(u32::from(s.flags & 0x02 != 0)))
}

/// The sequence number of the TCP segment quoted in an ICMP error (its first 8 bytes
/// are always quoted); `None` when the error quotes no TCP segment.
pub fn quoted_seq(frame: &[u8], m: &Meta) -> Option<u32> {
    if !m.has_inner() || m.inner_key.proto != IPPROTO_TCP {
        return None;
    }
    frame.get(m.inner_l4 + 4..m.inner_l4 + 8).map(be32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, TcpOptionElement};

    fn frame(opts: &[TcpOptionElement], flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1000, 80, 0xffff_fff0, 512);
        if flags & 0x02 != 0 {
            b = b.syn();
        }
        if flags & 0x10 != 0 {
            b = b.ack(77);
        }
        if flags & 0x01 != 0 {
            b = b.fin();
        }
        let b = b.options(opts).unwrap();
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    #[test]
    fn fields_options_and_end() {
        let f = frame(
            &[
                TcpOptionElement::MaximumSegmentSize(1460),
                TcpOptionElement::Noop,
                TcpOptionElement::WindowScale(7),
            ],
            0x02,
            b"",
        );
        let m = crate::parse(&f).unwrap();
        let s = segment(&f, &m).unwrap();
        assert_eq!(
            (s.seq, s.win, s.len, s.wscale),
            (0xffff_fff0, 512, 0, Some(7))
        );
        assert_eq!(s.end(), 0xffff_fff1, "SYN takes one sequence number");
        assert_eq!(payload_seq(&f, &m), Some(0xffff_fff1));
        let f = frame(
            &[TcpOptionElement::WindowScale(30)],
            0x11,
            b"0123456789abcdefg",
        );
        let m = crate::parse(&f).unwrap();
        let s = segment(&f, &m).unwrap();
        assert_eq!((s.ack, s.len, s.wscale), (77, 17, Some(MAX_WSCALE)));
        assert_eq!(
            s.end(),
            0xffff_fff0u32.wrapping_add(18),
            "wraps; FIN counts"
        );
        let f = frame(&[], 0x10, b"x");
        let m = crate::parse(&f).unwrap();
        assert_eq!(segment(&f, &m).unwrap().wscale, None);
        assert_eq!(segment(&f[..40], &m), None, "frame shorter than the header");
    }

    #[test]
    fn malformed_option_lists_end_the_walk() {
        assert_eq!(wscale(&[1, 1, 3, 3, 9]), Some(9));
        assert_eq!(wscale(&[0, 3, 3, 9]), None, "after EOL");
        assert_eq!(wscale(&[2, 1, 3, 3, 9]), None, "length below 2");
        assert_eq!(wscale(&[2, 9, 3, 3, 9]), None, "length past the end");
        assert_eq!(
            wscale(&[3, 4, 9, 9]),
            None,
            "window scale of the wrong length"
        );
        assert_eq!(wscale(&[8]), None, "kind without length");
    }
}
