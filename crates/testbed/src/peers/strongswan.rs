//! strongSwan between `src` and `dst`: one charon per end (`charon-systemd` in the
//! foreground, the `kernel-libipsec` plugin doing ESP in userspace over its own TUN, so
//! no kernel IPsec is needed), IKEv2 with a fresh random pre-shared key, AES-128-GCM
//! ESP in UDP on port 4500 (the framing nfx's tunnel uses), configured through each
//! daemon's own vici socket. The inner addresses sit on `lo` (this kernel refuses
//! dummy interfaces); charon routes the peer's inner address through its TUN.

use super::{binary, ping_ok, temp_dir, tool, Endpoints, PeerGuard, Traffic, INNER_DST, INNER_SRC};
use crate::netns;
use anyhow::Context;
use std::net::Ipv4Addr;
use std::path::Path;

/// The plugins charon loads: kernel-libipsec before kernel-netlink (else it would use
/// kernel XFRM, which this machine lacks), `kdf` for key derivation.
const PLUGINS: &str = "random nonce openssl pem pkcs1 x509 pubkey curve25519 aes sha1 sha2 \
                       hmac gcm kdf kernel-libipsec kernel-netlink socket-default vici";

/// One end's strongswan.conf: modular loading off, its own vici socket, routes on.
fn daemon_conf(vici: &Path) -> String {
    format!(
        "charon {{\n  load_modular = no\n  load = {PLUGINS}\n  install_routes = yes\n  \
         plugins {{ vici {{ socket = unix://{} }} }}\n  \
         filelog {{ stderr {{ default = 1 }} }}\n}}\n",
        vici.display()
    )
}

/// One end's swanctl.conf: the connection to the other end and the shared key.
fn conn_conf(
    local: Ipv4Addr,
    peer: Ipv4Addr,
    inner: Ipv4Addr,
    peer_inner: Ipv4Addr,
    psk: &str,
) -> String {
    format!(
        "connections {{ bench {{ version = 2\n encap = yes\n local_addrs = {local}\n \
         remote_addrs = {peer}\n local_port = 4500\n remote_port = 4500\n \
         proposals = aes128gcm16-prfsha256-x25519\n \
         local {{ auth = psk\n id = {inner} }}\n remote {{ auth = psk\n id = {peer_inner} }}\n \
         children {{ c {{ local_ts = {inner}/32\n remote_ts = {peer_inner}/32\n \
         esp_proposals = aes128gcm16-x25519\n mode = tunnel }} }} }} }}\n\
         secrets {{ ike-1 {{ id-1 = {inner}\n id-2 = {peer_inner}\n secret = \"{psk}\" }} }}\n"
    )
}

/// Starts both daemons, loads their configurations, has `src` initiate and waits
/// until `src` pings `dst`'s inner address.
pub(super) fn start(ep: &Endpoints) -> anyhow::Result<PeerGuard> {
    let mut g = PeerGuard::new(temp_dir("strongswan")?, Traffic::inner());
    let charon = binary("charon-systemd")?;
    let charon = charon
        .to_str()
        .context("path of charon-systemd is not UTF-8")?;
    let swanctl = binary("swanctl")?;
    let swanctl = swanctl.to_str().context("path of swanctl is not UTF-8")?;
    let psk = tool(&["openssl", "rand", "-hex", "32"])?.trim().to_string();
    let ends = [
        (&ep.src_ns, 's', ep.src_ip, ep.dst_ip, INNER_SRC, INNER_DST),
        (&ep.dst_ns, 'd', ep.dst_ip, ep.src_ip, INNER_DST, INNER_SRC),
    ];
    let mut logs = Vec::new();
    for &(ns, end, local, peer, inner, peer_inner) in &ends {
        let dir = g.dir().to_path_buf();
        let vici = dir.join(format!("{end}.vici"));
        let conf = dir.join(format!("strongswan-{end}.conf"));
        let swan = dir.join(format!("swanctl-{end}.conf"));
        std::fs::write(&conf, daemon_conf(&vici))?;
        std::fs::write(&swan, conn_conf(local, peer, inner, peer_inner, &psk))?;
        let addr = format!("{inner}/32");
        netns::ip(ns, &["addr", "add", &addr, "dev", "lo"])?;
        g.addrs.push((ns.to_string(), addr, "lo".into()));
        let log = format!("charon-{end}.log");
        let conf_s = conf.to_str().context("temp path is not UTF-8")?;
        let i = g.spawn(ns, &[charon], &[("STRONGSWAN_CONF", conf_s)], &log)?;
        let v = vici.clone();
        g.wait_ready(&format!("charon in {ns}"), &[(i, &log)], || v.exists())?;
        let uri = format!("unix://{}", vici.display());
        let swan_s = swan.to_str().context("temp path is not UTF-8")?;
        let load = [
            "ip",
            "netns",
            "exec",
            ns,
            swanctl,
            "--load-all",
            "--file",
            swan_s,
            "--uri",
            &uri,
        ];
        g.wait_ready(&format!("swanctl --load-all in {ns}"), &[(i, &log)], || {
            tool(&load).is_ok()
        })?;
        logs.push((i, log));
    }
    let uri = format!("unix://{}", g.dir().join("s.vici").display());
    tool(&[
        "ip",
        "netns",
        "exec",
        &ep.src_ns,
        swanctl,
        "--initiate",
        "--child",
        "c",
        "--timeout",
        "10",
        "--uri",
        &uri,
    ])?;
    let logs: Vec<(usize, &str)> = logs.iter().map(|(i, l)| (*i, l.as_str())).collect();
    let src = ep.src_ns.clone();
    g.wait_ready(
        "strongSwan CHILD_SA (ping through the tunnel)",
        &logs,
        || ping_ok(&src, INNER_DST),
    )?;
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_name_both_ends_and_the_nat_t_port() {
        let c = conn_conf(
            Ipv4Addr::new(10, 1, 0, 1),
            Ipv4Addr::new(10, 1, 0, 2),
            INNER_SRC,
            INNER_DST,
            "k",
        );
        for want in [
            "encap = yes",
            "local_port = 4500",
            "remote_addrs = 10.1.0.2",
            "local_ts = 192.168.250.1/32",
            "remote_ts = 192.168.250.2/32",
            "secret = \"k\"",
        ] {
            assert!(c.contains(want), "{want} missing in {c}");
        }
        let d = daemon_conf(Path::new("/tmp/x.vici"));
        assert!(d.contains("kernel-libipsec kernel-netlink") && d.contains("unix:///tmp/x.vici"));
    }
}
