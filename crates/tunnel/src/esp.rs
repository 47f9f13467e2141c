//! ESP packet format (RFC 4303) with the transforms of RFC 4106 (AES-GCM), RFC 7634
//! (ChaCha20-Poly1305), RFC 3686 + RFC 4868 (AES-CTR + HMAC-SHA-256-128) and the
//! private PRESENT-CTR + HMAC-SHA-256-128 transform (docs/tunnel.md). This module only
//! lays packets out and builds the IV/AAD/offsets of one accel operation; the crypto
//! itself runs in a batch on an `nfx_accel::Engine`.
//!
//! Wire layout (every transform): `SPI(4) SEQ(4) IV(8) | payload pad padlen nh | ICV(16)`.
//! The explicit IV is the 64-bit sequence number (unique per SA, RFC 4106 §3.1).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use nfx_accel::{Alg, AlgFamily, Buf, Direction, Iv, Layout, SecretBytes, SessionSpec};
use zeroize::Zeroize;

use crate::replay::ReplayWindow;
use crate::selectors::Selectors;
use crate::seqspace::{SeqLane, SeqSpace};
use crate::seqstate::SeqState;

/// ESP header: SPI + sequence number.
pub const HDR: usize = 8;
/// Explicit IV length of every transform here.
pub const IV_LEN: usize = 8;
/// Offset of the payload in a packet buffer.
pub const HEAD: usize = HDR + IV_LEN;
/// Integrity check value length (AEAD tag or HMAC-SHA-256-128).
pub const ICV: usize = 16;
/// Bytes ESP adds besides padding: header, IV, pad length, next header, ICV.
pub const OVERHEAD: usize = HEAD + 2 + ICV;
/// Extra buffer room past the ICV for the ESN AAD (SPI ‖ SEQ-hi ‖ SEQ-lo).
pub const ESN_AAD: usize = 12;

/// Why a packet could not be protected or opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EspError {
    /// The packet does not fit the buffer / tunnel MTU.
    TooBig,
    /// Malformed ESP (short, unknown SPI, bad length, padding or next header).
    BadEncap,
    /// Sequence number already seen or left of the window.
    Replay,
    /// ICV check failed.
    AuthFailed,
    /// The 32-bit sequence space is used up (the SA must be rekeyed), or the next
    /// block of a persisted sequence could not be reserved: nothing is sent.
    SeqExhausted,
    /// A dummy packet (next header 59), discarded per RFC 4303 §2.6.
    Dummy,
    /// The inner packet is outside the SA's traffic selectors.
    Selector,
}

/// The keys of one SA: cipher key, 4-byte salt / nonce and (CTR transforms) HMAC key.
pub struct SaKeys {
    /// The transform.
    pub alg: Alg,
    /// Security Parameters Index.
    pub spi: u32,
    cipher: SecretBytes,
    salt: [u8; 4],
    auth: SecretBytes,
}

impl Drop for SaKeys {
    fn drop(&mut self) {
        self.salt.zeroize();
    }
}

impl fmt::Debug for SaKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SaKeys({}, spi {:#x}, <keys redacted>)",
            self.alg, self.spi
        )
    }
}

impl SaKeys {
    /// Splits keying material `cipher key ‖ salt(4)` (RFC 4106 §8.1, RFC 7634 §2,
    /// RFC 3686 §5.1) and checks the HMAC key of the CTR transforms (32 bytes).
    pub fn new(
        alg: Alg,
        spi: u32,
        keymat: &SecretBytes,
        auth: Option<&SecretBytes>,
    ) -> Result<SaKeys, String> {
        let klen = alg.cipher_key_len();
        if keymat.len() != klen + 4 {
            return Err(format!(
                "{alg} needs {} bytes of keying material ({klen}-byte key + 4-byte salt), got {}",
                klen + 4,
                keymat.len()
            ));
        }
        let auth = match (alg.family(), auth) {
            (AlgFamily::CtrHmac, Some(a)) if a.len() == 32 => a.clone(),
            (AlgFamily::CtrHmac, Some(a)) => {
                return Err(format!(
                    "auth_key must be 32 bytes (RFC 4868), got {}",
                    a.len()
                ))
            }
            (AlgFamily::CtrHmac, None) => return Err(format!("{alg} needs an auth_key")),
            (_, Some(_)) => return Err(format!("{alg} takes no auth_key")),
            (_, None) => SecretBytes::new(Vec::new()),
        };
        let m = keymat.expose();
        let mut salt = [0u8; 4];
        salt.copy_from_slice(&m[klen..]);
        Ok(SaKeys {
            alg,
            spi,
            cipher: SecretBytes::from_slice(&m[..klen]),
            salt,
            auth,
        })
    }

