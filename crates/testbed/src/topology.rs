//! The line topology `src — edge — cloud — dst`: creation (idempotent), removal of only
//! what nfx made, status, addresses, and a Drop guard for tests.

use crate::{netns, probe, process, root};
use anyhow::{bail, Context};
use serde::Serialize;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Alias written on every veth nfx creates; part of the proof that a namespace is ours.
pub const MARK_ALIAS: &str = "nfx-testbed";
/// Directory of ownership marker files, one per namespace nfx created.
pub(crate) const MARK_DIR: &str = "/run/nfx/testbed";
/// Host byte of the NAT public address in the edge–cloud subnet (10.b.2.100).
pub const NAT_HOST: u8 = 100;

/// What to build: namespace name prefix and the `b` of the 10.b.x.x subnets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Spec {
    /// Prefix of every namespace name (`<prefix>src`, `<prefix>edge`, ...).
    pub prefix: String,
    /// Second octet of all addresses, so parallel testbeds never overlap.
    pub subnet_base: u8,
}

impl Default for Spec {
    fn default() -> Self {
        Self {
            prefix: "nfx-".into(),
            subnet_base: 200,
        }
    }
}

impl Spec {
    /// Checks the prefix (non-empty, short, `[A-Za-z0-9_-]`) and subnet base (1..=254).
    pub fn validate(&self) -> anyhow::Result<()> {
        let ok_chars = self
            .prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if self.prefix.is_empty() || self.prefix.len() > 40 || !ok_chars {
            bail!(
                "testbed prefix {:?} is invalid: use 1-40 characters from A-Z a-z 0-9 - _",
                self.prefix
            );
        }
        if self.subnet_base == 0 || self.subnet_base == 255 {
            bail!(
                "testbed subnet base {} is invalid: must be 1..=254",
                self.subnet_base
            );
        }
        Ok(())
    }

    /// Namespace name of a host.
    pub fn ns(&self, host: Host) -> String {
        format!("{}{}", self.prefix, host.name())
    }

    /// Address `10.<b>.<subnet>.<host>`.
    pub fn addr(&self, subnet: u8, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet_base, subnet, host)
    }
}

/// The four hosts of the line topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Host {
    /// Traffic source.
    Src,
    /// Where nfx runs the chain (the device under test).
    Edge,
    /// Next router towards dst.
    Cloud,
    /// Traffic sink / servers.
    Dst,
}

impl Host {
    /// All hosts, in line order.
    pub const ALL: [Host; 4] = [Host::Src, Host::Edge, Host::Cloud, Host::Dst];

    /// Short name used in namespace names.
    pub fn name(self) -> &'static str {
        match self {
            Host::Src => "src",
            Host::Edge => "edge",
            Host::Cloud => "cloud",
            Host::Dst => "dst",
        }
    }
}

