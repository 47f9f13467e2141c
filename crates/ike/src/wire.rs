//! The IKEv2 message format (RFC 7296 §3): the fixed header, the chain of generic
//! payload headers and every payload nfx reads or writes, decoded with a bounds check
//! on every length field. Nothing here trusts a length it did not check against the
//! bytes it has.

use crate::consts::{flags, payload as pt};
use crate::proposal::Proposal;
use crate::ts::TrafficSelector;

/// Length of the IKE header.
pub const HDR_LEN: usize = 28;
/// Length of a generic payload header.
pub const GEN_LEN: usize = 4;
/// Largest message nfx accepts or builds (a UDP datagram's payload).
pub const MAX_MSG: usize = 65_507;
/// Most payloads one message may carry.
pub const MAX_PAYLOADS: usize = 64;

/// Why bytes are not an acceptable IKEv2 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Fewer bytes than a field needs.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A length field that disagrees with the bytes around it.
    #[error("bad length in {0}")]
    BadLength(&'static str),
    /// The major version is not 2.
    #[error("IKE major version {0} is not 2")]
    Version(u8),
    /// A payload marked critical that nfx does not know.
    #[error("unsupported critical payload {0}")]
    UnsupportedCritical(u8),
    /// A field holds a value the protocol forbids.
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// More payloads than `MAX_PAYLOADS`.
    #[error("too many payloads")]
    TooMany,
}

/// A bounds-checked cursor over received bytes.
pub struct Reader<'a> {
    data: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `data`; `what` names the structure in errors.
    pub fn new(data: &'a [u8], what: &'static str) -> Self {
        Reader { data, what }
    }

    /// Bytes left.
    pub fn left(&self) -> usize {
        self.data.len()
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        if n > self.data.len() {
            return Err(ParseError::Truncated(self.what));
        }
        let (h, t) = self.data.split_at(n);
        self.data = t;
        Ok(h)
    }

    /// Takes one byte.
    pub fn u8(&mut self) -> Result<u8, ParseError> {
        Ok(self.take(1)?[0])
    }

    /// Takes a big-endian u16.
    pub fn u16(&mut self) -> Result<u16, ParseError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Takes a big-endian u32.
    pub fn u32(&mut self) -> Result<u32, ParseError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Takes a big-endian u64.
    pub fn u64(&mut self) -> Result<u64, ParseError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// The fixed IKE header (RFC 7296 §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Initiator's SPI.
    pub spi_i: u64,
    /// Responder's SPI (0 in the first IKE_SA_INIT request).
    pub spi_r: u64,
    /// Type of the first payload.
    pub next: u8,
    /// Exchange type.
    pub exchange: u8,
    /// Flags (`consts::flags`).
    pub flags: u8,
    /// Message ID.
    pub msg_id: u32,
    /// Length of the whole message.
    pub length: u32,
}

impl Header {
    /// Decodes the header of `msg` and checks that its length field is the message's.
    pub fn decode(msg: &[u8]) -> Result<Header, ParseError> {
        if msg.len() > MAX_MSG {
            return Err(ParseError::BadLength("message"));
        }
        let mut r = Reader::new(msg, "IKE header");
        let spi_i = r.u64()?;
        let spi_r = r.u64()?;
        let next = r.u8()?;
        let version = r.u8()?;
        let exchange = r.u8()?;
        let flags = r.u8()?;
        let msg_id = r.u32()?;
        let length = r.u32()?;
        if version >> 4 != 2 {
            return Err(ParseError::Version(version >> 4));
        }
        if length as usize != msg.len() {
            return Err(ParseError::BadLength("IKE header"));
        }
        Ok(Header {
            spi_i,
            spi_r,
            next,
            exchange,
            flags,
            msg_id,
            length,
        })
    }

