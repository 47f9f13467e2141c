//! SA payloads (RFC 7296 §3.3): proposals and transforms on the wire, the proposal
//! strings of the configuration (strongSwan's syntax: `aes128gcm16-prfsha256-x25519`),
//! and the choice a responder makes and an initiator checks.

use crate::consts::{attr, id, proto, transform as tt};
use crate::wire::{ParseError, Reader};

/// Most proposals / transforms per SA payload nfx reads.
const MAX_ITEMS: usize = 64;

/// One transform of a proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transform {
    /// Transform type.
    pub ty: u8,
    /// Transform ID.
    pub id: u16,
    /// Key Length attribute in bits, if present.
    pub key_len: Option<u16>,
    /// An attribute nfx does not know was present: the transform cannot be chosen.
    pub unknown_attr: bool,
}

impl Transform {
    /// A transform without attributes.
    pub fn new(ty: u8, id: u16) -> Transform {
        Transform {
            ty,
            id,
            key_len: None,
            unknown_attr: false,
        }
    }

    /// A transform with a key length.
    pub fn keyed(ty: u8, id: u16, bits: u16) -> Transform {
        Transform {
            key_len: Some(bits),
            ..Transform::new(ty, id)
        }
    }

    fn same(&self, o: &Transform) -> bool {
        self.ty == o.ty && self.id == o.id && self.key_len == o.key_len && !o.unknown_attr
    }
}

/// One proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// Proposal number (1-based, in order).
    pub num: u8,
    /// Protocol (IKE or ESP).
    pub proto: u8,
    /// SPI (empty in an IKE_SA_INIT, 8 bytes in an IKE rekey, 4 bytes for ESP).
    pub spi: Vec<u8>,
    /// Transforms.
    pub transforms: Vec<Transform>,
}

/// Decodes the body of an SA payload.
pub fn decode_sa(body: &[u8]) -> Result<Vec<Proposal>, ParseError> {
    let mut r = Reader::new(body, "SA payload");
    let mut out = Vec::new();
    loop {
        if out.len() >= MAX_ITEMS {
            return Err(ParseError::TooMany);
        }
        let last = r.u8()?;
        r.u8()?;
        let len = r.u16()? as usize;
        if len < 8 {
            return Err(ParseError::BadLength("proposal"));
        }
        let mut p = Reader::new(r.take(len - 4)?, "proposal");
        let num = p.u8()?;
        let proto = p.u8()?;
        let spi_len = p.u8()? as usize;
        let n = p.u8()? as usize;
        let spi = p.take(spi_len)?.to_vec();
        let mut transforms = Vec::with_capacity(n);
        for i in 0..n {
            let tlast = p.u8()?;
            p.u8()?;
            let tlen = p.u16()? as usize;
            if tlen < 8 {
                return Err(ParseError::BadLength("transform"));
            }
            let mut t = Reader::new(p.take(tlen - 4)?, "transform");
            let ty = t.u8()?;
            t.u8()?;
            let tid = t.u16()?;
            let mut tr = Transform::new(ty, tid);
            while t.left() > 0 {
                let at = t.u16()?;
                if at & 0x8000 != 0 {
                    let v = t.u16()?;
                    if at & 0x7fff == attr::KEY_LENGTH {
                        tr.key_len = Some(v);
                    } else {
                        tr.unknown_attr = true;
                    }
                } else {
                    let alen = t.u16()? as usize;
                    t.take(alen)?;
                    tr.unknown_attr = true;
                }
            }
            let want_last = if i + 1 == n { 0 } else { 3 };
            if tlast != want_last {
                return Err(ParseError::Invalid("transform Last Substruc"));
            }
            transforms.push(tr);
        }
        if p.left() != 0 {
            return Err(ParseError::BadLength("proposal"));
        }
        out.push(Proposal {
            num,
            proto,
            spi,
            transforms,
        });
        match last {
            0 if r.left() == 0 => return Ok(out),
            0 => return Err(ParseError::BadLength("SA payload")),
            2 => continue,
            _ => return Err(ParseError::Invalid("proposal Last Substruc")),
        }
    }
}

