//! The multi-host testbed: N host namespaces joined by links (a line h1—h2—…—hN and, from
//! three hosts on, the chord h1—hN so that services have two ways between the ends; or
//! the hosts and links an infrastructure file names, see [`HostsSpec::names`]),
//! endpoint namespaces attached to hosts, and a management namespace with a veth to
//! every host, through which a controller in the root namespace reaches the hosts'
//! agents without any interface being added to the root namespace.
//!
//! Every host forwards IPv4 (`ip_forward=1`) but starts **closed**: an nftables table
//! `inet nfx_steer` whose `forward` chain has policy drop, so the kernel carries no
//! traffic between endpoints until an agent opens a deployed service's path.
//!
//! Addresses (b = subnet base): endpoint k (src = 0, dst = 1, then the extra ones) sits
//! in 10.b.(1+k).0/24 (host side .1, endpoint .2); link j (1-based) in
//! 10.b.(100+j).0/24 (its first host .1, its second .2); host i's management link in
//! 10.b.(200+i).0/24 (management side .1, host side .2).

use crate::topology::{create_ns, kill_all_in, mark_path, owned, MARK_ALIAS, MARK_DIR};
use crate::{netns, probe, process, root};
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Most hosts a testbed may have (management subnets 10.b.201–10.b.232).
pub const MAX_HOSTS: usize = 32;
/// Most endpoints (subnets 10.b.1–10.b.99).
pub const MAX_ENDPOINTS: usize = 99;
/// The nftables table (family inet) that keeps every host closed until agents open paths
/// (its rules come from the agents' steering, which the caller passes to [`up`]).
pub const STEER_TABLE: &str = "nfx_steer";
/// Interface of a host on its management link.
pub const MGMT_IFACE: &str = "mgmt0";

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostsSpec {
    /// Prefix of every namespace name.
    pub prefix: String,
    /// Second octet of every address.
    pub subnet_base: u8,
    /// Number of hosts (1..=[`MAX_HOSTS`]).
    pub hosts: usize,
    /// Endpoint names besides `src` (on the first host) and `dst` (on the last),
    /// attached round-robin.
    pub extra_endpoints: Vec<String>,
    /// Host ids in order (as an infrastructure file names them); empty: `h1`…`hN`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// The links between hosts (ids of [`HostsSpec::host_ids`]); empty: the line
    /// h1—…—hN plus, from three hosts on, the chord h1—hN.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkInfo>,
}

/// One end of a link as seen from a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Neighbor {
    /// The other host.
    pub host: String,
    /// This host's interface towards it.
    pub iface: String,
    /// The other host's address on the link.
    pub peer: Ipv4Addr,
    /// This host's address on the link.
    pub local: Ipv4Addr,
}

/// A host of the built testbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Host id (`h1`…).
    pub id: String,
    /// Its namespace.
    pub netns: String,
    /// Its address on the management link (where its agent listens).
    pub mgmt: Ipv4Addr,
    /// Its links to other hosts.
    pub neighbors: Vec<Neighbor>,
}

/// An endpoint (traffic source or sink) of the built testbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointInfo {
    /// Endpoint name.
    pub name: String,
    /// Its namespace.
    pub netns: String,
    /// Its address.
    pub address: Ipv4Addr,
    /// The host it is attached to.
    pub host: String,
    /// The host's address on the endpoint's subnet (its gateway).
    pub gateway: Ipv4Addr,
}

/// A link between two hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInfo {
    /// Lower host.
    pub a: String,
    /// Higher host.
    pub b: String,
    /// Nominal one-way latency, µs (what the infrastructure file says; the kernel's main
    /// routes follow the same shortest paths).
    pub latency_us: u32,
}

/// Nominal latency of a line link, µs.
pub const LINE_LATENCY_US: u32 = 20;
/// Nominal latency of the chord h1—hN, µs: longer than the line around, so shortest paths
/// follow the line and the chord is the way around a failed host.
pub const CHORD_LATENCY_US: u32 = 60;

