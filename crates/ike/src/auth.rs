//! Peer authentication (RFC 7296 §2.15): the signed octets, pre-shared-key MACs and
//! X.509 certificates with ECDSA P-256 signatures, either as the RFC 4754 method 9
//! (raw `r | s`) or as RFC 7427 Digital Signatures. Chains are verified by
//! rustls-webpki against the configured CA certificates.

use std::fmt;

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P256_SHA256_FIXED_SIGNING,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{
    CertificateDer, PrivateKeyDer, ServerName, SignatureVerificationAlgorithm, TrustAnchor,
    UnixTime,
};
use webpki::{EndEntityCert, ExtendedKeyUsageValidator, KeyPurposeIdIter};

use crate::consts::{auth as method, cert as certenc, idtype};
use crate::crypto::{prf, Secret};
use crate::wire::Identity;

/// The octets a peer's AUTH covers: `RealMessage | NonceData | prf(SK_p, ID body)`.
pub fn signed_octets(real_msg: &[u8], peer_nonce: &[u8], sk_p: &Secret, id: &Identity) -> Vec<u8> {
    let maced = prf(sk_p.expose(), &[&id.body()]);
    [real_msg, peer_nonce, maced.expose()].concat()
}

/// `prf(prf(Shared Secret, "Key Pad for IKEv2"), octets)`.
pub fn psk_mac(psk: &Secret, octets: &[u8]) -> Secret {
    let pad = prf(psk.expose(), &[b"Key Pad for IKEv2"]);
    prf(pad.expose(), &[octets])
}

/// Why authentication failed (reported to the operator; the peer only learns
/// AUTHENTICATION_FAILED).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The peer used another method than configured.
    #[error("peer authenticated with method {0}, expected {1}")]
    Method(u8, &'static str),
    /// PSK MAC or signature does not verify.
    #[error("AUTH payload does not verify")]
    BadAuth,
    /// No usable certificate from the peer.
    #[error("no X.509 certificate from the peer")]
    NoCert,
    /// The chain does not verify against the configured CAs.
    #[error("certificate chain: {0}")]
    Chain(String),
    /// The identity is not one the certificate holds.
    #[error("identity {0} is not in the peer's certificate")]
    Name(String),
    /// A signature algorithm nfx does not accept.
    #[error("unsupported signature algorithm")]
    Algorithm,
}

/// Our certificate credentials: the chain we send (end entity first), our P-256 key
/// and the CA certificates that peers' chains must lead to.
pub struct CertCreds {
    chain: Vec<CertificateDer<'static>>,
    asn1: EcdsaKeyPair,
    fixed: EcdsaKeyPair,
    cas: Vec<CertificateDer<'static>>,
}

impl fmt::Debug for CertCreds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CertCreds({} certs, {} CAs, <key redacted>)",
            self.chain.len(),
            self.cas.len()
        )
    }
}

/// How this end authenticates and checks its peer.
#[derive(Debug)]
pub enum Credentials {
    /// A pre-shared key (both directions).
    Psk(Secret),
    /// Certificates.
    Cert(CertCreds),
}

fn certs_from_pem(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let v: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{what}: not PEM certificates"))?;
    if v.is_empty() {
        return Err(format!("{what}: no CERTIFICATE block"));
    }
    Ok(v)
}

impl CertCreds {
    /// Loads PEM texts: our certificate (+ intermediates), our PKCS#8 or SEC1 P-256
    /// key, the CA certificates. Errors never quote the files' contents.
    pub fn from_pem(cert: &[u8], key: &[u8], ca: &[u8]) -> Result<CertCreds, String> {
        let chain = certs_from_pem(cert, "certificate")?;
        let cas = certs_from_pem(ca, "CA")?;
        let der = PrivateKeyDer::from_pem_slice(key).map_err(|_| "key: not a PEM private key")?;
        let load = |alg| {
            EcdsaKeyPair::from_private_key_der(alg, der.secret_der())
                .map_err(|_| "key: not an ECDSA P-256 private key".to_string())
        };
        let creds = CertCreds {
            asn1: load(&ECDSA_P256_SHA256_ASN1_SIGNING)?,
            fixed: load(&ECDSA_P256_SHA256_FIXED_SIGNING)?,
            chain,
            cas,
        };
        for c in &creds.cas {
            webpki::anchor_from_trusted_cert(c).map_err(|e| format!("CA: {e}"))?;
        }
        let probe = b"nfx key/certificate match";
        let sig = creds.sign(probe, true).1;
        let ee =
            EndEntityCert::try_from(&creds.chain[0]).map_err(|e| format!("certificate: {e}"))?;
        ee.verify_signature(webpki::aws_lc_rs::ECDSA_P256_SHA256, probe, &sig[13..])
            .map_err(|_| "the key does not belong to the certificate".to_string())?;
        Ok(creds)
    }