    /// Appends the header to `out` (version 2.0).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.spi_i.to_be_bytes());
        out.extend_from_slice(&self.spi_r.to_be_bytes());
        out.push(self.next);
        out.push(0x20);
        out.push(self.exchange);
        out.push(self.flags);
        out.extend_from_slice(&self.msg_id.to_be_bytes());
        out.extend_from_slice(&self.length.to_be_bytes());
    }

    /// Whether the message is a response.
    pub fn is_response(&self) -> bool {
        self.flags & flags::RESPONSE != 0
    }

    /// Whether the sender is the original initiator of the IKE SA.
    pub fn from_initiator(&self) -> bool {
        self.flags & flags::INITIATOR != 0
    }
}

/// One payload of a chain, not interpreted yet.
#[derive(Debug, Clone, Copy)]
pub struct RawPayload<'a> {
    /// Payload type.
    pub ty: u8,
    /// The critical bit.
    pub critical: bool,
    /// The payload body (after the generic header).
    pub body: &'a [u8],
}

/// The result of walking a payload chain: the payloads before an Encrypted payload and,
/// if there is one, where it starts.
pub struct Chain<'a> {
    /// Payloads in order (the SK payload not included).
    pub payloads: Vec<RawPayload<'a>>,
    /// Offset of the SK payload's generic header in the walked bytes and the type of the
    /// first payload inside it.
    pub sk: Option<(usize, u8)>,
}

/// Walks the generic payload headers of `data` starting with type `first`. An SK
/// payload must be the last one and reach to the end of `data`.
pub fn walk(first: u8, data: &[u8]) -> Result<Chain<'_>, ParseError> {
    let mut payloads = Vec::new();
    let mut next = first;
    let mut off = 0;
    while next != pt::NONE {
        if payloads.len() >= MAX_PAYLOADS {
            return Err(ParseError::TooMany);
        }
        let mut r = Reader::new(&data[off..], "payload header");
        let nn = r.u8()?;
        let crit = r.u8()? & 0x80 != 0;
        let len = r.u16()? as usize;
        if len < GEN_LEN || off + len > data.len() {
            return Err(ParseError::BadLength("payload"));
        }
        if next == pt::SK {
            if off + len != data.len() {
                return Err(ParseError::Invalid("Encrypted payload not last"));
            }
            return Ok(Chain {
                payloads,
                sk: Some((off, nn)),
            });
        }
        payloads.push(RawPayload {
            ty: next,
            critical: crit,
            body: &data[off + GEN_LEN..off + len],
        });
        off += len;
        next = nn;
    }
    if off != data.len() {
        return Err(ParseError::BadLength("payload chain"));
    }
    Ok(Chain { payloads, sk: None })
}

/// An identity (IDi / IDr body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// ID type (`consts::idtype`).
    pub ty: u8,
    /// The identification data.
    pub data: Vec<u8>,
}

impl Identity {
    /// The payload body: type, three reserved bytes, data (what MACedIDFor* covers).
    pub fn body(&self) -> Vec<u8> {
        let mut v = vec![self.ty, 0, 0, 0];
        v.extend_from_slice(&self.data);
        v
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::consts::idtype;
        match self.ty {
            idtype::FQDN | idtype::RFC822_ADDR => {
                write!(f, "{}", String::from_utf8_lossy(&self.data))
            }
            idtype::IPV4_ADDR if self.data.len() == 4 => {
                let a: [u8; 4] = self.data[..].try_into().unwrap_or_default();
                write!(f, "{}", std::net::Ipv4Addr::from(a))
            }
            t => write!(f, "<id type {t}, {} bytes>", self.data.len()),
        }
    }
}

/// A Notify payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// Protocol the SPI belongs to (0 if none).
    pub proto: u8,
    /// SPI (empty, or 4 bytes for ESP).
    pub spi: Vec<u8>,
    /// Notify message type.
    pub ty: u16,
    /// Notification data.
    pub data: Vec<u8>,
}

impl Notify {
    /// A notify without SPI.
    pub fn new(ty: u16, data: &[u8]) -> Notify {
        Notify {
            proto: 0,
            spi: Vec::new(),
            ty,
            data: data.to_vec(),
        }
    }

    /// Whether this is an error type (below 16384).
    pub fn is_error(&self) -> bool {
        self.ty < crate::consts::notify::FIRST_STATUS
    }
}

