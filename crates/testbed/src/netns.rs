//! Network-namespace helpers: list, run a command inside, enter from a thread (setns),
//! read interface facts, write per-namespace sysctls.

use crate::process;
use anyhow::{bail, Context};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Where iproute2 keeps the bind mounts of named namespaces.
const NETNS_DIR: &str = "/run/netns";
/// Time limit for one `ip`/`sysctl` call.
const IP_LIMIT: Duration = Duration::from_secs(10);

/// The bind-mount path of a named namespace.
pub fn path(ns: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(ns)
}

/// Whether a named namespace exists.
pub fn exists(ns: &str) -> bool {
    path(ns).exists()
}

/// Names of all named namespaces (`ip netns list`).
pub fn list() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs `ip -n <ns> <args>` and returns stdout.
pub fn ip(ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut full = vec!["ip", "-n", ns];
    full.extend_from_slice(args);
    process::run(&full, IP_LIMIT)
}

/// Runs a program inside a namespace (`ip netns exec <ns> ...`), bounded by `limit`.
pub fn exec(ns: &str, args: &[&str], limit: Duration) -> anyhow::Result<String> {
    let mut full = vec!["ip", "netns", "exec", ns];
    full.extend_from_slice(args);
    process::run(&full, limit)
}

/// A `Command` that runs `args` inside `ns`; the caller spawns and guards it.
pub fn command(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

/// Moves the calling thread into namespace `ns` (setns(2) with CLONE_NEWNET).
///
/// Only this thread changes namespace; sockets it opens afterwards live in `ns`.
/// Use it from a dedicated thread (see [`in_netns`]).
pub fn enter(ns: &str) -> anyhow::Result<()> {
    let f = std::fs::File::open(path(ns))
        .with_context(|| format!("network namespace {ns} does not exist"))?;
    // SAFETY: fd is a valid open namespace file for the duration of the call.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        bail!(
            "setns into {ns} failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Runs `f` on a new thread that has entered `ns`, and returns its result.
pub fn in_netns<T, F>(ns: &str, f: F) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> anyhow::Result<T> + Send + 'static,
{
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns)?;
        f()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("thread in namespace panicked"))?
}

/// Writes a sysctl inside `ns`, e.g. `("net/ipv4/ip_forward", "1")`.
pub fn sysctl_set(ns: &str, key: &str, value: &str) -> anyhow::Result<()> {
    let file = format!("/proc/sys/{key}");
    let value = value.to_string();
    in_netns(ns, move || {
        std::fs::write(&file, &value).with_context(|| format!("writing {file}"))
    })
}

/// Reads a sysctl inside `ns`.
pub fn sysctl_get(ns: &str, key: &str) -> anyhow::Result<String> {
    let file = format!("/proc/sys/{key}");
    in_netns(ns, move || {
        Ok(std::fs::read_to_string(&file)
            .with_context(|| format!("reading {file}"))?
            .trim()
            .to_string())
    })
}

/// One interface as `ip -j link` reports it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Link {
    /// Interface name.
    pub ifname: String,
    /// MAC address (absent on some device kinds).
    #[serde(default)]
    pub address: Option<String>,
    /// Interface alias; nfx marks the veths it creates with one.
    #[serde(default)]
    pub ifalias: Option<String>,
    /// Operational state (UP, DOWN, LOWERLAYERDOWN, UNKNOWN).
    #[serde(default)]
    pub operstate: Option<String>,
}

/// All interfaces in `ns`.
pub fn links(ns: &str) -> anyhow::Result<Vec<Link>> {
    let out = ip(ns, &["-j", "link", "show"])?;
    serde_json::from_str(&out).with_context(|| format!("parsing `ip -j link` of {ns}"))
}

