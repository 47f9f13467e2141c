//! Real steering on one host: the host's part of every deployed service's path, as
//! nftables rules and policy routes, in the host's namespace.
//!
//! The host forwards IPv4 but its `inet nfx_steer` table's `forward` chain drops
//! everything (closed by default). For each service the controller sends a
//! [`HostPath`]: the previous and next host (none at the ingress / egress), the traffic
//! selector and the software devices whose workers the traffic crosses here, in order.
//! The path is cut into segments — prev → first worker, worker → next worker, last
//! worker → next, and the same backwards for replies — and each segment is one
//! `prerouting` rule: packets of the service arriving on the segment's interface get the
//! segment's mark; the mark selects a routing table (`ip rule fwmark M lookup M`) whose
//! default route leads into the next worker's port or to the next host; the `forward`
//! chain accepts marked packets only. A worker is attached by two veth pairs
//! ([`super::stages`]): the kernel routes into its inside port and receives its output on
//! the outside one.
//!
//! Every change re-renders the whole table in one nftables transaction, so packets see
//! either the old or the new paths of the host, never a mix: routes and rules of new marks
//! are added before the transaction, those of marks no longer used removed after it. When
//! a worker leaves a path (migration), frames still inside it are carried on for
//! [`DRAIN`] by drain rules from its outputs into the new path.
//!
//! The reply direction is matched on the destination side only (source address =
//! selector `dst`, source port = selector `dport`): a NAT in the chain changes the other
//! side's address.
//!
//! A transcoder on the host takes its stream in transparently ([`Redirect`]): UDP
//! arriving for the transcoder's `output` is redirected (`nat` prerouting, before the
//! routing decision) to its `listen_port` on the host, so a source sends to the final
//! destination and needs no knowledge of the transcoder; the transcoder's own stream to
//! `output` starts on the host and never passes prerouting there. Where the service's
//! selector names its source as one address, that stream gets it back (`snat` in a `nat`
//! postrouting chain, matching only packets to `output` whose source is an address of the
//! host), so the destination sees the stream come from the source.

use super::stages::Stage;
use nfx_model::{Cidr, Proto, Selector};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod persist;
pub use persist::Restored;

/// The table (family inet) holding every path of the host.
pub const TABLE: &str = "nfx_steer";

/// Marks nfx sets: 0x4e58 ("NX") in the upper half, slot and segment in the lower.
const MARK_BASE: u32 = 0x4e58_0000;
/// Mask of the marks nfx owns.
const MARK_MASK: u32 = 0xffff_0000;
/// Priority of nfx's `ip rule`s (it owns every rule at this priority in the host).
pub const RULE_PREF: &str = "1000";
/// Most workers a path may cross on one host (segments fit in 4 bits per direction).
pub const MAX_STAGES: usize = 7;
/// Most path generations in use at once (slots of 16 marks).
const SLOTS: u32 = 4095;
/// How long frames still inside a worker that left a path are carried on.
pub const DRAIN: Duration = Duration::from_secs(2);

/// The host's part of one service's path, as the controller sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPath {
    /// The service's traffic in its forward direction, as it enters the chain (a port
    /// forward's target where the service's selector names its public endpoint).
    pub selector: Selector,
    /// Host the traffic comes from (none: it enters here from an endpoint).
    #[serde(default)]
    pub prev: Option<String>,
    /// Host the traffic goes to (none: it leaves here to an endpoint).
    #[serde(default)]
    pub next: Option<String>,
    /// Software devices whose workers the traffic crosses on this host, in order.
    #[serde(default)]
    pub stages: Vec<String>,
    /// For each stage, the service's instances on that worker in the service's order:
    /// the chain its worker runs for this service's frames (and only for them).
    #[serde(default)]
    pub instances: BTreeMap<String, Vec<String>>,
    /// Stages whose frames a NAT earlier in the service's chain has rewritten (on this
    /// host or before it), and a software NAT's stage forwarding the ports the
    /// service's selector names (its frames carry either end of the forward): their
    /// workers classify the service by its destination side only (`dst`, `proto`,
    /// `dport`), as the steering does after the first stage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_nat: Vec<String>,
    /// A NAT on an earlier host has rewritten the frames arriving from `prev`: they are
    /// matched by the selector's destination side only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nat_before: bool,
    /// The local ESP tunnel endpoint (instance id) whose TUN device carries the traffic
    /// to `next` instead of the link (the endpoint encrypts it onto the link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_next: Option<String>,
    /// The local ESP tunnel endpoint whose TUN device the traffic from `prev` arrives
    /// on (decrypted), and which carries the replies back to `prev`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_prev: Option<String>,
}

