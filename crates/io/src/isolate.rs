//! Keeps the kernel's own IP stack away from the frames a dataplane port takes.
//!
//! Why: an AF_PACKET socket only taps an interface. Every frame nfx forwards is also
//! handed to the kernel of the port's namespace, which (forwarding off) looks up a route,
//! finds none and rate-limits an ICMP error, or (a frame to its own address, e.g. a NAT
//! reply) answers it with a TCP reset — per frame, on the CPU that delivers it, which on
//! veth is the sender's. A dataplane that owns its NIC (AF_XDP, DPDK) never pays that.
//!
//! How: one nftables table per port, family `netdev`, with a chain on the interface's
//! ingress hook that drops IPv4 and IPv6. The packet taps (`ptype_all`, where AF_PACKET
//! sockets receive) run before the ingress hook in `__netif_receive_skb_core`, so the
//! port still gets every frame; the kernel's IP stack gets none. ARP and IPv6 neighbour
//! discovery pass, so the kernel keeps answering for the namespace's addresses (a NAT's
//! public address, a gateway).
//!
//! The table is named `nfx_isolate_<pid>_<ifindex>_<n>` (process id, interface index,
//! a per-process counter), installed by [`KernelIsolation::install`] and removed when the
//! value is dropped. A process that died without removing its tables (SIGKILL) leaves
//! them behind: every install also deletes the `nfx_isolate_*` tables of the namespace
//! whose process no longer exists (one `nft` run installs and lists; a second runs only
//! when there is something stale to delete). Needs the `nft` tool (package nftables) and root.
//!
//! The tables also tell who serves an interface: a port that shares its interface with
//! no other dataplane (no fanout group) refuses to start while a live process holds an
//! isolation table on it — a second dataplane tapping the same interface would receive
//! and forward a copy of every frame (one worker runs every service of a device instead).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Name prefix of every isolation table.
pub const TABLE_PREFIX: &str = "nfx_isolate_";

/// Longest an `nft` call may take before it is killed and reported.
const NFT_LIMIT: Duration = Duration::from_secs(10);

/// Numbers the tables of this process.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// One interface to isolate (see [`KernelIsolation::install`] for the flags).
#[derive(Debug, Clone, Copy)]
pub struct IsolationRequest<'a> {
    /// Interface name.
    pub iface: &'a str,
    /// Its index.
    pub ifindex: u32,
    /// Drop IPv4 at prerouting instead of the ingress hook.
    pub ipv4_at_prerouting: bool,
    /// Refuse an interface another live process holds a table on.
    pub exclusive: bool,
}

/// An installed ingress drop on one interface; removed on drop, in the namespace of the
/// thread that drops it (the port's worker thread, which opened it there).
#[derive(Debug)]
pub struct KernelIsolation {
    table: String,
    ipv4_at_prerouting: bool,
}

impl KernelIsolation {
    /// Installs the drop on `iface` (index `ifindex`) in the calling thread's network
    /// namespace and removes the stale tables of dead processes found there. With
    /// `ipv4_at_prerouting`, IPv4 is dropped at the IP layer's prerouting hook instead of
    /// the device's ingress hook: for a port whose socket receives IPv4 after the ingress
    /// hooks (behind a tc fast path, see `AfPacketOptions::fast_path`). With `exclusive`,
    /// refuses (`AddrInUse`) an interface on which a live process already holds an
    /// isolation table.
    pub fn install(
        iface: &str,
        ifindex: u32,
        ipv4_at_prerouting: bool,
        exclusive: bool,
    ) -> io::Result<Self> {
        let mut one = Self::install_all(&[IsolationRequest {
            iface,
            ifindex,
            ipv4_at_prerouting,
            exclusive,
        }])?;
        Ok(one.remove(0))
    }