/// The MAC address of `iface` inside `ns`.
pub fn mac(ns: &str, iface: &str) -> anyhow::Result<String> {
    let out = ip(ns, &["-j", "link", "show", "dev", iface])?;
    let links: Vec<Link> = serde_json::from_str(&out)
        .with_context(|| format!("parsing `ip -j link show dev {iface}` of {ns}"))?;
    links
        .into_iter()
        .next()
        .and_then(|l| l.address)
        .with_context(|| format!("{iface} in {ns} has no MAC address"))
}

/// IPv4 addresses (`a.b.c.d/len`) of `iface` inside `ns`.
pub fn ipv4_addrs(ns: &str, iface: &str) -> anyhow::Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct AddrInfo {
        family: String,
        local: String,
        prefixlen: u8,
    }
    #[derive(serde::Deserialize)]
    struct Iface {
        #[serde(default)]
        addr_info: Vec<AddrInfo>,
    }
    let out = ip(ns, &["-j", "addr", "show", "dev", iface])?;
    let v: Vec<Iface> = serde_json::from_str(&out)
        .with_context(|| format!("parsing `ip -j addr` of {iface} in {ns}"))?;
    Ok(v.into_iter()
        .flat_map(|i| i.addr_info)
        .filter(|a| a.family == "inet")
        .map(|a| format!("{}/{}", a.local, a.prefixlen))
        .collect())
}

/// Process ids running inside `ns` (`ip netns pids`).
pub fn pids(ns: &str) -> Vec<u32> {
    process::run(&["ip", "netns", "pids", ns], IP_LIMIT)
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The peers (`addr:port`) of the established TCP connections to local `port` inside
/// `ns`, as that namespace's kernel sees them (`ss`): how a test checks which source
/// address a NAT gave a connection.
pub fn tcp_peers(ns: &str, port: u16) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let filter = format!("sport = :{port}");
    let mut cmd = command(ns, &["ss", "-Htn", "state", "established", &filter]);
    cmd.stdout(std::process::Stdio::piped());
    let out = process::output_within(cmd, Duration::from_secs(5))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(String::from))
        .collect())
}

/// Whether a socket listens on `port` inside `ns` (TCP LISTEN, or a bound UDP socket),
/// read from `/proc/thread-self/net/{tcp,udp}` of a thread inside `ns`.
pub fn listening(ns: &str, port: u16, udp: bool) -> anyhow::Result<bool> {
    let file = if udp {
        "/proc/thread-self/net/udp"
    } else {
        "/proc/thread-self/net/tcp"
    };
    in_netns(ns, move || {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
        Ok(proc_net_has_listener(&text, port, udp))
    })
}

/// Parses `/proc/net/tcp|udp` text: is there a socket on local `port` in the
/// listening state (TCP `0A`) or bound state (UDP `07`)?
pub fn proc_net_has_listener(text: &str, port: u16, udp: bool) -> bool {
    let want_state = if udp { "07" } else { "0A" };
    text.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local_port = f
            .get(1)
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| u16::from_str_radix(p, 16).ok());
        local_port == Some(port) && f.get(3) == Some(&want_state)
    })
}

/// Waits (bounded by `limit`) until something listens on `port` inside `ns`.
pub fn wait_listening(ns: &str, port: u16, udp: bool, limit: Duration) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if listening(ns, port, udp)? {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            bail!("nothing listens on port {port} in {ns} after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_is_under_run_netns() {
        assert_eq!(path("x"), PathBuf::from("/run/netns/x"));
    }

    #[test]
    fn missing_namespace_is_a_clear_error() {
        let err = enter("nfx-no-such-namespace-xyz").unwrap_err().to_string();
        assert!(err.contains("does not exist"), "{err}");
        assert!(!exists("nfx-no-such-namespace-xyz"));
    }

    #[test]
    fn proc_net_listener_parsing() {
        let t = "  sl  local_address rem_address   st tx_queue\n   0: 00000000:1451 00000000:0000 0A 00000000\n   1: 0100007F:0050 0200007F:C350 01 0\n";
        assert!(proc_net_has_listener(t, 5201, false));
        assert!(!proc_net_has_listener(t, 80, false));
        assert!(!proc_net_has_listener(t, 5201, true));
    }

    #[test]
    fn link_json_parses() {
        let j = r#"[{"ifindex":2,"ifname":"veth0","address":"02:00:00:00:00:01","ifalias":"nfx-testbed","operstate":"UP"}]"#;
        let v: Vec<Link> = serde_json::from_str(j).unwrap();
        assert_eq!(v[0].address.as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(v[0].ifalias.as_deref(), Some("nfx-testbed"));
    }
}

/// Byte and packet counters of one interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfaceCounters {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames sent.
    pub tx_packets: u64,
}