impl HostPath {
    /// The service's instances on stage `device`, in order (a stage without any is a bad
    /// path of `service`: its device would run nothing or, worse, everything).
    pub fn chain_of(&self, service: &str, device: &str) -> Result<&Vec<String>, SteerError> {
        self.instances
            .get(device)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                SteerError::Invalid(format!(
                    "path of {service}: instances: no chain for stage {device:?}"
                ))
            })
    }
}

/// A transcoder's stream taken in transparently: UDP arriving at the host for `output`
/// is delivered to the transcoder at `listen_port` on the host, and the transcoder's own
/// stream to `output` leaves with the original source's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirect {
    /// Where the transcoder sends its stream (and where the source addresses its own).
    pub output: SocketAddrV4,
    /// The transcoder's UDP port on the host.
    pub listen_port: u16,
    /// The original source (the service selector's `src` when it is one IPv4 address):
    /// the transcoder's stream to `output` is source-NATed to it. None: it leaves with
    /// the host's address.
    pub source: Option<Ipv4Addr>,
}

/// A neighbor host as the agent's configuration names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighborLink {
    /// This host's interface towards the neighbor.
    pub iface: String,
    /// The neighbor's address on the link (next hop).
    pub peer: Ipv4Addr,
}

/// Where a segment's packets go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// The main routing table (an endpoint is attached here).
    Main,
    /// `default via GW dev IFACE onlink` in the mark's own table.
    Via(Ipv4Addr, String),
}

/// One segment: packets of the service arriving on `iif` (any interface: `None`) and
/// matching `expr` get `mark` and go to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    iif: Option<String>,
    expr: String,
    mark: u32,
    target: Target,
}

/// What the agent programmed for one service.
#[derive(Debug, Clone)]
struct Programmed {
    path: HostPath,
    segments: Vec<Segment>,
    /// Drain segments of workers that left the path, with their end.
    drains: Vec<(Segment, Instant)>,
    slot: u32,
}

/// How the steering reaches the host's tools (so rendering is tested without root).
pub trait HostTools: Send {
    /// Loads an nftables script in one transaction.
    fn nft(&mut self, script: &str) -> Result<(), String>;
    /// Runs `ip ARGS`; returns stdout.
    fn ip(&mut self, args: &[&str]) -> Result<String, String>;
}

/// The real tools of the namespace the agent runs in.
pub struct SystemTools;

impl HostTools for SystemTools {
    fn nft(&mut self, script: &str) -> Result<(), String> {
        nfx_io::command::run("nft", &["-f", "-"], Some(script), Duration::from_secs(10))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn ip(&mut self, args: &[&str]) -> Result<String, String> {
        nfx_io::command::run("ip", args, None, Duration::from_secs(10)).map_err(|e| e.to_string())
    }
}

/// Tools that change nothing (feature `fuzzing`, and tests): every `nft` script and `ip` call
/// succeeds with no output, so the `agent_api` fuzz target renders real rulesets without
/// touching a namespace.
#[cfg(any(test, feature = "fuzzing"))]
pub struct Unplugged;

#[cfg(any(test, feature = "fuzzing"))]
impl HostTools for Unplugged {
    fn nft(&mut self, _script: &str) -> Result<(), String> {
        Ok(())
    }

    fn ip(&mut self, _args: &[&str]) -> Result<String, String> {
        Ok(String::new())
    }
}

/// The steering of one host.
pub struct Steering {
    tools: Box<dyn HostTools>,
    neighbors: BTreeMap<String, NeighborLink>,
    stages: BTreeMap<String, Stage>,
    /// The TUN device of each local tunnel endpoint (by instance), as a link.
    tunnels: BTreeMap<String, NeighborLink>,
    services: BTreeMap<String, Programmed>,
    /// The transcoders' redirects, by instance.
    redirects: BTreeMap<String, Redirect>,
    /// Marks whose rule and table are installed.
    routed: BTreeSet<u32>,
    next_slot: u32,
    /// Where every change of the paths is recorded for a restarted agent.
    record: Option<PathBuf>,
}

/// Why a path cannot be programmed (a bad request: HTTP 400) or the host failed (503).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SteerError {
    /// The request names something this host does not have.
    #[error("{0}")]
    Invalid(String),
    /// A tool failed.
    #[error("{0}")]
    Failed(String),
}

