//! Fuzz target: a tunnel endpoint's configuration file (`nfx tunnel --config FILE`,
//! read as root; a host agent writes one per endpoint, an operator writes their own).
//! Whatever the text, parsing gives a configuration whose values are all within their
//! documented ranges, or an error that names the file; never a panic. The file's
//! directory is a scratch directory holding the files a configuration names: a PSK
//! file, a token file, PEM files, a world-readable PSK file and files holding a canary.
//! No error ever shows the canary unless the text itself holds it (errors quote paths,
//! never a credential's content).
//!
//! Input: the YAML text.
#![no_main]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nfx_tunnel::config::{Config, Keying, MAX_THREADS};

const CANARY: &str = "NFXCANARY";

/// The scratch directory and the configuration file's path in it.
fn config_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("nfx-fuzz-tunnel-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let canary_line = format!("{CANARY}-{CANARY}-{CANARY}\n");
        let files: [(&str, &str, u32); 8] = [
            ("tunnel.psk", "an-example-pre-shared-key-0123", 0o600),
            ("em.token", "an-example-em-token", 0o600),
            ("canary.psk", &canary_line, 0o600),
            ("shared.psk", &canary_line, 0o644),
            ("canary.pem", &canary_line, 0o600),
            ("short.psk", "short", 0o600),
            (
                "cert.pem",
                "-----BEGIN CERTIFICATE-----\nNFXCANARY\n-----END CERTIFICATE-----\n",
                0o644,
            ),
            ("empty", "", 0o600),
        ];
        for (name, text, mode) in files {
            let p = dir.join(name);
            std::fs::write(&p, text).expect("scratch file");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("mode");
        }
        dir.join("tunnel.yaml")
    })
}

/// The ranges `Config` documents for what it accepts.
fn check(cfg: &Config) {
    assert!((1..=256).contains(&cfg.batch), "batch {}", cfg.batch);
    assert!(
        (1..=MAX_THREADS).contains(&cfg.threads),
        "threads {}",
        cfg.threads
    );
    assert!((64..=65536).contains(&cfg.replay_window));
    assert!((1..=15).contains(&cfg.tun.name.len()), "tun.name");
    assert!((16..=65536).contains(&cfg.tun.queue_len));
    assert!((576..=65535).contains(&cfg.underlay.mtu));
    let mtu = cfg.inner_mtu();
    assert!(
        mtu >= 68 && mtu <= cfg.max_inner_mtu() && mtu < cfg.underlay.mtu,
        "inner mtu {mtu}"
    );
    assert_eq!(
        cfg.em_listen.is_some() && cfg.em_token.is_none(),
        false,
        "EM without token"
    );
    if let Some(t) = &cfg.em_token {
        assert!(!t.is_empty() && t.trim() == t.as_str(), "token not trimmed");
    }
    match &cfg.keying {
        Keying::Static(k) => {
            assert!((1..=1u64 << 32).contains(&k.seq_block));
            assert!(
                k.inbound.spi >= 256 && k.outbound.spi >= 256,
                "reserved SPI"
            );
        }
        Keying::Ike(ike) => {
            assert!(!ike.ike_proposals.is_empty() && !ike.esp_proposals.is_empty());
            assert!(!ike.local_ts.is_empty() && !ike.remote_ts.is_empty());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path: &Path = config_path();
    match Config::parse(path, text) {
        Ok(cfg) => check(&cfg),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with(&path.display().to_string()),
                "error without the file: {msg}"
            );
            assert!(
                text.contains(CANARY) || !msg.contains(CANARY),
                "an error shows a file's content: {msg}"
            );
        }
    }
});