/// The built testbed, as recorded in `/run/nfx/testbed/<prefix>hosts.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// What was built.
    pub spec: HostsSpec,
    /// The management namespace.
    pub mgmt_netns: String,
    /// Hosts in order.
    pub hosts: Vec<HostInfo>,
    /// Endpoints in order (src, dst, extras).
    pub endpoints: Vec<EndpointInfo>,
    /// Links.
    pub links: Vec<LinkInfo>,
    /// The directories of the BPF file system this testbed's agents pin their table
    /// chains under (one per agent with table devices, [`record_pins`]): a chain pinned
    /// there outlives its agent by design, so [`down`] removes them once the agents are
    /// stopped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bpf_pins: Vec<PathBuf>,
}

impl HostsSpec {
    /// Checks prefix, subnet base, host count and endpoint names.
    pub fn validate(&self) -> anyhow::Result<()> {
        crate::Spec {
            prefix: self.prefix.clone(),
            subnet_base: self.subnet_base,
        }
        .validate()?;
        if self.hosts == 0 || self.hosts > MAX_HOSTS {
            bail!("--hosts {}: must be 1..={MAX_HOSTS}", self.hosts);
        }
        self.validate_shape()?;
        let ids = self.host_ids();
        let mut names: Vec<&str> = vec!["src", "dst"];
        for e in &self.extra_endpoints {
            if !name_ok(e)
                || ids.contains(e)
                || e.starts_with('h') && e[1..].parse::<usize>().is_ok()
            {
                bail!("endpoint name {e:?}: use 1-12 of a-z A-Z 0-9 -, not a host name or mgmt");
            }
            if names.contains(&e.as_str()) {
                bail!("endpoint {e:?} is given twice");
            }
            names.push(e);
        }
        if names.len() > MAX_ENDPOINTS {
            bail!("at most {MAX_ENDPOINTS} endpoints");
        }
        Ok(())
    }

    /// Checks the host names and links, when given: unique names that fit interface
    /// names, links between two different named hosts, at most one per pair, and every
    /// host reachable from the first.
    fn validate_shape(&self) -> anyhow::Result<()> {
        if !self.names.is_empty() && self.names.len() != self.hosts {
            bail!("{} host names for {} hosts", self.names.len(), self.hosts);
        }
        for (i, n) in self.names.iter().enumerate() {
            if !name_ok(n) {
                bail!("host name {n:?}: use 1-12 of a-z A-Z 0-9 -, not mgmt");
            }
            if self.names[..i].contains(n) {
                bail!("host {n:?} is given twice");
            }
        }
        let ids = self.host_ids();
        let idx = |id: &str| ids.iter().position(|h| h == id);
        let mut seen = std::collections::BTreeSet::new();
        for l in &self.links {
            let (Some(a), Some(b)) = (idx(&l.a), idx(&l.b)) else {
                bail!(
                    "link {}—{}: both ends must be hosts of the testbed",
                    l.a,
                    l.b
                );
            };
            if a == b || !seen.insert((a.min(b), a.max(b))) {
                bail!("link {}—{}: a loop or given twice", l.a, l.b);
            }
        }
        let mut reached = vec![false; ids.len()];
        let mut todo = vec![0];
        while let Some(v) = todo.pop() {
            if !std::mem::replace(&mut reached[v], true) {
                todo.extend(self.links().iter().filter_map(|&(a, b, _)| {
                    (a - 1 == v)
                        .then_some(b - 1)
                        .or((b - 1 == v).then_some(a - 1))
                }));
            }
        }
        if let Some(i) = reached.iter().position(|r| !r) {
            bail!("host {} is not linked to the others", ids[i]);
        }
        Ok(())
    }

