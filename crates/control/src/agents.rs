//! The controller's side of its host agents: one HTTPS client per agent (from the
//! management namespace), the [`Programmer`] that turns a service path into each host's
//! part of it ([`HostPath`]) and sends them in an order that never leaves a gap, and the
//! heartbeat monitor that finds dead agents and lost instances and has the controller
//! re-place what they carried.
//!
//! A service's hosts, in order: its ingress, the hosts of its hops, its egress, and
//! between consecutive ones the hosts on the path of least link latency that avoids hosts
//! that are down. A host may appear only once (a path that comes back to a host cannot be
//! told apart by the selector there).

use crate::controller::Controller;
use crate::enforcer::{Programmer, Steered, TunnelEnds};
use crate::hostagent::steering::HostPath;
use crate::mediator::{is_down, DownHosts};
use crate::netns_exec::NetnsExecutor;
use crate::vnfm::remote::{AgentLink, RemoteVnfm};
use nfx_model::{Infrastructure, Tier};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// How often each agent is asked for its heartbeat.
pub const HEARTBEAT: Duration = Duration::from_millis(250);
/// Time limit of one heartbeat call.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(700);
/// An agent that has not answered for this long is down.
pub const DEAD_AFTER: Duration = Duration::from_secs(2);
/// How often services are checked for re-placement when nothing changed (retries).
const HEAL_EVERY: Duration = Duration::from_secs(5);
/// Time limit of one agent's `/metrics` answer when the controller is scraped.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// Time limit of a management call (deploying a worker included).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The agents of an infrastructure.
pub struct Agents {
    infra: Infrastructure,
    clients: BTreeMap<String, Arc<RemoteVnfm>>,
    links: BTreeMap<String, AgentLink>,
    down: DownHosts,
}

impl Agents {
    /// Clients for every host with an agent in `infra`: `tls` for https, connections
    /// opened from `netns` (threads entered there), `token` sent on every call.
    pub fn new(
        infra: &Infrastructure,
        tls: Option<Arc<rustls::ClientConfig>>,
        netns: Option<&str>,
        token: Zeroizing<String>,
        down: DownHosts,
    ) -> anyhow::Result<Self> {
        let exec = match netns {
            Some(ns) => Some(NetnsExecutor::start(ns, 4)?),
            None => None,
        };
        let mut clients = BTreeMap::new();
        let mut links = BTreeMap::new();
        for h in &infra.hosts {
            let Some(url) = &h.agent else { continue };
            if url.starts_with("https://") && tls.is_none() {
                anyhow::bail!("host {}: {url} needs the controller's TLS material", h.id);
            }
            let link = AgentLink {
                base: url.clone(),
                token: Some(token.clone()),
                tls: tls.clone(),
                exec: exec.clone(),
                timeout: CALL_TIMEOUT,
            };
            clients.insert(h.id.clone(), Arc::new(RemoteVnfm::with_link(link.clone())));
            links.insert(h.id.clone(), link);
        }
        Ok(Agents {
            infra: infra.clone(),
            clients,
            links,
            down,
        })
    }

    /// The client of each host's agent.
    pub fn clients(&self) -> &BTreeMap<String, Arc<RemoteVnfm>> {
        &self.clients
    }

    /// Each host's part of `path` for the hosts run by agents, in path order.
    pub fn host_paths(&self, path: &Steered) -> Result<Vec<(String, HostPath)>, String> {
        let down = self.down.read().map(|d| d.clone()).unwrap_or_default();
        host_paths(&self.infra, &down, path, |h| self.clients.contains_key(h))
    }

    fn client(&self, host: &str) -> Result<&Arc<RemoteVnfm>, String> {
        self.clients
            .get(host)
            .ok_or_else(|| format!("host {host} has no agent"))
    }

