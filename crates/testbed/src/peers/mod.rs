//! Third-party tunnels that nfx's own tunnel is measured against (wireguard-go,
//! boringtun, OpenVPN, strongSwan, OpenSSH and Dropbear port forwards), each started between the
//! testbed's `src` and `dst` namespaces with fresh keys in a private temp dir, checked
//! to pass traffic, and torn down by a guard.

mod boringtun;
mod openvpn;
mod ssh;
mod strongswan;
mod wireguard;

use crate::process::ChildGuard;
use crate::{netns, process, Host, Testbed};
use anyhow::{bail, Context};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Inner (tunnel) address of the `src` end, the same as nfx's tunnel uses.
pub const INNER_SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 250, 1);
/// Inner (tunnel) address of the `dst` end, the same as nfx's tunnel uses.
pub const INNER_DST: Ipv4Addr = Ipv4Addr::new(192, 168, 250, 2);
/// Port of the iperf3 server in `dst`.
pub const IPERF_PORT: u16 = 5201;
/// Port of the sockperf server in `dst`.
pub const SOCKPERF_PORT: u16 = 11111;
/// How long a peer may take from start to passing traffic.
const UP_LIMIT: Duration = Duration::from_secs(20);
/// How long a stopping peer gets before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(3);
/// Time limit of the helper tools (key generation, `wg`, `ip`).
const TOOL_LIMIT: Duration = Duration::from_secs(10);

/// The peers, named as in `nfx bench tunnel`'s JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// WireGuard's Go userspace implementation.
    WireguardGo,
    /// Cloudflare's Rust userspace WireGuard, run with `--threads 1` (faster here).
    Boringtun,
    /// OpenVPN 2.6 in TLS mode with AES-256-GCM.
    Openvpn,
    /// strongSwan (charon, kernel-libipsec) with IKEv2 and AES-128-GCM ESP in UDP.
    Strongswan,
    /// OpenSSH local port forward with aes128-gcm@openssh.com.
    OpensshAes128Gcm,
    /// OpenSSH local port forward with aes128-ctr + hmac-sha2-256.
    OpensshAes128Ctr,
    /// Dropbear local port forward with aes128-ctr + hmac-sha2-256.
    DropbearAes128Ctr,
}

impl Peer {
    /// Every peer, in the order the benchmark runs them.
    pub const ALL: [Peer; 7] = [
        Peer::WireguardGo,
        Peer::Boringtun,
        Peer::Openvpn,
        Peer::Strongswan,
        Peer::OpensshAes128Gcm,
        Peer::OpensshAes128Ctr,
        Peer::DropbearAes128Ctr,
    ];

    /// The case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Peer::WireguardGo => "wireguard-go",
            Peer::Boringtun => "boringtun",
            Peer::Openvpn => "openvpn",
            Peer::Strongswan => "strongswan",
            Peer::OpensshAes128Gcm => "openssh-aes128-gcm",
            Peer::OpensshAes128Ctr => "openssh-aes128-ctr",
            Peer::DropbearAes128Ctr => "dropbear-aes128-ctr",
        }
    }

    /// Looks a peer up by its case name.
    pub fn from_name(name: &str) -> Option<Peer> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The programs this peer needs.
    pub fn binaries(self) -> &'static [&'static str] {
        match self {
            Peer::WireguardGo => &["wireguard-go", "wg"],
            Peer::Boringtun => &["boringtun-cli", "wg"],
            Peer::Openvpn => &["openvpn", "openssl"],
            Peer::Strongswan => &["charon-systemd", "swanctl", "openssl"],
            Peer::OpensshAes128Gcm | Peer::OpensshAes128Ctr => &["sshd", "ssh", "ssh-keygen"],
            Peer::DropbearAes128Ctr => &["dropbear", "dbclient", "dropbearkey"],
        }
    }

    /// `Some(reason)` when a program is missing (the peer must then be skipped).
    pub fn missing(self) -> Option<String> {
        self.binaries()
            .iter()
            .find(|b| find_binary(b).is_none())
            .map(|b| format!("{b} not installed — run scripts/bench-deps.sh"))
    }

    /// Starts the tunnel between `tb`'s `src` and `dst` and returns once it passes
    /// traffic (bounded); the guard stops it and removes what it made.
    pub fn start(self, tb: &Testbed) -> anyhow::Result<PeerGuard> {
        if let Some(why) = self.missing() {
            bail!("{}: {why}", self.name());
        }
        let ep = Endpoints::of(tb);
        let r = match self {
            Peer::WireguardGo => wireguard::start(&ep, &wireguard::go_daemon()?),
            Peer::Boringtun => wireguard::start(&ep, &boringtun::daemon()?),
            Peer::Openvpn => openvpn::start(&ep),
            Peer::Strongswan => strongswan::start(&ep),
            Peer::OpensshAes128Gcm => ssh::start(&ep, ssh::Flavor::OpensshAes128Gcm),
            Peer::OpensshAes128Ctr => ssh::start(&ep, ssh::Flavor::OpensshAes128Ctr),
            Peer::DropbearAes128Ctr => ssh::start(&ep, ssh::Flavor::DropbearAes128Ctr),
        };
        r.with_context(|| format!("starting {}", self.name()))
    }
}