    fn addr(&self, subnet: u8, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet_base, subnet, host)
    }

    /// Host ids: the given names, else `h1`…`hN`.
    pub fn host_ids(&self) -> Vec<String> {
        if self.names.is_empty() {
            (1..=self.hosts).map(|i| format!("h{i}")).collect()
        } else {
            self.names.clone()
        }
    }

    /// The links as (1-based host, 1-based host, latency µs): the given ones, else the
    /// line plus the chord h1—hN from three hosts on.
    pub fn links(&self) -> Vec<(usize, usize, u32)> {
        if !self.links.is_empty() {
            let ids = self.host_ids();
            let idx = |id: &str| ids.iter().position(|h| h == id).map_or(0, |i| i + 1);
            return self
                .links
                .iter()
                .map(|l| (idx(&l.a), idx(&l.b), l.latency_us))
                .collect();
        }
        let mut l: Vec<(usize, usize, u32)> = (1..self.hosts)
            .map(|i| (i, i + 1, LINE_LATENCY_US))
            .collect();
        if self.hosts >= 3 {
            l.push((1, self.hosts, CHORD_LATENCY_US));
        }
        l
    }

    /// The namespace of endpoint `name`: `<prefix><name>`, or `<prefix><name>-ep` when
    /// a host has that name (an infrastructure's `src` and `dst` hosts).
    fn endpoint_netns(&self, name: &str) -> String {
        if self.host_ids().iter().any(|h| h == name) {
            format!("{}{name}-ep", self.prefix)
        } else {
            format!("{}{name}", self.prefix)
        }
    }

    /// The host's interface towards endpoint `name`: `to-<name>`, or `ep-<name>` when a
    /// host has that name (`to-<host>` is the interface of a link).
    fn endpoint_iface(&self, name: &str) -> String {
        if self.host_ids().iter().any(|h| h == name) {
            format!("ep-{name}")
        } else {
            format!("to-{name}")
        }
    }

    /// Endpoint names with the (1-based) host each is attached to.
    pub fn endpoints(&self) -> Vec<(String, usize)> {
        let mut v = vec![("src".to_string(), 1), ("dst".to_string(), self.hosts)];
        for (k, e) in self.extra_endpoints.iter().enumerate() {
            v.push((e.clone(), k % self.hosts + 1));
        }
        v
    }

    /// Where the layout of this testbed is recorded.
    pub fn record_path(prefix: &str) -> PathBuf {
        PathBuf::from(MARK_DIR).join(format!("{prefix}hosts.json"))
    }

    /// Everything this spec builds, without building it.
    pub fn layout(&self) -> Layout {
        let ns = |name: &str| format!("{}{name}", self.prefix);
        let ids = self.host_ids();
        let mut hosts: Vec<HostInfo> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| HostInfo {
                id: id.clone(),
                netns: ns(id),
                mgmt: self.addr(200 + i as u8 + 1, 2),
                neighbors: Vec::new(),
            })
            .collect();
        let mut links = Vec::new();
        for (j, &(a, b, latency_us)) in self.links().iter().enumerate() {
            let subnet = 100 + j as u8 + 1;
            let (la, lb) = (self.addr(subnet, 1), self.addr(subnet, 2));
            hosts[a - 1].neighbors.push(Neighbor {
                host: ids[b - 1].clone(),
                iface: format!("to-{}", ids[b - 1]),
                peer: lb,
                local: la,
            });
            hosts[b - 1].neighbors.push(Neighbor {
                host: ids[a - 1].clone(),
                iface: format!("to-{}", ids[a - 1]),
                peer: la,
                local: lb,
            });
            links.push(LinkInfo {
                a: ids[a - 1].clone(),
                b: ids[b - 1].clone(),
                latency_us,
            });
        }
        let endpoints = self
            .endpoints()
            .into_iter()
            .enumerate()
            .map(|(k, (name, h))| EndpointInfo {
                netns: self.endpoint_netns(&name),
                address: self.addr(1 + k as u8, 2),
                gateway: self.addr(1 + k as u8, 1),
                host: ids[h - 1].clone(),
                name,
            })
            .collect();
        Layout {
            spec: self.clone(),
            mgmt_netns: ns("mgmt"),
            hosts,
            endpoints,
            links,
            bpf_pins: Vec::new(),
        }
    }
}