    /// [`KernelIsolation::install`] for several interfaces in one `nft` run (each run
    /// costs a process and a ruleset cache fetch, on a worker's start-up path): all are
    /// installed, or none.
    pub fn install_all(wants: &[IsolationRequest<'_>]) -> io::Result<Vec<Self>> {
        let tables: Vec<String> = wants
            .iter()
            .map(|w| {
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                format!("{TABLE_PREFIX}{}_{}_{n}", std::process::id(), w.ifindex)
            })
            .collect();
        let mut script = String::new();
        for (w, table) in wants.iter().zip(&tables) {
            script.push_str(&ruleset(table, w.iface, w.ipv4_at_prerouting));
        }
        script.push_str("list tables\n");
        // One transaction: on failure nothing was installed.
        let listing = nft(&["-f", "-"], Some(&script))?;
        let installed: Vec<Self> = wants
            .iter()
            .zip(tables)
            .map(|(w, table)| Self {
                table,
                ipv4_at_prerouting: w.ipv4_at_prerouting,
            })
            .collect();
        remove_stale_in(&listing)?;
        let ours: Vec<&str> = installed.iter().map(|i| i.table.as_str()).collect();
        for w in wants.iter().filter(|w| w.exclusive) {
            if let Some(pid) = live_owners(&listing, w.ifindex, &ours).first() {
                // Dropping `installed` removes the tables just added.
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "interface {} is already served by the nfx dataplane of process {pid}: a second one on it, outside a shared fanout group, would receive and forward a copy of every frame (run every service of the interface in one worker, `services:` in its run config)",
                        w.iface
                    ),
                ));
            }
        }
        Ok(installed)
    }

    /// The nftables table (family netdev) that holds the drop.
    pub fn table(&self) -> &str {
        &self.table
    }
}

impl Drop for KernelIsolation {
    fn drop(&mut self) {
        let families: &[&str] = if self.ipv4_at_prerouting {
            &["netdev", "ip"]
        } else {
            &["netdev"]
        };
        for family in families {
            if let Err(e) = nft(&["delete", "table", family, &self.table], None) {
                // Nobody to return the error to; the next install in this namespace
                // removes the table once this process has ended.
                eprintln!(
                    "removing kernel-stack isolation table {family} {}: {e}",
                    self.table
                );
            }
        }
    }
}

/// Name prefix of a standing isolation table ([`install_standing`]).
pub const STANDING_PREFIX: &str = "nfx_port_";

/// The standing isolation table of interface `iface`.
pub fn standing_table(iface: &str) -> String {
    format!("{STANDING_PREFIX}{iface}")
}

/// Installs the drop of [`KernelIsolation::install`] on each of `ifaces` (in the calling
/// thread's namespace), in one `nft` run, as tables that no process owns: each, named
/// by [`standing_table`], stays until its interface goes or it is deleted, and loading
/// it again replaces it. For a supervisor that made the interfaces and starts and stops
/// dataplanes on them (`kernel_stack: external`): the workers' start and exit then run no
/// `nft` process, and the kernel never sees the ports' IP traffic, with or without a
/// worker. Nothing checks who else taps the interfaces: the supervisor runs one
/// dataplane per interface.
pub fn install_standing(ifaces: &[&str]) -> io::Result<()> {
    let script: String = ifaces
        .iter()
        .map(|i| ruleset(&standing_table(i), i, false))
        .collect();
    nft(&["-f", "-"], Some(&script)).map(drop)
}

