//! The YAML configuration of one tunnel endpoint (`nfx tunnel --config FILE`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use nfx_accel::{Alg, AlgFamily, EngineKind, SecretBytes};
use serde::Deserialize;
use zeroize::Zeroizing;

use crate::esp::SaKeys;
use crate::ike_config::{self, RawIke};

/// Errors of a configuration file, naming the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: {err}")]
    Io {
        /// The file.
        file: PathBuf,
        /// What went wrong.
        err: std::io::Error,
    },
    /// YAML syntax, an unknown field or a wrong type.
    #[error("{file}: {err}")]
    Syntax {
        /// The file.
        file: PathBuf,
        /// The parser's message (names the field and line).
        err: serde_yaml_ng::Error,
    },
    /// A field has a value that is not allowed.
    #[error("{file}: field `{field}`: {why}")]
    Field {
        /// The file.
        file: PathBuf,
        /// The field path.
        field: String,
        /// What is wrong.
        why: String,
    },
}

/// One direction's SA as written in the file (keys as hex strings).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSa {
    /// Security Parameters Index (non-zero, not 1..=255 which are reserved).
    pub spi: u32,
    /// Cipher key followed by the 4-byte salt/nonce, hex.
    pub key: String,
    /// HMAC-SHA-256 key (hex) for the CTR+HMAC transforms.
    #[serde(default)]
    pub auth_key: Option<String>,
}

/// The TUN side.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct TunConfig {
    /// Interface name (≤ 15 bytes).
    pub name: String,
    /// Address with prefix put on the interface, e.g. `192.168.77.1/30`.
    pub address: String,
    /// Inner MTU; default: underlay MTU minus the tunnel overhead.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Packets the kernel queues on the TUN for the worker to read (its `txqueuelen`):
    /// deep enough that a stream survives the worker being descheduled for a while on
    /// a busy machine (the kernel default, 500, is 50 ms at 10,000 packets/s).
    #[serde(default = "default_queue_len")]
    pub queue_len: u32,
}

fn default_queue_len() -> u32 {
    4096
}

/// The UDP underlay (RFC 3948).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct UnderlayConfig {
    /// Local address:port to bind (port 4500 by convention).
    pub local: SocketAddr,
    /// The peer endpoint's address:port.
    pub peer: SocketAddr,
    /// MTU of the underlay path (default 1500).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
}

fn default_mtu() -> u32 {
    1500
}

fn default_window() -> u64 {
    1024
}

fn default_batch() -> usize {
    64
}

fn default_offload() -> bool {
    true
}

/// Most packet worker threads an endpoint runs.
pub const MAX_THREADS: usize = 8;

/// The CPUs the process may run on (affinity and cgroup quota), at most `MAX_THREADS`.
fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: String,
    #[serde(default)]
    netns: Option<String>,
    #[serde(default)]
    em_listen: Option<SocketAddr>,
    #[serde(default)]
    em_token_file: Option<PathBuf>,
    #[serde(default)]
    engine: Option<String>,
    #[serde(default)]
    lookaside: Option<PathBuf>,
    #[serde(default)]
    lookaside_dir: Option<PathBuf>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default)]
    esn: bool,
    #[serde(default = "default_window")]
    replay_window: u64,
    #[serde(default = "default_batch")]
    batch: usize,
    #[serde(default = "default_offload")]
    offload: bool,
    #[serde(default)]
    threads: Option<usize>,
    tun: TunConfig,
    underlay: UnderlayConfig,
    #[serde(default)]
    ike: Option<RawIke>,
    #[serde(default)]
    insecure_static_keys: bool,
    #[serde(default)]
    seq_state: Option<PathBuf>,
    #[serde(default = "default_seq_block")]
    seq_block: u64,
    #[serde(default)]
    outbound: Option<RawSa>,
    #[serde(default)]
    inbound: Option<RawSa>,
}

fn default_seq_block() -> u64 {
    1 << 22
}

/// Keys typed into the configuration (`insecure_static_keys: true`).
pub struct StaticKeys {
    /// The transform.
    pub alg: Alg,
    /// 64-bit extended sequence numbers.
    pub esn: bool,
    /// Outbound SA.
    pub outbound: SaKeys,
    /// Inbound SA.
    pub inbound: SaKeys,
    /// Where the outbound sequence reservation is kept across restarts.
    pub seq_state: PathBuf,
    /// Sequence numbers reserved per write of the state file.
    pub seq_block: u64,
}