    /// The CA certificates peers' chains must lead to.
    pub fn cas(&self) -> &[CertificateDer<'static>] {
        &self.cas
    }

    /// The certificates to send (end entity first).
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// Signs `octets`: RFC 7427 (method 14, ECDSA with SHA-256, DER signature) when
    /// the peer announced SHA2-256, else RFC 4754 method 9 (`r | s`).
    pub fn sign(&self, octets: &[u8], rfc7427: bool) -> (u8, Vec<u8>) {
        let rng = SystemRandom::new();
        if rfc7427 {
            let sig = self.asn1.sign(&rng, octets).expect("ECDSA signing");
            let mut d = vec![ECDSA_SHA256_ALGID.len() as u8];
            d.extend_from_slice(ECDSA_SHA256_ALGID);
            d.extend_from_slice(sig.as_ref());
            (method::DIGITAL_SIGNATURE, d)
        } else {
            let sig = self.fixed.sign(&rng, octets).expect("ECDSA signing");
            (method::ECDSA_P256_SHA256, sig.as_ref().to_vec())
        }
    }

    /// Verifies the peer: its chain (`certs`, end entity first) against our CAs at
    /// `now`, that `id` (the configured remote identity) is named by the certificate,
    /// and its AUTH payload over `octets`.
    pub fn verify(
        &self,
        certs: &[Vec<u8>],
        id: &Identity,
        auth_method: u8,
        data: &[u8],
        octets: &[u8],
        now: UnixTime,
    ) -> Result<(), AuthError> {
        let ee_der = CertificateDer::from(certs.first().ok_or(AuthError::NoCert)?.as_slice());
        let inter: Vec<CertificateDer<'_>> = certs[1..]
            .iter()
            .map(|c| CertificateDer::from(c.as_slice()))
            .collect();
        let anchors: Vec<TrustAnchor<'_>> = self
            .cas
            .iter()
            .filter_map(|c| webpki::anchor_from_trusted_cert(c).ok())
            .collect();
        let ee = EndEntityCert::try_from(&ee_der).map_err(|e| AuthError::Chain(e.to_string()))?;
        ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &inter,
            now,
            IkeEku,
            None,
            None,
        )
        .map_err(|e| AuthError::Chain(e.to_string()))?;
        let name = match id.ty {
            idtype::FQDN => std::str::from_utf8(&id.data)
                .ok()
                .and_then(|s| ServerName::try_from(s.to_string()).ok()),
            idtype::IPV4_ADDR | idtype::IPV6_ADDR => ServerName::try_from(id.to_string()).ok(),
            _ => None,
        }
        .ok_or_else(|| AuthError::Name(id.to_string()))?;
        ee.verify_is_valid_for_subject_name(&name)
            .map_err(|_| AuthError::Name(id.to_string()))?;
        let (alg, sig): (&dyn SignatureVerificationAlgorithm, Vec<u8>) = match auth_method {
            method::ECDSA_P256_SHA256 => (
                webpki::aws_lc_rs::ECDSA_P256_SHA256,
                raw_to_der(data).ok_or(AuthError::BadAuth)?,
            ),
            method::DIGITAL_SIGNATURE => {
                let n = *data.first().ok_or(AuthError::BadAuth)? as usize;
                let algid = data.get(1..1 + n).ok_or(AuthError::BadAuth)?;
                (sig_alg(algid)?, data[1 + n..].to_vec())
            }
            m => return Err(AuthError::Method(m, "a signature")),
        };
        ee.verify_signature(alg, octets, &sig)
            .map_err(|_| AuthError::BadAuth)
    }
}

