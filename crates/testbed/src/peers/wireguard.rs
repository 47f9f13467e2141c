//! WireGuard in userspace between `src` and `dst`: one daemon per end (wireguard-go,
//! or boringtun through the same [`Daemon`] description), keys from `wg genkey`,
//! configured with `wg set` and `ip` inside each namespace.

use super::{
    binary, ping_ok, run_to_file, temp_dir, tool, Endpoints, PeerGuard, Traffic, INNER_DST,
    INNER_SRC,
};
use crate::netns;
use anyhow::Context;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// UDP port both ends listen on (each in its own namespace).
const WG_PORT: u16 = 51820;
/// Where userspace WireGuard daemons put their control sockets (shared by all namespaces).
const UAPI_DIR: &str = "/var/run/wireguard";
/// Inner MTU: 1500 minus WireGuard's 60-byte IPv4 overhead, as wg-quick sets it.
const WG_MTU: &str = "1420";

/// How to run one userspace WireGuard daemon in the foreground.
pub(super) struct Daemon {
    /// Short tag used in interface names (`wg`, `bt`).
    pub short: &'static str,
    /// The program.
    pub program: PathBuf,
    /// Arguments before the interface name.
    pub args: Vec<&'static str>,
}

/// wireguard-go in the foreground. Never give it `--help`: it takes that as an
/// interface name and daemonises.
pub(super) fn go_daemon() -> anyhow::Result<Daemon> {
    Ok(Daemon {
        short: "wg",
        program: binary("wireguard-go")?,
        args: vec!["-f"],
    })
}

/// Interface name of one end: unique per testbed (its subnet base) and daemon, ≤ 15 bytes.
fn ifname(d: &Daemon, tag: u8, end: char) -> String {
    format!("nfx{}{tag}{end}", d.short)
}

/// Writes a fresh private key to `<dir>/<end>.key` and returns its public key.
fn keypair(dir: &Path, end: char) -> anyhow::Result<(PathBuf, String)> {
    let wg = binary("wg")?;
    let key = dir.join(format!("{end}.key"));
    let mut gen = Command::new(&wg);
    gen.arg("genkey");
    run_to_file(gen, &key)?;
    let mut pubk = Command::new(&wg);
    pubk.arg("pubkey")
        .stdin(std::fs::File::open(&key)?)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = crate::process::output_within(pubk, super::TOOL_LIMIT)?;
    let public = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || public.len() != 44 {
        anyhow::bail!(
            "`wg pubkey` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((key, public))
}

/// Starts both ends, configures them and waits until `src` pings `dst`'s inner address.
pub(super) fn start(ep: &Endpoints, d: &Daemon) -> anyhow::Result<PeerGuard> {
    let mut g = PeerGuard::new(temp_dir(d.short)?, Traffic::inner());
    let wg = binary("wg")?;
    let wg = wg.to_str().context("path of wg is not UTF-8")?;
    let program = d.program.to_str().context("daemon path is not UTF-8")?;
    struct End<'a> {
        ns: &'a str,
        letter: char,
        inner: Ipv4Addr,
        peer_inner: Ipv4Addr,
        peer_ip: Ipv4Addr,
    }
    let ends = [
        End {
            ns: &ep.src_ns,
            letter: 's',
            inner: INNER_SRC,
            peer_inner: INNER_DST,
            peer_ip: ep.dst_ip,
        },
        End {
            ns: &ep.dst_ns,
            letter: 'd',
            inner: INNER_DST,
            peer_inner: INNER_SRC,
            peer_ip: ep.src_ip,
        },
    ];
    let keys = [
        keypair(g.dir(), ends[0].letter)?,
        keypair(g.dir(), ends[1].letter)?,
    ];
    let mut logs = Vec::new();
    for e in &ends {
        let name = ifname(d, ep.tag, e.letter);
        let sock = PathBuf::from(UAPI_DIR).join(format!("{name}.sock"));
        // A socket left by a killed earlier run of this same testbed would be reused.
        let _ = std::fs::remove_file(&sock);
        g.links.push((e.ns.to_string(), name.clone()));
        g.files.push(sock.clone());
        let log = format!("{}-{}.log", d.short, e.letter);
        let mut args: Vec<&str> = vec![program];
        args.extend(d.args.iter().copied());
        args.push(&name);
        let env = [("WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD", "1")];
        let i = g.spawn(e.ns, &args, &env, &log)?;
        let (ns, n) = (e.ns.to_string(), name.clone());
        g.wait_ready(&format!("{name} in {}", e.ns), &[(i, &log)], || {
            sock.exists() && netns::ip(&ns, &["link", "show", "dev", &n]).is_ok()
        })?;
        logs.push((i, log));
    }
    for (e, other) in ends.iter().zip([1, 0]) {
        let name = ifname(d, ep.tag, e.letter);
        let key = keys[if e.letter == 's' { 0 } else { 1 }]
            .0
            .to_str()
            .context("temp path is not UTF-8")?
            .to_string();
        let (port, endpoint, allowed) = (
            WG_PORT.to_string(),
            format!("{}:{WG_PORT}", e.peer_ip),
            format!("{}/32", e.peer_inner),
        );
        tool(&[
            "ip",
            "netns",
            "exec",
            e.ns,
            wg,
            "set",
            &name,
            "listen-port",
            &port,
            "private-key",
            &key,
            "peer",
            &keys[other].1,
            "endpoint",
            &endpoint,
            "allowed-ips",
            &allowed,
        ])?;
        let addr = format!("{}/24", e.inner);
        netns::ip(e.ns, &["addr", "add", &addr, "dev", &name])?;
        netns::ip(e.ns, &["link", "set", "dev", &name, "mtu", WG_MTU, "up"])?;
    }
    let logs: Vec<(usize, &str)> = logs.iter().map(|(i, l)| (*i, l.as_str())).collect();
    let src = ep.src_ns.clone();
    g.wait_ready(
        "WireGuard handshake (ping through the tunnel)",
        &logs,
        || ping_ok(&src, INNER_DST),
    )?;
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_fit_linux_and_differ_per_testbed_and_end() {
        let d = Daemon {
            short: "bt",
            program: PathBuf::from("/x"),
            args: vec![],
        };
        let a = ifname(&d, 254, 's');
        assert_eq!(a, "nfxbt254s");
        assert!(a.len() <= 15);
        assert_ne!(a, ifname(&d, 254, 'd'));
        assert_ne!(a, ifname(&d, 211, 's'));
    }
}