    /// The accel session spec of this SA in one direction.
    pub fn spec(&self, dir: Direction) -> SessionSpec {
        SessionSpec {
            alg: self.alg,
            dir,
            key: self.cipher.clone(),
            auth_key: self.auth.clone(),
            tag_len: ICV,
        }
    }

    /// The per-packet nonce / initial counter block for explicit IV `explicit`.
    pub fn iv(&self, explicit: u64) -> Result<Iv, EspError> {
        let s = self.salt;
        let e = explicit.to_be_bytes();
        Ok(match self.alg {
            Alg::Aes128CtrHmacSha256 => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&s);
                b[4..12].copy_from_slice(&e);
                b[15] = 1;
                Iv::new(&b)
            }
            Alg::Present80CtrHmacSha256 | Alg::Present128CtrHmacSha256 => {
                if explicit >= 1 << 48 {
                    return Err(EspError::BadEncap);
                }
                let c = (explicit << 16) ^ ((u32::from_be_bytes(s) as u64) << 32);
                Iv::new(&c.to_be_bytes())
            }
            _ => {
                let mut b = [0u8; 12];
                b[..4].copy_from_slice(&s);
                b[4..].copy_from_slice(&e);
                Iv::new(&b)
            }
        })
    }

    fn is_aead(&self) -> bool {
        self.alg.family() == AlgFamily::Aead
    }
}

/// The next-header value for an inner IP packet, from its version nibble.
pub fn next_header(inner: &[u8]) -> Option<u8> {
    match inner.first().map(|b| b >> 4) {
        Some(4) => Some(4),
        Some(6) => Some(41),
        _ => None,
    }
}

/// Where the AAD goes: `SPI ‖ SEQ` (AEAD), `SPI ‖ SEQ ‖ IV` (CTR+HMAC: the ICV covers the
/// header and IV), or `SPI ‖ SEQ-hi ‖ SEQ-lo` written past the packet (AEAD with ESN).
fn aad(keys: &SaKeys, esn: bool, buf: &mut [u8], wire: usize, seq: u64) -> (u32, u32) {
    if !keys.is_aead() {
        return (0, HEAD as u32);
    }
    if !esn {
        return (0, HDR as u32);
    }
    buf[wire..wire + 4].copy_from_slice(&keys.spi.to_be_bytes());
    buf[wire + 4..wire + 12].copy_from_slice(&seq.to_be_bytes());
    (wire as u32, ESN_AAD as u32)
}

/// One ready-to-submit operation's parameters and the packet length on the wire.
#[derive(Debug, Clone, Copy)]
pub struct Prepared {
    /// Nonce / counter block.
    pub iv: Iv,
    /// AAD, data and ICV offsets.
    pub layout: Layout,
    /// Full 64-bit sequence number.
    pub seq: u64,
}

/// The sending side of an SA as one worker lane sees it: the keys (shared by the
/// lanes) and the lane's handle on the SA's one sequence space.
pub struct Outbound {
    /// Keys.
    pub keys: Arc<SaKeys>,
    esn: bool,
    seq: SeqLane,
    selectors: Arc<Selectors>,
}

impl Outbound {
    /// A fresh outbound SA with new keys (first sequence number 1).
    pub fn new(keys: SaKeys, esn: bool) -> Self {
        Self::with_space(keys, esn, 1, None)
    }

    /// An SA whose keys outlive the process: it starts at `start` (the first number
    /// the state file had not handed out) and reserves further blocks as it goes.
    pub fn persisted(keys: SaKeys, esn: bool, state: SeqState, start: u64) -> Self {
        Self::with_space(keys, esn, start, Some(state))
    }

