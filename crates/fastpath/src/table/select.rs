//! Which frames a chain takes when several chains share a device's ports (one per
//! service): each chain is its own tcx program on the ports, and its `svc_sel` rows —
//! one per direction — say which frames are its own; every other frame goes on,
//! untouched and uncounted, to the next program on the hook and then to the kernel.

use super::raw::{prefix_words, RawRule};
use super::{TableChain, TableError};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// One direction's match: the fields a frame must carry (none given: any).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameMatch {
    /// Source network (address, prefix length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<(IpAddr, u8)>,
    /// Destination network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<(IpAddr, u8)>,
    /// IP protocol number (1 stands for ICMP of either family, as in ACL rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<u8>,
    /// Source port range (TCP, UDP), inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<(u16, u16)>,
    /// Destination port range, inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<(u16, u16)>,
}

/// A service's frames in both directions: what a chain sharing its ports takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// Frames the forward chain runs on.
    pub forward: FrameMatch,
    /// Frames the reverse chain runs on (replies).
    pub reverse: FrameMatch,
}

/// `(network words, mask words, family)` of `addr/len`, or the request's error.
fn prefix(addr: IpAddr, len: u8) -> Result<([u32; 4], [u32; 4], u8), TableError> {
    prefix_words(addr, len)
        .ok_or_else(|| TableError::Request(format!("{addr}/{len}: prefix longer than the address")))
}

impl FrameMatch {
    /// The program's row for this match (`allow` 1: the row selects).
    pub(crate) fn row(&self) -> Result<RawRule, TableError> {
        let range = |r: Option<(u16, u16)>| r.unwrap_or((0, u16::MAX));
        let (sport_lo, sport_hi) = range(self.sport);
        let (dport_lo, dport_hi) = range(self.dport);
        if sport_lo > sport_hi || dport_lo > dport_hi {
            return Err(TableError::Request(
                "a port range ends before it starts".into(),
            ));
        }
        let mut row = RawRule {
            sport_lo,
            sport_hi,
            dport_lo,
            dport_hi,
            allow: 1,
            proto: self.proto.unwrap_or(0),
            ..RawRule::default()
        };
        if let Some((a, l)) = self.src {
            (row.src, row.src_mask, row.family) = prefix(a, l)?;
        }
        if let Some((a, l)) = self.dst {
            let (net, mask, family) = prefix(a, l)?;
            if row.family != 0 && row.family != family {
                return Err(TableError::Request(
                    "source and destination of different IP families".into(),
                ));
            }
            (row.dst, row.dst_mask, row.family) = (net, mask, family);
        }
        Ok(row)
    }
}

impl TableChain {
    /// Makes the chain take only the frames of `selection` (it shares its ports with
    /// other chains), or every frame (`None`, the default). Two map writes, no reload;
    /// set it before attaching so that no other service's frame is ever touched.
    pub fn select(&mut self, selection: Option<&Selection>) -> Result<(), TableError> {
        let rows = match selection {
            Some(s) => [s.forward.row()?, s.reverse.row()?],
            None => [RawRule::default(), RawRule::default()],
        };
        for (dir, row) in rows.iter().enumerate() {
            self.svc_sel.put(&(dir as u32), row)?;
        }
        self.selection = selection.copied();
        Ok(())
    }

    /// The frames the chain takes (`None`: every frame).
    pub fn selection(&self) -> Option<&Selection> {
        self.selection.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_mask_prefixes_and_default_to_any_port() {
        let m = FrameMatch {
            src: Some(("10.1.2.3".parse().unwrap(), 16)),
            proto: Some(17),
            dport: Some((53, 53)),
            ..FrameMatch::default()
        };
        let r = m.row().unwrap();
        assert_eq!(r.family, 4);
        assert_eq!(r.src[0], u32::from_ne_bytes([10, 1, 0, 0]));
        assert_eq!(r.src_mask[0], u32::from_ne_bytes([255, 255, 0, 0]));
        assert_eq!(
            (r.sport_lo, r.sport_hi, r.dport_lo, r.dport_hi),
            (0, 65535, 53, 53)
        );
        assert_eq!((r.allow, r.proto), (1, 17));

        let v6 = FrameMatch {
            dst: Some(("2001:db8::1".parse().unwrap(), 40)),
            ..FrameMatch::default()
        };
        let r = v6.row().unwrap();
        assert_eq!(r.family, 6);
        assert_eq!(r.dst_mask[0], u32::MAX);
        assert_eq!(r.dst_mask[1], u32::from_ne_bytes([255, 0, 0, 0]));
        assert_eq!(&r.dst_mask[2..], &[0, 0]);
        assert_eq!(r.dst[1], u32::from_ne_bytes([0, 0, 0, 0]));
    }

    #[test]
    fn bad_matches_are_refused() {
        let long = FrameMatch {
            src: Some(("10.0.0.0".parse().unwrap(), 33)),
            ..FrameMatch::default()
        };
        assert!(long.row().is_err());
        let mixed = FrameMatch {
            src: Some(("10.0.0.0".parse().unwrap(), 8)),
            dst: Some(("2001:db8::".parse().unwrap(), 32)),
            ..FrameMatch::default()
        };
        assert!(mixed.row().is_err());
        let backwards = FrameMatch {
            dport: Some((80, 79)),
            ..FrameMatch::default()
        };
        assert!(backwards.row().is_err());
    }
}