impl Steering {
    /// Steering over the host's neighbors and worker stages. Call [`Steering::reset`]
    /// before use.
    pub fn new(
        tools: Box<dyn HostTools>,
        neighbors: BTreeMap<String, NeighborLink>,
        stages: BTreeMap<String, Stage>,
    ) -> Self {
        Steering {
            tools,
            neighbors,
            stages,
            tunnels: BTreeMap::new(),
            services: BTreeMap::new(),
            redirects: BTreeMap::new(),
            routed: BTreeSet::new(),
            next_slot: 1,
            record: None,
        }
    }

    /// Forgets every path: removes nfx's rules and tables left by an earlier agent and
    /// loads the closed table.
    pub fn reset(&mut self) -> Result<(), SteerError> {
        for table in self.rule_tables() {
            self.remove_rule(&table);
        }
        self.services.clear();
        self.routed.clear();
        self.commit()
    }

    /// Makes the TUN device `tun` (gateway `gw` on it) the way through tunnel endpoint
    /// `instance` for the paths that name it.
    pub fn set_tunnel(&mut self, instance: &str, tun: NeighborLink) {
        self.tunnels.insert(instance.to_string(), tun);
    }

    /// Forgets tunnel endpoint `instance` (paths naming it can no longer be programmed).
    pub fn remove_tunnel(&mut self, instance: &str) {
        self.tunnels.remove(instance);
    }

    /// Refuses `redirect` for transcoder `instance` when another transcoder of the host
    /// already takes the stream for the same `output` or listens on the same port: the
    /// host's redirect rules would send one stream to both, or the second to neither.
    pub fn check_redirect(&self, instance: &str, redirect: &Redirect) -> Result<(), SteerError> {
        let other = self.redirects.iter().find(|(id, r)| {
            id.as_str() != instance
                && (r.output == redirect.output || r.listen_port == redirect.listen_port)
        });
        match other {
            None => Ok(()),
            Some((id, r)) if r.output == redirect.output => Err(SteerError::Invalid(format!(
                "transcoder {id} on this host already takes the stream for {}; one \
                 transcoder per output",
                r.output
            ))),
            Some((id, r)) => Err(SteerError::Invalid(format!(
                "transcoder {id} on this host already listens on UDP port {}",
                r.listen_port
            ))),
        }
    }

    /// Sets (or with `None` removes) the redirect of transcoder `instance` and loads the
    /// table; a failed load keeps the redirects as they were, and a redirect that
    /// clashes with another transcoder's ([`Steering::check_redirect`]) is refused.
    pub fn set_redirect(
        &mut self,
        instance: &str,
        redirect: Option<Redirect>,
    ) -> Result<(), SteerError> {
        if let Some(r) = &redirect {
            self.check_redirect(instance, r)?;
        }
        let old = match redirect {
            Some(r) => self.redirects.insert(instance.to_string(), r),
            None => self.redirects.remove(instance),
        };
        if old == redirect {
            return Ok(());
        }
        let r = self.commit();
        if r.is_err() {
            match old {
                Some(o) => self.redirects.insert(instance.to_string(), o),
                None => self.redirects.remove(instance),
            };
        }
        r
    }

    /// The redirect of transcoder `instance`, if any.
    pub fn redirect(&self, instance: &str) -> Option<Redirect> {
        self.redirects.get(instance).copied()
    }

    /// Sets the original source of transcoder `instance`'s redirect (no-op when it has
    /// none or the source is unchanged) and loads the table.
    pub fn set_redirect_source(
        &mut self,
        instance: &str,
        source: Option<Ipv4Addr>,
    ) -> Result<(), SteerError> {
        match self.redirect(instance) {
            Some(r) => self.set_redirect(instance, Some(Redirect { source, ..r })),
            None => Ok(()),
        }
    }

    /// The programmed paths.
    pub fn paths(&self) -> BTreeMap<String, HostPath> {
        self.services
            .iter()
            .map(|(s, p)| (s.clone(), p.path.clone()))
            .collect()
    }