    /// Brings `host`'s paths in line with `all` (after a restart of either side).
    pub fn sync_host(&self, host: &str, all: &BTreeMap<String, Steered>) -> Result<(), String> {
        let mut mine = BTreeMap::new();
        for (svc, p) in all {
            match self.host_paths(p) {
                Ok(parts) => {
                    if let Some((_, hp)) = parts.into_iter().find(|(h, _)| h == host) {
                        mine.insert(svc.clone(), hp);
                    }
                }
                Err(e) => log::warn!("sync of {host}: service {svc}: {e}"),
            }
        }
        self.client(host)?
            .sync_paths(&mine)
            .map_err(|e| format!("{host}: {e}"))
    }

    /// Every agent's `/metrics` text, fetched in parallel with [`SCRAPE_TIMEOUT`] each;
    /// an agent that did not answer in time gives its error.
    pub fn scrape_metrics(&self) -> Vec<(String, Result<String, String>)> {
        let calls: Vec<_> = self
            .links
            .iter()
            .map(|(host, link)| {
                let mut link = link.clone();
                link.timeout = SCRAPE_TIMEOUT;
                let client = RemoteVnfm::with_link(link);
                let h = std::thread::Builder::new()
                    .name(format!("scrape-{host}"))
                    .spawn(move || client.metrics().map_err(|e| e.to_string()));
                (host.clone(), h)
            })
            .collect();
        calls
            .into_iter()
            .map(|(host, h)| {
                let got = match h {
                    Ok(h) => h
                        .join()
                        .unwrap_or_else(|_| Err("scrape thread panicked".into())),
                    Err(e) => Err(format!("cannot start the scrape thread: {e}")),
                };
                (host, got)
            })
            .collect()
    }

    /// Starts one heartbeat thread per agent; they report to `ctl` until it is dropped.
    pub fn start_monitor(self: &Arc<Self>, ctl: &Arc<Controller>) {
        for (host, link) in &self.links {
            let (me, ctl, host) = (Arc::downgrade(self), Arc::downgrade(ctl), host.clone());
            let mut link = link.clone();
            link.timeout = HEARTBEAT_TIMEOUT;
            let spawned = std::thread::Builder::new()
                .name(format!("heartbeat-{host}"))
                .spawn(move || monitor(me, ctl, host, link));
            if let Err(e) = spawned {
                log::error!("cannot start the heartbeat thread: {e}");
            }
        }
    }
}

/// What one heartbeat thread knows of its agent.
struct Beat {
    last_ok: Instant,
    pid: Option<u32>,
    down: bool,
    last_heal: Instant,
}

/// The heartbeat loop of one agent: answers keep it up (and a new agent process, or one
/// back from down, gets the controller's paths); silence for [`DEAD_AFTER`] marks it
/// down, its instances lost, and has the controller re-place what it carried; lost
/// instances it reports are marked lost and re-placed too.
fn monitor(me: Weak<Agents>, ctl: Weak<Controller>, host: String, mut link: AgentLink) {
    if let Some(x) = link.exec.take() {
        if let Err(e) = nfx_io::netns::enter_netns(x.netns()) {
            log::error!("heartbeat of {host}: {e}");
            return;
        }
    }
    let client = RemoteVnfm::with_link(link);
    let mut b = Beat {
        last_ok: Instant::now(),
        pid: None,
        down: false,
        last_heal: Instant::now(),
    };
    loop {
        let t = Instant::now();
        let (Some(agents), Some(ctl)) = (me.upgrade(), ctl.upgrade()) else {
            return;
        };
        let changed = match client.health() {
            Ok(h) => agent_answered(&agents, &ctl, &host, &mut b, h),
            Err(e) => agent_silent(&agents, &ctl, &host, &mut b, &e.to_string()),
        };
        if changed || b.last_heal.elapsed() >= HEAL_EVERY {
            b.last_heal = Instant::now();
            if let Err(e) = ctl.heal() {
                log::warn!("re-placing services: {e}");
            }
        }
        drop((agents, ctl));
        std::thread::sleep(HEARTBEAT.saturating_sub(t.elapsed()));
    }
}