    fn with_space(keys: SaKeys, esn: bool, start: u64, state: Option<SeqState>) -> Self {
        let last = if esn { u64::MAX } else { u32::MAX as u64 };
        Outbound {
            keys: Arc::new(keys),
            esn,
            seq: SeqLane::new(SeqSpace::new(start, last, state)),
            selectors: Arc::new(Selectors::any()),
        }
    }

    /// The SA carries only what `selectors` cover (IKE's negotiated traffic selectors;
    /// without this call, every IP packet).
    pub fn with_selectors(mut self, selectors: Selectors) -> Self {
        self.selectors = Arc::new(selectors);
        self
    }

    /// Another lane's handle on the same SA: same keys, same sequence space, a block
    /// of its own (so lanes never repeat a number).
    pub fn lane(&self) -> Outbound {
        Outbound {
            keys: Arc::clone(&self.keys),
            esn: self.esn,
            seq: self.seq.sibling(),
            selectors: Arc::clone(&self.selectors),
        }
    }

    /// Ends this lane's batch: unused reserved numbers go back when they can.
    pub fn end_batch(&mut self) {
        self.seq.end_batch();
    }

    /// The highest sequence number any lane may have used so far (0: none).
    pub fn sent(&self) -> u64 {
        self.seq.space().reserved() - 1
    }

    /// The SPI.
    pub fn spi(&self) -> u32 {
        self.keys.spi
    }

    /// Whether the SA uses 64-bit sequence numbers.
    pub fn esn(&self) -> bool {
        self.esn
    }

    /// Lays out the inner packet at `buf[HEAD..HEAD + inner_len]` as an ESP packet
    /// (header, IV, padding, trailer) and returns the operation parameters; the wire
    /// packet is `buf[..wire_len(inner_len)]` once the operation completes.
    pub fn prepare(&mut self, buf: &mut Buf, inner_len: usize) -> Result<Prepared, EspError> {
        let data_len = padded(inner_len);
        let wire = HEAD + data_len + ICV;
        let total = wire
            + if self.esn && self.keys.is_aead() {
                ESN_AAD
            } else {
                0
            };
        if total > buf.capacity() || inner_len == 0 {
            return Err(EspError::TooBig);
        }
        buf.set_len(total).map_err(|_| EspError::TooBig)?;
        let s = buf.as_mut_slice();
        let inner = &s[HEAD..HEAD + inner_len];
        let nh = next_header(inner).ok_or(EspError::BadEncap)?;
        if !self.selectors.allows_out(inner) {
            return Err(EspError::Selector);
        }
        let seq = self.seq.take().ok_or(EspError::SeqExhausted)?;
        s[..4].copy_from_slice(&self.keys.spi.to_be_bytes());
        s[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        s[8..16].copy_from_slice(&seq.to_be_bytes());
        let pad = data_len - inner_len - 2;
        let t = HEAD + inner_len;
        for i in 0..pad {
            s[t + i] = i as u8 + 1;
        }
        s[t + pad] = pad as u8;
        s[t + pad + 1] = nh;
        let (aad_off, aad_len) = aad(&self.keys, self.esn, s, wire, seq);
        Ok(Prepared {
            iv: self.keys.iv(seq)?,
            layout: Layout {
                aad_off,
                aad_len,
                data_off: HEAD as u32,
                data_len: data_len as u32,
                tag_off: (HEAD + data_len) as u32,
            },
            seq,
        })
    }
}

/// Payload + padding + trailer length for an inner packet (4-byte aligned, RFC 4303 §2.4).
pub fn padded(inner_len: usize) -> usize {
    (inner_len + 2).div_ceil(4) * 4
}

/// Wire length of the ESP packet carrying `inner_len` bytes.
pub fn wire_len(inner_len: usize) -> usize {
    HEAD + padded(inner_len) + ICV
}

/// The receiving side of an SA: keys, anti-replay window and traffic selectors.
pub struct Inbound {
    /// Keys.
    pub keys: SaKeys,
    esn: bool,
    window: ReplayWindow,
    selectors: Selectors,
}

impl Inbound {
    /// A fresh inbound SA with a replay window of `window` packets.
    pub fn new(keys: SaKeys, esn: bool, window: u64) -> Self {
        Inbound {
            keys,
            esn,
            window: ReplayWindow::new(window),
            selectors: Selectors::any(),
        }
    }