/// ecdsa-with-SHA256 AlgorithmIdentifier (RFC 7427 Appendix A.3.2).
const ECDSA_SHA256_ALGID: &[u8] = &[
    0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02,
];
/// ecdsa-with-SHA384 AlgorithmIdentifier.
const ECDSA_SHA384_ALGID: &[u8] = &[
    0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03,
];
/// sha256WithRSAEncryption AlgorithmIdentifier (NULL parameters).
const RSA_SHA256_ALGID: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b, 0x05, 0x00,
];
/// Ed25519 AlgorithmIdentifier (RFC 8420).
const ED25519_ALGID: &[u8] = &[0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70];

fn sig_alg(algid: &[u8]) -> Result<&'static dyn SignatureVerificationAlgorithm, AuthError> {
    use webpki::aws_lc_rs as a;
    Ok(match algid {
        ECDSA_SHA256_ALGID => a::ECDSA_P256_SHA256,
        ECDSA_SHA384_ALGID => a::ECDSA_P256_SHA384,
        RSA_SHA256_ALGID => a::RSA_PKCS1_2048_8192_SHA256,
        ED25519_ALGID => a::ED25519,
        _ => return Err(AuthError::Algorithm),
    })
}

/// DER `ECDSA-Sig-Value` of a raw 64-byte `r | s` (RFC 4754).
fn raw_to_der(raw: &[u8]) -> Option<Vec<u8>> {
    if raw.len() != 64 {
        return None;
    }
    let int = |x: &[u8]| {
        let x = &x[x.iter().position(|&b| b != 0).unwrap_or(x.len() - 1)..];
        let mut v = vec![0x02];
        if x[0] & 0x80 != 0 {
            v.push(x.len() as u8 + 1);
            v.push(0);
        } else {
            v.push(x.len() as u8);
        }
        v.extend_from_slice(x);
        v
    };
    let body = [int(&raw[..32]), int(&raw[32..])].concat();
    Some([&[0x30, body.len() as u8][..], &body].concat())
}

/// Extended key usage a peer certificate may carry: none, or one of id-kp-ipsecIKE,
/// anyExtendedKeyUsage, serverAuth or clientAuth (RFC 4945 §5.1.3.12 leaves the
/// last two to local policy; CAs commonly issue them to VPN gateways).
struct IkeEku;

/// id-kp-ipsecIKE (1.3.6.1.5.5.7.3.17), DER content octets.
const IPSEC_IKE_OID: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x11];

const EKU_OK: [&[usize]; 4] = [
    &[1, 3, 6, 1, 5, 5, 7, 3, 17],
    &[2, 5, 29, 37, 0],
    &[1, 3, 6, 1, 5, 5, 7, 3, 1],
    &[1, 3, 6, 1, 5, 5, 7, 3, 2],
];

impl ExtendedKeyUsageValidator for IkeEku {
    fn validate(&self, iter: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        let mut present = Vec::new();
        for k in iter {
            let oid = k?.to_decoded_oid();
            if EKU_OK.contains(&oid.as_slice()) {
                return Ok(());
            }
            present.push(oid);
        }
        if present.is_empty() {
            return Ok(());
        }
        Err(webpki::Error::RequiredEkuNotFoundContext(
            webpki::RequiredEkuNotFoundContext {
                required: webpki::KeyUsage::required(IPSEC_IKE_OID),
                present,
            },
        ))
    }
}

/// The CERT payloads of our chain.
pub fn cert_payloads(c: &CertCreds) -> Vec<crate::wire::Payload> {
    c.chain()
        .iter()
        .map(|d| crate::wire::Payload::Cert {
            encoding: certenc::X509_SIGNATURE,
            data: d.as_ref().to_vec(),
        })
        .collect()
}

