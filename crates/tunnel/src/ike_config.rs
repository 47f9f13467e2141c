//! The `ike:` block of a tunnel configuration and the [`nfx_ike::Config`] built from
//! it. Credential files are named relative to the configuration file's directory;
//! errors name the file and field, never the file's content, and a secret file that
//! other users can read is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nfx_ike::auth::{CertCreds, Credentials};
use nfx_ike::config::parse_identity;
use nfx_ike::consts::proto;
use nfx_ike::crypto::Secret;
use nfx_ike::proposal::{esp_proposal, parse_proposal, EspAlg};
use nfx_ike::ts::TrafficSelector;
use nfx_ike::{HalfOpen, Lifetimes, Retransmit};
use serde::Deserialize;

use crate::config::UnderlayConfig;

/// The `ike:` block as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIke {
    role: String,
    local_id: String,
    remote_id: String,
    #[serde(default)]
    psk_file: Option<PathBuf>,
    #[serde(default)]
    cert: Option<PathBuf>,
    #[serde(default)]
    key: Option<PathBuf>,
    #[serde(default)]
    ca: Option<PathBuf>,
    #[serde(default = "default_proposals")]
    proposals: Vec<String>,
    #[serde(default = "default_esp")]
    esp: Vec<String>,
    #[serde(default = "yes")]
    esn: bool,
    #[serde(default = "yes")]
    pfs: bool,
    #[serde(default = "default_ts")]
    local_ts: Vec<String>,
    #[serde(default = "default_ts")]
    remote_ts: Vec<String>,
    #[serde(default = "default_ike_lifetime")]
    ike_lifetime_s: f64,
    #[serde(default = "default_child_lifetime")]
    child_lifetime_s: f64,
    #[serde(default)]
    child_rekey_packets: Option<u64>,
    #[serde(default)]
    child_rekey_bytes: u64,
    #[serde(default = "default_dpd")]
    dpd_s: f64,
    #[serde(default = "default_retransmit_ms")]
    retransmit_ms: u64,
    #[serde(default = "default_tries")]
    retransmit_tries: u32,
    #[serde(default = "default_grace_ms")]
    grace_ms: u64,
    #[serde(default = "default_restart")]
    restart_s: f64,
}

fn yes() -> bool {
    true
}
fn default_proposals() -> Vec<String> {
    vec![
        "aes128gcm16-aes256gcm16-prfsha256-x25519-ecp256".into(),
        "aes128-aes256-sha256-x25519-ecp256".into(),
    ]
}
fn default_esp() -> Vec<String> {
    [
        "aes-128-gcm",
        "aes-256-gcm",
        "chacha20-poly1305",
        "aes-128-ctr-hmac-sha256",
    ]
    .map(String::from)
    .to_vec()
}
fn default_ts() -> Vec<String> {
    vec!["0.0.0.0/0".into(), "::/0".into()]
}
fn default_ike_lifetime() -> f64 {
    4.0 * 3600.0
}
fn default_child_lifetime() -> f64 {
    3600.0
}
fn default_dpd() -> f64 {
    30.0
}
fn default_retransmit_ms() -> u64 {
    500
}
fn default_tries() -> u32 {
    6
}
fn default_grace_ms() -> u64 {
    2000
}
fn default_restart() -> f64 {
    5.0
}

/// A field name and what is wrong with it.
type FieldError = (String, String);

fn bad(f: &str, why: impl Into<String>) -> FieldError {
    (f.to_string(), why.into())
}

/// Reads a credential file named relative to `dir`; `secret` files must not be
/// readable by other users. Errors quote the path, never the content.
fn read_file(dir: &Path, f: &str, p: &Path, secret: bool) -> Result<Vec<u8>, FieldError> {
    let path = dir.join(p);
    let meta = std::fs::metadata(&path).map_err(|e| bad(f, format!("{}: {e}", path.display())))?;
    if secret && meta.permissions().mode() & 0o077 != 0 {
        return Err(bad(
            f,
            format!(
                "{} is readable by other users (chmod 600 it)",
                path.display()
            ),
        ));
    }
    if meta.len() > 1 << 20 {
        return Err(bad(f, format!("{} is larger than 1 MiB", path.display())));
    }
    std::fs::read(&path).map_err(|e| bad(f, format!("{}: {e}", path.display())))
}

