//! OpenVPN 2.6 between `src` and `dst` in peer-to-peer TLS mode: self-signed EC
//! certificates pinned with `--peer-fingerprint` (static-key mode cannot do AES-GCM),
//! data channel AES-256-GCM, UDP, no DCO (this kernel has none).

use super::{binary, ping_ok, temp_dir, tool, Endpoints, PeerGuard, Traffic, INNER_DST, INNER_SRC};
use anyhow::{bail, Context};
use std::path::Path;

/// UDP port of the `dst` end.
const OVPN_PORT: &str = "1194";
/// The data-channel cipher measured.
const CIPHER: &str = "AES-256-GCM";

/// Makes a self-signed P-256 certificate `<dir>/<name>.crt` with key `<name>.key` and
/// returns its SHA-256 fingerprint (`AA:BB:...`).
fn certificate(dir: &Path, name: &str) -> anyhow::Result<String> {
    let openssl = binary("openssl")?;
    let openssl = openssl.to_str().context("openssl path is not UTF-8")?;
    let crt = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let (crt, key) = (
        crt.to_str().context("temp path is not UTF-8")?,
        key.to_str().context("temp path is not UTF-8")?,
    );
    let subj = format!("/CN=nfx-bench-{name}");
    tool(&[
        openssl,
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "2",
        "-subj",
        &subj,
        "-keyout",
        key,
        "-out",
        crt,
    ])?;
    let out = tool(&[
        openssl,
        "x509",
        "-in",
        crt,
        "-noout",
        "-fingerprint",
        "-sha256",
    ])?;
    parse_fingerprint(&out)
}

/// The fingerprint from `openssl x509 -fingerprint -sha256` output
/// (`sha256 Fingerprint=AB:CD:...`).
fn parse_fingerprint(out: &str) -> anyhow::Result<String> {
    let fp = out
        .split_once('=')
        .map(|(_, f)| f.trim().to_string())
        .context("openssl printed no fingerprint")?;
    let ok = fp.len() == 95
        && fp
            .split(':')
            .all(|b| b.len() == 2 && b.chars().all(|c| c.is_ascii_hexdigit()));
    if !ok {
        bail!("unexpected certificate fingerprint {fp:?}");
    }
    Ok(fp)
}

/// Starts the TLS server end in `dst` and the client end in `src`, and waits until the
/// tunnel passes a ping and both logs show the AES-256-GCM data channel.
pub(super) fn start(ep: &Endpoints) -> anyhow::Result<PeerGuard> {
    let mut g = PeerGuard::new(temp_dir("ovpn")?, Traffic::inner());
    let openvpn = binary("openvpn")?;
    let openvpn = openvpn
        .to_str()
        .context("openvpn path is not UTF-8")?
        .to_string();
    let fp_src = certificate(g.dir(), "src")?;
    let fp_dst = certificate(g.dir(), "dst")?;
    let dir = g.dir().to_path_buf();
    let file = |n: &str| dir.join(n).to_string_lossy().into_owned();
    let (dst_ip, src_in, dst_in) = (
        ep.dst_ip.to_string(),
        INNER_SRC.to_string(),
        INNER_DST.to_string(),
    );
    let common = |dev: String, cert: String, key: String, fp: &str| -> Vec<String> {
        [
            openvpn.as_str(),
            "--dev",
            &dev,
            "--dev-type",
            "tun",
            "--proto",
            "udp",
            "--cert",
            &cert,
            "--key",
            &key,
            "--peer-fingerprint",
            fp,
            "--data-ciphers",
            CIPHER,
            "--cipher",
            CIPHER,
            "--auth-nocache",
            "--verb",
            "3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let dev_dst = format!("nfxov{}d", ep.tag);
    let mut server = common(dev_dst.clone(), file("dst.crt"), file("dst.key"), &fp_src);
    server.extend(
        [
            "--tls-server",
            "--dh",
            "none",
            "--local",
            &dst_ip,
            "--lport",
            OVPN_PORT,
            "--ifconfig",
            &dst_in,
            &src_in,
        ]
        .map(String::from),
    );
    let dev_src = format!("nfxov{}s", ep.tag);
    let mut client = common(dev_src.clone(), file("src.crt"), file("src.key"), &fp_dst);
    client.extend(
        [
            "--tls-client",
            "--remote",
            &dst_ip,
            OVPN_PORT,
            "--nobind",
            "--ifconfig",
            &src_in,
            &dst_in,
        ]
        .map(String::from),
    );
    g.links.push((ep.dst_ns.clone(), dev_dst));
    g.links.push((ep.src_ns.clone(), dev_src));
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let client: Vec<&str> = client.iter().map(String::as_str).collect();
    let s = g.spawn(&ep.dst_ns, &server, &[], "server.log")?;
    let dst_ns = ep.dst_ns.clone();
    g.wait_ready("OpenVPN server socket", &[(s, "server.log")], || {
        crate::netns::listening(&dst_ns, 1194, true).unwrap_or(false)
    })?;
    let c = g.spawn(&ep.src_ns, &client, &[], "client.log")?;
    let logs = [(s, "server.log"), (c, "client.log")];
    let src = ep.src_ns.clone();
    g.wait_ready("OpenVPN tunnel (ping through it)", &logs, || {
        ping_ok(&src, INNER_DST)
    })?;
    for log in ["server.log", "client.log"] {
        let text = std::fs::read_to_string(g.dir().join(log)).unwrap_or_default();
        if !text.contains(&format!("Data Channel: cipher '{CIPHER}'")) {
            bail!(
                "OpenVPN {log} does not show the {CIPHER} data channel: {}",
                g.log_tail(log)
            );
        }
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_parses_and_is_checked() {
        let fp = (0..32)
            .map(|i| format!("{i:02X}"))
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(
            parse_fingerprint(&format!("sha256 Fingerprint={fp}\n")).unwrap(),
            fp
        );
        assert!(parse_fingerprint("no fingerprint").is_err());
        assert!(parse_fingerprint("SHA256 Fingerprint=AB:CD").is_err());
    }
}
