//! What one IKE endpoint is configured with (built by the tunnel from its YAML file).

use std::net::SocketAddr;
use std::time::Duration;

use crate::auth::Credentials;
use crate::consts::idtype;
use crate::proposal::Proposal;
use crate::ts::TrafficSelector;
use crate::wire::Identity;

/// When SAs are rekeyed. Each rekey time is shortened by a random share of up to
/// `jitter` so that two peers with the same settings rarely rekey at once.
#[derive(Debug, Clone)]
pub struct Lifetimes {
    /// IKE SA rekey interval.
    pub ike: Duration,
    /// CHILD_SA rekey interval.
    pub child: Duration,
    /// Rekey a CHILD_SA after this many outbound packets (32-bit sequence numbers:
    /// always well before 2^32).
    pub child_packets: u64,
    /// Rekey a CHILD_SA after this many outbound bytes (0: no limit).
    pub child_bytes: u64,
    /// Share (0..1) of an interval taken off at random.
    pub jitter: f64,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            ike: Duration::from_secs(4 * 3600),
            child: Duration::from_secs(3600),
            child_packets: DEFAULT_CHILD_PACKETS,
            child_bytes: 0,
            jitter: 0.1,
        }
    }
}

/// Packets after which a CHILD_SA without ESN is rekeyed by default: 3·2^30, a quarter
/// of the 32-bit sequence space left for the rekey to finish.
pub const DEFAULT_CHILD_PACKETS: u64 = 3 << 30;

/// Retransmission of our requests (RFC 7296 §2.1): `timeout · backoff^n` after the
/// n-th send, `tries` sends in all, then the peer is declared dead.
#[derive(Debug, Clone)]
pub struct Retransmit {
    /// Wait after the first send.
    pub timeout: Duration,
    /// Growth of the wait per retransmission.
    pub backoff: f64,
    /// Sends before giving up.
    pub tries: u32,
}

impl Default for Retransmit {
    fn default() -> Self {
        Retransmit {
            timeout: Duration::from_millis(500),
            backoff: 1.8,
            tries: 6,
        }
    }
}

/// Bounds on half-open SAs (IKE_SA_INIT answered, IKE_AUTH not yet seen), RFC 7296
/// §2.6: above `cookie_after` a responder answers with a stateless COOKIE, above
/// `max` it drops IKE_SA_INIT requests; each half-open SA expires after `timeout`.
#[derive(Debug, Clone)]
pub struct HalfOpen {
    /// Half-open SAs before cookies are required.
    pub cookie_after: usize,
    /// Most half-open SAs.
    pub max: usize,
    /// Lifetime of a half-open SA.
    pub timeout: Duration,
}

impl Default for HalfOpen {
    fn default() -> Self {
        HalfOpen {
            cookie_after: 8,
            max: 64,
            timeout: Duration::from_secs(10),
        }
    }
}

/// One IKE endpoint's configuration.
#[derive(Debug)]
pub struct Config {
    /// Whether this end starts the IKE SA (and restarts it after a failure).
    pub initiator: bool,
    /// Our identity.
    pub local_id: Identity,
    /// The identity the peer must prove.
    pub remote_id: Identity,
    /// PSK or certificates.
    pub creds: Credentials,
    /// IKE proposals in preference order.
    pub ike_proposals: Vec<Proposal>,
    /// ESP proposals in preference order.
    pub esp_proposals: Vec<Proposal>,
    /// A fresh Diffie-Hellman exchange in every CHILD_SA rekey (perfect forward secrecy).
    pub pfs: bool,
    /// Traffic we protect (our side).
    pub local_ts: Vec<TrafficSelector>,
    /// Traffic we protect (peer's side).
    pub remote_ts: Vec<TrafficSelector>,
    /// Rekeying.
    pub lifetimes: Lifetimes,
    /// Dead-peer detection: an empty INFORMATIONAL after this long without hearing
    /// from the peer (IKE or ESP); none if `None`.
    pub dpd: Option<Duration>,
    /// Retransmission.
    pub retransmit: Retransmit,
    /// Half-open bounds.
    pub half_open: HalfOpen,
    /// How long an inbound SA stays installed after it was replaced (packets still in
    /// flight on the old SA are decrypted).
    pub grace: Duration,
    /// How long an initiator waits before starting again after a failure.
    pub restart_after: Duration,
    /// Our underlay address (NAT detection, cookies).
    pub local: SocketAddr,
    /// The peer's underlay address.
    pub remote: SocketAddr,
}

/// Parses an identity the way strongSwan writes them: an IPv4/IPv6 address, `@name` or
/// a bare domain name (FQDN), `user@domain` (RFC 822).
pub fn parse_identity(s: &str) -> Result<Identity, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty identity".into());
    }
    if let Ok(ip) = s.parse::<std::net::IpAddr>() {
        return Ok(match ip {
            std::net::IpAddr::V4(v) => Identity {
                ty: idtype::IPV4_ADDR,
                data: v.octets().to_vec(),
            },
            std::net::IpAddr::V6(v) => Identity {
                ty: idtype::IPV6_ADDR,
                data: v.octets().to_vec(),
            },
        });
    }
    if let Some(name) = s.strip_prefix('@') {
        if name.is_empty() {
            return Err("empty FQDN identity".into());
        }
        return Ok(Identity {
            ty: idtype::FQDN,
            data: name.as_bytes().to_vec(),
        });
    }
    if s.contains('=') {
        return Err(format!(
            "`{s}`: distinguished-name identities are not supported; use an FQDN, an address or user@domain"
        ));
    }
    let ty = if s.contains('@') {
        idtype::RFC822_ADDR
    } else {
        idtype::FQDN
    };
    Ok(Identity {
        ty,
        data: s.as_bytes().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities() {
        assert_eq!(parse_identity("10.0.0.1").unwrap().ty, idtype::IPV4_ADDR);
        assert_eq!(parse_identity("@edge").unwrap().data, b"edge");
        assert_eq!(parse_identity("edge.nfx").unwrap().ty, idtype::FQDN);
        assert_eq!(parse_identity("a@b.c").unwrap().ty, idtype::RFC822_ADDR);
        assert!(parse_identity("CN=x").is_err());
        assert!(parse_identity("").is_err());
        assert!(parse_identity("@").is_err());
    }
}