/// Appends the body of an SA payload carrying `props`.
pub fn encode_sa(props: &[Proposal], out: &mut Vec<u8>) {
    for (i, p) in props.iter().enumerate() {
        let mut body = vec![p.num, p.proto, p.spi.len() as u8, p.transforms.len() as u8];
        body.extend_from_slice(&p.spi);
        for (j, t) in p.transforms.iter().enumerate() {
            let mut tb = vec![t.ty, 0];
            tb.extend_from_slice(&t.id.to_be_bytes());
            if let Some(k) = t.key_len {
                tb.extend_from_slice(&(0x8000 | attr::KEY_LENGTH).to_be_bytes());
                tb.extend_from_slice(&k.to_be_bytes());
            }
            body.push(if j + 1 == p.transforms.len() { 0 } else { 3 });
            body.push(0);
            body.extend_from_slice(&((tb.len() + 4) as u16).to_be_bytes());
            body.extend_from_slice(&tb);
        }
        out.push(if i + 1 == props.len() { 0 } else { 2 });
        out.push(0);
        out.extend_from_slice(&((body.len() + 4) as u16).to_be_bytes());
        out.extend_from_slice(&body);
    }
}

/// A Diffie-Hellman group nfx implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhGroup {
    /// 256-bit random ECP group (19).
    Ecp256,
    /// Curve25519 (31).
    Curve25519,
}

impl DhGroup {
    /// The transform ID.
    pub fn id(self) -> u16 {
        match self {
            DhGroup::Ecp256 => id::DH_ECP256,
            DhGroup::Curve25519 => id::DH_CURVE25519,
        }
    }

    /// The group with this transform ID.
    pub fn from_id(v: u16) -> Option<DhGroup> {
        match v {
            id::DH_ECP256 => Some(DhGroup::Ecp256),
            id::DH_CURVE25519 => Some(DhGroup::Curve25519),
            _ => None,
        }
    }
}

/// Encryption of the IKE SA itself (SK payloads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IkeEncr {
    /// AES-GCM with a 16-byte ICV (RFC 5282), key 128 or 256 bits.
    AesGcm16(u16),
    /// AES-CBC (RFC 3602) with HMAC-SHA-256-128, key 128 or 256 bits.
    AesCbc(u16),
}

impl IkeEncr {
    /// Encryption key bytes plus the 4-byte salt of GCM (RFC 5282 §7.1).
    pub fn key_len(self) -> usize {
        match self {
            IkeEncr::AesGcm16(b) => b as usize / 8 + 4,
            IkeEncr::AesCbc(b) => b as usize / 8,
        }
    }

    /// Integrity key bytes (none with an AEAD).
    pub fn integ_key_len(self) -> usize {
        match self {
            IkeEncr::AesGcm16(_) => 0,
            IkeEncr::AesCbc(_) => 32,
        }
    }
}

/// The algorithms of an IKE SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IkeSuite {
    /// SK payload protection.
    pub encr: IkeEncr,
    /// Diffie-Hellman group.
    pub dh: DhGroup,
}

/// An ESP transform nfx's data path implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EspAlg {
    /// AES-128-GCM, 16-byte ICV.
    AesGcm128,
    /// AES-256-GCM, 16-byte ICV.
    AesGcm256,
    /// ChaCha20-Poly1305.
    ChaCha20Poly1305,
    /// AES-128-CTR with HMAC-SHA-256-128.
    AesCtr128HmacSha256,
}

impl EspAlg {
    /// Cipher key plus salt/nonce bytes (RFC 4106 §8.1, RFC 7634 §2, RFC 3686 §5.1).
    pub fn key_len(self) -> usize {
        match self {
            EspAlg::AesGcm128 | EspAlg::AesCtr128HmacSha256 => 20,
            EspAlg::AesGcm256 | EspAlg::ChaCha20Poly1305 => 36,
        }
    }

    /// HMAC key bytes (0 for an AEAD).
    pub fn integ_key_len(self) -> usize {
        match self {
            EspAlg::AesCtr128HmacSha256 => 32,
            _ => 0,
        }
    }

