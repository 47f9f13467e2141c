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

use super::{InstanceRow, Mediator, PlanError};
use crate::enforcer::Hop;
use crate::vnfm::{MigrateReport, VnfmError};
use nfx_chaining::network::{to_ns, to_us};
use nfx_model::{DeviceModel, Tier};
use std::sync::Arc;

/// Functions an instance of which may move to another host.
pub const CROSS_HOST_FUNCTIONS: [&str; 3] = ["firewall", "dpi", "elephant"];

impl Mediator {
    /// Whether `old` (instance `instance`) may move to `dm`, a device of another host:
    /// a software instance of a [`CROSS_HOST_FUNCTIONS`] function onto a software
    /// device that runs it, on a host that answers.
    pub(super) fn check_cross_host(
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
    /// processing latency (`new` = (instance, its latency) of an instance not yet
    /// recorded).
    pub(super) fn hops_latency_us(
        &self,
        ingress: &str,
        egress: &str,
        hops: &[Hop],
        new: (&str, f64),
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
            let proc_us = if h.instance == new.0 {
                new.1
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
