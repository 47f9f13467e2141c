//! SSH local port forwards from `src` to the benchmark servers in `dst`: an sshd or a
//! Dropbear server on a private port in `dst` with fresh host and user keys, and an
//! `ssh -L` / `dbclient -L` in `src` that offers only the chosen cipher and MAC. One
//! forward carries iperf3 (control and data connections), another sockperf.

use super::{binary, run_to_file, temp_dir, tool, Endpoints, PeerGuard, Traffic};
use super::{IPERF_PORT, SOCKPERF_PORT};
use crate::netns;
use anyhow::{bail, Context};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The SSH server's private port in `dst`.
const SSH_PORT: u16 = 2222;
/// Local port in `src` forwarded to iperf3 in `dst`.
const IPERF_FWD: u16 = 15201;
/// Local port in `src` forwarded to sockperf in `dst`.
const SOCKPERF_FWD: u16 = 21111;
/// sshd's privilege-separation directory (Debian's service unit normally makes it).
const PRIVSEP_DIR: &str = "/run/sshd";

/// Which SSH implementation and cipher suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    /// OpenSSH, aes128-gcm@openssh.com.
    OpensshAes128Gcm,
    /// OpenSSH, aes128-ctr + hmac-sha2-256.
    OpensshAes128Ctr,
    /// Dropbear (libtomcrypt, no AES-NI), aes128-ctr + hmac-sha2-256.
    DropbearAes128Ctr,
}

impl Flavor {
    /// (cipher, MAC) as the SSH implementations name them.
    fn suite(self) -> (&'static str, &'static str) {
        match self {
            Flavor::OpensshAes128Gcm => ("aes128-gcm@openssh.com", "hmac-sha2-256"),
            Flavor::OpensshAes128Ctr | Flavor::DropbearAes128Ctr => ("aes128-ctr", "hmac-sha2-256"),
        }
    }

    /// The MAC the negotiation must report (`<implicit>` for an AEAD cipher).
    fn negotiated_mac(self) -> &'static str {
        match self {
            Flavor::OpensshAes128Gcm => "<implicit>",
            _ => self.suite().1,
        }
    }
}

/// Where the benchmark talks: servers on `dst`'s loopback, clients to `src`'s forwards.
fn forwarded() -> Traffic {
    Traffic {
        server_addr: Ipv4Addr::LOCALHOST,
        client_addr: Ipv4Addr::LOCALHOST,
        iperf_server_port: IPERF_PORT,
        iperf_client_port: IPERF_FWD,
        sockperf_server_port: SOCKPERF_PORT,
        sockperf_client_port: SOCKPERF_FWD,
    }
}

/// The two `-L` specifications.
fn forwards() -> [String; 2] {
    [
        format!("127.0.0.1:{IPERF_FWD}:127.0.0.1:{IPERF_PORT}"),
        format!("127.0.0.1:{SOCKPERF_FWD}:127.0.0.1:{SOCKPERF_PORT}"),
    ]
}

/// Renders the sshd configuration: only public-key login from the generated user key,
/// only local forwarding, only the chosen cipher and MAC.
fn sshd_config(listen: Ipv4Addr, dir: &Path, f: Flavor) -> String {
    let (cipher, mac) = f.suite();
    let d = dir.display();
    format!(
        "ListenAddress {listen}:{SSH_PORT}\nHostKey {d}/host_key\nPidFile none\n\
         AuthorizedKeysFile {d}/authorized_keys\nAuthenticationMethods publickey\n\
         PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
         PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nUseDNS no\n\
         AllowTcpForwarding local\nAllowAgentForwarding no\nX11Forwarding no\nPermitTTY no\n\
         Ciphers {cipher}\nMACs {mac}\nCompression no\nLogLevel INFO\n"
    )
}

/// Checks the `kex: client->server cipher: C MAC: M` line of `ssh -v`'s log.
fn check_negotiated(log: &str, f: Flavor) -> anyhow::Result<()> {
    let (cipher, _) = f.suite();
    let want = format!("cipher: {cipher} MAC: {}", f.negotiated_mac());
    let line = log
        .lines()
        .find(|l| l.contains("kex: client->server cipher:"))
        .context("ssh log shows no negotiated cipher")?;
    if !line.contains(&want) {
        bail!("ssh negotiated `{}`, expected `{want}`", line.trim());
    }
    Ok(())
}

/// Root's home directory from `/etc/passwd` text (Dropbear reads authorized keys and
/// known hosts only from there).
fn root_home(passwd: &str) -> Option<String> {
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 7 && f[2] == "0")
        .map(|f| f[5].to_string())
}