    /// nfx's name of the transform (the tunnel config's `alg` values).
    pub fn name(self) -> &'static str {
        match self {
            EspAlg::AesGcm128 => "aes-128-gcm",
            EspAlg::AesGcm256 => "aes-256-gcm",
            EspAlg::ChaCha20Poly1305 => "chacha20-poly1305",
            EspAlg::AesCtr128HmacSha256 => "aes-128-ctr-hmac-sha256",
        }
    }

    fn transforms(self) -> Vec<Transform> {
        match self {
            EspAlg::AesGcm128 => vec![Transform::keyed(tt::ENCR, id::ENCR_AES_GCM_16, 128)],
            EspAlg::AesGcm256 => vec![Transform::keyed(tt::ENCR, id::ENCR_AES_GCM_16, 256)],
            EspAlg::ChaCha20Poly1305 => vec![Transform::new(tt::ENCR, id::ENCR_CHACHA20_POLY1305)],
            EspAlg::AesCtr128HmacSha256 => vec![
                Transform::keyed(tt::ENCR, id::ENCR_AES_CTR, 128),
                Transform::new(tt::INTEG, id::AUTH_HMAC_SHA2_256_128),
            ],
        }
    }

    /// Whether nfx's ESP supports 64-bit sequence numbers with this transform.
    pub fn esn_capable(self) -> bool {
        self != EspAlg::AesCtr128HmacSha256
    }
}

/// The algorithms of a CHILD_SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspSuite {
    /// The ESP transform.
    pub alg: EspAlg,
    /// 64-bit extended sequence numbers.
    pub esn: bool,
    /// PFS group of a rekey (none: keys from SK_d and the nonces only).
    pub dh: Option<DhGroup>,
}

fn token_transforms(tok: &str, ike: bool) -> Option<Vec<Transform>> {
    let e = |i, b| Transform::keyed(tt::ENCR, i, b);
    Some(match tok {
        "aes128gcm16" | "aes128gcm" => vec![e(id::ENCR_AES_GCM_16, 128)],
        "aes256gcm16" | "aes256gcm" => vec![e(id::ENCR_AES_GCM_16, 256)],
        "aes128" if ike => vec![e(id::ENCR_AES_CBC, 128)],
        "aes256" if ike => vec![e(id::ENCR_AES_CBC, 256)],
        "aes128ctr" if !ike => vec![e(id::ENCR_AES_CTR, 128)],
        "chacha20poly1305" if !ike => vec![Transform::new(tt::ENCR, id::ENCR_CHACHA20_POLY1305)],
        "sha256" => vec![Transform::new(tt::INTEG, id::AUTH_HMAC_SHA2_256_128)],
        "prfsha256" if ike => vec![Transform::new(tt::PRF, id::PRF_HMAC_SHA2_256)],
        "x25519" | "curve25519" => vec![Transform::new(tt::DH, id::DH_CURVE25519)],
        "ecp256" => vec![Transform::new(tt::DH, id::DH_ECP256)],
        "esn" if !ike => vec![Transform::new(tt::ESN, id::ESN_YES)],
        "noesn" if !ike => vec![Transform::new(tt::ESN, id::ESN_NO)],
        _ => return None,
    })
}