/// A Delete payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    /// Protocol (IKE: no SPIs; ESP: 4-byte SPIs).
    pub proto: u8,
    /// The SPIs (inbound SPIs of the sender).
    pub spis: Vec<u32>,
}

/// The payloads nfx interprets; everything else it may skip is `Other`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Security Association.
    Sa(Vec<Proposal>),
    /// Key Exchange: group and public value.
    Ke {
        /// DH group.
        group: u16,
        /// Public value.
        data: Vec<u8>,
    },
    /// Identification of the initiator.
    IdI(Identity),
    /// Identification of the responder.
    IdR(Identity),
    /// Certificate.
    Cert {
        /// Encoding.
        encoding: u8,
        /// The certificate data.
        data: Vec<u8>,
    },
    /// Certificate request.
    CertReq {
        /// Encoding.
        encoding: u8,
        /// CA key hashes.
        data: Vec<u8>,
    },
    /// Authentication.
    Auth {
        /// Auth method.
        method: u8,
        /// Authentication data.
        data: Vec<u8>,
    },
    /// Nonce.
    Nonce(Vec<u8>),
    /// Notify.
    Notify(Notify),
    /// Delete.
    Delete(Delete),
    /// Traffic selectors of the initiator.
    TsI(Vec<TrafficSelector>),
    /// Traffic selectors of the responder.
    TsR(Vec<TrafficSelector>),
    /// A payload nfx reads past (vendor ID, configuration, ...).
    Other {
        /// Payload type.
        ty: u8,
        /// Body.
        body: Vec<u8>,
    },
}

fn decode_identity(body: &[u8]) -> Result<Identity, ParseError> {
    let mut r = Reader::new(body, "ID payload");
    let ty = r.u8()?;
    r.take(3)?;
    let data = r.rest().to_vec();
    if data.is_empty() {
        return Err(ParseError::Invalid("empty identity"));
    }
    Ok(Identity { ty, data })
}

fn decode_notify(body: &[u8]) -> Result<Notify, ParseError> {
    let mut r = Reader::new(body, "Notify payload");
    let proto = r.u8()?;
    let spi_len = r.u8()? as usize;
    let ty = r.u16()?;
    let spi = r.take(spi_len)?.to_vec();
    Ok(Notify {
        proto,
        spi,
        ty,
        data: r.rest().to_vec(),
    })
}

fn decode_delete(body: &[u8]) -> Result<Delete, ParseError> {
    let mut r = Reader::new(body, "Delete payload");
    let proto = r.u8()?;
    let spi_len = r.u8()? as usize;
    let n = r.u16()? as usize;
    let mut spis = Vec::new();
    match (proto, spi_len) {
        (crate::consts::proto::IKE, 0) if n == 0 => {}
        (crate::consts::proto::ESP | crate::consts::proto::AH, 4) => {
            if r.left() != n * 4 {
                return Err(ParseError::BadLength("Delete payload"));
            }
            for _ in 0..n {
                spis.push(r.u32()?);
            }
        }
        _ => return Err(ParseError::Invalid("Delete payload SPI size")),
    }
    if r.left() != 0 {
        return Err(ParseError::BadLength("Delete payload"));
    }
    Ok(Delete { proto, spis })
}