    /// Programs (or replaces) the path of `service`.
    pub fn program(&mut self, service: &str, path: &HostPath) -> Result<(), SteerError> {
        let mut wanted = self.services.clone();
        self.insert(&mut wanted, service, path)?;
        self.switch(wanted)
    }

    /// Removes the path of `service` (no-op when absent).
    pub fn withdraw(&mut self, service: &str) -> Result<(), SteerError> {
        if !self.services.contains_key(service) {
            return Ok(());
        }
        let mut wanted = self.services.clone();
        wanted.remove(service);
        self.switch(wanted)
    }

    /// Makes the programmed paths exactly `paths` (the controller's view after a restart
    /// of either side); unchanged paths keep their marks.
    pub fn sync(&mut self, paths: &BTreeMap<String, HostPath>) -> Result<(), SteerError> {
        let mut wanted: BTreeMap<String, Programmed> = self
            .services
            .iter()
            .filter(|(s, _)| paths.contains_key(*s))
            .map(|(s, p)| (s.clone(), p.clone()))
            .collect();
        for (s, p) in paths {
            self.insert(&mut wanted, s, p)?;
        }
        self.switch(wanted)
    }

    /// Ends drains whose time is up; returns whether the ruleset changed.
    pub fn expire_drains(&mut self, now: Instant) -> Result<bool, SteerError> {
        if !self
            .services
            .values()
            .any(|p| p.drains.iter().any(|(_, end)| *end <= now))
        {
            return Ok(false);
        }
        let mut wanted = self.services.clone();
        for p in wanted.values_mut() {
            p.drains.retain(|(_, end)| *end > now);
        }
        self.switch(wanted)?;
        Ok(true)
    }

    /// Adds `path` for `service` to `wanted` (same path: kept as is; changed: new marks,
    /// with drains from the workers it no longer crosses).
    fn insert(
        &mut self,
        wanted: &mut BTreeMap<String, Programmed>,
        service: &str,
        path: &HostPath,
    ) -> Result<(), SteerError> {
        check_service_id(service)?;
        if wanted.get(service).is_some_and(|p| p.path == *path) {
            return Ok(());
        }
        let slot = self.free_slot(wanted)?;
        let segments = self.segments(path, MARK_BASE | (slot << 4))?;
        let mut drains = Vec::new();
        if let Some(old) = wanted.get(service) {
            let end = Instant::now() + DRAIN;
            for gone in old.path.stages.iter().filter(|d| !path.stages.contains(d)) {
                drains.extend(
                    self.drain_segments(gone, path, &segments)
                        .into_iter()
                        .map(|s| (s, end)),
                );
            }
        }
        wanted.insert(
            service.to_string(),
            Programmed {
                path: path.clone(),
                segments,
                drains,
                slot,
            },
        );
        Ok(())
    }

    fn free_slot(&mut self, wanted: &BTreeMap<String, Programmed>) -> Result<u32, SteerError> {
        let used: BTreeSet<u32> = wanted
            .values()
            .chain(self.services.values())
            .map(|p| p.slot)
            .collect();
        for _ in 0..SLOTS {
            let s = self.next_slot;
            self.next_slot = self.next_slot % SLOTS + 1;
            if !used.contains(&s) {
                return Ok(s);
            }
        }
        Err(SteerError::Failed(
            "no free mark slot (too many paths)".into(),
        ))
    }

    /// Installs `wanted`: routes of new marks, then the one nftables transaction, then the
    /// removal of routes no longer used.
    fn switch(&mut self, wanted: BTreeMap<String, Programmed>) -> Result<(), SteerError> {
        self.switch_routes(wanted, false)
    }