/// Parses one proposal string (`-`-separated algorithm names, strongSwan syntax) into
/// a proposal for `proto` (IKE or ESP). An IKE proposal without `prfsha256` gets it;
/// an ESP proposal without `esn`/`noesn` gets `noesn`.
pub fn parse_proposal(s: &str, proto_id: u8) -> Result<Proposal, String> {
    let ike = proto_id == proto::IKE;
    let mut ts: Vec<Transform> = Vec::new();
    for tok in s.split('-') {
        let t = token_transforms(tok, ike).ok_or_else(|| {
            format!(
                "`{tok}` is not an {} algorithm nfx implements",
                if ike { "IKE" } else { "ESP" }
            )
        })?;
        ts.extend(t);
    }
    let has = |ts: &[Transform], ty| ts.iter().any(|t| t.ty == ty);
    let aead = ts.iter().any(|t| {
        t.ty == tt::ENCR && matches!(t.id, id::ENCR_AES_GCM_16 | id::ENCR_CHACHA20_POLY1305)
    });
    if !has(&ts, tt::ENCR) {
        return Err(format!("`{s}` has no encryption algorithm"));
    }
    if aead && has(&ts, tt::INTEG) {
        return Err(format!("`{s}` mixes an AEAD with an integrity algorithm"));
    }
    if !aead && !has(&ts, tt::INTEG) {
        return Err(format!("`{s}` needs an integrity algorithm (sha256)"));
    }
    if ike {
        if !has(&ts, tt::PRF) {
            ts.push(Transform::new(tt::PRF, id::PRF_HMAC_SHA2_256));
        }
        if !has(&ts, tt::DH) {
            return Err(format!("`{s}` has no Diffie-Hellman group"));
        }
    } else if !has(&ts, tt::ESN) {
        ts.push(Transform::new(tt::ESN, id::ESN_NO));
    }
    if !ike
        && ts.iter().any(|t| t.ty == tt::ESN && t.id == id::ESN_YES)
        && ts
            .iter()
            .any(|t| t.ty == tt::ENCR && t.id == id::ENCR_AES_CTR)
    {
        return Err(format!(
            "`{s}`: nfx's ESP has extended sequence numbers with the AEAD transforms only"
        ));
    }
    ts.sort_by_key(|t| t.ty);
    Ok(Proposal {
        num: 1,
        proto: proto_id,
        spi: Vec::new(),
        transforms: ts,
    })
}

/// Numbers `props` 1, 2, ... and gives each the SPI `spi`.
pub fn with_spi(props: &[Proposal], spi: &[u8]) -> Vec<Proposal> {
    props
        .iter()
        .enumerate()
        .map(|(i, p)| Proposal {
            num: i as u8 + 1,
            spi: spi.to_vec(),
            ..p.clone()
        })
        .collect()
}

fn supported(t: &Transform, ike: bool) -> bool {
    if t.unknown_attr {
        return false;
    }
    match (t.ty, t.id, t.key_len) {
        (tt::ENCR, id::ENCR_AES_GCM_16, Some(128 | 256)) => true,
        (tt::ENCR, id::ENCR_AES_CBC, Some(128 | 256)) => ike,
        (tt::ENCR, id::ENCR_AES_CTR, Some(128)) => !ike,
        (tt::ENCR, id::ENCR_CHACHA20_POLY1305, None) => !ike,
        (tt::PRF, id::PRF_HMAC_SHA2_256, None) => ike,
        (tt::INTEG, id::AUTH_HMAC_SHA2_256_128, None) => true,
        (tt::DH, id::DH_ECP256 | id::DH_CURVE25519, None) => true,
        (tt::ESN, id::ESN_NO | id::ESN_YES, None) => !ike,
        _ => false,
    }
}

/// Picks, for each transform type, the first of `theirs` that `ours` also lists;
/// `None` if a type `theirs` has finds no match. ESP's ESN must be consistent with the
/// chosen cipher (no ESN with AES-CTR).
fn match_one(ours: &Proposal, theirs: &Proposal, ike: bool) -> Option<Vec<Transform>> {
    let mut types: Vec<u8> = theirs.transforms.iter().map(|t| t.ty).collect();
    types.sort_unstable();
    types.dedup();
    let mut out = Vec::new();
    for ty in types {
        let pick = theirs
            .transforms
            .iter()
            .filter(|t| t.ty == ty)
            .find(|t| supported(t, ike) && ours.transforms.iter().any(|o| o.same(t)))?;
        out.push(*pick);
    }
    // Every type we require must be present in theirs.
    for o in &ours.transforms {
        if o.ty != tt::DH && !out.iter().any(|t| t.ty == o.ty) {
            return None;
        }
    }
    Some(out)
}

