//! Operations (one crypto job on one buffer) and their completions.

use crate::{Buf, SessionId};

/// Longest IV/counter block any algorithm takes.
pub const MAX_IV: usize = 16;

/// Per-operation IV / nonce / initial counter block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Iv {
    bytes: [u8; MAX_IV],
    len: u8,
}

impl Iv {
    /// An IV from up to 16 bytes (longer input is cut, and then rejected by the engine
    /// because its length no longer matches the algorithm).
    pub fn new(bytes: &[u8]) -> Iv {
        let n = bytes.len().min(MAX_IV);
        let mut iv = Iv {
            bytes: [0; MAX_IV],
            len: n as u8,
        };
        iv.bytes[..n].copy_from_slice(&bytes[..n]);
        if bytes.len() > MAX_IV {
            iv.len = u8::MAX;
        }
        iv
    }

    /// The IV bytes (empty if the input was too long).
    pub fn as_slice(&self) -> &[u8] {
        if self.len as usize > MAX_IV {
            return &[];
        }
        &self.bytes[..self.len as usize]
    }

    /// The declared length (255 marks an over-long input).
    pub fn declared_len(&self) -> usize {
        self.len as usize
    }
}

/// Where the parts of an operation live inside its buffer (like a DPDK crypto op's
/// offsets): AAD and data must not overlap each other or the tag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the additional authenticated data.
    pub aad_off: u32,
    /// Length of the AAD.
    pub aad_len: u32,
    /// Offset of the data encrypted/decrypted in place.
    pub data_off: u32,
    /// Length of that data.
    pub data_len: u32,
    /// Offset of the tag/digest (its length is the session's tag length).
    pub tag_off: u32,
}

impl Layout {
    /// The common shape `[aad][data][tag]` packed from offset 0.
    pub fn packed(aad_len: usize, data_len: usize) -> Layout {
        Layout {
            aad_off: 0,
            aad_len: aad_len as u32,
            data_off: aad_len as u32,
            data_len: data_len as u32,
            tag_off: (aad_len + data_len) as u32,
        }
    }

    /// Bytes the buffer must hold for this layout with `tag_len`.
    pub fn span(&self, tag_len: usize) -> u64 {
        let aad = self.aad_off as u64 + self.aad_len as u64;
        let data = self.data_off as u64 + self.data_len as u64;
        let tag = self.tag_off as u64 + tag_len as u64;
        aad.max(data).max(tag)
    }
}

/// One operation: session, IV, buffer and where AAD/data/tag are in it.
#[derive(Debug)]
pub struct Op {
    /// Session (of the engine it is submitted to).
    pub session: SessionId,
    /// IV / nonce / initial counter block.
    pub iv: Iv,
    /// Offsets of AAD, data and tag in `buf`.
    pub layout: Layout,
    /// The buffer, processed in place and handed back in the completion.
    pub buf: Buf,
    /// Opaque caller value returned in the completion (e.g. a packet index).
    pub user: u64,
}

/// Outcome of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Status {
    /// Done; data and tag are valid.
    Ok = 0,
    /// Tag/digest mismatch; the data region was zeroed (no plaintext released).
    AuthFailed = 1,
    /// IV length, layout or buffer wrong for the session; nothing was changed.
    BadArgument = 2,
    /// Unknown session id.
    NoSession = 3,
    /// The device vanished and no fallback could run the operation.
    DeviceGone = 4,
}

impl Status {
    /// Decodes the wire value used in the lookaside rings.
    pub fn from_u32(v: u32) -> Status {
        match v {
            0 => Status::Ok,
            1 => Status::AuthFailed,
            2 => Status::BadArgument,
            3 => Status::NoSession,
            _ => Status::DeviceGone,
        }
    }

    /// Stable name for logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::AuthFailed => "auth-failed",
            Status::BadArgument => "bad-argument",
            Status::NoSession => "no-session",
            Status::DeviceGone => "device-gone",
        }
    }
}

/// A finished operation: the op (with its buffer) and its status.
#[derive(Debug)]
pub struct Completion {
    /// The operation as submitted, buffer now processed.
    pub op: Op,
    /// What happened.
    pub status: Status,
    /// The lookaside device's own processing time for this operation, ns (its share of
    /// the pass's bitsliced keystream plus its own XOR), as the device measured it and
    /// returned it with the completion: the engine time without the hand-off. `None`
    /// from engines that run in the caller's thread, and for operations the device
    /// never ran.
    pub device_ns: Option<u32>,
}