fn credentials(r: &RawIke, dir: &Path) -> Result<Credentials, FieldError> {
    match (&r.psk_file, &r.cert, &r.key, &r.ca) {
        (Some(p), None, None, None) => {
            let raw = Secret::new(read_file(dir, "psk_file", p, true)?);
            let text = raw.expose();
            let end = text
                .iter()
                .rposition(|b| !b.is_ascii_whitespace())
                .map_or(0, |i| i + 1);
            if end < 16 {
                return Err(bad("psk_file", "the key must be at least 16 bytes"));
            }
            Ok(Credentials::Psk(Secret::from_slice(&text[..end])))
        }
        (None, Some(c), Some(k), Some(a)) => {
            let cert = read_file(dir, "cert", c, false)?;
            let key = Secret::new(read_file(dir, "key", k, true)?);
            let ca = read_file(dir, "ca", a, false)?;
            CertCreds::from_pem(&cert, key.expose(), &ca)
                .map(Credentials::Cert)
                .map_err(|e| bad("cert", e))
        }
        _ => Err(bad(
            "psk_file",
            "give either `psk_file` or all of `cert`, `key` and `ca`",
        )),
    }
}

fn esp_alg(name: &str) -> Result<EspAlg, FieldError> {
    Ok(match name {
        "aes-128-gcm" => EspAlg::AesGcm128,
        "aes-256-gcm" => EspAlg::AesGcm256,
        "chacha20-poly1305" => EspAlg::ChaCha20Poly1305,
        "aes-128-ctr-hmac-sha256" => EspAlg::AesCtr128HmacSha256,
        n if n.starts_with("present") => {
            return Err(bad(
                "esp",
                format!("{n} is a private transform: static keys only"),
            ))
        }
        n => {
            return Err(bad(
                "esp",
                format!("`{n}` is not an ESP transform nfx negotiates"),
            ))
        }
    })
}

/// Longest interval a configuration may give (about 31 years): far beyond any lifetime
/// or timer, and small enough that the endpoint's deadline arithmetic cannot overflow.
const MAX_SECS: f64 = 1e9;

fn secs(f: &str, v: f64, min: f64) -> Result<Duration, FieldError> {
    if !(v.is_finite() && (min..=MAX_SECS).contains(&v)) {
        return Err(bad(
            f,
            format!("{v} is not a number of seconds in {min}..={MAX_SECS}"),
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

fn selectors(f: &str, v: &[String]) -> Result<Vec<TrafficSelector>, FieldError> {
    if v.is_empty() {
        return Err(bad(f, "needs at least one CIDR block"));
    }
    v.iter()
        .map(|s| TrafficSelector::cidr(s).map_err(|e| bad(f, e)))
        .collect()
}

/// Builds the IKE endpoint configuration (`dir`: the configuration file's directory).
pub fn build(
    r: &RawIke,
    dir: &Path,
    underlay: &UnderlayConfig,
) -> Result<nfx_ike::Config, FieldError> {
    let initiator = match r.role.as_str() {
        "initiator" => true,
        "responder" => false,
        o => return Err(bad("role", format!("`{o}` is not initiator or responder"))),
    };
    if r.proposals.is_empty() || r.esp.is_empty() {
        return Err(bad(
            "proposals",
            "need at least one IKE and one ESP proposal",
        ));
    }
    let ike_proposals = r
        .proposals
        .iter()
        .map(|p| parse_proposal(p, proto::IKE).map_err(|e| bad("proposals", e)))
        .collect::<Result<_, _>>()?;
    let esp_proposals = r
        .esp
        .iter()
        .map(|n| esp_alg(n).map(|a| esp_proposal(a, r.esn)))
        .collect::<Result<_, _>>()?;
    let dpd = match r.dpd_s {
        0.0 => None,
        d => Some(secs("dpd_s", d, 0.1)?),
    };
    if !(1..=20).contains(&r.retransmit_tries) || !(10..=60_000).contains(&r.retransmit_ms) {
        return Err(bad(
            "retransmit_ms",
            "retransmit_ms 10..=60000, retransmit_tries 1..=20",
        ));
    }
    Ok(nfx_ike::Config {
        initiator,
        local_id: parse_identity(&r.local_id).map_err(|e| bad("local_id", e))?,
        remote_id: parse_identity(&r.remote_id).map_err(|e| bad("remote_id", e))?,
        creds: credentials(r, dir)?,
        ike_proposals,
        esp_proposals,
        pfs: r.pfs,
        local_ts: selectors("local_ts", &r.local_ts)?,
        remote_ts: selectors("remote_ts", &r.remote_ts)?,
        lifetimes: Lifetimes {
            ike: secs("ike_lifetime_s", r.ike_lifetime_s, 1.0)?,
            child: secs("child_lifetime_s", r.child_lifetime_s, 0.5)?,
            child_packets: r
                .child_rekey_packets
                .unwrap_or(nfx_ike::config::DEFAULT_CHILD_PACKETS),
            child_bytes: r.child_rekey_bytes,
            jitter: 0.1,
        },
        dpd,
        retransmit: Retransmit {
            timeout: Duration::from_millis(r.retransmit_ms),
            backoff: 1.8,
            tries: r.retransmit_tries,
        },
        half_open: HalfOpen::default(),
        grace: Duration::from_millis(r.grace_ms),
        restart_after: secs("restart_s", r.restart_s, 0.1)?,
        local: underlay.local,
        remote: underlay.peer,
    })
}