/// The ruleset for table `table` on interface `iface`. Loading it twice replaces the
/// first copy (add, delete, define in one transaction). With `ipv4_at_prerouting` the
/// netdev table passes IPv4 and a table of family `ip` drops it at prerouting, before
/// defragmentation and connection tracking (priority -450).
pub fn ruleset(table: &str, iface: &str, ipv4_at_prerouting: bool) -> String {
    let ip_rule = if ipv4_at_prerouting {
        ""
    } else {
        "\x20   meta protocol ip counter drop\n"
    };
    let mut r = format!(
        "add table netdev {table}\n\
         delete table netdev {table}\n\
         table netdev {table} {{\n\
         \x20 chain ingress {{\n\
         \x20   type filter hook ingress device \"{iface}\" priority filter; policy accept;\n\
         {ip_rule}\
         \x20   meta protocol ip6 icmpv6 type {{ nd-router-solicit, nd-router-advert, nd-neighbor-solicit, nd-neighbor-advert, nd-redirect }} accept\n\
         \x20   meta protocol ip6 counter drop\n\
         \x20 }}\n\
         }}\n"
    );
    if ipv4_at_prerouting {
        r.push_str(&format!(
            "add table ip {table}\n\
             delete table ip {table}\n\
             table ip {table} {{\n\
             \x20 chain prerouting {{\n\
             \x20   type filter hook prerouting priority -450; policy accept;\n\
             \x20   iifname \"{iface}\" counter drop\n\
             \x20 }}\n\
             }}\n"
        ));
    }
    r
}

/// The process id in an isolation table's name, `None` for other tables.
pub fn table_pid(table: &str) -> Option<u32> {
    table
        .strip_prefix(TABLE_PREFIX)?
        .split('_')
        .next()?
        .parse()
        .ok()
}

/// The interface index in an isolation table's name, `None` for other tables.
pub fn table_ifindex(table: &str) -> Option<u32> {
    table
        .strip_prefix(TABLE_PREFIX)?
        .split('_')
        .nth(1)?
        .parse()
        .ok()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The (family, name) of every table of `listing` (`nft list tables`) of family netdev
/// or ip.
fn tables(listing: &str) -> impl Iterator<Item = (&str, &str)> {
    listing.lines().filter_map(|l| {
        let mut w = l.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some("table"), Some(f @ ("netdev" | "ip")), Some(t)) => Some((f, t)),
            _ => None,
        }
    })
}

/// Isolation tables (family netdev or ip, then name) of the calling thread's namespace
/// whose process has ended.
fn stale_tables(listing: &str) -> Vec<(String, String)> {
    tables(listing)
        .filter(|(_, t)| table_pid(t).is_some_and(|pid| !alive(pid)))
        .map(|(f, t)| (f.to_string(), t.to_string()))
        .collect()
}

