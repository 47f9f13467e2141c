//! Migration to another host. The two instances are served by different VNFMs (one
//! agent each), so the flow state goes old agent → controller → new agent
//! ([`crate::vnfm::Vnfm::export_state`], [`crate::vnfm::Vnfm::import_state`]) instead of one VNFM's
//! `migrate_instance`: a first copy while the old instance still carries the traffic,
//! the paths re-steered through the new host, then a final copy of what the old instance
//! created in between (flows the new one holds already are skipped), then the old one is
//! destroyed.
//!
//! What may move: software-tier instances whose flow state names no host — the
//! firewall (connection tracking with its TCP windows), and the DPI and elephant
//! detector, whose software nodes hold no flow state to move. A NAT is refused: its
//! mappings translate to its host's public address, to which the replies are routed;
//! on another host the same mappings would answer for an address that host does not
//! own, and re-writing them to the new host's address would change every established
//! flow's translated endpoint — the peer would see a new connection. The service's
//! latency bound is checked for every path the move changes.

use super::{best_fit, InstanceRow, Mediator, PathRow, PlanError};
use crate::enforcer::{Hop, ServiceEnds, Steered};
use crate::vnfm::{MigrateReport, VnfmError};
use nfx_chaining::network::{to_ns, to_us};
use nfx_model::{DeviceModel, Tier};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Functions an instance of which may move to another host.
pub const CROSS_HOST_FUNCTIONS: [&str; 3] = ["firewall", "dpi", "elephant"];

impl Mediator {
    /// Whether `old` (instance `instance`) may move to `dm`, a device of another host:
    /// a software instance of a [`CROSS_HOST_FUNCTIONS`] function onto a software
    /// device that runs it, on a host that answers.
    pub(crate) fn check_cross_host(
        &self,
        old: &InstanceRow,
        instance: &str,
        dm: &DeviceModel,
    ) -> Result<(), PlanError> {
        let f = old.spec.function.as_str();
        if f == "nat" {
            return Err(PlanError::Invalid(format!(
                "{instance} is a NAT: its mappings translate to {}'s public address, which \
                 replies are routed to; on {} they would answer for an address that host \
                 does not own. A NAT moves only within its host",
                old.host, dm.host
            )));
        }
        if !CROSS_HOST_FUNCTIONS.contains(&f) {
            return Err(PlanError::Invalid(format!(
                "{instance} runs {f}: only {} instances move to another host",
                CROSS_HOST_FUNCTIONS.join(", ")
            )));
        }
        if old.tier != Tier::Software || dm.tier != Tier::Software {
            return Err(PlanError::Invalid(format!(
                "device {} is on the {} tier and {instance} on the {}: only a software \
                 worker's flow state moves to another host",
                dm.id,
                dm.tier.as_str(),
                old.tier.as_str()
            )));
        }
        if super::is_down(&self.down, &dm.host) {
            return Err(PlanError::Conflict(format!(
                "host {} is down: nothing is placed on it",
                dm.host
            )));
        }
        Ok(())
    }

    /// End-to-end latency of `hops` from `ingress` to `egress`, µs, as the chaining DP
    /// counts it: the shortest transfer between consecutive hosts plus each hop's
    /// processing latency (`new` = (instance, its latency) of instances not yet recorded
    /// or about to change device).
    pub(super) fn hops_latency_us(
        &self,
        ingress: &str,
        egress: &str,
        hops: &[Hop],
        new: &[(&str, f64)],
    ) -> Result<f64, PlanError> {
        let n = self.infra.hosts.len();
        let idx = |h: &str| {
            self.host_index
                .get(h)
                .copied()
                .ok_or_else(|| PlanError::Invalid(format!("unknown host {h:?}")))
        };
        let mut at = idx(ingress)?;
        let mut ns = 0u64;
        for h in hops {
            let next = idx(&h.host)?;
            let proc_us = if let Some(&(_, l)) = new.iter().find(|(i, _)| *i == h.instance) {
                l
            } else {
                let r = self.instances.get(&h.instance).ok_or_else(|| {
                    PlanError::Conflict(format!("hop {} is not recorded", h.instance))
                })?;
                r.latency_us
            };
            ns += self.transfer_ns[at * n + next] + to_ns(proc_us);
            at = next;
        }
        Ok(to_us(ns + self.transfer_ns[at * n + idx(egress)?]))
    }

    /// The latency of service `svc`'s path `p` once each instance of `moves` runs on its
    /// device there (the hops keep the instances' ids), µs; refused, naming the service,
    /// when the path would break its latency bound, visit a host twice or cross a host
    /// that is down ([`crate::agents::host_route`], whatever programs the hosts), or when
    /// the enforcer's hosts would refuse it. What `nfx deploy --optimize` and a
    /// migration that chooses another host itself check, before any move.
    pub(crate) fn moved_path_latency(
        &self,
        svc: &str,
        p: &PathRow,
        moves: &BTreeMap<String, &DeviceModel>,
    ) -> Result<f64, PlanError> {
        let mut np = p.clone();
        let mut lat: Vec<(&str, f64)> = Vec::new();
        for h in np.hops.iter_mut() {
            if let Some((id, d)) = moves.get_key_value(&h.instance) {
                h.device = d.id.clone();
                h.host = d.host.clone();
                lat.push((id.as_str(), d.latency_us));
            }
        }
        let (ends, bound) = path_bound(svc, &np)?;
        let us = self.hops_latency_us(&ends.ingress, &ends.egress, &np.hops, &lat)?;
        if us > bound + super::CERTIFY_SLACK_US {
            return Err(PlanError::Conflict(format!(
                "service {svc}'s path would take {us:.3} µs, over its bound of {bound} µs"
            )));
        }
        let steered = Steered {
            ends: np.ends.clone(),
            hops: np.hops,
            hosts: Vec::new(),
        };
        crate::agents::host_route(&self.infra, &self.down_hosts_now(), &steered)
            .and_then(|_| self.enforcer.check(&steered))
            .map_err(|e| PlanError::Invalid(format!("path of {svc}: {e}")))?;
        Ok(us)
    }