/// Makes `<dir>/<name>/.ssh` (mode 0700 as SSH servers demand) and returns `<dir>/<name>`.
fn private_home(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let home = dir.join(name);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home.join(".ssh"))
        .with_context(|| format!("creating {}", home.display()))?;
    Ok(home)
}

/// Starts the server in `dst` and the forwarding client in `src`, and waits until both
/// forwards listen in `src`.
pub(super) fn start(ep: &Endpoints, f: Flavor) -> anyhow::Result<PeerGuard> {
    let mut g = PeerGuard::new(temp_dir("ssh")?, forwarded());
    let (server, client) = match f {
        Flavor::DropbearAes128Ctr => dropbear_commands(&g, ep)?,
        _ => openssh_commands(&g, ep, f)?,
    };
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let s = g.spawn(&ep.dst_ns, &server, &[], "server.log")?;
    let dst = ep.dst_ns.clone();
    g.wait_ready("SSH server", &[(s, "server.log")], || {
        netns::listening(&dst, SSH_PORT, false).unwrap_or(false)
    })?;
    let client: Vec<&str> = client.iter().map(String::as_str).collect();
    let c = g.spawn(&ep.src_ns, &client, &[], "client.log")?;
    let src = ep.src_ns.clone();
    g.wait_ready(
        "SSH port forwards",
        &[(s, "server.log"), (c, "client.log")],
        || {
            [IPERF_FWD, SOCKPERF_FWD]
                .iter()
                .all(|&p| netns::listening(&src, p, false).unwrap_or(false))
        },
    )?;
    if f != Flavor::DropbearAes128Ctr {
        let log = std::fs::read_to_string(g.dir().join("client.log")).unwrap_or_default();
        check_negotiated(&log, f)?;
    }
    Ok(g)
}

/// `sshd -D` with a generated config and `ssh -N -L ...` that offers only the suite.
fn openssh_commands(
    g: &PeerGuard,
    ep: &Endpoints,
    f: Flavor,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let dir = g.dir();
    for name in ["host_key", "user_key"] {
        let path = dir.join(name);
        let path = path.to_str().context("temp path is not UTF-8")?;
        tool(&[
            binary("ssh-keygen")?.to_str().context("path not UTF-8")?,
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "nfx-bench",
            "-f",
            path,
        ])?;
    }
    std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys"))?;
    let cfg = dir.join("sshd_config");
    std::fs::write(&cfg, sshd_config(ep.dst_ip, dir, f))?;
    if !Path::new(PRIVSEP_DIR).is_dir() {
        std::fs::create_dir_all(PRIVSEP_DIR).with_context(|| format!("creating {PRIVSEP_DIR}"))?;
    }
    // sshd re-executes itself and so must be started by its absolute path.
    let sshd = binary("sshd")?.to_string_lossy().into_owned();
    let cfg = cfg.to_string_lossy().into_owned();
    tool(&[&sshd, "-t", "-f", &cfg]).context("sshd rejects the generated config")?;
    let server = vec![sshd, "-D".into(), "-e".into(), "-f".into(), cfg];
    let (cipher, mac) = f.suite();
    let key = dir.join("user_key").to_string_lossy().into_owned();
    let [fwd1, fwd2] = forwards();
    let mut client: Vec<String> = vec![binary("ssh")?.to_string_lossy().into_owned()];
    client.extend(
        [
            "-F",
            "/dev/null",
            "-v",
            "-N",
            "-T",
            "-i",
            &key,
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            &format!("Ciphers={cipher}"),
            "-o",
            &format!("MACs={mac}"),
            "-o",
            "Compression=no",
            "-o",
            "ExitOnForwardFailure=yes",
            "-o",
            "ConnectTimeout=5",
            "-p",
            &SSH_PORT.to_string(),
            "-L",
            &fwd1,
            "-L",
            &fwd2,
            &format!("root@{}", ep.dst_ip),
        ]
        .map(String::from),
    );
    Ok((server, client))
}

/// Dropbear has no option for the authorized-keys file or known-hosts file: each end
/// runs with a private home bind-mounted over root's home. The bind mount lives only in
/// the mount namespace `ip netns exec` makes for that process, so the host's home is
/// never touched.
fn with_home(home: &Path, root_home: &str, program: PathBuf) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        "mount --bind \"$1\" \"$2\" && shift 2 && exec \"$@\"".into(),
        "nfx-home".into(),
        home.to_string_lossy().into_owned(),
        root_home.into(),
        program.to_string_lossy().into_owned(),
    ]
}