/// Checks a PSK AUTH payload in constant time.
pub fn verify_psk(
    psk: &Secret,
    auth_method: u8,
    data: &[u8],
    octets: &[u8],
) -> Result<(), AuthError> {
    if auth_method != method::PSK {
        return Err(AuthError::Method(auth_method, "PSK"));
    }
    verify_slices_are_equal(psk_mac(psk, octets).expose(), data).map_err(|_| AuthError::BadAuth)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A CA and an end-entity certificate for `name` (ECDSA P-256), as PEM texts
    /// (cert, key, ca).
    pub fn make_certs(names: &[&str]) -> Vec<(String, String, String)> {
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "nfx test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        names
            .iter()
            .map(|n| {
                let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
                let params = rcgen::CertificateParams::new(vec![n.to_string()]).unwrap();
                let cert = params.signed_by(&key, &ca).unwrap();
                (cert.pem(), key.serialize_pem(), ca.pem())
            })
            .collect()
    }

    fn fqdn(s: &str) -> Identity {
        Identity {
            ty: idtype::FQDN,
            data: s.as_bytes().to_vec(),
        }
    }

    #[test]
    fn signatures_verify_with_the_chain_and_name() {
        let v = make_certs(&["a.nfx", "b.nfx"]);
        let a =
            CertCreds::from_pem(v[0].0.as_bytes(), v[0].1.as_bytes(), v[0].2.as_bytes()).unwrap();
        let b =
            CertCreds::from_pem(v[1].0.as_bytes(), v[1].1.as_bytes(), v[1].2.as_bytes()).unwrap();
        let now = UnixTime::now();
        let a_chain: Vec<Vec<u8>> = a.chain().iter().map(|c| c.to_vec()).collect();
        for rfc7427 in [true, false] {
            let (m, sig) = a.sign(b"octets", rfc7427);
            b.verify(&a_chain, &fqdn("a.nfx"), m, &sig, b"octets", now)
                .unwrap();
            assert_eq!(
                b.verify(&a_chain, &fqdn("a.nfx"), m, &sig, b"octetz", now),
                Err(AuthError::BadAuth)
            );
            assert!(matches!(
                b.verify(&a_chain, &fqdn("b.nfx"), m, &sig, b"octets", now),
                Err(AuthError::Name(_))
            ));
        }
        // A certificate from another CA is refused.
        let other = make_certs(&["a.nfx"]);
        let c = CertCreds::from_pem(
            other[0].0.as_bytes(),
            other[0].1.as_bytes(),
            other[0].2.as_bytes(),
        )
        .unwrap();
        let c_chain: Vec<Vec<u8>> = c.chain().iter().map(|c| c.to_vec()).collect();
        let (m, sig) = c.sign(b"octets", true);
        assert!(matches!(
            b.verify(&c_chain, &fqdn("a.nfx"), m, &sig, b"octets", now),
            Err(AuthError::Chain(_))
        ));
        assert_eq!(
            b.verify(&[], &fqdn("a.nfx"), m, &sig, b"octets", now),
            Err(AuthError::NoCert)
        );
    }

    #[test]
    fn bad_pem_errors_do_not_quote_content() {
        let v = make_certs(&["a.nfx"]);
        let e = CertCreds::from_pem(b"SECRET-CONTENT", v[0].1.as_bytes(), v[0].2.as_bytes())
            .unwrap_err();
        assert!(!e.contains("SECRET"), "{e}");
        let e =
            CertCreds::from_pem(v[0].0.as_bytes(), b"SECRET-KEY", v[0].2.as_bytes()).unwrap_err();
        assert!(!e.contains("SECRET"), "{e}");
        let w = make_certs(&["b.nfx"]);
        let e = CertCreds::from_pem(v[0].0.as_bytes(), w[0].1.as_bytes(), v[0].2.as_bytes())
            .unwrap_err();
        assert!(e.contains("does not belong"), "{e}");
    }

    #[test]
    fn psk_mac_checks() {
        let k = Secret::new(b"secret".to_vec());
        let mac = psk_mac(&k, b"octets");
        verify_psk(&k, method::PSK, mac.expose(), b"octets").unwrap();
        assert_eq!(
            verify_psk(&k, method::PSK, mac.expose(), b"other"),
            Err(AuthError::BadAuth)
        );
        assert!(verify_psk(&k, method::DIGITAL_SIGNATURE, mac.expose(), b"octets").is_err());
    }

    #[test]
    fn raw_signature_to_der() {
        let mut raw = [0u8; 64];
        raw[0] = 0x80;
        raw[63] = 1;
        let d = raw_to_der(&raw).unwrap();
        assert_eq!(&d[..4], &[0x30, 38, 0x02, 33]);
        assert_eq!(&d[d.len() - 3..], &[0x02, 1, 1]);
        assert!(raw_to_der(&raw[..63]).is_none());
    }
}