/// Where a peer finds a program: `$PATH`, then the places `scripts/bench-deps.sh` and
/// Debian put them (sudo may drop the sbin and cargo/go directories from `$PATH`).
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(
        [
            "/usr/local/bin",
            "/usr/local/sbin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
        ]
        .iter()
        .map(PathBuf::from),
    );
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        dirs.push(home.join("go/bin"));
        dirs.push(home.join(".cargo/bin"));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// Like [`find_binary`], as an error naming the program when it is missing.
fn binary(name: &str) -> anyhow::Result<PathBuf> {
    find_binary(name).with_context(|| format!("{name} not installed — run scripts/bench-deps.sh"))
}

/// The two tunnel ends of a testbed.
#[derive(Debug, Clone)]
pub(crate) struct Endpoints {
    src_ns: String,
    dst_ns: String,
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    /// The testbed's subnet base: makes interface and socket names unique per testbed.
    tag: u8,
}

impl Endpoints {
    fn of(tb: &Testbed) -> Self {
        Self {
            src_ns: tb.ns(Host::Src),
            dst_ns: tb.ns(Host::Dst),
            src_ip: tb.src_ip(),
            dst_ip: tb.dst_ip(),
            tag: tb.spec().subnet_base,
        }
    }
}

/// Where the benchmark's servers listen (in `dst`) and where its clients connect (from
/// `src`): the inner address for L3 tunnels, local forwarded ports for SSH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    /// Address the iperf3 and sockperf servers bind to in `dst`.
    pub server_addr: Ipv4Addr,
    /// Address the clients connect to from `src`.
    pub client_addr: Ipv4Addr,
    /// iperf3 server port in `dst`.
    pub iperf_server_port: u16,
    /// Port the iperf3 client connects to from `src`.
    pub iperf_client_port: u16,
    /// sockperf server port in `dst`.
    pub sockperf_server_port: u16,
    /// Port the sockperf client connects to from `src`.
    pub sockperf_client_port: u16,
}

impl Traffic {
    /// Traffic through an L3 tunnel: straight to `dst`'s inner address.
    fn inner() -> Self {
        Self {
            server_addr: INNER_DST,
            client_addr: INNER_DST,
            iperf_server_port: IPERF_PORT,
            iperf_client_port: IPERF_PORT,
            sockperf_server_port: SOCKPERF_PORT,
            sockperf_client_port: SOCKPERF_PORT,
        }
    }
}

/// A running peer tunnel. Dropping it stops its processes (SIGINT, then SIGKILL),
/// deletes the interfaces and files it made and removes its temp dir.
pub struct PeerGuard {
    children: Vec<ChildGuard>,
    /// Interfaces to delete if the daemon left them: (namespace, name).
    links: Vec<(String, String)>,
    /// Files outside the temp dir to remove (e.g. UAPI sockets).
    files: Vec<PathBuf>,
    /// Addresses to delete: (namespace, address/prefix, device).
    addrs: Vec<(String, String, String)>,
    traffic: Traffic,
    dir: tempfile::TempDir,
}

impl PeerGuard {
    fn new(dir: tempfile::TempDir, traffic: Traffic) -> Self {
        Self {
            children: Vec::new(),
            links: Vec::new(),
            files: Vec::new(),
            addrs: Vec::new(),
            traffic,
            dir,
        }
    }