    /// [`Steering::switch`]; with `refresh`, the routes of marks whose rule is already
    /// installed are replaced too (a restarted agent's marks: their next hops may have
    /// changed while it was down).
    fn switch_routes(
        &mut self,
        wanted: BTreeMap<String, Programmed>,
        refresh: bool,
    ) -> Result<(), SteerError> {
        let needed = routes_of(&wanted);
        for (mark, (gw, dev)) in &needed {
            let routed = self.routed.contains(mark);
            if routed && !refresh {
                continue;
            }
            let (m, gw) = (mark.to_string(), gw.to_string());
            let fail = |e: String| SteerError::Failed(format!("route for mark {mark:#x}: {e}"));
            self.tools
                .ip(&[
                    "route", "replace", "default", "via", &gw, "dev", dev, "onlink", "table", &m,
                ])
                .map_err(fail)?;
            if routed {
                continue;
            }
            self.tools
                .ip(&["rule", "add", "fwmark", &m, "table", &m, "pref", RULE_PREF])
                .map_err(fail)?;
            self.routed.insert(*mark);
        }
        let previous = std::mem::replace(&mut self.services, wanted);
        if let Err(e) = self.commit() {
            self.services = previous;
            return Err(e);
        }
        let stale: Vec<u32> = self
            .routed
            .iter()
            .filter(|m| !needed.contains_key(m))
            .copied()
            .collect();
        for mark in stale {
            let m = mark.to_string();
            let _ = self
                .tools
                .ip(&["rule", "del", "fwmark", &m, "table", &m, "pref", RULE_PREF]);
            let _ = self.tools.ip(&["route", "flush", "table", &m]);
            self.routed.remove(&mark);
        }
        Ok(())
    }

    /// Loads the whole table for the programmed paths in one transaction.
    fn commit(&mut self) -> Result<(), SteerError> {
        let script = render(&self.services, &self.redirects);
        self.tools
            .nft(&script)
            .map_err(|e| SteerError::Failed(format!("nft: {e}")))?;
        self.save_record();
        Ok(())
    }

    fn neighbor(&self, host: &str) -> Result<&NeighborLink, SteerError> {
        self.neighbors
            .get(host)
            .ok_or_else(|| SteerError::Invalid(format!("{host:?} is not a neighbor of this host")))
    }

    /// The link towards a neighbouring host of the path: the local tunnel endpoint's
    /// TUN device when the hop crosses the tunnel, else the host's link.
    fn hop_link(
        &self,
        host: Option<&str>,
        tunnel: Option<&str>,
    ) -> Result<Option<NeighborLink>, SteerError> {
        match (host, tunnel) {
            (None, None) => Ok(None),
            (None, Some(t)) => Err(SteerError::Invalid(format!(
                "tunnel endpoint {t:?} named at an end of the path"
            ))),
            (Some(h), None) => Ok(Some(self.neighbor(h)?.clone())),
            (Some(_), Some(t)) => self.tunnels.get(t).cloned().map(Some).ok_or_else(|| {
                SteerError::Invalid(format!("tunnel endpoint {t:?} does not run on this host"))
            }),
        }
    }

    fn stage(&self, device: &str) -> Result<&Stage, SteerError> {
        self.stages
            .get(device)
            .ok_or_else(|| SteerError::Invalid(format!("{device:?} is not a device of this host")))
    }

    /// The interface traffic for `addr` leaves by (main table), for the path's ends.
    fn route_dev(&mut self, net: Option<&Cidr>) -> Option<String> {
        let a = net?.addr.to_string();
        let out = self.tools.ip(&["-j", "route", "get", &a]).ok()?;
        #[derive(Deserialize)]
        struct R {
            dev: String,
        }
        let r: Vec<R> = serde_json::from_str(&out).ok()?;
        r.into_iter().next().map(|r| r.dev)
    }

    /// The segments of `path` with marks from `base`.
    fn segments(&mut self, path: &HostPath, base: u32) -> Result<Vec<Segment>, SteerError> {
        path.selector
            .validate()
            .map_err(|e| SteerError::Invalid(format!("selector: {e}")))?;
        if path.stages.len() > MAX_STAGES {
            return Err(SteerError::Invalid(format!(
                "a path crosses at most {MAX_STAGES} workers on one host"
            )));
        }
        let stages: Vec<Stage> = path
            .stages
            .iter()
            .map(|d| self.stage(d).cloned())
            .collect::<Result<_, _>>()?;
        let mut seen = BTreeSet::new();
        if let Some(d) = path.stages.iter().find(|d| !seen.insert(*d)) {
            return Err(SteerError::Invalid(format!("stage {d:?} appears twice")));
        }
        let prev = self.hop_link(path.prev.as_deref(), path.tunnel_prev.as_deref())?;
        let next = self.hop_link(path.next.as_deref(), path.tunnel_next.as_deref())?;
        let entry_iif = match &prev {
            Some(n) => Some(n.iface.clone()),
            None => self.route_dev(path.selector.src.as_ref()),
        };
        let reply_iif = match &next {
            Some(n) => Some(n.iface.clone()),
            None => self.route_dev(path.selector.dst.as_ref()),
        };
        let to = |n: &Option<NeighborLink>| match n {
            Some(n) => Target::Via(n.peer, n.iface.clone()),
            None => Target::Main,
        };
        let sel = &path.selector;
        let s = stages.len();
        let mut v = Vec::new();
        for j in 0..=s {
            v.push(Segment {
                iif: if j == 0 {
                    entry_iif.clone()
                } else {
                    Some(stages[j - 1].kernel_out.clone())
                },
                expr: if j == 0 && !path.nat_before {
                    forward_match(sel)
                } else {
                    forward_dst_match(sel)
                },
                mark: base | j as u32,
                target: if j < s {
                    stages[j].in_target()
                } else {
                    to(&next)
                },
            });
        }
        for j in (0..=s).rev() {
            v.push(Segment {
                iif: if j == s {
                    reply_iif.clone()
                } else {
                    Some(stages[j].kernel_in.clone())
                },
                expr: reply_match(sel),
                mark: base | (8 + j as u32),
                target: if j > 0 {
                    stages[j - 1].out_target()
                } else {
                    to(&prev)
                },
            });
        }
        Ok(v)
    }