/// The three regions of a buffer an operation touches, split without copying.
pub(crate) struct Parts<'a> {
    /// Read-only AAD.
    pub aad: &'a [u8],
    /// Data processed in place.
    pub data: &'a mut [u8],
    /// Tag (written on encrypt, read on decrypt).
    pub tag: &'a mut [u8],
}

fn range(off: u32, len: usize) -> std::ops::Range<usize> {
    off as usize..off as usize + len
}

fn disjoint(a: &std::ops::Range<usize>, b: &std::ops::Range<usize>) -> bool {
    a.is_empty() || b.is_empty() || a.end <= b.start || b.end <= a.start
}

/// Splits `buf` into AAD, data and tag as `layout` says; `None` if a region lies outside
/// the buffer or two regions overlap.
pub(crate) fn split<'a>(buf: &'a mut [u8], layout: &Layout, tag_len: usize) -> Option<Parts<'a>> {
    if layout.span(tag_len) > buf.len() as u64 {
        return None;
    }
    let aad = range(layout.aad_off, layout.aad_len as usize);
    let data = range(layout.data_off, layout.data_len as usize);
    let tag = range(layout.tag_off, tag_len);
    if !disjoint(&aad, &data) || !disjoint(&aad, &tag) || !disjoint(&data, &tag) {
        return None;
    }
    // Order the three disjoint regions and carve them out with split_at_mut.
    let mut regions = [(aad.clone(), 0usize), (data.clone(), 1), (tag.clone(), 2)];
    // The usual shape, `[aad][data][tag]`, is in order already (this runs per packet).
    if !(aad.start <= data.start && data.start <= tag.start) {
        regions.sort_by_key(|(r, _)| r.start);
    }
    let mut out: [&'a mut [u8]; 3] = [&mut [], &mut [], &mut []];
    let mut rest: &'a mut [u8] = buf;
    let mut consumed = 0usize;
    for (r, which) in regions {
        if r.is_empty() {
            continue;
        }
        let tail = std::mem::take(&mut rest);
        let (_, tail) = tail.split_at_mut(r.start - consumed);
        let (mine, tail) = tail.split_at_mut(r.len());
        out[which] = mine;
        rest = tail;
        consumed = r.end;
    }
    let [a, d, t] = out;
    Some(Parts {
        aad: a,
        data: d,
        tag: t,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iv_lengths() {
        assert_eq!(Iv::new(&[1, 2, 3]).as_slice(), &[1, 2, 3]);
        let long = Iv::new(&[0; 17]);
        assert_eq!(long.declared_len(), 255);
        assert!(long.as_slice().is_empty());
    }

    #[test]
    fn split_packed_and_reordered() {
        let mut b: Vec<u8> = (0..40).collect();
        let p = split(&mut b, &Layout::packed(4, 20), 16).unwrap();
        assert_eq!(p.aad, &[0, 1, 2, 3]);
        assert_eq!(p.data[0], 4);
        assert_eq!(p.tag[0], 24);
        let l = Layout {
            aad_off: 30,
            aad_len: 2,
            data_off: 10,
            data_len: 5,
            tag_off: 0,
        };
        let p = split(&mut b, &l, 8).unwrap();
        assert_eq!(p.aad, &[30, 31]);
        assert_eq!(p.data, &[10, 11, 12, 13, 14]);
        assert_eq!(p.tag.len(), 8);
    }

    #[test]
    fn split_rejects_overlap_and_overflow() {
        let mut b = vec![0u8; 40];
        assert!(split(&mut b, &Layout::packed(4, 30), 16).is_none());
        let l = Layout {
            aad_off: 0,
            aad_len: 8,
            data_off: 4,
            data_len: 8,
            tag_off: 20,
        };
        assert!(split(&mut b, &l, 16).is_none());
        let l = Layout {
            aad_off: u32::MAX,
            aad_len: u32::MAX,
            ..Layout::default()
        };
        assert!(split(&mut b, &l, 16).is_none());
    }

    #[test]
    fn status_wire_round_trip() {
        for s in [
            Status::Ok,
            Status::AuthFailed,
            Status::BadArgument,
            Status::NoSession,
            Status::DeviceGone,
        ] {
            assert_eq!(Status::from_u32(s as u32), s);
        }
    }
}