impl Payload {
    /// Interprets one raw payload; `Ok(None)` for a non-critical payload nfx ignores.
    pub fn decode(raw: &RawPayload<'_>) -> Result<Option<Payload>, ParseError> {
        let b = raw.body;
        let p = match raw.ty {
            pt::SA => Payload::Sa(crate::proposal::decode_sa(b)?),
            pt::KE => {
                let mut r = Reader::new(b, "KE payload");
                let group = r.u16()?;
                r.take(2)?;
                Payload::Ke {
                    group,
                    data: r.rest().to_vec(),
                }
            }
            pt::IDI => Payload::IdI(decode_identity(b)?),
            pt::IDR => Payload::IdR(decode_identity(b)?),
            pt::CERT | pt::CERTREQ => {
                let mut r = Reader::new(b, "CERT payload");
                let encoding = r.u8()?;
                let data = r.rest().to_vec();
                if raw.ty == pt::CERT {
                    Payload::Cert { encoding, data }
                } else {
                    Payload::CertReq { encoding, data }
                }
            }
            pt::AUTH => {
                let mut r = Reader::new(b, "AUTH payload");
                let method = r.u8()?;
                r.take(3)?;
                Payload::Auth {
                    method,
                    data: r.rest().to_vec(),
                }
            }
            pt::NONCE => {
                if !(16..=256).contains(&b.len()) {
                    return Err(ParseError::BadLength("Nonce payload"));
                }
                Payload::Nonce(b.to_vec())
            }
            pt::NOTIFY => Payload::Notify(decode_notify(b)?),
            pt::DELETE => Payload::Delete(decode_delete(b)?),
            pt::TSI => Payload::TsI(crate::ts::decode(b)?),
            pt::TSR => Payload::TsR(crate::ts::decode(b)?),
            pt::VENDOR | pt::CP | pt::EAP => Payload::Other {
                ty: raw.ty,
                body: b.to_vec(),
            },
            t if raw.critical => return Err(ParseError::UnsupportedCritical(t)),
            _ => return Ok(None),
        };
        Ok(Some(p))
    }

    /// The payload type.
    pub fn ty(&self) -> u8 {
        match self {
            Payload::Sa(_) => pt::SA,
            Payload::Ke { .. } => pt::KE,
            Payload::IdI(_) => pt::IDI,
            Payload::IdR(_) => pt::IDR,
            Payload::Cert { .. } => pt::CERT,
            Payload::CertReq { .. } => pt::CERTREQ,
            Payload::Auth { .. } => pt::AUTH,
            Payload::Nonce(_) => pt::NONCE,
            Payload::Notify(_) => pt::NOTIFY,
            Payload::Delete(_) => pt::DELETE,
            Payload::TsI(_) => pt::TSI,
            Payload::TsR(_) => pt::TSR,
            Payload::Other { ty, .. } => *ty,
        }
    }

    /// The payload body (without the generic header).
    pub fn body(&self) -> Vec<u8> {
        let mut v = Vec::new();
        match self {
            Payload::Sa(props) => crate::proposal::encode_sa(props, &mut v),
            Payload::Ke { group, data } => {
                v.extend_from_slice(&group.to_be_bytes());
                v.extend_from_slice(&[0, 0]);
                v.extend_from_slice(data);
            }
            Payload::IdI(id) | Payload::IdR(id) => v = id.body(),
            Payload::Cert { encoding, data } | Payload::CertReq { encoding, data } => {
                v.push(*encoding);
                v.extend_from_slice(data);
            }
            Payload::Auth { method, data } => {
                v.extend_from_slice(&[*method, 0, 0, 0]);
                v.extend_from_slice(data);
            }
            Payload::Nonce(n) => v.extend_from_slice(n),
            Payload::Notify(n) => {
                v.push(n.proto);
                v.push(n.spi.len() as u8);
                v.extend_from_slice(&n.ty.to_be_bytes());
                v.extend_from_slice(&n.spi);
                v.extend_from_slice(&n.data);
            }
            Payload::Delete(d) => {
                let spi_len = if d.proto == crate::consts::proto::IKE {
                    0
                } else {
                    4
                };
                v.push(d.proto);
                v.push(spi_len);
                v.extend_from_slice(&(d.spis.len() as u16).to_be_bytes());
                for s in &d.spis {
                    v.extend_from_slice(&s.to_be_bytes());
                }
            }
            Payload::TsI(ts) | Payload::TsR(ts) => crate::ts::encode(ts, &mut v),
            Payload::Other { body, .. } => v.extend_from_slice(body),
        }
        v
    }
}

/// Encodes `payloads` as a chain (each behind its generic header); returns the type of
/// the first one (`NONE` for an empty chain). `last_next` goes into the last header.
pub fn encode_chain(payloads: &[Payload], last_next: u8, out: &mut Vec<u8>) -> u8 {
    for (i, p) in payloads.iter().enumerate() {
        let next = payloads.get(i + 1).map_or(last_next, Payload::ty);
        let body = p.body();
        out.push(next);
        out.push(0);
        out.extend_from_slice(&((body.len() + GEN_LEN) as u16).to_be_bytes());
        out.extend_from_slice(&body);
    }
    payloads.first().map_or(last_next, Payload::ty)
}