/// `dropbear -F` with a generated host key and `dbclient -N -L ...` with only the suite.
fn dropbear_commands(g: &PeerGuard, ep: &Endpoints) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let dir = g.dir();
    let keygen = binary("dropbearkey")?;
    let gen = |path: &Path| -> anyhow::Result<()> {
        let mut c = Command::new(&keygen);
        c.args(["-t", "ed25519", "-f"]).arg(path);
        run_to_file(c, &dir.join("keygen.log"))
    };
    let srv_home = private_home(dir, "server-home")?;
    let cli_home = private_home(dir, "client-home")?;
    let host_key = dir.join("host_key");
    let user_key = cli_home.join(".ssh/id_dropbear");
    gen(&host_key)?;
    gen(&user_key)?;
    let public = tool(&[
        keygen.to_str().context("path not UTF-8")?,
        "-y",
        "-f",
        user_key.to_str().context("temp path is not UTF-8")?,
    ])?;
    let line = public
        .lines()
        .find(|l| l.starts_with("ssh-ed25519 "))
        .context("dropbearkey -y printed no public key")?;
    std::fs::write(srv_home.join(".ssh/authorized_keys"), format!("{line}\n"))?;
    let passwd = std::fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
    let home = root_home(&passwd).context("/etc/passwd has no uid-0 user")?;
    let mut server = with_home(&srv_home, &home, binary("dropbear")?);
    server.extend(
        [
            "-F",
            "-E",
            "-s",
            "-p",
            &format!("{}:{SSH_PORT}", ep.dst_ip),
            "-r",
            &host_key.to_string_lossy(),
            "-P",
            &dir.join("dropbear.pid").to_string_lossy(),
        ]
        .map(String::from),
    );
    let (cipher, mac) = Flavor::DropbearAes128Ctr.suite();
    let [fwd1, fwd2] = forwards();
    let mut client = with_home(&cli_home, &home, binary("dbclient")?);
    client.extend(
        [
            "-N",
            "-T",
            "-y",
            "-i",
            &user_key.to_string_lossy(),
            "-c",
            cipher,
            "-m",
            mac,
            "-p",
            &SSH_PORT.to_string(),
            "-L",
            &fwd1,
            "-L",
            &fwd2,
            &format!("root@{}", ep.dst_ip),
        ]
        .map(String::from),
    );
    Ok((server, client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sshd_config_allows_only_the_suite_and_the_generated_key() {
        let c = sshd_config(
            Ipv4Addr::new(10, 9, 3, 2),
            Path::new("/tmp/k"),
            Flavor::OpensshAes128Ctr,
        );
        assert!(c.contains("ListenAddress 10.9.3.2:2222\n"));
        assert!(c.contains("Ciphers aes128-ctr\nMACs hmac-sha2-256\n"));
        assert!(c.contains("AuthorizedKeysFile /tmp/k/authorized_keys\n"));
        assert!(c.contains("PasswordAuthentication no\n"));
        let g = sshd_config(
            Ipv4Addr::LOCALHOST,
            Path::new("/x"),
            Flavor::OpensshAes128Gcm,
        );
        assert!(g.contains("Ciphers aes128-gcm@openssh.com\n"));
    }

    #[test]
    fn negotiated_suite_is_checked() {
        let gcm = "debug1: kex: client->server cipher: aes128-gcm@openssh.com MAC: <implicit> compression: none\n";
        assert!(check_negotiated(gcm, Flavor::OpensshAes128Gcm).is_ok());
        assert!(check_negotiated(gcm, Flavor::OpensshAes128Ctr).is_err());
        let ctr =
            "debug1: kex: client->server cipher: aes128-ctr MAC: hmac-sha2-256 compression: none\n";
        assert!(check_negotiated(ctr, Flavor::OpensshAes128Ctr).is_ok());
        assert!(check_negotiated("nothing", Flavor::OpensshAes128Ctr).is_err());
    }

    #[test]
    fn root_home_comes_from_passwd() {
        let p = "daemon:x:1:1::/usr/sbin:/bin/false\nroot:x:0:0:root:/root:/bin/bash\n";
        assert_eq!(root_home(p).as_deref(), Some("/root"));
        assert_eq!(root_home("bad line\n"), None);
    }

    #[test]
    fn traffic_goes_through_the_forwards() {
        let t = forwarded();
        assert_eq!(t.client_addr, Ipv4Addr::LOCALHOST);
        assert_eq!((t.iperf_client_port, t.iperf_server_port), (15201, 5201));
        assert_eq!(
            forwards(),
            [
                "127.0.0.1:15201:127.0.0.1:5201",
                "127.0.0.1:21111:127.0.0.1:11111"
            ]
        );
    }

    #[test]
    fn private_home_is_closed_to_others() {
        use std::os::unix::fs::PermissionsExt;
        let d = temp_dir("unit").unwrap();
        let h = private_home(d.path(), "h").unwrap();
        let mode = std::fs::metadata(h.join(".ssh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0);
    }
}