impl Layout {
    /// Every namespace of the testbed.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self.hosts.iter().map(|h| h.netns.clone()).collect();
        v.extend(self.endpoints.iter().map(|e| e.netns.clone()));
        v.push(self.mgmt_netns.clone());
        v
    }

    /// The host with id `id`.
    pub fn host(&self, id: &str) -> Option<&HostInfo> {
        self.hosts.iter().find(|h| h.id == id)
    }

    /// The endpoint named `name`.
    pub fn endpoint(&self, name: &str) -> Option<&EndpointInfo> {
        self.endpoints.iter().find(|e| e.name == name)
    }

    /// Latency of the link between hosts `a` and `b`.
    fn link_latency(&self, a: &str, b: &str) -> Option<u32> {
        self.links
            .iter()
            .find(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a))
            .map(|l| l.latency_us)
    }

    /// Next hop (neighbor) from host index `from` towards host index `to` on the path of
    /// least nominal latency (ties to the lower host), `None` when `from == to`.
    fn next_hop(&self, from: usize, to: usize) -> Option<&Neighbor> {
        if from == to {
            return None;
        }
        let idx = |id: &str| self.hosts.iter().position(|h| h.id == id);
        // Dijkstra from `to`; the neighbor of `from` closest to `to` is the next hop.
        let mut dist = vec![u64::MAX; self.hosts.len()];
        dist[to] = 0;
        let mut q = std::collections::BTreeSet::from([(0u64, to)]);
        while let Some((d, v)) = q.pop_first() {
            for n in &self.hosts[v].neighbors {
                let u = idx(&n.host)?;
                let w = u64::from(self.link_latency(&self.hosts[v].id, &n.host)?);
                if d + w < dist[u] {
                    q.remove(&(dist[u], u));
                    dist[u] = d + w;
                    q.insert((dist[u], u));
                }
            }
        }
        self.hosts[from]
            .neighbors
            .iter()
            .filter_map(|n| {
                let u = idx(&n.host)?;
                let w = u64::from(self.link_latency(&self.hosts[from].id, &n.host)?);
                Some((dist[u].saturating_add(w), u, n))
            })
            .min_by_key(|&(d, u, _)| (d, u))
            .map(|(_, _, n)| n)
    }
}

/// Whether `n` fits as a host or endpoint name: 1-12 of a-z A-Z 0-9 - (the interface
/// names `to-<name>` stay within the kernel's 15 bytes), and not the management
/// namespace's `mgmt`.
fn name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 12
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && n != "mgmt"
}

/// Builds the testbed (idempotent: completes or repairs what exists) and records its
/// layout. Each host gets `closed` (the agents' nftables table with no path) before its
/// kernel forwards. Agents are not started here (see `nfx testbed up --hosts`).
pub fn up(spec: &HostsSpec, closed: &str) -> anyhow::Result<Layout> {
    root::require_root()?;
    spec.validate()?;
    let mut lay = spec.layout();
    build(&lay, closed)
        .with_context(|| format!("building the {}-host testbed {:?}", spec.hosts, spec.prefix))?;
    // A rebuild keeps the pins of the agents that may still run from the last one.
    lay.bpf_pins = recorded(&spec.prefix)
        .map(|l| l.bpf_pins)
        .unwrap_or_default();
    let rec = HostsSpec::record_path(&spec.prefix);
    std::fs::write(&rec, serde_json::to_vec_pretty(&lay)?)
        .with_context(|| format!("writing {}", rec.display()))?;
    Ok(lay)
}