/// Decodes every payload of a walked chain (unknown non-critical ones dropped).
pub fn decode_all(raw: &[RawPayload<'_>]) -> Result<Vec<Payload>, ParseError> {
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        if let Some(p) = Payload::decode(r)? {
            out.push(p);
        }
    }
    Ok(out)
}

/// Builds a plaintext message (IKE_SA_INIT) from a header template and payloads.
pub fn encode_plain(mut h: Header, payloads: &[Payload]) -> Vec<u8> {
    let mut body = Vec::new();
    h.next = encode_chain(payloads, pt::NONE, &mut body);
    h.length = (HDR_LEN + body.len()) as u32;
    let mut out = Vec::with_capacity(h.length as usize);
    h.encode(&mut out);
    out.extend_from_slice(&body);
    out
}

/// Decodes a plaintext message: header and payloads (an SK payload is an error here).
pub fn decode_plain(msg: &[u8]) -> Result<(Header, Vec<Payload>), ParseError> {
    let h = Header::decode(msg)?;
    let chain = walk(h.next, &msg[HDR_LEN..])?;
    if chain.sk.is_some() {
        return Err(ParseError::Invalid("unexpected Encrypted payload"));
    }
    Ok((h, decode_all(&chain.payloads)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::{exchange, notify};

    fn hdr() -> Header {
        Header {
            spi_i: 0x0102030405060708,
            spi_r: 0,
            next: 0,
            exchange: exchange::IKE_SA_INIT,
            flags: flags::INITIATOR,
            msg_id: 0,
            length: 0,
        }
    }

    #[test]
    fn plain_round_trip() {
        let ps = vec![
            Payload::Ke {
                group: 31,
                data: vec![7; 32],
            },
            Payload::Nonce(vec![1; 32]),
            Payload::Notify(Notify::new(notify::NAT_DETECTION_SOURCE_IP, &[9; 20])),
            Payload::Delete(Delete {
                proto: crate::consts::proto::ESP,
                spis: vec![0x1234, 0x5678],
            }),
            Payload::IdI(Identity {
                ty: crate::consts::idtype::FQDN,
                data: b"edge.nfx".to_vec(),
            }),
        ];
        let m = encode_plain(hdr(), &ps);
        let (h, got) = decode_plain(&m).unwrap();
        assert_eq!(h.spi_i, 0x0102030405060708);
        assert_eq!(h.length as usize, m.len());
        assert_eq!(got, ps);
    }

    #[test]
    fn bad_lengths_are_refused() {
        let m = encode_plain(hdr(), &[Payload::Nonce(vec![1; 32])]);
        assert_eq!(
            decode_plain(&m[..m.len() - 1]).unwrap_err(),
            ParseError::BadLength("IKE header")
        );
        let mut long = m.clone();
        long[HDR_LEN + 3] += 1;
        assert!(decode_plain(&long).is_err());
        let mut short = m.clone();
        short[HDR_LEN + 2] = 0;
        short[HDR_LEN + 3] = 3;
        assert_eq!(
            decode_plain(&short).unwrap_err(),
            ParseError::BadLength("payload")
        );
        let mut v1 = m.clone();
        v1[17] = 0x10;
        assert_eq!(decode_plain(&v1).unwrap_err(), ParseError::Version(1));
        let tiny = encode_plain(hdr(), &[Payload::Nonce(vec![1; 8])]);
        assert!(decode_plain(&tiny).is_err(), "nonce below 16 bytes");
    }

    #[test]
    fn unknown_payloads_skipped_unless_critical() {
        let mut m = encode_plain(hdr(), &[Payload::Nonce(vec![1; 16])]);
        m[16] = 200;
        let (_, ps) = decode_plain(&m).unwrap();
        assert!(ps.is_empty());
        m[HDR_LEN + 1] = 0x80;
        assert_eq!(
            decode_plain(&m).unwrap_err(),
            ParseError::UnsupportedCritical(200)
        );
    }
}