    /// Segments carrying on what is still inside the worker of `gone` into `path`: its
    /// forward output to where the path's last segment goes, its reply output to where
    /// the path's reply ends.
    fn drain_segments(&self, gone: &str, path: &HostPath, new: &[Segment]) -> Vec<Segment> {
        let Some(st) = self.stages.get(gone) else {
            return Vec::new();
        };
        let n = path.stages.len();
        let (fwd_last, reply_last) = (&new[n], &new[new.len() - 1]);
        vec![
            Segment {
                iif: Some(st.kernel_out.clone()),
                expr: forward_dst_match(&path.selector),
                ..fwd_last.clone()
            },
            Segment {
                iif: Some(st.kernel_in.clone()),
                expr: reply_match(&path.selector),
                ..reply_last.clone()
            },
        ]
    }
}

impl Stage {
    /// Into the worker's inside port.
    fn in_target(&self) -> Target {
        Target::Via(self.gw_in, self.kernel_in.clone())
    }

    /// Into the worker's outside port (replies).
    fn out_target(&self) -> Target {
        Target::Via(self.gw_out, self.kernel_out.clone())
    }
}

/// The mark tables `services` route through: mark → (next hop, interface), drains
/// included (segments into the main table need none).
fn routes_of(services: &BTreeMap<String, Programmed>) -> BTreeMap<u32, (Ipv4Addr, String)> {
    services
        .values()
        .flat_map(|p| p.segments.iter().chain(p.drains.iter().map(|(s, _)| s)))
        .filter_map(|s| match &s.target {
            Target::Via(gw, dev) => Some((s.mark, (*gw, dev.clone()))),
            Target::Main => None,
        })
        .collect()
}

/// Service ids go into nft comments: letters, digits, `-`, `_`, `.` only.
fn check_service_id(s: &str) -> Result<(), SteerError> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(SteerError::Invalid(format!(
            "service id {s:?}: use 1-64 of A-Z a-z 0-9 - _ ."
        )))
    }
}

fn family(c: &Cidr) -> &'static str {
    match c.addr {
        IpAddr::V4(_) => "ip",
        IpAddr::V6(_) => "ip6",
    }
}

fn proto_match(sel: &Selector) -> String {
    let v6 = sel.src.or(sel.dst).is_some_and(|c| c.addr.is_ipv6());
    match sel.proto {
        None => String::new(),
        Some(Proto::Icmp) if v6 => " meta l4proto ipv6-icmp".into(),
        Some(p) => format!(" meta l4proto {p}"),
    }
}

/// The whole forward selector.
fn forward_match(sel: &Selector) -> String {
    let mut e = String::new();
    if let Some(c) = &sel.src {
        let _ = write!(e, " {} saddr {c}", family(c));
    }
    if let Some(c) = &sel.dst {
        let _ = write!(e, " {} daddr {c}", family(c));
    }
    e.push_str(&proto_match(sel));
    if let Some(p) = &sel.sport {
        let _ = write!(e, " th sport {p}");
    }
    if let Some(p) = &sel.dport {
        let _ = write!(e, " th dport {p}");
    }
    e
}