/// Where the SA keys come from.
pub enum Keying {
    /// IKEv2 negotiates them (the default).
    Ike(Box<nfx_ike::Config>),
    /// Typed into the file, sequence numbers persisted.
    Static(StaticKeys),
}

/// A validated endpoint configuration.
pub struct Config {
    /// Endpoint name (reported by the EM).
    pub name: String,
    /// Network namespace to run the data path in.
    pub netns: Option<String>,
    /// Where the EM HTTP endpoint listens (bound before entering `netns`).
    pub em_listen: Option<SocketAddr>,
    /// The EM's bearer token (from `em_token_file`; required with `em_listen`).
    pub em_token: Option<Zeroizing<String>>,
    /// The software engine (`soft` or `cpu`), also the lookaside fallback.
    pub engine: EngineKind,
    /// A lookaside device socket to attach at start.
    pub lookaside: Option<PathBuf>,
    /// The directory lookaside device sockets must lie in (at start and for
    /// `POST /accelerator/use`); `None`: the socket's own directory, if private.
    pub lookaside_dir: Option<PathBuf>,
    /// Anti-replay window size.
    pub replay_window: u64,
    /// Packets per crypto batch.
    pub batch: usize,
    /// Packet worker threads (`threads`; default: the CPUs this process may run on,
    /// at most 8). One thread: it serves both directions. More: one receives and
    /// decrypts, each of the others reads one queue of a multi-queue TUN and encrypts.
    pub threads: usize,
    /// Kernel offloads: TUN vnet header with TSO/USO/checksum, UDP GSO/GRO, receive
    /// coalescing (`false`: one syscall per packet, the old path, for comparison).
    pub offload: bool,
    /// TUN settings.
    pub tun: TunConfig,
    /// Underlay settings.
    pub underlay: UnderlayConfig,
    /// SA keys: IKE or static.
    pub keying: Keying,
}

/// Decodes a hex string into zeroized key bytes (`None` on a bad digit or odd length).
pub fn parse_hex(s: &str) -> Option<SecretBytes> {
    let s = s.trim();
    let s = s.strip_prefix("0x").unwrap_or(s);
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 2);
    for pair in s.as_bytes().chunks(2) {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out.push((hi * 16 + lo) as u8);
    }
    Some(SecretBytes::new(out))
}