/// One veth pair: end `a` (host, iface, host byte) and end `b`, in subnet 10.b.<subnet>.0/24.
struct Wire {
    a: (Host, &'static str, u8),
    b: (Host, &'static str, u8),
    subnet: u8,
}

/// The three links of the line.
const WIRES: [Wire; 3] = [
    Wire {
        a: (Host::Src, "veth0", 1),
        b: (Host::Edge, "to-src", 2),
        subnet: 1,
    },
    Wire {
        a: (Host::Edge, "to-cloud", 1),
        b: (Host::Cloud, "to-edge", 2),
        subnet: 2,
    },
    Wire {
        a: (Host::Cloud, "to-dst", 1),
        b: (Host::Dst, "veth0", 2),
        subnet: 3,
    },
];

/// A built (or attached-to) testbed.
#[derive(Debug, Clone)]
pub struct Testbed {
    spec: Spec,
}

/// What `down` did.
#[derive(Debug, Default, Serialize)]
pub struct DownReport {
    /// Namespaces removed.
    pub removed: Vec<String>,
    /// Namespaces with our names that were left alone because nfx did not make them.
    pub skipped: Vec<String>,
}

/// One interface in [`Status`].
#[derive(Debug, Serialize)]
pub struct IfaceStatus {
    /// Interface name.
    pub name: String,
    /// MAC address.
    pub mac: String,
    /// IPv4 addresses with prefix length.
    pub addrs: Vec<String>,
    /// Operational state.
    pub state: String,
}

/// One namespace in [`Status`].
#[derive(Debug, Serialize)]
pub struct HostStatus {
    /// Namespace name.
    pub ns: String,
    /// Whether it exists.
    pub exists: bool,
    /// Whether nfx made it (marker present).
    pub owned: bool,
    /// `net.ipv4.ip_forward` inside it.
    pub forwarding: Option<bool>,
    /// Its interfaces except `lo`.
    pub ifaces: Vec<IfaceStatus>,
}

/// Snapshot of the testbed for `nfx testbed status`.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The spec the status was taken for.
    pub spec: Spec,
    /// One entry per host, in line order.
    pub hosts: Vec<HostStatus>,
}

impl Status {
    /// True when all four namespaces exist and are ours.
    pub fn complete(&self) -> bool {
        self.hosts.iter().all(|h| h.exists && h.owned)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for h in &self.hosts {
            if !h.exists {
                writeln!(f, "{:<16} absent", h.ns)?;
                continue;
            }
            let fwd = match h.forwarding {
                Some(true) => "on",
                Some(false) => "off",
                None => "?",
            };
            let owner = if h.owned { "" } else { " (not made by nfx)" };
            writeln!(f, "{:<16} forwarding {fwd}{owner}", h.ns)?;
            for i in &h.ifaces {
                writeln!(
                    f,
                    "  {:<10} {:<18} {:<8} {}",
                    i.name,
                    i.mac,
                    i.state,
                    i.addrs.join(" ")
                )?;
            }
        }
        Ok(())
    }
}

/// Path of the ownership marker of a namespace.
pub(crate) fn mark_path(ns: &str) -> PathBuf {
    PathBuf::from(MARK_DIR).join(ns)
}

/// Whether namespace `ns` was made by nfx: marker file, or a veth carrying our alias.
pub(crate) fn owned(ns: &str) -> bool {
    if mark_path(ns).exists() {
        return true;
    }
    netns::links(ns)
        .map(|ls| ls.iter().any(|l| l.ifalias.as_deref() == Some(MARK_ALIAS)))
        .unwrap_or(false)
}

impl Testbed {
    /// A handle on the testbed described by `spec` without creating anything
    /// (for `down`, `status`, and code that runs on a testbed someone else built).
    pub fn attach(spec: Spec) -> anyhow::Result<Self> {
        spec.validate()?;
        Ok(Self { spec })
    }

    /// Creates the topology, or completes/repairs it if it (partly) exists.
    pub fn up(spec: Spec) -> anyhow::Result<Self> {
        root::require_root()?;
        let tb = Self::attach(spec)?;
        tb.create()
            .with_context(|| format!("building testbed with prefix {:?}", tb.spec.prefix))?;
        Ok(tb)
    }

    /// The spec this testbed was built from.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Namespace name of `host`.
    pub fn ns(&self, host: Host) -> String {
        self.spec.ns(host)
    }

    /// Address of src's interface (10.b.1.1).
    pub fn src_ip(&self) -> Ipv4Addr {
        self.spec.addr(1, 1)
    }

    /// Address of edge's inside interface `to-src` (10.b.1.2).
    pub fn edge_inside_ip(&self) -> Ipv4Addr {
        self.spec.addr(1, 2)
    }

    /// Address of edge's outside interface `to-cloud` (10.b.2.1).
    pub fn edge_outside_ip(&self) -> Ipv4Addr {
        self.spec.addr(2, 1)
    }

    /// Address of cloud's interface towards edge (10.b.2.2).
    pub fn cloud_ip(&self) -> Ipv4Addr {
        self.spec.addr(2, 2)
    }

    /// Address of dst's interface (10.b.3.2).
    pub fn dst_ip(&self) -> Ipv4Addr {
        self.spec.addr(3, 2)
    }

    /// The NAT public address (10.b.2.100), not assigned to any kernel interface.
    pub fn nat_ip(&self) -> Ipv4Addr {
        self.spec.addr(2, NAT_HOST)
    }

    /// MAC address of `iface` in `host`.
    pub fn mac(&self, host: Host, iface: &str) -> anyhow::Result<String> {
        netns::mac(&self.ns(host), iface)
    }