fn agent_answered(
    agents: &Agents,
    ctl: &Controller,
    host: &str,
    b: &mut Beat,
    h: crate::hostagent::Health,
) -> bool {
    b.last_ok = Instant::now();
    let figures = match (&h.energy, &h.energy_error) {
        (_, Some(e)) => Some(crate::energy::HostFigures::Unmetered(e.clone())),
        (Some(r), None) => Some(crate::energy::HostFigures::Report(r.clone())),
        (None, None) => None,
    };
    if figures.is_some() {
        ctl.record_energy(host, figures);
    }
    let mut changed = false;
    if b.down {
        b.down = false;
        if let Ok(mut d) = agents.down.write() {
            d.remove(host);
        }
        ctl.event("agent.up", serde_json::json!({"host": host, "pid": h.pid}));
        ctl.remove_orphans(host);
        changed = true;
    }
    if b.pid != Some(h.pid) {
        match agents.sync_host(host, &ctl.with_mediator(|m| m.enforcer().all())) {
            Ok(()) => b.pid = Some(h.pid),
            Err(e) => log::warn!("bringing {host}'s paths in line: {e}"),
        }
    }
    let mut by_reason: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for l in &h.lost {
        by_reason
            .entry(&l.reason)
            .or_default()
            .push(l.instance.clone());
    }
    for (reason, ids) in by_reason {
        match ctl.mark_lost(host, &ids, reason) {
            Ok(marked) => changed |= !marked.is_empty(),
            Err(e) => log::warn!("marking lost instances of {host}: {e}"),
        }
    }
    changed
}

fn agent_silent(agents: &Agents, ctl: &Controller, host: &str, b: &mut Beat, err: &str) -> bool {
    let silent = b.last_ok.elapsed();
    if b.down || silent < DEAD_AFTER {
        return false;
    }
    b.down = true;
    b.pid = None;
    ctl.record_energy(host, None);
    if let Ok(mut d) = agents.down.write() {
        d.insert(host.to_string());
    }
    log::warn!("agent of {host} silent for {silent:?}: down ({err})");
    ctl.event(
        "agent.down",
        serde_json::json!({"host": host, "silent_ms": silent.as_millis() as u64, "error": err}),
    );
    let on_host: Vec<String> = ctl.with_mediator(|m| {
        m.instances()
            .iter()
            .filter(|(_, r)| r.host == host)
            .map(|(id, _)| id.clone())
            .collect()
    });
    if let Err(e) = ctl.mark_lost(host, &on_host, &format!("agent of {host} down: {err}")) {
        log::warn!("marking the instances of {host} lost: {e}");
    }
    true
}

impl Programmer for Agents {
    fn install(
        &self,
        service: &str,
        now: &Steered,
        before: Option<&Steered>,
    ) -> Result<Vec<String>, String> {
        let new = self.host_paths(now)?;
        // Downstream first: when a host switches, the hosts after it already carry the
        // new path.
        for (host, hp) in new.iter().rev() {
            self.client(host)?
                .put_path(service, hp)
                .map_err(|e| format!("{host}: {e}"))?;
        }
        if let Some(b) = before {
            let old = match self.host_paths(b) {
                Ok(o) => o.into_iter().map(|(h, _)| h).collect(),
                Err(_) => self.clients.keys().cloned().collect::<Vec<_>>(),
            };
            self.remove_from(
                service,
                old.iter().filter(|h| !new.iter().any(|(n, _)| n == *h)),
            );
        }
        Ok(new.into_iter().map(|(h, _)| h).collect())
    }

    fn withdraw(&self, service: &str, path: Option<&Steered>) -> Result<(), String> {
        let hosts: Vec<String> = match path.map(|p| self.host_paths(p)) {
            Some(Ok(parts)) => parts.into_iter().map(|(h, _)| h).collect(),
            _ => self.clients.keys().cloned().collect(),
        };
        // Upstream first: traffic stops entering before the hosts after it close.
        for host in &hosts {
            if is_down(&self.down, host) {
                continue;
            }
            self.client(host)?
                .delete_path(service)
                .map_err(|e| format!("{host}: {e}"))?;
        }
        Ok(())
    }