/// The responder's choice: the first of the peer's proposals (its preference order)
/// that one of ours accepts; the result has exactly one transform of each type.
pub fn select(ours: &[Proposal], theirs: &[Proposal], proto_id: u8) -> Option<Proposal> {
    let ike = proto_id == proto::IKE;
    for t in theirs.iter().filter(|t| t.proto == proto_id) {
        let spi_ok = match proto_id {
            proto::ESP => t.spi.len() == 4,
            _ => t.spi.is_empty() || t.spi.len() == 8,
        };
        if !spi_ok {
            continue;
        }
        for o in ours {
            if let Some(ts) = match_one(o, t, ike) {
                let p = Proposal {
                    num: t.num,
                    proto: proto_id,
                    spi: t.spi.clone(),
                    transforms: ts,
                };
                if ike && ike_suite(&p).is_none() {
                    continue;
                }
                if !ike && esp_suite(&p).is_none() {
                    continue;
                }
                return Some(p);
            }
        }
    }
    None
}

/// Checks an answer to our `offered` proposals: one proposal, a number we sent, one
/// transform per type, each one we offered in that proposal.
pub fn check_answer(offered: &[Proposal], answer: &[Proposal]) -> Option<Proposal> {
    let [a] = answer else { return None };
    let o = offered
        .iter()
        .find(|o| o.num == a.num && o.proto == a.proto)?;
    let mut seen = Vec::new();
    for t in &a.transforms {
        if seen.contains(&t.ty) || !o.transforms.iter().any(|x| x.same(t)) {
            return None;
        }
        seen.push(t.ty);
    }
    for x in &o.transforms {
        if x.ty != tt::DH && !seen.contains(&x.ty) {
            return None;
        }
    }
    Some(a.clone())
}

fn one(p: &Proposal, ty: u8) -> Option<&Transform> {
    p.transforms.iter().find(|t| t.ty == ty)
}

/// The IKE suite of a chosen proposal (`None` if incomplete or unsupported).
pub fn ike_suite(p: &Proposal) -> Option<IkeSuite> {
    let e = one(p, tt::ENCR)?;
    let encr = match (e.id, e.key_len?) {
        (id::ENCR_AES_GCM_16, b) => IkeEncr::AesGcm16(b),
        (id::ENCR_AES_CBC, b) => IkeEncr::AesCbc(b),
        _ => return None,
    };
    if one(p, tt::PRF)?.id != id::PRF_HMAC_SHA2_256 {
        return None;
    }
    let integ = one(p, tt::INTEG).map(|t| t.id);
    match (encr, integ) {
        (IkeEncr::AesGcm16(_), None) => {}
        (IkeEncr::AesCbc(_), Some(id::AUTH_HMAC_SHA2_256_128)) => {}
        _ => return None,
    }
    let dh = DhGroup::from_id(one(p, tt::DH)?.id)?;
    Some(IkeSuite { encr, dh })
}

/// The ESP suite of a chosen proposal (`None` if incomplete or unsupported).
pub fn esp_suite(p: &Proposal) -> Option<EspSuite> {
    let e = one(p, tt::ENCR)?;
    let integ = one(p, tt::INTEG).map(|t| t.id);
    let alg = match (e.id, e.key_len, integ) {
        (id::ENCR_AES_GCM_16, Some(128), None) => EspAlg::AesGcm128,
        (id::ENCR_AES_GCM_16, Some(256), None) => EspAlg::AesGcm256,
        (id::ENCR_CHACHA20_POLY1305, None, None) => EspAlg::ChaCha20Poly1305,
        (id::ENCR_AES_CTR, Some(128), Some(id::AUTH_HMAC_SHA2_256_128)) => {
            EspAlg::AesCtr128HmacSha256
        }
        _ => return None,
    };
    let esn = match one(p, tt::ESN).map(|t| t.id) {
        Some(id::ESN_YES) if alg.esn_capable() => true,
        Some(id::ESN_NO) | None => false,
        _ => return None,
    };
    let dh = match one(p, tt::DH) {
        Some(t) => Some(DhGroup::from_id(t.id)?),
        None => None,
    };
    Some(EspSuite { alg, esn, dh })
}