/// The live processes holding an isolation table other than `own` on interface
/// `ifindex`, each once.
fn live_owners(listing: &str, ifindex: u32, own: &[&str]) -> Vec<u32> {
    let mut pids: Vec<u32> = tables(listing)
        .filter(|(f, t)| *f == "netdev" && !own.contains(t) && table_ifindex(t) == Some(ifindex))
        .filter_map(|(_, t)| table_pid(t))
        .filter(|pid| alive(*pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Deletes the isolation tables of `listing` left by processes that no longer exist. A
/// table already gone is fine: another port opening at the same time (the two ports of
/// a worker open in parallel) or another process may have deleted it first.
fn remove_stale_in(listing: &str) -> io::Result<()> {
    for (family, t) in stale_tables(listing) {
        match nft(&["delete", "table", &family, &t], None) {
            Err(e) if e.to_string().contains("No such file or directory") => {}
            r => {
                r?;
            }
        }
    }
    Ok(())
}

/// Deletes the isolation tables, in the calling thread's namespace, left by processes
/// that no longer exist (a worker killed with SIGKILL; its supervisor calls this).
pub fn remove_stale() -> io::Result<()> {
    remove_stale_in(&nft(&["list", "tables"], None)?)
}

/// Runs `nft ARGS` (with `input` on stdin), bounded by [`NFT_LIMIT`]; returns stdout.
fn nft(args: &[&str], input: Option<&str>) -> io::Result<String> {
    crate::command::run("nft", args, input, NFT_LIMIT).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::new(
                e.kind(),
                format!("{e} (the `nft` tool of package nftables is needed to keep the kernel stack off the ports)"),
            )
        } else {
            e
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_drops_ip_and_ip6_on_one_device_only() {
        let r = ruleset("nfx_isolate_1_2_3", "to-src", false);
        assert!(r.starts_with(
            "add table netdev nfx_isolate_1_2_3\ndelete table netdev nfx_isolate_1_2_3\n"
        ));
        assert!(r.contains("hook ingress device \"to-src\""));
        assert_eq!(r.matches("device ").count(), 1);
        assert!(r.contains("meta protocol ip counter drop"));
        assert!(r.contains("meta protocol ip6 counter drop"));
        assert!(r.contains("nd-neighbor-solicit"), "IPv6 ND must pass: {r}");
        assert!(!r.contains("arp"), "ARP must pass: {r}");
        assert!(r.contains("policy accept"));
        assert!(!r.contains("table ip "));
    }

    #[test]
    fn fast_path_ruleset_drops_ipv4_at_prerouting_instead() {
        let r = ruleset("nfx_isolate_1_2_3", "to-src", true);
        assert!(!r.contains("meta protocol ip counter drop"), "{r}");
        assert!(r.contains("meta protocol ip6 counter drop"));
        assert!(r.contains("table ip nfx_isolate_1_2_3 {"));
        assert!(r.contains("hook prerouting priority -450"));
        assert!(r.contains("iifname \"to-src\" counter drop"));
    }

    #[test]
    fn pid_is_read_from_isolation_tables_only() {
        assert_eq!(table_pid("nfx_isolate_4242_7_0"), Some(4242));
        assert_eq!(table_pid("nfx_isolate_x_7_0"), None);
        assert_eq!(table_pid("nfx_edge_ingress"), None);
        assert_eq!(table_pid("filter"), None);
    }

    #[test]
    fn an_interface_is_owned_by_the_live_processes_with_a_table_on_it() {
        let me = std::process::id();
        let listing = format!(
            "table netdev nfx_isolate_{me}_3_0\ntable ip nfx_isolate_{me}_3_0\ntable netdev nfx_isolate_{me}_4_1\ntable netdev nfx_isolate_1073741823_3_2\ntable netdev other\n"
        );
        assert_eq!(live_owners(&listing, 3, &["nfx_isolate_0_3_9"]), vec![me]);
        assert_eq!(live_owners(&listing, 4, &["nfx_isolate_0_3_9"]), vec![me]);
        assert!(live_owners(&listing, 5, &["nfx_isolate_0_3_9"]).is_empty());
        // The table being installed is not another owner.
        assert!(live_owners(&listing, 4, &[&format!("nfx_isolate_{me}_4_1")]).is_empty());
        assert_eq!(table_ifindex("nfx_isolate_4242_7_0"), Some(7));
        assert_eq!(table_ifindex("nfx_edge_ingress"), None);
    }

    #[test]
    fn standing_tables_belong_to_no_process_and_are_never_stale() {
        let t = standing_table("sw0i");
        assert_eq!(t, "nfx_port_sw0i");
        assert_eq!(table_pid(&t), None);
        let listing = format!("table netdev {t}\n");
        assert!(stale_tables(&listing).is_empty());
        assert!(live_owners(&listing, 3, &[]).is_empty());
    }

    #[test]
    fn only_tables_of_dead_processes_are_stale() {
        let me = std::process::id();
        // Pid 0x3fffffff is above any pid_max, so no process has it.
        let listing = format!(
            "table netdev nfx_isolate_{me}_3_0\ntable netdev nfx_isolate_1073741823_3_1\ntable netdev other\ntable inet nfx_isolate_1073741823_3_2\ntable ip nfx_isolate_1073741823_3_1\n"
        );
        let t = "nfx_isolate_1073741823_3_1".to_string();
        assert_eq!(
            stale_tables(&listing),
            vec![("netdev".to_string(), t.clone()), ("ip".to_string(), t)]
        );
    }
}