    fn check(&self, now: &Steered) -> Result<(), String> {
        self.host_paths(now).map(drop)
    }
}

impl Agents {
    /// Removes `service` from `hosts` (after its new path is in place); a host that is
    /// down or fails is logged and brought in line when it answers again.
    fn remove_from<'a>(&self, service: &str, hosts: impl Iterator<Item = &'a String>) {
        for host in hosts {
            if is_down(&self.down, host) {
                continue;
            }
            if let Some(c) = self.clients.get(host) {
                if let Err(e) = c.delete_path(service) {
                    log::warn!("removing the old path of {service} from {host}: {e}");
                }
            }
        }
    }
}

/// The hosts of `path` in order (see the module doc), avoiding `down` between waypoints.
pub(crate) fn host_route(
    infra: &Infrastructure,
    down: &BTreeSet<String>,
    path: &Steered,
) -> Result<Vec<String>, String> {
    let ends = path
        .ends
        .as_ref()
        .ok_or("the path has no ingress/egress recorded")?;
    let mut points = vec![ends.ingress.clone()];
    points.extend(path.hops.iter().map(|h| h.host.clone()));
    points.push(ends.egress.clone());
    points.dedup();
    let mut route = vec![points[0].clone()];
    for w in points.windows(2) {
        let leg = shortest(infra, down, &w[0], &w[1]).ok_or_else(|| {
            format!(
                "no route from {} to {} around the hosts that are down",
                w[0], w[1]
            )
        })?;
        route.extend(leg.into_iter().skip(1));
    }
    let mut seen = BTreeSet::new();
    if let Some(h) = route.iter().find(|h| !seen.insert(h.as_str())) {
        return Err(format!(
            "the path visits host {h} twice ({})",
            route.join(" → ")
        ));
    }
    Ok(route)
}

/// Each agent host's [`HostPath`] of `path` (`agent(h)`: whether host `h` has one).
fn host_paths(
    infra: &Infrastructure,
    down: &BTreeSet<String>,
    path: &Steered,
    agent: impl Fn(&str) -> bool,
) -> Result<Vec<(String, HostPath)>, String> {
    let route = host_route(infra, down, path)?;
    if !route.iter().any(|h| agent(h)) {
        return Ok(Vec::new());
    }
    // The source side is matched only where no NAT has rewritten the frames yet, so
    // the selector as they carry it there (a port forward's target) serves every host.
    let selector = path
        .ends
        .as_ref()
        .and_then(|e| e.inside.clone().or_else(|| e.selector.clone()))
        .ok_or("the service has no selector: hosts run by agents forward only a service's selected traffic")?;
    let forwarded = path.ends.as_ref().is_some_and(|e| e.inside.is_some());
    let tunnel = path.ends.as_ref().and_then(|e| e.tunnel.as_ref());
    if let Some(t) = tunnel {
        if !route.windows(2).any(|w| w[0] == t.from && w[1] == t.to) {
            return Err(format!(
                "the path ({}) no longer goes from {} straight to {}, its tunnel's ends",
                route.join(" → "),
                t.from,
                t.to
            ));
        }
    }
    let mut out = Vec::new();
    for (i, host) in route.iter().enumerate() {
        if !agent(host) {
            continue;
        }
        let mut stages: Vec<String> = Vec::new();
        let mut after_nat: Vec<String> = Vec::new();
        let mut instances: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, h) in path
            .hops
            .iter()
            .enumerate()
            .filter(|(_, h)| &h.host == host)
        {
            let tier = infra.device(&h.device).map(|d| d.tier);
            if !matches!(tier, Some(Tier::Software | Tier::Table)) {
                return Err(format!(
                    "hop {} on device {} ({}) cannot be steered by an agent",
                    h.instance,
                    h.device,
                    tier.map(Tier::as_str).unwrap_or("unknown")
                ));
            }
            if stages.last() != Some(&h.device) {
                stages.push(h.device.clone());
                if path.hops[..k].iter().any(|p| p.function == "nat") {
                    after_nat.push(h.device.clone());
                }
            }
            // A worker classifies a frame from outside by its reversed 5-tuple: at a
            // software NAT forwarding the selector's ports, connections opened from
            // outside carry the public endpoint, the replies from inside the target,
            // which only the destination side matches alike.
            let nat_worker = h.function == "nat" && matches!(tier, Some(Tier::Software));
            if forwarded && nat_worker && !after_nat.contains(&h.device) {
                after_nat.push(h.device.clone());
            }
            instances
                .entry(h.device.clone())
                .or_default()
                .push(h.instance.clone());
        }
        let prev = i.checked_sub(1).map(|k| route[k].clone());
        let next = route.get(i + 1).cloned();
        let (tunnel_prev, tunnel_next) =
            tunnel_sides(tunnel, host, prev.as_deref(), next.as_deref());
        out.push((
            host.clone(),
            HostPath {
                selector: selector.clone(),
                prev,
                next,
                stages,
                instances,
                after_nat,
                nat_before: path
                    .hops
                    .iter()
                    .any(|h| h.function == "nat" && route[..i].contains(&h.host)),
                tunnel_next,
                tunnel_prev,
            },
        ));
    }
    Ok(out)
}