fn build(lay: &Layout, closed: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(MARK_DIR).with_context(|| format!("creating {MARK_DIR}"))?;
    for ns in lay.namespaces() {
        create_ns(&ns)?;
    }
    let s = &lay.spec;
    for (k, e) in lay.endpoints.iter().enumerate() {
        let h = lay.host(&e.host).context("endpoint host")?;
        let subnet = 1 + k as u8;
        wire(
            (&h.netns, &s.endpoint_iface(&e.name), s.addr(subnet, 1)),
            (&e.netns, "veth0", s.addr(subnet, 2)),
        )?;
        netns::ip(
            &e.netns,
            &["route", "replace", "default", "via", &e.gateway.to_string()],
        )?;
    }
    for (j, l) in lay.links.iter().enumerate() {
        let subnet = 100 + j as u8 + 1;
        let (a, b) = (
            lay.host(&l.a).context("link")?,
            lay.host(&l.b).context("link")?,
        );
        wire(
            (&a.netns, &format!("to-{}", b.id), s.addr(subnet, 1)),
            (&b.netns, &format!("to-{}", a.id), s.addr(subnet, 2)),
        )?;
    }
    for (i, h) in lay.hosts.iter().enumerate() {
        wire(
            (
                &lay.mgmt_netns,
                &format!("m-{}", h.id),
                s.addr(200 + i as u8 + 1, 1),
            ),
            (&h.netns, MGMT_IFACE, h.mgmt),
        )?;
        close_forwarding(&h.netns, closed)?;
        netns::sysctl_set(&h.netns, "net/ipv4/ip_forward", "1")?;
        for (k, e) in lay.endpoints.iter().enumerate() {
            let Some(n) = lay.next_hop(
                i,
                lay.hosts
                    .iter()
                    .position(|x| x.id == e.host)
                    .context("host")?,
            ) else {
                continue;
            };
            let net = format!("{}/24", s.addr(1 + k as u8, 0));
            netns::ip(
                &h.netns,
                &["route", "replace", &net, "via", &n.peer.to_string()],
            )?;
        }
    }
    warm(lay)
}

/// A veth pair between two namespaces with an address on each end (a /24).
fn wire(a: (&str, &str, Ipv4Addr), b: (&str, &str, Ipv4Addr)) -> anyhow::Result<()> {
    let has = |ns: &str, ifname: &str| -> anyhow::Result<bool> {
        Ok(netns::links(ns)?.iter().any(|l| l.ifname == ifname))
    };
    if !has(a.0, a.1)? {
        if has(b.0, b.1)? {
            netns::ip(b.0, &["link", "del", b.1])?;
        }
        netns::ip(
            a.0,
            &[
                "link", "add", a.1, "type", "veth", "peer", "name", b.1, "netns", b.0,
            ],
        )?;
    }
    for (ns, ifname, addr) in [a, b] {
        netns::ip(ns, &["link", "set", "dev", ifname, "alias", MARK_ALIAS])?;
        netns::ip(
            ns,
            &["addr", "replace", &format!("{addr}/24"), "dev", ifname],
        )?;
        netns::ip(ns, &["link", "set", "dev", ifname, "up"])?;
    }
    Ok(())
}