    /// The device of another host a migration of `old` (instance `instance`) takes when
    /// its own host has no room: among the software devices of the other hosts that are
    /// up, run its function and have room, those whose move keeps every path through it
    /// valid ([`Mediator::moved_path_latency`]); the least added path latency (summed over
    /// its services), then the best fit. Also says why, for the plan's reason.
    pub(super) fn cross_host_fallback(
        &self,
        old: &InstanceRow,
        instance: &str,
    ) -> Result<(&DeviceModel, String), PlanError> {
        let paths: Vec<(&String, &PathRow)> = self
            .paths
            .iter()
            .filter(|(_, p)| p.hops.iter().any(|h| h.instance == instance))
            .collect();
        let mut ok: Vec<(&DeviceModel, f64)> = Vec::new();
        let mut refused: Vec<String> = Vec::new();
        for dm in self.model.devices().iter().filter(|d| {
            d.host != old.host
                && d.functions.contains(&old.spec.function)
                && d.throughput_gbps.free() >= old.spec.throughput_gbps
                && d.capacity.free() >= old.spec.capacity
        }) {
            let moves = BTreeMap::from([(instance.to_string(), dm)]);
            let added = self.check_cross_host(old, instance, dm).and_then(|()| {
                paths.iter().try_fold(0.0, |sum, (svc, p)| {
                    Ok(sum + self.moved_path_latency(svc, p, &moves)? - p.latency_us)
                })
            });
            match added {
                Ok(a) => ok.push((dm, a)),
                Err(e) => refused.push(format!("{}: {e}", dm.id)),
            }
        }
        let least = ok.iter().map(|&(_, a)| a).fold(f64::INFINITY, f64::min);
        let best = best_fit(
            ok.iter()
                .filter(|&&(_, a)| a <= least + super::CERTIFY_SLACK_US)
                .map(|&(d, a)| (a, d)),
            old.spec.throughput_gbps,
            old.spec.capacity,
        );
        let Some((added, dm)) = best else {
            let why = if refused.is_empty() {
                "no device of another host runs it with room".to_string()
            } else {
                refused.join("; ")
            };
            return Err(PlanError::Conflict(format!(
                "no other device on {} can take {instance} without raising its latency, and \
                 no device of another host can take it: {why}",
                old.host
            )));
        };
        let others = ok.len() - 1;
        Ok((
            dm,
            format!(
                "no other device on {} has room for it; {} on {} adds the least path latency \
                 ({added:+.3} µs over its services' paths, each within its bound; {others} \
                 other valid device(s) of other hosts), best fit among the least",
                old.host, dm.id, dm.host
            ),
        ))
    }

    /// Undoes a copy of `to`'s flows into `from` during a rollback: moves the flows back
    /// with one VNFM's `migrate_instance`; across VNFMs, copies back what `from` holds
    /// (the flows it created since the switch) as far as it can — an export never took
    /// anything out of `to`, which kept its own state and serves again, so a copy that
    /// fails is logged and does not stop the rollback.
    pub(super) fn copy_back(
        &self,
        from: &str,
        to: &str,
        flows: &[String],
    ) -> Result<(), VnfmError> {
        let same = Arc::ptr_eq(self.vnfm_of(from)?, self.vnfm_of(to)?);
        match self.copy_flows(from, to, flows) {
            Ok(_) => Ok(()),
            Err(e) if !same => {
                log::warn!("rollback: flows of {from} not copied back into {to}: {e}");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Copies every flow of `from` into `to`: one VNFM's `migrate_instance` when the
    /// same VNFM serves both, else an export from `from`'s and an import into `to`'s
    /// (the records `to` holds already are skipped).
    pub(super) fn copy_flows(
        &self,
        from: &str,
        to: &str,
        flows: &[String],
    ) -> Result<MigrateReport, VnfmError> {
        let (src, dst) = (self.vnfm_of(from)?, self.vnfm_of(to)?);
        if Arc::ptr_eq(src, dst) {
            return src.migrate_instance(from, to, flows);
        }
        if !flows.is_empty() {
            return Err(VnfmError::Invalid(
                "a move to another host carries the whole flow table; pass no flow list".into(),
            ));
        }
        let state = src.export_state(from)?;
        let added = dst.import_state(to, &state)?;
        log::info!(
            "flow state {from} -> {to}: {} bytes exported, {} flows added",
            state.bytes,
            added.flows
        );
        Ok(MigrateReport {
            flows: added.flows,
            bytes: state.bytes,
            held_ms: None,
        })
    }
}

/// The recorded ends and latency bound of service `svc`'s path `p`: what a move to
/// another host is checked against.
pub(super) fn path_bound<'a>(
    svc: &str,
    p: &'a PathRow,
) -> Result<(&'a ServiceEnds, f64), PlanError> {
    let ends = p
        .ends
        .as_ref()
        .ok_or_else(|| PlanError::Conflict(format!("service {svc}'s path has no recorded ends")))?;
    let bound = p.max_latency_us.ok_or_else(|| {
        PlanError::Conflict(format!(
            "service {svc}'s path was recorded without its latency bound; destroy and \
             deploy it to move its instances to another host"
        ))
    })?;
    Ok((ends, bound))
}