    /// Where the benchmark's servers and clients must talk through this tunnel.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// The peer's processes now: the ones it started and all their descendants (SSH
    /// servers fork a process per connection), for CPU accounting.
    pub fn pids(&self) -> Vec<u32> {
        let roots: Vec<u32> = self.children.iter().map(ChildGuard::id).collect();
        let table = std::fs::read_dir("/proc")
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .filter_map(|pid| {
                        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                        Some((pid, parent_of(&stat)?))
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        descendants(&roots, &table)
    }

    /// The last lines of each of the peer's logs, to explain a failed measurement.
    pub fn diagnostics(&self) -> String {
        let mut logs: Vec<String> = std::fs::read_dir(self.dir())
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.ends_with(".log"))
                    .collect()
            })
            .unwrap_or_default();
        logs.sort();
        logs.iter()
            .map(|l| format!("{l}: {}", self.log_tail(l)))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The temp dir holding keys, configs and logs.
    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts `args` inside `ns` with stdout and stderr going to `<dir>/<log>`, and
    /// keeps the child.
    fn spawn(
        &mut self,
        ns: &str,
        args: &[&str],
        env: &[(&str, &str)],
        log: &str,
    ) -> anyhow::Result<usize> {
        let log = std::fs::File::create(self.dir().join(log)).context("creating a log file")?;
        let mut cmd = netns::command(ns, args);
        cmd.envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        self.children.push(ChildGuard::spawn(cmd)?);
        Ok(self.children.len() - 1)
    }

    /// Fails with the log's tail if child `i` has exited.
    fn check_alive(&mut self, i: usize, log: &str) -> anyhow::Result<()> {
        if self.children[i].exited() {
            bail!("{} exited: {}", log, self.log_tail(log));
        }
        Ok(())
    }

    /// The last lines of a log in the temp dir (for error messages).
    fn log_tail(&self, log: &str) -> String {
        let text = std::fs::read_to_string(self.dir().join(log)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(6)..].join(" | ");
        if tail.is_empty() {
            "(no output)".into()
        } else {
            tail
        }
    }

    /// Waits (bounded by [`UP_LIMIT`]) until `ready` holds, failing early with the log
    /// of the first child that exits.
    fn wait_ready(
        &mut self,
        what: &str,
        logs: &[(usize, &str)],
        mut ready: impl FnMut() -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + UP_LIMIT;
        loop {
            for &(i, log) in logs {
                self.check_alive(i, log)?;
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let tails: Vec<String> = logs
                    .iter()
                    .map(|(_, l)| format!("{l}: {}", self.log_tail(l)))
                    .collect();
                bail!("{what} not ready after {UP_LIMIT:?}; {}", tails.join("; "));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PeerGuard {
    fn drop(&mut self) {
        let roots: Vec<u32> = self.children.iter().map(ChildGuard::id).collect();
        let forked: Vec<u32> = self
            .pids()
            .into_iter()
            .filter(|p| !roots.contains(p))
            .collect();
        // Clients were started last: stop them first so servers see a clean close.
        for c in self.children.iter_mut().rev() {
            if let Err(e) = c.interrupt(STOP_LIMIT) {
                log::warn!("stopping a tunnel peer: {e:#}");
            }
        }
        self.children.clear();
        stop_forked(&forked);
        for (ns, link) in &self.links {
            if netns::exists(ns) && netns::ip(ns, &["link", "show", "dev", link]).is_ok() {
                let _ = netns::ip(ns, &["link", "del", "dev", link]);
            }
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
        for (ns, addr, dev) in &self.addrs {
            if netns::exists(ns) {
                let _ = netns::ip(ns, &["addr", "del", addr, "dev", dev]);
            }
        }
    }
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !matches!(
                s.rfind(')')
                    .and_then(|i| s[i + 1..].split_whitespace().next()),
                Some("Z" | "X")
            )
        })
        .unwrap_or(false)
}

/// Stops processes our daemons forked (e.g. an SSH server's per-connection process):
/// SIGTERM, a bounded wait, then SIGKILL.
fn stop_forked(pids: &[u32]) {
    let signal = |sig: libc::c_int| {
        for &p in pids.iter().filter(|&&p| alive(p)) {
            // SAFETY: kill(2) on a process descended from one this guard started.
            unsafe { libc::kill(p as libc::pid_t, sig) };
        }
    };
    signal(libc::SIGTERM);
    let deadline = Instant::now() + STOP_LIMIT;
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(libc::SIGKILL);
}

/// The parent pid from `/proc/<pid>/stat` text (field 4, after the command name).
fn parent_of(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `roots` and every process below them in the (pid, parent) `table`.
fn descendants(roots: &[u32], table: &[(u32, u32)]) -> Vec<u32> {
    let mut out: Vec<u32> = roots.iter().copied().filter(|&p| p != 0).collect();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        for &(pid, ppid) in table {
            if ppid == parent && !out.contains(&pid) {
                out.push(pid);
            }
        }
        i += 1;
    }
    out
}

/// Runs a helper tool to completion (bounded) and returns its stdout.
fn tool(args: &[&str]) -> anyhow::Result<String> {
    process::run(args, TOOL_LIMIT)
}

/// Whether one ping from `ns` to `addr` is answered within a second.
fn ping_ok(ns: &str, addr: Ipv4Addr) -> bool {
    let a = addr.to_string();
    netns::exec(
        ns,
        &["ping", "-n", "-q", "-c", "1", "-W", "1", &a],
        Duration::from_secs(3),
    )
    .is_ok()
}

/// Runs `cmd` with stdout written to `out` (e.g. a private key that must never pass
/// through this process's memory), bounded.
fn run_to_file(mut cmd: Command, out: &Path) -> anyhow::Result<()> {
    let f = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    cmd.stdin(Stdio::null()).stdout(f).stderr(Stdio::piped());
    let mut g = ChildGuard::spawn(cmd)?;
    let st = g.wait_within(TOOL_LIMIT)?;
    if !st.success() {
        bail!("writing {} failed ({st})", out.display());
    }
    Ok(())
}

/// A private temp dir for one peer's keys, configs and logs (mode 0700).
fn temp_dir(peer: &str) -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("nfx-peer-{peer}-"))
        .tempdir()
        .context("creating a temp dir for the peer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_the_bench_case_names() {
        for p in Peer::ALL {
            assert_eq!(Peer::from_name(p.name()), Some(p));
        }
        assert_eq!(Peer::from_name("nfx-cpu"), None);
        let names: Vec<&str> = Peer::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            [
                "wireguard-go",
                "boringtun",
                "openvpn",
                "strongswan",
                "openssh-aes128-gcm",
                "openssh-aes128-ctr",
                "dropbear-aes128-ctr"
            ]
        );
    }