/// Loads `closed` (an nftables script that drops every forwarded packet in table
/// [`STEER_TABLE`]) in `ns` unless the table exists (an agent may hold paths in it).
fn close_forwarding(ns: &str, closed: &str) -> anyhow::Result<()> {
    let have = netns::exec(ns, &["nft", "list", "tables"], Duration::from_secs(10))?;
    if have
        .lines()
        .any(|l| l.trim() == format!("table inet {STEER_TABLE}"))
    {
        return Ok(());
    }
    let mut cmd = netns::command(ns, &["nft", "-f", "-"]);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().context("starting nft")?;
    use std::io::Write;
    child
        .stdin
        .take()
        .context("nft stdin")?
        .write_all(closed.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("{ns}: nft: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Resolves the neighbors of every link once (both directions) so the first packet of a
/// measurement does not wait for ARP.
fn warm(lay: &Layout) -> anyhow::Result<()> {
    let limit = Duration::from_secs(3);
    for h in &lay.hosts {
        for n in &h.neighbors {
            probe::udp_reachable(&h.netns, n.peer, limit)?;
        }
    }
    for e in &lay.endpoints {
        probe::udp_reachable(&e.netns, e.gateway, limit)?;
    }
    for (i, h) in lay.hosts.iter().enumerate() {
        let m = Ipv4Addr::new(10, lay.spec.subnet_base, 200 + i as u8 + 1, 1);
        probe::udp_reachable(&h.netns, m, limit)?;
    }
    Ok(())
}

/// What [`down`] did.
#[derive(Debug, Default, Serialize)]
pub struct HostsDown {
    /// Namespaces removed.
    pub removed: Vec<String>,
    /// Namespaces left alone because nfx did not make them.
    pub skipped: Vec<String>,
    /// The agents' pin directories removed (their chains detached, their tables freed).
    pub unpinned: Vec<PathBuf>,
}

/// True when `dir` can be a pin directory of an agent of `lay`: an absolute path
/// without `..`, directly under a directory `nfx`, named after one of its hosts
/// as the table tier names an agent's pins (`nfx_fastpath::table::agent_root`). A record
/// naming anything else is not followed.
fn pin_of(lay: &Layout, dir: &Path) -> bool {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    dir.is_absolute()
        && !dir
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        && dir
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|p| p == "nfx")
        && name.is_some_and(|n| {
            lay.hosts
                .iter()
                .any(|h| nfx_fastpath::table::names_agent_root(&n, &h.id))
        })
}

/// Records `dirs` as pin directories of the agents of the testbed of `prefix` (built by
/// [`up`]), beside those recorded already, for [`down`] to remove. Each must be one
/// of an agent of its hosts ([`Layout::bpf_pins`]).
pub fn record_pins(prefix: &str, dirs: &[PathBuf]) -> anyhow::Result<()> {
    let rec = HostsSpec::record_path(prefix);
    let mut lay = recorded(prefix).with_context(|| format!("no testbed {prefix:?} recorded"))?;
    for d in dirs {
        if !pin_of(&lay, d) {
            bail!(
                "{}: not a pin directory of an agent of this testbed",
                d.display()
            );
        }
        if !lay.bpf_pins.contains(d) {
            lay.bpf_pins.push(d.clone());
        }
    }
    std::fs::write(&rec, serde_json::to_vec_pretty(&lay)?)
        .with_context(|| format!("writing {}", rec.display()))
}

/// Removes the recorded pin directories of `lay`'s agents (run after the agents are
/// stopped, so none pins again); returns those removed and, one line each, those that
/// could not be (the others are still removed).
fn unpin_agents(lay: &Layout) -> (Vec<PathBuf>, Vec<String>) {
    let (mut removed, mut failed) = (Vec::new(), Vec::new());
    for d in lay.bpf_pins.iter().filter(|d| pin_of(lay, d)) {
        if d.exists() {
            match nfx_fastpath::table::unpin(d) {
                Ok(()) => removed.push(d.clone()),
                Err(e) => failed.push(format!("unpinning {}: {e}", d.display())),
            }
        }
    }
    (removed, failed)
}

/// The recorded layout of the testbed with `prefix`, if one was built.
pub fn recorded(prefix: &str) -> Option<Layout> {
    let text = std::fs::read(HostsSpec::record_path(prefix)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Removes the recorded multi-host testbed of `prefix`: stops every process in its
/// namespaces (agents, workers), removes its agents' pinned table chains (their tcx
/// links and tables; never another agent's: only the directories [`record_pins`]
/// recorded), deletes the namespaces nfx made, forgets the record.
pub fn down(prefix: &str) -> anyhow::Result<HostsDown> {
    root::require_root()?;
    let mut rep = HostsDown::default();
    let Some(lay) = recorded(prefix) else {
        return Ok(rep);
    };
    for ns in lay.namespaces() {
        if !netns::exists(&ns) {
            let _ = std::fs::remove_file(mark_path(&ns));
            continue;
        }
        if !owned(&ns) {
            rep.skipped.push(ns);
            continue;
        }
        kill_all_in(&ns);
    }
    let (unpinned, failed) = unpin_agents(&lay);
    rep.unpinned = unpinned;
    for ns in lay.namespaces() {
        if netns::exists(&ns) && owned(&ns) {
            process::run(&["ip", "netns", "del", &ns], Duration::from_secs(10))?;
            let _ = std::fs::remove_file(mark_path(&ns));
            rep.removed.push(ns);
        }
    }
    if !failed.is_empty() {
        bail!(
            "testbed {prefix:?}: namespaces removed, but pins are left (the record is kept \
             for another `down`): {}",
            failed.join("; ")
        );
    }
    let _ = std::fs::remove_file(HostsSpec::record_path(prefix));
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(n: usize, extra: &[&str]) -> HostsSpec {
        HostsSpec {
            prefix: "t-".into(),
            subnet_base: 152,
            hosts: n,
            extra_endpoints: extra.iter().map(|s| s.to_string()).collect(),
            names: Vec::new(),
            links: Vec::new(),
        }
    }

    #[test]
    fn layout_addresses_links_and_endpoints() {
        let l = spec(3, &["web", "db"]).layout();
        assert_eq!(l.mgmt_netns, "t-mgmt");
        assert_eq!(l.links.len(), 3, "line of 2 plus the chord h1—h3");
        let h1 = l.host("h1").unwrap();
        assert_eq!(h1.mgmt.to_string(), "10.152.201.2");
        let to_h3 = h1.neighbors.iter().find(|n| n.host == "h3").unwrap();
        assert_eq!(to_h3.iface, "to-h3");
        assert_eq!(to_h3.peer.to_string(), "10.152.103.2");
        let src = l.endpoint("src").unwrap();
        assert_eq!(
            (src.host.as_str(), src.address.to_string()),
            ("h1", "10.152.1.2".into())
        );
        assert_eq!(l.endpoint("dst").unwrap().host, "h3");
        assert_eq!(l.endpoint("web").unwrap().host, "h1");
        assert_eq!(l.endpoint("db").unwrap().host, "h2");
        assert_eq!(l.endpoint("db").unwrap().address.to_string(), "10.152.4.2");
        assert_eq!(l.namespaces().len(), 3 + 4 + 1);
    }

    #[test]
    fn only_pin_directories_of_the_testbeds_own_hosts_are_followed() {
        let long = "edge".repeat(20);
        let mut names = spec(3, &[]);
        names.names = vec!["edge-1".into(), "h2".into(), long.clone()];
        let l = names.layout();
        let ok = |p: &str| pin_of(&l, Path::new(p));
        for host in ["edge-1", long.as_str()] {
            let fs = Path::new("/sys/fs/bpf");
            let root = nfx_fastpath::table::agent_root(fs, host, Path::new("/nonexistent/run"));
            assert!(
                ok(root.to_str().unwrap()),
                "{}: the agent's own name",
                root.display()
            );
        }
        assert!(ok("/sys/fs/bpf/nfx/h2-00000000000000ab"));
        assert!(
            ok("/sys/fs/bpf/nfx/edge_1-00000000000000ab"),
            "non-alphanumerics as _"
        );
        for bad in [
            "/sys/fs/bpf/nfx/h3-00000000000000ab",
            "/sys/fs/bpf/nfx/h2-00ab",
            "/sys/fs/bpf/nfx/h2-00000000000000xy",
            "/sys/fs/bpf/nfx/h2",
            "/sys/fs/bpf/nfx/h2-",
            "/sys/fs/bpf/nfx/h22-00000000000000ab",
            "/sys/fs/bpf/other/h2-00000000000000ab",
            "/sys/fs/bpf/nfx/../nfx/h2-00000000000000ab",
            "/sys/fs/bpf/nfx/h2-00000000000000ab/..",
            "sys/fs/bpf/nfx/h2-00000000000000ab",
            "/",
        ] {
            assert!(!ok(bad), "{bad}");
        }
    }

    #[test]
    fn next_hops_follow_least_latency() {
        let l = spec(4, &[]).layout();
        // h1—h2—h3—h4 (20 µs each) plus the chord h1—h4 (60 µs): around the line
        // (60) ties the chord and goes to the lower host; h2 reaches h4 via h3.
        assert_eq!(l.next_hop(0, 3).unwrap().host, "h2");
        assert_eq!(l.next_hop(0, 2).unwrap().host, "h2");
        assert_eq!(l.next_hop(1, 3).unwrap().host, "h3");
        assert_eq!(
            l.next_hop(3, 0).unwrap().host,
            "h1",
            "chord 60 ties the line: lower host"
        );
        let five = spec(5, &[]).layout();
        assert_eq!(
            five.next_hop(0, 4).unwrap().host,
            "h5",
            "chord 60 < line 80"
        );
        assert!(l.next_hop(2, 2).is_none());
        let two = spec(2, &[]).layout();
        assert_eq!(two.links.len(), 1, "no chord below three hosts");
    }

    fn shaped() -> HostsSpec {
        let link = |a: &str, b: &str| LinkInfo {
            a: a.into(),
            b: b.into(),
            latency_us: 30,
        };
        HostsSpec {
            names: ["src", "edge", "cloud", "dst"].map(String::from).to_vec(),
            links: vec![
                link("src", "edge"),
                link("edge", "cloud"),
                link("cloud", "dst"),
            ],
            ..spec(4, &[])
        }
    }

    #[test]
    fn named_hosts_take_their_links_and_endpoints_their_own_namespaces() {
        let s = shaped();
        s.validate().unwrap();
        let l = s.layout();
        assert_eq!(l.links.len(), 3, "no chord: the links given");
        assert!(l.links.iter().all(|k| k.latency_us == 30));
        let src = l.endpoint("src").unwrap();
        assert_eq!((src.host.as_str(), src.netns.as_str()), ("src", "t-src-ep"));
        assert_eq!(l.host("src").unwrap().netns, "t-src");
        assert_eq!(l.endpoint("dst").unwrap().host, "dst");
        assert_eq!(s.endpoint_iface("src"), "ep-src");
        assert_eq!(l.next_hop(0, 3).unwrap().host, "edge");
        let mut ns = l.namespaces();
        ns.sort();
        ns.dedup();
        assert_eq!(ns.len(), 4 + 2 + 1, "every namespace distinct");
    }

    #[test]
    fn bad_shapes_are_named() {
        let mut s = shaped();
        s.names[2] = "edge".into();
        assert!(s.validate().unwrap_err().to_string().contains("twice"));
        let mut s = shaped();
        s.links.pop();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("dst is not linked"), "{e}");
        let mut s = shaped();
        s.links[0].b = "moon".into();
        assert!(s.validate().unwrap_err().to_string().contains("moon"));
        let mut s = shaped();
        s.names.pop();
        assert!(s.validate().is_err());
        let mut s = shaped();
        s.extra_endpoints = vec!["cloud".into()];
        assert!(s.validate().unwrap_err().to_string().contains("cloud"));
    }

    #[test]
    fn bad_specs_are_named() {
        assert!(spec(0, &[]).validate().is_err());
        assert!(spec(MAX_HOSTS + 1, &[]).validate().is_err());
        for bad in ["src", "h2", "mgmt", "a b", "waytoolongname"] {
            let e = spec(2, &[bad]).validate().unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        spec(3, &["web"]).validate().unwrap();
    }
}