/// On `host` of a path with `tunnel`: the tunnel endpoints its traffic arrives from
/// `prev` and leaves to `next` through (`(tunnel_prev, tunnel_next)`).
fn tunnel_sides(
    tunnel: Option<&TunnelEnds>,
    host: &str,
    prev: Option<&str>,
    next: Option<&str>,
) -> (Option<String>, Option<String>) {
    let Some(t) = tunnel else {
        return (None, None);
    };
    let out = (host == t.from && next == Some(t.to.as_str())).then(|| t.from_instance.clone());
    let inn = (host == t.to && prev == Some(t.from.as_str())).then(|| t.to_instance.clone());
    (inn, out)
}

/// The host sequence of least total link latency from `a` to `b` not crossing `down`
/// (except at its ends); ties go to the lower host index.
fn shortest(
    infra: &Infrastructure,
    down: &BTreeSet<String>,
    a: &str,
    b: &str,
) -> Option<Vec<String>> {
    let n = infra.hosts.len();
    let (s, t) = (infra.host_index(a)?, infra.host_index(b)?);
    let usable = |v: usize| v == s || v == t || !down.contains(&infra.hosts[v].id);
    let mut dist = vec![f64::INFINITY; n];
    let mut prev = vec![usize::MAX; n];
    let mut done = vec![false; n];
    dist[s] = 0.0;
    loop {
        let u = (0..n)
            .filter(|&v| !done[v] && dist[v].is_finite())
            .min_by(|&x, &y| dist[x].total_cmp(&dist[y]).then(x.cmp(&y)))?;
        if u == t {
            break;
        }
        done[u] = true;
        for l in &infra.links {
            let (x, y) = (infra.host_index(&l.a)?, infra.host_index(&l.b)?);
            let v = if x == u {
                y
            } else if y == u {
                x
            } else {
                continue;
            };
            if !usable(v) || done[v] {
                continue;
            }
            let d = dist[u] + l.latency_us;
            if d < dist[v] || (d == dist[v] && u < prev[v]) {
                dist[v] = d;
                prev[v] = u;
            }
        }
    }
    let mut seq = vec![t];
    while *seq.last()? != s {
        seq.push(prev[*seq.last()?]);
    }
    seq.reverse();
    Some(seq.into_iter().map(|v| infra.hosts[v].id.clone()).collect())
}

#[cfg(test)]
mod tests;