/// Parses the counters of `iface` from `/proc/net/dev` text (receive: bytes, packets
/// are columns 1–2; transmit: bytes, packets columns 9–10).
pub fn parse_net_dev(text: &str, iface: &str) -> anyhow::Result<IfaceCounters> {
    let cols: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim() == iface)
        .with_context(|| format!("no interface {iface} in /proc/net/dev"))?
        .1
        .split_whitespace()
        .map(|f| f.parse().context("bad /proc/net/dev counter"))
        .collect::<anyhow::Result<_>>()?;
    if cols.len() < 10 {
        bail!("short /proc/net/dev line for {iface}");
    }
    Ok(IfaceCounters {
        rx_bytes: cols[0],
        rx_packets: cols[1],
        tx_bytes: cols[8],
        tx_packets: cols[9],
    })
}

/// Reads the counters of `iface` inside `ns`.
pub fn iface_counters(ns: &str, iface: &str) -> anyhow::Result<IfaceCounters> {
    let iface = iface.to_string();
    in_netns(ns, move || {
        parse_net_dev(
            &std::fs::read_to_string("/proc/thread-self/net/dev")?,
            &iface,
        )
    })
}

/// Thread ids of the kernel's NAPI threads (`napi/<iface>-<id>`) now.
fn napi_threads() -> std::collections::BTreeSet<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Default::default();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("napi/"))
        })
        .collect()
}

/// Gives the veth `iface` in `ns` a NAPI instance (GRO on) run by its own kernel thread
/// (`threaded` = 1), so that the kernel's receive work for that interface — forwarding,
/// NAT, delivery to packet sockets — is accounted to a thread of its own instead of to
/// whichever process sent the frame. Returns the new threads' ids (empty if they
/// already existed).
pub fn threaded_napi(ns: &str, iface: &str) -> anyhow::Result<Vec<u32>> {
    let before = napi_threads();
    exec(ns, &["ethtool", "-K", iface, "gro", "on"], IP_LIMIT)?;
    let file = format!("/sys/class/net/{iface}/threaded");
    exec(ns, &["sh", "-c", &format!("echo 1 > {file}")], IP_LIMIT)
        .with_context(|| format!("{ns}: enabling threaded NAPI on {iface}"))?;
    let mut new: Vec<u32> = napi_threads().difference(&before).copied().collect();
    let tag = format!("napi/{iface}-");
    new.retain(|t| {
        std::fs::read_to_string(format!("/proc/{t}/comm")).is_ok_and(|c| c.starts_with(&tag))
    });
    Ok(new)
}

#[cfg(test)]
mod counter_tests {
    use super::*;

    #[test]
    fn net_dev_columns() {
        let t = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets\n    lo: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\nveth0: 1500 10 0 0 0 0 0 0 3000 20 0 0 0 0 0 0\n";
        let c = parse_net_dev(t, "veth0").unwrap();
        assert_eq!(
            c,
            IfaceCounters {
                rx_bytes: 1500,
                rx_packets: 10,
                tx_bytes: 3000,
                tx_packets: 20
            }
        );
        assert!(parse_net_dev(t, "eth9").is_err());
        assert!(parse_net_dev("x: 1 2 3", "x").is_err());
    }
}