/// The forward selector's destination side (what a NAT in the chain leaves alone).
fn forward_dst_match(sel: &Selector) -> String {
    let mut e = String::new();
    if let Some(c) = &sel.dst {
        let _ = write!(e, " {} daddr {c}", family(c));
    }
    e.push_str(&proto_match(sel));
    if let Some(p) = &sel.dport {
        let _ = write!(e, " th dport {p}");
    }
    e
}

/// Replies: from the selector's destination side.
fn reply_match(sel: &Selector) -> String {
    let mut e = String::new();
    if let Some(c) = &sel.dst {
        let _ = write!(e, " {} saddr {c}", family(c));
    }
    e.push_str(&proto_match(sel));
    if let Some(p) = &sel.dport {
        let _ = write!(e, " th sport {p}");
    }
    e
}

/// The table of a host with no path: every forwarded packet is dropped. Loaded when a
/// host is created, before its kernel forwards anything.
pub fn closed_ruleset() -> String {
    render(&BTreeMap::new(), &BTreeMap::new())
}

/// The `nfx_steer` table for `services` and the transcoders' `redirects`, replacing the
/// previous one in one transaction.
fn render(
    services: &BTreeMap<String, Programmed>,
    redirects: &BTreeMap<String, Redirect>,
) -> String {
    let mut r = format!(
        "add table inet {TABLE}\n\
         delete table inet {TABLE}\n\
         table inet {TABLE} {{\n\
         \x20 chain prerouting {{\n\
         \x20   type filter hook prerouting priority mangle; policy accept;\n"
    );
    // A segment with no interface (a path's end whose selector names no address, so
    // its endpoint's interface is unknown) matches on every interface. Those rules come
    // first: the last matching rule's mark wins, so on an interface a segment is bound
    // to, that segment decides (a forward packet reaching the egress host is not taken
    // for a reply of a selector that tells them apart by interface only).
    for bound in [false, true] {
        for (svc, p) in services {
            let drains = p.drains.iter().map(|(s, _)| (s, "drain "));
            let segs = p.segments.iter().map(|s| (s, "")).chain(drains);
            for (seg, tag) in segs.filter(|(s, _)| s.iif.is_some() == bound) {
                let iif = seg
                    .iif
                    .as_ref()
                    .map(|i| format!(" iifname \"{i}\""))
                    .unwrap_or_default();
                let _ = writeln!(
                    r,
                    "   {iif}{} meta mark set {:#x} comment \"{tag}{svc}\"",
                    seg.expr, seg.mark
                );
            }
        }
    }
    let _ = write!(
        r,
        "  }}\n\
         \x20 chain forward {{\n\
         \x20   type filter hook forward priority filter; policy drop;\n\
         \x20   meta mark and {MARK_MASK:#x} == {MARK_BASE:#x} accept\n\
         \x20 }}\n"
    );
    render_redirects(&mut r, redirects);
    r.push_str("}\n");
    r
}

/// The transcoders' chains: `transcode` redirects what arrives for each `output` into
/// the transcoder; `transcode_out` gives the transcoder's own stream to `output` (sent
/// from an address of the host: not a forwarded packet) its original source back.
fn render_redirects(r: &mut String, redirects: &BTreeMap<String, Redirect>) {
    let comment = |i: &str| i.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
    if !redirects.is_empty() {
        r.push_str(
            "  chain transcode {\n\
             \x20   type nat hook prerouting priority dstnat; policy accept;\n",
        );
        for (instance, x) in redirects {
            let _ = writeln!(
                r,
                "    ip daddr {} udp dport {} redirect to :{} comment \"{}\"",
                x.output.ip(),
                x.output.port(),
                x.listen_port,
                comment(instance)
            );
        }
        r.push_str("  }\n");
    }
    if redirects.values().any(|x| x.source.is_some()) {
        r.push_str(
            "  chain transcode_out {\n\
             \x20   type nat hook postrouting priority srcnat; policy accept;\n",
        );
        for (instance, x) in redirects {
            let Some(src) = x.source else { continue };
            let _ = writeln!(
                r,
                "    fib saddr type local ip daddr {} udp dport {} snat ip to {src} comment \"{}\"",
                x.output.ip(),
                x.output.port(),
                comment(instance)
            );
        }
        r.push_str("  }\n");
    }
}

#[cfg(test)]
mod tests;