    /// The SA delivers only what `selectors` cover (IKE's negotiated traffic
    /// selectors; without this call, every IP packet).
    pub fn with_selectors(mut self, selectors: Selectors) -> Self {
        self.selectors = selectors;
        self
    }

    /// The SPI.
    pub fn spi(&self) -> u32 {
        self.keys.spi
    }

    /// Checks the header of the ESP packet in `buf` (its length is the packet length),
    /// rejects replays early and returns the decrypt operation's parameters.
    pub fn prepare(&self, buf: &mut Buf) -> Result<Prepared, EspError> {
        let len = buf.len();
        if len < HEAD + 4 + ICV {
            return Err(EspError::BadEncap);
        }
        let data_len = len - HEAD - ICV;
        if !data_len.is_multiple_of(4) {
            return Err(EspError::BadEncap);
        }
        let s = buf.as_slice();
        if u32::from_be_bytes([s[0], s[1], s[2], s[3]]) != self.keys.spi {
            return Err(EspError::BadEncap);
        }
        let lo = u32::from_be_bytes([s[4], s[5], s[6], s[7]]);
        let seq = if self.esn {
            self.window.infer_esn(lo)
        } else {
            lo as u64
        };
        if !self.window.check(seq) {
            return Err(EspError::Replay);
        }
        let mut e = [0u8; 8];
        e.copy_from_slice(&s[8..16]);
        let iv = self.keys.iv(u64::from_be_bytes(e))?;
        let esn_room = if self.esn && self.keys.is_aead() {
            ESN_AAD
        } else {
            0
        };
        if len + esn_room > buf.capacity() {
            return Err(EspError::TooBig);
        }
        buf.set_len(len + esn_room).map_err(|_| EspError::TooBig)?;
        let (aad_off, aad_len) = aad(&self.keys, self.esn, buf.as_mut_slice(), len, seq);
        Ok(Prepared {
            iv,
            layout: Layout {
                aad_off,
                aad_len,
                data_off: HEAD as u32,
                data_len: data_len as u32,
                tag_off: (HEAD + data_len) as u32,
            },
            seq,
        })
    }