/// The ESP proposal of one transform (ESN offered first when `esn` and the transform
/// supports it, no-ESN always offered as well).
pub fn esp_proposal(alg: EspAlg, esn: bool) -> Proposal {
    let mut transforms = alg.transforms();
    if esn && alg.esn_capable() {
        transforms.push(Transform::new(tt::ESN, id::ESN_YES));
    }
    transforms.push(Transform::new(tt::ESN, id::ESN_NO));
    Proposal {
        num: 1,
        proto: proto::ESP,
        spi: Vec::new(),
        transforms,
    }
}

/// Adds the PFS group `dh` to ESP proposals (rekeying with a fresh exchange).
pub fn with_pfs(props: &[Proposal], dh: DhGroup) -> Vec<Proposal> {
    props
        .iter()
        .map(|p| {
            let mut p = p.clone();
            p.transforms.push(Transform::new(tt::DH, dh.id()));
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sa_round_trip() {
        let props = with_spi(
            &[
                parse_proposal(
                    "aes128gcm16-aes256gcm16-prfsha256-x25519-ecp256",
                    proto::IKE,
                )
                .unwrap(),
                parse_proposal("aes256-sha256-ecp256", proto::IKE).unwrap(),
            ],
            &[],
        );
        let mut b = Vec::new();
        encode_sa(&props, &mut b);
        assert_eq!(decode_sa(&b).unwrap(), props);
        for cut in 0..b.len() {
            assert!(decode_sa(&b[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn proposal_strings() {
        assert!(parse_proposal("aes128gcm16-sha256-x25519", proto::IKE).is_err());
        assert!(parse_proposal("aes128-x25519", proto::IKE).is_err());
        assert!(parse_proposal("aes128gcm16", proto::IKE).is_err());
        assert!(parse_proposal("rot13-x25519", proto::IKE).is_err());
        assert!(parse_proposal("aes128ctr-sha256-esn", proto::ESP).is_err());
        let p = parse_proposal("aes128ctr-sha256", proto::ESP).unwrap();
        assert_eq!(esp_suite(&p).unwrap().alg, EspAlg::AesCtr128HmacSha256);
    }

    #[test]
    fn responder_picks_in_peer_order_and_initiator_checks() {
        let ours = with_spi(
            &[parse_proposal("aes256gcm16-aes128gcm16-x25519-ecp256", proto::IKE).unwrap()],
            &[],
        );
        let theirs = with_spi(
            &[
                parse_proposal("aes256-sha256-ecp256", proto::IKE).unwrap(),
                parse_proposal("aes128gcm16-prfsha256-ecp256-x25519", proto::IKE).unwrap(),
            ],
            &[],
        );
        let c = select(&ours, &theirs, proto::IKE).unwrap();
        assert_eq!(c.num, 2);
        let s = ike_suite(&c).unwrap();
        assert_eq!(s.encr, IkeEncr::AesGcm16(128));
        assert_eq!(s.dh, DhGroup::Ecp256);
        assert!(check_answer(&theirs, std::slice::from_ref(&c)).is_some());
        let mut forged = c.clone();
        forged.transforms[0].key_len = Some(192);
        assert!(check_answer(&theirs, &[forged]).is_none());
        assert!(check_answer(&theirs, &[c.clone(), c]).is_none());
    }

    #[test]
    fn esn_is_chosen_when_both_offer_it() {
        let ours = with_spi(&[esp_proposal(EspAlg::AesGcm128, true)], &[1, 2, 3, 4]);
        let theirs_esn = with_spi(&[esp_proposal(EspAlg::AesGcm128, true)], &[5, 6, 7, 8]);
        let c = select(&ours, &theirs_esn, proto::ESP).unwrap();
        assert!(esp_suite(&c).unwrap().esn);
        let theirs_no = with_spi(&[esp_proposal(EspAlg::AesGcm128, false)], &[5, 6, 7, 8]);
        let c = select(&ours, &theirs_no, proto::ESP).unwrap();
        assert!(!esp_suite(&c).unwrap().esn);
        let ctr = with_spi(&[esp_proposal(EspAlg::AesCtr128HmacSha256, true)], &[1; 4]);
        assert!(!ctr[0]
            .transforms
            .iter()
            .any(|t| t.ty == tt::ESN && t.id == id::ESN_YES));
        assert!(select(&ours, &ctr, proto::ESP).is_none());
    }
}