    /// Next-hop MACs for a dataplane on edge: (src's `veth0`, cloud's `to-edge`).
    pub fn edge_peer_macs(&self) -> anyhow::Result<(String, String)> {
        Ok((
            self.mac(Host::Src, "veth0")?,
            self.mac(Host::Cloud, "to-edge")?,
        ))
    }

    /// Turns the edge kernel's IPv4 forwarding on (kernel baseline) or off (nfx forwards).
    pub fn set_edge_forwarding(&self, on: bool) -> anyhow::Result<()> {
        netns::sysctl_set(
            &self.ns(Host::Edge),
            "net/ipv4/ip_forward",
            if on { "1" } else { "0" },
        )
    }

    /// Whether the edge kernel forwards IPv4.
    pub fn edge_forwarding(&self) -> anyhow::Result<bool> {
        Ok(netns::sysctl_get(&self.ns(Host::Edge), "net/ipv4/ip_forward")? == "1")
    }

    fn create(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(MARK_DIR).with_context(|| format!("creating {MARK_DIR}"))?;
        for host in Host::ALL {
            create_ns(&self.ns(host))?;
        }
        for w in &WIRES {
            self.create_wire(w)?;
        }
        self.routes()?;
        for host in [Host::Edge, Host::Cloud] {
            netns::sysctl_set(&self.ns(host), "net/ipv4/ip_forward", "1")?;
        }
        self.warm_neighbors()
    }

    fn create_wire(&self, w: &Wire) -> anyhow::Result<()> {
        let (a_ns, b_ns) = (self.ns(w.a.0), self.ns(w.b.0));
        let has = |ns: &str, ifname: &str| -> anyhow::Result<bool> {
            Ok(netns::links(ns)?.iter().any(|l| l.ifname == ifname))
        };
        if !has(&a_ns, w.a.1)? {
            if has(&b_ns, w.b.1)? {
                netns::ip(&b_ns, &["link", "del", w.b.1])?;
            }
            netns::ip(
                &a_ns,
                &[
                    "link", "add", w.a.1, "type", "veth", "peer", "name", w.b.1, "netns", &b_ns,
                ],
            )?;
        }
        for (ns, (_, ifname, host)) in [(&a_ns, w.a), (&b_ns, w.b)] {
            netns::ip(ns, &["link", "set", "dev", ifname, "alias", MARK_ALIAS])?;
            let cidr = format!("{}/24", self.spec.addr(w.subnet, host));
            netns::ip(ns, &["addr", "replace", &cidr, "dev", ifname])?;
            netns::ip(ns, &["link", "set", "dev", ifname, "up"])?;
        }
        Ok(())
    }

    fn routes(&self) -> anyhow::Result<()> {
        let s = &self.spec;
        let net = |subnet: u8| format!("{}/24", s.addr(subnet, 0));
        let routes: [(Host, String, Ipv4Addr); 5] = [
            (Host::Src, "default".into(), s.addr(1, 2)),
            (Host::Dst, "default".into(), s.addr(3, 1)),
            (Host::Edge, net(3), s.addr(2, 2)),
            (Host::Cloud, net(1), s.addr(2, 1)),
            (Host::Cloud, format!("{}/32", self.nat_ip()), s.addr(2, 1)),
        ];
        for (host, to, via) in routes {
            netns::ip(
                &self.ns(host),
                &["route", "replace", &to, "via", &via.to_string()],
            )?;
        }
        Ok(())
    }

    /// Resolves every neighbor once (both ends of each link) so the first measured
    /// packet does not wait for ARP.
    pub fn warm_neighbors(&self) -> anyhow::Result<()> {
        for w in &WIRES {
            for (from, to) in [(w.a, w.b), (w.b, w.a)] {
                let target = self.spec.addr(w.subnet, to.2);
                probe::udp_reachable(&self.ns(from.0), target, Duration::from_secs(3))
                    .with_context(|| format!("link {} of {}", from.1, self.ns(from.0)))?;
            }
        }
        Ok(())
    }

    /// Removes the namespaces of this testbed that nfx made (killing what runs in them).
    pub fn down(&self) -> anyhow::Result<DownReport> {
        root::require_root()?;
        let mut rep = DownReport::default();
        for host in Host::ALL {
            let ns = self.ns(host);
            if !netns::exists(&ns) {
                let _ = std::fs::remove_file(mark_path(&ns));
                continue;
            }
            if !owned(&ns) {
                rep.skipped.push(ns);
                continue;
            }
            kill_all_in(&ns);
            process::run(&["ip", "netns", "del", &ns], Duration::from_secs(10))?;
            let _ = std::fs::remove_file(mark_path(&ns));
            rep.removed.push(ns);
        }
        Ok(rep)
    }