    #[test]
    fn missing_binary_names_the_install_script() {
        assert!(find_binary("nfx-no-such-tool-xyz").is_none());
        let e = binary("nfx-no-such-tool-xyz").unwrap_err().to_string();
        assert!(e.contains("nfx-no-such-tool-xyz not installed"), "{e}");
        assert!(e.contains("scripts/bench-deps.sh"), "{e}");
        assert!(find_binary("sh").is_some());
    }

    #[test]
    fn parent_pid_parses_with_spaces_in_the_name() {
        assert_eq!(parent_of("42 (a b) c) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of("42 (x) S"), None);
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn descendants_follow_the_whole_tree() {
        let table = [(10, 1), (11, 10), (12, 11), (13, 1), (14, 12), (20, 99)];
        let mut d = descendants(&[10, 99], &table);
        d.sort();
        assert_eq!(d, [10, 11, 12, 14, 20, 99]);
        assert_eq!(descendants(&[0], &table), Vec::<u32>::new());
    }

    #[test]
    fn own_process_tree_includes_a_spawned_child() {
        let dir = temp_dir("unit").unwrap();
        let mut g = PeerGuard::new(dir, Traffic::inner());
        let mut cmd = Command::new("sleep");
        cmd.arg("5");
        g.children.push(ChildGuard::spawn(cmd).unwrap());
        let child = g.children[0].id();
        let pids = g.pids();
        assert_eq!(pids[0], child);
        assert!(alive(child));
        drop(g);
        assert!(!alive(child), "the guard must stop its children");
    }

    #[test]
    fn liveness_reads_proc() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX));
    }

    #[test]
    fn forked_processes_are_stopped() {
        let mut cmd = Command::new("sleep");
        cmd.arg("5");
        let mut c = ChildGuard::spawn(cmd).unwrap();
        let pid = c.id();
        stop_forked(&[pid]);
        assert!(c.exited());
        assert!(!alive(pid));
    }

    #[test]
    fn log_tail_reports_the_last_lines() {
        let dir = temp_dir("unit").unwrap();
        let g = PeerGuard::new(dir, Traffic::inner());
        assert_eq!(g.log_tail("none.log"), "(no output)");
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        std::fs::write(g.dir().join("x.log"), text).unwrap();
        assert_eq!(
            g.log_tail("x.log"),
            "line 5 | line 6 | line 7 | line 8 | line 9 | line 10"
        );
        std::fs::write(g.dir().join("a.log"), "started\n").unwrap();
        std::fs::write(g.dir().join("key"), "not a log").unwrap();
        assert_eq!(
            g.diagnostics(),
            "a.log: started; x.log: line 5 | line 6 | line 7 | line 8 | line 9 | line 10"
        );
    }
}