    /// After the ICV checked out: advances the replay window and returns where the
    /// inner packet is in the buffer.
    pub fn finish(&mut self, p: &Prepared, buf: &Buf) -> Result<Range<usize>, EspError> {
        if !self.window.accept(p.seq) {
            return Err(EspError::Replay);
        }
        let data_len = p.layout.data_len as usize;
        let d = &buf.as_slice()[HEAD..HEAD + data_len];
        let nh = d[data_len - 1];
        let pad = d[data_len - 2] as usize;
        if pad + 2 > data_len {
            return Err(EspError::BadEncap);
        }
        let inner_len = data_len - 2 - pad;
        if d[inner_len..inner_len + pad]
            .iter()
            .enumerate()
            .any(|(i, &b)| b != i as u8 + 1)
        {
            return Err(EspError::BadEncap);
        }
        match nh {
            59 => Err(EspError::Dummy),
            4 | 41 if inner_len > 0 && next_header(&d[..inner_len]) == Some(nh) => {
                if self.selectors.allows_in(&d[..inner_len]) {
                    Ok(HEAD..HEAD + inner_len)
                } else {
                    Err(EspError::Selector)
                }
            }
            _ => Err(EspError::BadEncap),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_accel::{cpu_engine, soft_engine, Engine, Op, Status};

    const ALGS: [Alg; 6] = [
        Alg::Aes128Gcm,
        Alg::Aes256Gcm,
        Alg::Chacha20Poly1305,
        Alg::Aes128CtrHmacSha256,
        Alg::Present80CtrHmacSha256,
        Alg::Present128CtrHmacSha256,
    ];

    fn keys(alg: Alg, fill: u8) -> SaKeys {
        let km = SecretBytes::new(vec![fill; alg.cipher_key_len() + 4]);
        let auth = SecretBytes::new(vec![fill ^ 0x5a; 32]);
        let auth = (alg.family() == AlgFamily::CtrHmac).then_some(&auth);
        SaKeys::new(alg, 0x1234, &km, auth).unwrap()
    }

    fn inner(n: usize, tag: u8) -> Vec<u8> {
        let mut p = vec![tag; n];
        p[0] = 0x45;
        p
    }

    fn run(
        e: &mut dyn Engine,
        sess: nfx_accel::SessionId,
        buf: Buf,
        p: &Prepared,
    ) -> (Buf, Status) {
        let mut ops = vec![Op {
            session: sess,
            iv: p.iv,
            layout: p.layout,
            buf,
            user: 0,
        }];
        e.submit(&mut ops).unwrap();
        let mut out = Vec::new();
        e.drain(&mut out).unwrap();
        let c = out.pop().unwrap();
        (c.op.buf, c.status)
    }

    /// Encrypts `pkt` with `tx` and returns the wire bytes.
    fn seal(e: &mut dyn Engine, tx: &mut Outbound, pkt: &[u8]) -> Vec<u8> {
        let sess = e.create_session(tx.keys.spec(Direction::Encrypt)).unwrap();
        let mut buf = Buf::heap(2048);
        buf.set_len(HEAD + pkt.len()).unwrap();
        buf.as_mut_slice()[HEAD..].copy_from_slice(pkt);
        let p = tx.prepare(&mut buf, pkt.len()).unwrap();
        let (buf, st) = run(e, sess, buf, &p);
        assert_eq!(st, Status::Ok);
        buf.as_slice()[..wire_len(pkt.len())].to_vec()
    }

    fn open(e: &mut dyn Engine, rx: &mut Inbound, wire: &[u8]) -> Result<Vec<u8>, EspError> {
        let sess = e.create_session(rx.keys.spec(Direction::Decrypt)).unwrap();
        let mut buf = Buf::heap(2048);
        buf.fill_from(wire).unwrap();
        let p = rx.prepare(&mut buf)?;
        let (buf, st) = run(e, sess, buf, &p);
        if st != Status::Ok {
            assert!(buf.as_slice()[HEAD..HEAD + p.layout.data_len as usize]
                .iter()
                .all(|&b| b == 0));
            return Err(EspError::AuthFailed);
        }
        let r = rx.finish(&p, &buf)?;
        Ok(buf.as_slice()[r].to_vec())
    }

    #[test]
    fn round_trip_every_transform_both_engines() {
        for alg in ALGS {
            for esn in [false, true] {
                if esn && alg.family() == AlgFamily::CtrHmac {
                    continue;
                }
                for mk in [soft_engine as fn() -> Box<dyn Engine>, cpu_engine] {
                    let mut e = mk();
                    let mut tx = Outbound::new(keys(alg, 7), esn);
                    let mut rx = Inbound::new(keys(alg, 7), esn, 64);
                    for n in [20, 21, 22, 23, 100, 1400] {
                        let pkt = inner(n, n as u8);
                        let w = seal(e.as_mut(), &mut tx, &pkt);
                        assert_eq!(w.len() % 4, 0, "{alg}");
                        assert_ne!(&w[HEAD..HEAD + 8], &pkt[..8], "{alg}: not encrypted");
                        assert_eq!(
                            open(e.as_mut(), &mut rx, &w).unwrap(),
                            pkt,
                            "{alg} esn={esn}"
                        );
                    }
                }
            }
        }
    }

    /// A UDP packet `src` → `dst` with a valid IPv4 header for the ESP layer.
    fn udp4(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut p = inner(60, 1);
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn inner_packets_outside_the_selectors_are_refused_both_ways() {
        let ts = |s: &str| nfx_ike::ts::TrafficSelector::cidr(s).unwrap();
        // Our side is 10.1.0.0/24, the peer's 10.2.0.7. `tx` is our outbound SA, `rx`
        // the peer's inbound one (its selectors are the mirror image of ours).
        let ours = Selectors::negotiated(vec![ts("10.1.0.0/24")], vec![ts("10.2.0.7")]);
        let peers = Selectors::negotiated(vec![ts("10.2.0.7")], vec![ts("10.1.0.0/24")]);
        let mut e = cpu_engine();
        let mut tx = Outbound::new(keys(Alg::Aes128Gcm, 5), false).with_selectors(ours);
        let mut rx = Inbound::new(keys(Alg::Aes128Gcm, 5), false, 64).with_selectors(peers);
        let good = udp4([10, 1, 0, 9], [10, 2, 0, 7]);
        let w = seal(e.as_mut(), &mut tx, &good);
        assert_eq!(open(e.as_mut(), &mut rx, &w).unwrap(), good);
        // Outbound: a destination the peer did not agree to takes no sequence number.
        let mut buf = Buf::heap(2048);
        let off = udp4([10, 1, 0, 9], [10, 2, 0, 8]);
        buf.set_len(HEAD + off.len()).unwrap();
        buf.as_mut_slice()[HEAD..].copy_from_slice(&off);
        let refused = tx.prepare(&mut buf, off.len()).err();
        assert_eq!(refused, Some(EspError::Selector));
        buf.set_len(HEAD + good.len()).unwrap();
        buf.as_mut_slice()[HEAD..].copy_from_slice(&good);
        assert_eq!(tx.prepare(&mut buf, good.len()).unwrap().seq, 2);
        // Inbound: we hold the keys, so we can seal anything with an SA that checks
        // nothing: authentic packets from a source outside our side or to a host that is
        // not the peer's are still not delivered.
        let mut forger = Outbound::new(keys(Alg::Aes128Gcm, 5), false);
        forger.seq = SeqLane::new(SeqSpace::new(100, u32::MAX as u64, None));
        let spoofed = [udp4([10, 1, 1, 5], [10, 2, 0, 7]), off];
        for pkt in spoofed {
            let w = seal(e.as_mut(), &mut forger, &pkt);
            assert_eq!(open(e.as_mut(), &mut rx, &w), Err(EspError::Selector));
        }
        // The window took them (they were authentic), and good traffic still flows.
        let mut tail = Outbound::new(keys(Alg::Aes128Gcm, 5), false);
        tail.seq = SeqLane::new(SeqSpace::new(200, u32::MAX as u64, None));
        let w = seal(e.as_mut(), &mut tail, &good);
        assert_eq!(open(e.as_mut(), &mut rx, &w).unwrap(), good);
    }

    #[test]
    fn soft_and_cpu_produce_identical_wire_bytes() {
        for alg in ALGS {
            let a = seal(
                soft_engine().as_mut(),
                &mut Outbound::new(keys(alg, 3), false),
                &inner(77, 9),
            );
            let b = seal(
                cpu_engine().as_mut(),
                &mut Outbound::new(keys(alg, 3), false),
                &inner(77, 9),
            );
            assert_eq!(a, b, "{alg}");
        }
    }

    #[test]
    fn tamper_replay_and_wrong_key_are_rejected() {
        for alg in ALGS {
            let mut e = cpu_engine();
            let mut tx = Outbound::new(keys(alg, 1), false);
            let mut rx = Inbound::new(keys(alg, 1), false, 64);
            let w = seal(e.as_mut(), &mut tx, &inner(60, 1));
            for pos in [5, 10, 20, w.len() - 1] {
                let mut t = w.clone();
                t[pos] ^= 1;
                assert_eq!(
                    open(e.as_mut(), &mut rx, &t),
                    Err(EspError::AuthFailed),
                    "{alg} byte {pos}"
                );
            }
            assert!(open(e.as_mut(), &mut rx, &w).is_ok());
            assert_eq!(open(e.as_mut(), &mut rx, &w), Err(EspError::Replay));
            let mut wrong = Inbound::new(keys(alg, 2), false, 64);
            let w2 = seal(e.as_mut(), &mut tx, &inner(60, 1));
            assert_eq!(
                open(e.as_mut(), &mut wrong, &w2),
                Err(EspError::AuthFailed),
                "{alg}"
            );
            let mut other_spi = w2.clone();
            other_spi[3] ^= 1;
            assert_eq!(
                open(e.as_mut(), &mut rx, &other_spi),
                Err(EspError::BadEncap)
            );
            assert_eq!(
                open(e.as_mut(), &mut rx, &w2[..20]),
                Err(EspError::BadEncap)
            );
        }
    }

    #[test]
    fn non_ip_and_oversize_inner_rejected() {
        let mut tx = Outbound::new(keys(Alg::Aes128Gcm, 1), false);
        let mut buf = Buf::heap(64);
        buf.set_len(HEAD + 30).unwrap();
        assert_eq!(tx.prepare(&mut buf, 30).unwrap_err(), EspError::BadEncap);
        assert_eq!(tx.prepare(&mut buf, 60).unwrap_err(), EspError::TooBig);
        assert_eq!(tx.sent(), 0);
    }

    /// A static key's SA refuses to send once the 32-bit space is used, and its
    /// persisted sequence resumes past the reservation after a "restart".
    #[test]
    fn persisted_sequence_stops_at_2_32_and_resumes_past_reservations() {
        let dir = std::env::temp_dir().join(format!("nfx-esp-seq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        std::fs::write(&path, format!("nfx-esp-seq-v1 next={}\n", u32::MAX)).unwrap();
        let (st, start) = SeqState::open(&path, 10).unwrap();
        let mut tx = Outbound::persisted(keys(Alg::Aes128Gcm, 1), false, st, start);
        let mut e = cpu_engine();
        let w = seal(e.as_mut(), &mut tx, &inner(40, 1));
        assert_eq!(u32::from_be_bytes(w[4..8].try_into().unwrap()), u32::MAX);
        let mut buf = Buf::heap(256);
        buf.set_len(HEAD + 40).unwrap();
        buf.as_mut_slice()[HEAD] = 0x45;
        assert_eq!(
            tx.prepare(&mut buf, 40).unwrap_err(),
            EspError::SeqExhausted
        );
        // With ESN the same state goes on past 2^32, reserving as it goes; a new
        // process starts after everything the old one reserved.
        std::fs::write(&path, format!("nfx-esp-seq-v1 next={}\n", u32::MAX)).unwrap();
        let (st, start) = SeqState::open(&path, 10).unwrap();
        let mut tx = Outbound::persisted(keys(Alg::Aes128Gcm, 1), true, st, start);
        for _ in 0..25 {
            seal(e.as_mut(), &mut tx, &inner(40, 1));
        }
        let used = tx.sent();
        let (_, restart) = SeqState::open(&path, 10).unwrap();
        assert!(restart > used, "restart at {restart}, used up to {used}");
    }

    /// RFC 3686 §6 test vector #1 through this module's counter-block construction.
    #[test]
    fn rfc3686_vector_1() {
        let mut km = hex("AE6852F8121067CC4BF7A5765577F39E");
        km.extend(hex("00000030"));
        let auth = SecretBytes::new(vec![1; 32]);
        let k = SaKeys::new(
            Alg::Aes128CtrHmacSha256,
            0x1000,
            &SecretBytes::new(km),
            Some(&auth),
        )
        .unwrap();
        let iv = k.iv(0).unwrap();
        assert_eq!(
            iv.as_slice(),
            hex("00000030000000000000000000000001").as_slice()
        );
        for mut e in [soft_engine(), cpu_engine()] {
            let s = e.create_session(k.spec(Direction::Encrypt)).unwrap();
            let mut buf = Buf::heap(64);
            buf.fill_from(b"Single block msg").unwrap();
            buf.set_len(48).unwrap();
            let p = Prepared {
                iv,
                layout: Layout {
                    aad_off: 0,
                    aad_len: 0,
                    data_off: 0,
                    data_len: 16,
                    tag_off: 16,
                },
                seq: 0,
            };
            let (buf, st) = run(e.as_mut(), s, buf, &p);
            assert_eq!(st, Status::Ok);
            assert_eq!(
                &buf.as_slice()[..16],
                hex("E4095D4FB7A7B3792D6175A3261311B8").as_slice()
            );
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        ::hex::decode(s).expect("a test vector in hex")
    }

    #[test]
    fn key_material_checks_and_redaction() {
        let km = SecretBytes::new(vec![0xab; 20]);
        assert!(SaKeys::new(Alg::Aes256Gcm, 300, &km, None).is_err());
        assert!(SaKeys::new(Alg::Aes128CtrHmacSha256, 300, &km, None).is_err());
        assert!(SaKeys::new(Alg::Aes128Gcm, 300, &km, Some(&km)).is_err());
        let k = SaKeys::new(Alg::Aes128Gcm, 300, &km, None).unwrap();
        let d = format!("{k:?}");
        assert!(!d.contains("ab") && !d.contains("171") && d.contains("redacted"));
    }
}