    /// Which namespaces exist, their addresses, MACs and forwarding state.
    pub fn status(&self) -> anyhow::Result<Status> {
        root::require_root()?;
        let mut hosts = Vec::new();
        for host in Host::ALL {
            let ns = self.ns(host);
            if !netns::exists(&ns) {
                hosts.push(HostStatus {
                    ns,
                    exists: false,
                    owned: false,
                    forwarding: None,
                    ifaces: Vec::new(),
                });
                continue;
            }
            let mut ifaces = Vec::new();
            for l in netns::links(&ns)?.into_iter().filter(|l| l.ifname != "lo") {
                ifaces.push(IfaceStatus {
                    addrs: netns::ipv4_addrs(&ns, &l.ifname)?,
                    mac: l.address.unwrap_or_default(),
                    state: l.operstate.unwrap_or_default(),
                    name: l.ifname,
                });
            }
            hosts.push(HostStatus {
                forwarding: netns::sysctl_get(&ns, "net/ipv4/ip_forward")
                    .ok()
                    .map(|v| v == "1"),
                owned: owned(&ns),
                exists: true,
                ns,
                ifaces,
            });
        }
        Ok(Status {
            spec: self.spec.clone(),
            hosts,
        })
    }
}

/// Creates namespace `ns` (or adopts it if nfx made it), marks it as ours and sets the
/// quiet defaults: loopback up, no IPv6, no reverse-path filter.
pub(crate) fn create_ns(ns: &str) -> anyhow::Result<()> {
    if netns::exists(ns) {
        let foreign = netns::links(ns)?
            .iter()
            .any(|l| l.ifname != "lo" && l.ifalias.as_deref() != Some(MARK_ALIAS));
        if !owned(ns) && foreign {
            bail!("network namespace {ns} exists and was not made by nfx; choose another --prefix");
        }
    } else {
        process::run(&["ip", "netns", "add", ns], Duration::from_secs(10))?;
    }
    std::fs::write(mark_path(ns), b"made by nfx testbed\n")
        .with_context(|| format!("writing marker for {ns}"))?;
    netns::ip(ns, &["link", "set", "lo", "up"])?;
    // Quiet, predictable namespaces: no IPv6 chatter (RS/ND/MLD) through the dataplane,
    // no reverse-path filtering of NATed replies.
    for (k, v) in [
        ("net/ipv6/conf/all/disable_ipv6", "1"),
        ("net/ipv6/conf/default/disable_ipv6", "1"),
    ] {
        if let Err(e) = netns::sysctl_set(ns, k, v) {
            log::debug!("{ns}: {k}: {e:#} (IPv6 not available, ignored)");
        }
    }
    netns::sysctl_set(ns, "net/ipv4/conf/all/rp_filter", "0")?;
    netns::sysctl_set(ns, "net/ipv4/conf/default/rp_filter", "0")?;
    Ok(())
}

/// Stops every process inside `ns`: SIGTERM, up to 2 s grace, then SIGKILL (and up to
/// 1 s for the killed to be gone).
pub(crate) fn kill_all_in(ns: &str) {
    let signal_all = |sig: libc::c_int| {
        let pids = netns::pids(ns);
        for &p in &pids {
            // SAFETY: kill(2) with a pid read from `ip netns pids`; ESRCH is harmless.
            unsafe { libc::kill(p as libc::pid_t, sig) };
        }
        pids.len()
    };
    if signal_all(libc::SIGTERM) == 0 {
        return;
    }
    let gone_within = |limit: Duration| {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline && !netns::pids(ns).is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    gone_within(Duration::from_secs(2));
    if signal_all(libc::SIGKILL) > 0 {
        // Killed processes are gone before the caller removes what they held.
        gone_within(Duration::from_secs(1));
    }
}

/// Owns a testbed and removes it when dropped (tests, demo, benchmarks), even on
/// error or panic.
pub struct TestbedGuard {
    tb: Testbed,
}

impl TestbedGuard {
    /// Builds the testbed and guards it.
    pub fn up(spec: Spec) -> anyhow::Result<Self> {
        let guard = Self {
            tb: Testbed::attach(spec.clone())?,
        };
        // If `up` fails half-way the guard still removes what was made.
        Testbed::up(spec)?;
        Ok(guard)
    }

    /// Disarms the guard: the testbed stays up (e.g. to inspect it afterwards).
    pub fn keep(self) -> Testbed {
        let tb = self.tb.clone();
        std::mem::forget(self);
        tb
    }
}

impl std::ops::Deref for TestbedGuard {
    type Target = Testbed;
    fn deref(&self) -> &Testbed {
        &self.tb
    }
}

impl Drop for TestbedGuard {
    fn drop(&mut self) {
        if let Err(e) = self.tb.down() {
            log::warn!("testbed {:?} teardown: {e:#}", self.tb.spec.prefix);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        let s = Spec {
            prefix: "t1-".into(),
            subnet_base: 77,
        };
        assert_eq!(s.ns(Host::Edge), "t1-edge");
        let tb = Testbed::attach(s).unwrap();
        assert_eq!(tb.src_ip().to_string(), "10.77.1.1");
        assert_eq!(tb.edge_inside_ip().to_string(), "10.77.1.2");
        assert_eq!(tb.edge_outside_ip().to_string(), "10.77.2.1");
        assert_eq!(tb.cloud_ip().to_string(), "10.77.2.2");
        assert_eq!(tb.dst_ip().to_string(), "10.77.3.2");
        assert_eq!(tb.nat_ip().to_string(), "10.77.2.100");
    }

    #[test]
    fn bad_specs_are_rejected() {
        for (p, b) in [("", 1), ("a b", 1), ("x;rm", 1), ("ok-", 0), ("ok-", 255)] {
            let s = Spec {
                prefix: p.into(),
                subnet_base: b,
            };
            assert!(s.validate().is_err(), "{p:?} {b}");
        }
        assert!(Spec::default().validate().is_ok());
    }

    #[test]
    fn wires_cover_the_line_once() {
        let ends: Vec<_> = WIRES.iter().flat_map(|w| [w.a.0, w.b.0]).collect();
        assert_eq!(
            ends,
            [
                Host::Src,
                Host::Edge,
                Host::Edge,
                Host::Cloud,
                Host::Cloud,
                Host::Dst
            ]
        );
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn testbed_up_twice_status_down() {
        let spec = Spec {
            prefix: "nfxut-tb-".into(),
            subnet_base: 231,
        };
        {
            let tb = TestbedGuard::up(spec.clone()).unwrap();
            Testbed::up(spec.clone()).unwrap();
            let st = tb.status().unwrap();
            assert!(st.complete(), "{st}");
            let edge = &st.hosts[1];
            assert_eq!(edge.forwarding, Some(true));
            assert!(edge
                .ifaces
                .iter()
                .any(|i| i.name == "to-src" && i.addrs == ["10.231.1.2/24"]));
            tb.set_edge_forwarding(false).unwrap();
            assert!(!tb.edge_forwarding().unwrap());
            let (a, b) = tb.edge_peer_macs().unwrap();
            assert_eq!(a.len(), 17);
            assert_ne!(a, b);
        }
        for h in Host::ALL {
            assert!(!netns::exists(&spec.ns(h)));
        }
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn down_leaves_foreign_namespaces_alone() {
        let spec = Spec {
            prefix: "nfxut-foreign-".into(),
            subnet_base: 232,
        };
        let ns = spec.ns(Host::Src);
        struct Cleanup(String);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let _ = process::run(&["ip", "netns", "del", &self.0], Duration::from_secs(5));
            }
        }
        let _cleanup = Cleanup(ns.clone());
        process::run(&["ip", "netns", "add", &ns], Duration::from_secs(5)).unwrap();
        netns::ip(
            &ns,
            &["link", "add", "x0", "type", "veth", "peer", "name", "x1"],
        )
        .unwrap();
        let rep = Testbed::attach(spec.clone()).unwrap().down().unwrap();
        assert_eq!(rep.skipped, std::slice::from_ref(&ns));
        assert!(netns::exists(&ns));
        let err = Testbed::up(spec).unwrap_err();
        assert!(format!("{err:#}").contains("not made by nfx"));
    }
}