/// Validates the static-key part of a file without an `ike:` block.
fn static_keys(
    raw: &RawConfig,
    path: &Path,
    field: &dyn Fn(&str, String) -> ConfigError,
) -> Result<StaticKeys, ConfigError> {
    if !raw.insecure_static_keys {
        return Err(field(
            "ike",
            "missing: SAs are negotiated with IKE; typed-in keys need `insecure_static_keys: true` \
             and `seq_state: FILE` (a restart would repeat AES-GCM/ChaCha20 nonces otherwise)"
                .into(),
        ));
    }
    let seq_state = raw.seq_state.as_ref().ok_or_else(|| {
        field(
            "seq_state",
            "required with insecure_static_keys: the file that keeps sequence numbers (nonces) from repeating across restarts".into(),
        )
    })?;
    let seq_state = path.parent().unwrap_or(Path::new(".")).join(seq_state);
    if !(1..=1 << 32).contains(&raw.seq_block) {
        return Err(field(
            "seq_block",
            format!("{} is not in 1..=2^32", raw.seq_block),
        ));
    }
    let alg_name = raw
        .alg
        .as_deref()
        .ok_or_else(|| field("alg", "required with static keys".into()))?;
    let alg: Alg = alg_name.parse().map_err(|e| field("alg", format!("{e}")))?;
    if matches!(alg.family(), AlgFamily::Digest | AlgFamily::Cipher) {
        return Err(field(
            "alg",
            format!("{alg} is not an ESP transform (it has no integrity check)"),
        ));
    }
    if raw.esn && alg.family() == AlgFamily::CtrHmac {
        return Err(field(
            "esn",
            format!("{alg}: extended sequence numbers are supported with the AEAD transforms only"),
        ));
    }
    let sa = |name: &str, r: Option<&RawSa>| -> Result<SaKeys, ConfigError> {
        let r = r.ok_or_else(|| field(name, "required with static keys".into()))?;
        if r.spi < 256 {
            return Err(field(
                &format!("{name}.spi"),
                format!("{} is reserved (SPIs 0..=255)", r.spi),
            ));
        }
        let key = parse_hex(&r.key)
            .ok_or_else(|| field(&format!("{name}.key"), "not a hex string".into()))?;
        let auth = match &r.auth_key {
            Some(h) => Some(
                parse_hex(h)
                    .ok_or_else(|| field(&format!("{name}.auth_key"), "not a hex string".into()))?,
            ),
            None => None,
        };
        SaKeys::new(alg, r.spi, &key, auth.as_ref())
            .map_err(|why| field(&format!("{name}.key"), why))
    };
    Ok(StaticKeys {
        alg,
        esn: raw.esn,
        outbound: sa("outbound", raw.outbound.as_ref())?,
        inbound: sa("inbound", raw.inbound.as_ref())?,
        seq_state,
        seq_block: raw.seq_block,
    })
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Io {
            file: path.into(),
            err,
        })?;
        Config::parse(path, &text)
    }

    /// Parses and validates YAML text (`path` only names the file in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = serde_yaml_ng::from_str(text).map_err(|err| ConfigError::Syntax {
            file: path.into(),
            err,
        })?;
        let field = |field: &str, why: String| ConfigError::Field {
            file: path.into(),
            field: field.into(),
            why,
        };
        let engine = match raw.engine.as_deref().unwrap_or("cpu") {
            "soft" => EngineKind::Soft,
            "cpu" => EngineKind::Cpu,
            other => {
                return Err(field(
                    "engine",
                    format!("`{other}` is not a software engine (soft, cpu); use `lookaside: SOCKET` for the device"),
                ))
            }
        };
        if raw.batch == 0 || raw.batch > 256 {
            return Err(field("batch", format!("{} is not in 1..=256", raw.batch)));
        }
        let threads = match raw.threads {
            Some(n @ 1..=MAX_THREADS) => n,
            Some(n) => return Err(field("threads", format!("{n} is not in 1..={MAX_THREADS}"))),
            None => default_threads(),
        };
        if raw.replay_window < 64 || raw.replay_window > 65536 {
            return Err(field(
                "replay_window",
                format!("{} is not in 64..=65536", raw.replay_window),
            ));
        }
        if raw.tun.name.is_empty() || raw.tun.name.len() > 15 {
            return Err(field("tun.name", "must be 1..=15 bytes".into()));
        }
        if !(16..=65536).contains(&raw.tun.queue_len) {
            return Err(field(
                "tun.queue_len",
                format!("{} is not in 16..=65536", raw.tun.queue_len),
            ));
        }
        if !(576..=65535).contains(&raw.underlay.mtu) {
            return Err(field(
                "underlay.mtu",
                format!("{} is not in 576..=65535", raw.underlay.mtu),
            ));
        }
        let keying = if let Some(ike) = &raw.ike {
            for (set, name) in [
                (raw.alg.is_some(), "alg"),
                (raw.outbound.is_some(), "outbound"),
                (raw.inbound.is_some(), "inbound"),
                (raw.insecure_static_keys, "insecure_static_keys"),
                (raw.seq_state.is_some(), "seq_state"),
                (raw.esn, "esn"),
            ] {
                if set {
                    return Err(field(
                        name,
                        "static-key settings do not go with an `ike:` block (IKE negotiates the SAs; ESN: `ike.esn`)".into(),
                    ));
                }
            }
            let dir = path.parent().unwrap_or(Path::new("."));
            Keying::Ike(Box::new(
                ike_config::build(ike, dir, &raw.underlay)
                    .map_err(|(f, why)| field(&format!("ike.{f}"), why))?,
            ))
        } else {
            Keying::Static(static_keys(&raw, path, &field)?)
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let em_token = match (&raw.em_listen, &raw.em_token_file) {
            (Some(_), None) => {
                return Err(field(
                    "em_token_file",
                    "required with `em_listen`: every element-manager call needs the bearer token in this file".into(),
                ))
            }
            (_, Some(f)) => Some(
                nfx_io::token::read_file(&dir.join(f)).map_err(|why| field("em_token_file", why))?,
            ),
            (None, None) => None,
        };
        let cfg = Config {
            name: raw.name,
            netns: raw.netns,
            em_listen: raw.em_listen,
            em_token,
            engine,
            lookaside: raw.lookaside,
            lookaside_dir: raw.lookaside_dir.map(|d| dir.join(d)),
            replay_window: raw.replay_window,
            batch: raw.batch,
            threads,
            offload: raw.offload,
            tun: raw.tun,
            underlay: raw.underlay,
            keying,
        };
        let mtu = cfg.inner_mtu();
        if mtu < 68 {
            return Err(field(
                "tun.mtu",
                format!("{mtu} is below the IPv4 minimum 68"),
            ));
        }
        if let Some(m) = cfg.tun.mtu {
            if m > cfg.max_inner_mtu() {
                return Err(field(
                    "tun.mtu",
                    format!(
                        "{m} does not fit the underlay MTU {} with {} bytes of tunnel overhead (max {})",
                        cfg.underlay.mtu,
                        cfg.underlay.mtu - cfg.max_inner_mtu(),
                        cfg.max_inner_mtu()
                    ),
                ));
            }
        }
        Ok(cfg)
    }

    /// Largest inner packet that fits one underlay packet (outer IPv4 + UDP + ESP
    /// header + IV + worst-case padding + trailer + ICV).
    pub fn max_inner_mtu(&self) -> u32 {
        let overhead = 20 + 8 + crate::esp::OVERHEAD as u32 + 3;
        let m = self.underlay.mtu.saturating_sub(overhead);
        m - m % 4
    }

    /// The MTU put on the TUN device.
    pub fn inner_mtu(&self) -> u32 {
        self.tun.mtu.unwrap_or_else(|| self.max_inner_mtu())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "
name: t1
alg: aes-128-gcm
tun: {name: esp0, address: 192.168.77.1/30}
underlay: {local: '10.0.0.1:4500', peer: '10.0.0.2:4500'}
outbound: {spi: 0x1001, key: '000102030405060708090a0b0c0d0e0f10111213'}
inbound: {spi: 0x1002, key: '000102030405060708090a0b0c0d0e0f10111213'}
insecure_static_keys: true
seq_state: t.seq
";

    fn err(text: &str) -> String {
        match Config::parse(Path::new("t.yaml"), text) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_defaults() {
        let c = Config::parse(Path::new("t.yaml"), OK).unwrap();
        assert_eq!(c.engine, EngineKind::Cpu);
        assert_eq!(c.underlay.mtu, 1500);
        assert_eq!(c.inner_mtu(), 1432);
        assert_eq!(c.batch, 64);
        assert_eq!(c.tun.queue_len, 4096);
        assert!(c.offload, "offloads are on by default");
        let c = Config::parse(Path::new("t.yaml"), &format!("{OK}offload: false\n")).unwrap();
        assert!(!c.offload);
        let e = err(&format!("{OK}offload: maybe\n"));
        assert!(e.contains("t.yaml") && e.contains("offload"), "{e}");
    }

    #[test]
    fn errors_name_file_and_field() {
        let e = err(&OK.replace("aes-128-gcm", "rot13"));
        assert!(e.contains("t.yaml") && e.contains("`alg`"), "{e}");
        let e = err(&OK.replace("0x1001", "5"));
        assert!(e.contains("outbound.spi"), "{e}");
        let e = err(&OK.replace("0f10111213'}\ninbound", "0f101112'}\ninbound"));
        assert!(e.contains("outbound.key"), "{e}");
        let e = err(&format!("{OK}bogus: 1\n"));
        assert!(e.contains("bogus"), "{e}");
        let e = err(&format!("{OK}engine: lookaside\n"));
        assert!(e.contains("`engine`"), "{e}");
        let e = err(&OK.replace(
            "address: 192.168.77.1/30",
            "address: 192.168.77.1/30, mtu: 1480",
        ));
        assert!(e.contains("tun.mtu"), "{e}");
        let e = err(&OK.replace(
            "address: 192.168.77.1/30",
            "address: 192.168.77.1/30, queue_len: 8",
        ));
        assert!(e.contains("tun.queue_len"), "{e}");
        let e = err(&OK.replace(
            "'000102030405060708090a0b0c0d0e0f10111213'}\ninbound",
            "'zz'}\ninbound",
        ));
        assert!(e.contains("hex"), "{e}");
        let e = err(&format!("{OK}em_listen: '127.0.0.1:7301'\n"));
        assert!(e.contains("em_token_file") && e.contains("required"), "{e}");
        let e = err(&format!(
            "{OK}em_listen: '127.0.0.1:7301'\nem_token_file: /nonexistent/em.token\n"
        ));
        assert!(e.contains("/nonexistent/em.token"), "{e}");
    }

    #[test]
    fn static_keys_need_the_flag_and_a_sequence_state() {
        let e = err(&OK.replace("insecure_static_keys: true\n", ""));
        assert!(
            e.contains("`ike`") && e.contains("insecure_static_keys"),
            "{e}"
        );
        let e = err(&OK.replace("seq_state: t.seq\n", ""));
        assert!(e.contains("seq_state"), "{e}");
        let c = Config::parse(Path::new("/etc/nfx/t.yaml"), OK).unwrap();
        match c.keying {
            Keying::Static(k) => assert_eq!(k.seq_state, Path::new("/etc/nfx/t.seq")),
            Keying::Ike(_) => panic!("static expected"),
        }
    }

    fn ike_dir(tag: &str, psk: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("nfx-ikecfg-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("t.psk");
        std::fs::write(&p, psk).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        d
    }

    const IKE: &str = "
name: t1
tun: {name: esp0, address: 192.168.77.1/30}
underlay: {local: '10.0.0.1:4500', peer: '10.0.0.2:4500'}
ike: {role: initiator, local_id: a.nfx, remote_id: b.nfx, psk_file: t.psk}
";

    #[test]
    fn ike_block_reads_the_psk_next_to_the_file() {
        let d = ike_dir("ok", "a-long-enough-secret-key\n", 0o600);
        let c = Config::parse(&d.join("t.yaml"), IKE).unwrap();
        let Keying::Ike(ike) = c.keying else {
            panic!("IKE expected")
        };
        assert!(ike.initiator);
        assert_eq!(ike.esp_proposals.len(), 4);
        assert!(format!("{:?}", ike.creds).contains("redacted"));
        // Static-key fields do not mix with IKE.
        let e = Config::parse(&d.join("t.yaml"), &format!("{IKE}alg: aes-128-gcm\n"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("`alg`"), "{e}");
        let e = Config::parse(&d.join("t.yaml"), &IKE.replace("initiator", "boss"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("ike.role"), "{e}");
        let e = Config::parse(
            &d.join("t.yaml"),
            &IKE.replace(
                "psk_file: t.psk",
                "psk_file: t.psk, esp: [present-80-ctr-hmac-sha256]",
            ),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            e.contains("ike.esp") && e.contains("static keys only"),
            "{e}"
        );
    }

    #[test]
    fn intervals_past_the_limit_are_an_error_not_a_panic() {
        let d = ike_dir("secs", "a-long-enough-secret-key\n", 0o600);
        for (field, value) in [
            ("dpd_s", "1e30"),
            ("ike_lifetime_s", "1e300"),
            ("child_lifetime_s", "2e9"),
            ("restart_s", ".inf"),
        ] {
            let text = IKE.replace(
                "psk_file: t.psk",
                &format!("psk_file: t.psk, {field}: {value}"),
            );
            let e = Config::parse(&d.join("t.yaml"), &text)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(&format!("ike.{field}")), "{e}");
        }
    }

    #[test]
    fn psk_file_errors_never_show_the_key() {
        let d = ike_dir("short", "short-SECRET", 0o600);
        let e = Config::parse(&d.join("t.yaml"), IKE)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("ike.psk_file") && e.contains("16 bytes") && !e.contains("SECRET"),
            "{e}"
        );
        let d = ike_dir("mode", "a-long-enough-SECRET-key", 0o644);
        let e = Config::parse(&d.join("t.yaml"), IKE)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("chmod 600") && !e.contains("SECRET"), "{e}");
        let e = Config::parse(&d.join("t.yaml"), &IKE.replace("t.psk", "missing.psk"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("missing.psk"), "{e}");
    }

    #[test]
    fn example_configs_parse() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/tunnel");
        let d = ike_dir("examples", "an-example-pre-shared-key-0123", 0o600);
        std::fs::rename(d.join("t.psk"), d.join("tunnel.psk")).unwrap();
        std::fs::write(d.join("em.token"), "an-example-em-token").unwrap();
        for f in ["edge.yaml", "cloud.yaml", "present.yaml"] {
            let text = std::fs::read_to_string(root.join(f)).unwrap();
            Config::parse(&d.join(f), &text).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }

    #[test]
    fn hex_parsing() {
        assert_eq!(parse_hex("0x0aFf").unwrap().expose(), &[10, 255]);
        assert!(parse_hex("abc").is_none());
        assert!(parse_hex("zz").is_none());
    }
}
