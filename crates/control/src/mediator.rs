//! The mediator (HYPER §III-B, Fig. 2): the only caller of VNFMs. It turns orchestrator
//! requests into journaled steps —
//! * chaining: the exact stage DP of `nfx-chaining` computes the hop-by-hop path, which
//!   goes to the forwarding enforcer;
//! * deploy: when a stage needs a new instance, the software tier is used if it meets the
//!   SLA, otherwise the best device of a faster tier by HYPER's online best-fit fitness
//!   (`nfx-placement`);
//! * destroy: steer traffic away first, then destroy;
//! * migrate: deploy the new instance, move the flows, re-steer, destroy the old one;
//! * status: gather from the VNFMs.
//!
//! Planning reserves resources on a draft of the resource model only; the rows it
//! returns are persisted with the operation, and `apply_rows` commits them: the model
//! is always rebuilt from those rows.

use crate::enforcer::{Enforcer, Hop, ServiceEnds, TunnelEnds};
use crate::ops::Step;
use crate::topology::transfer_matrix;
use crate::vnfm::{InstanceSpec, InstanceState, Vnfm, VnfmError};
use nfx_chaining::network::to_ns;
use nfx_chaining::{solve_with_retry, Chainer, Needs, Network, SlaSpec, Status};
use nfx_model::service::Service;
use nfx_model::{Infrastructure, Pool, ResourceError, ResourceModel, Tier};
use placer::{best_fit, host_devices, Draft, Placer};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use zeroize::Zeroizing;

pub mod crosshost;
pub(crate) mod forwards;
pub mod pins;
mod placer;
pub mod tunnel;

/// Most hosts the chaining DP considers for one service (the nearest by lower bound).
pub const MAX_CHAIN_NODES: usize = 128;

/// Rounding slack (µs) when a capped plan's latency is compared with the floor of the
/// hosts left out: latencies are whole nanoseconds, so 0.1 ns separates no two of them.
const CERTIFY_SLACK_US: f64 = 1e-4;

/// Transfer latency used between hosts with no route (µs): large, still finite for the DP.
pub(crate) const UNREACHABLE_US: f64 = 1e8;

/// A VNF instance as the controller records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRow {
    /// What was (or will be) deployed.
    pub spec: InstanceSpec,
    /// Host of its device.
    pub host: String,
    /// Tier of its device.
    pub tier: Tier,
    /// Processing latency, µs.
    pub latency_us: f64,
    /// `planned`, `running` or `destroying`.
    pub status: String,
    /// Services whose path uses it.
    pub users: Vec<String>,
}

/// A service's chained path and what it reserved on each hop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathRow {
    /// Service id.
    pub service: String,
    /// Hops in order.
    pub hops: Vec<Hop>,
    /// End-to-end latency of the path, µs.
    pub latency_us: f64,
    /// Throughput reserved on every hop, Gbit/s.
    pub throughput_gbps: f64,
    /// The largest capacity reserved on a hop.
    pub capacity: f64,
    /// Capacity reserved on each hop (its function's `capacity_need`, in its tier's
    /// units); empty in rows stored without it: `capacity` on every hop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacities: Vec<f64>,
    /// Where the service enters and leaves and which packets are its (what real hosts
    /// need to steer it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends: Option<ServiceEnds>,
    /// The service's latency bound (`sla.max_latency_us`), µs: what a migration to
    /// another host must keep the path under; absent in rows stored without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_latency_us: Option<f64>,
}

impl PathRow {
    /// The instances the service holds, each once: its hops' in path order, then its
    /// tunnel's endpoints.
    pub fn members(&self) -> Vec<String> {
        let tunnel = self.ends.as_ref().and_then(|e| e.tunnel.as_ref());
        let ends = tunnel
            .into_iter()
            .flat_map(|t| [t.from_instance.clone(), t.to_instance.clone()]);
        let mut out: Vec<String> = Vec::new();
        for id in self.hops.iter().map(|h| h.instance.clone()).chain(ends) {
            if !out.contains(&id) {
                out.push(id);
            }
        }
        out
    }
}

/// Why a placement went where it did (kept in the `placements` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementRecord {
    /// Instance id.
    pub instance: String,
    /// Function.
    pub function: String,
    /// Chosen device.
    pub device: String,
    /// Its host.
    pub host: String,
    /// Its tier.
    pub tier: Tier,
    /// The decision in words.
    pub reason: String,
}

/// What planning a request produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// New or changed instance rows (`None` = removed).
    pub instances: Vec<(String, Option<InstanceRow>)>,
    /// New or changed path rows (`None` = removed).
    pub paths: Vec<(String, Option<PathRow>)>,
    /// Placement decisions taken.
    pub placements: Vec<PlacementRecord>,
    /// Path latency for deploys, µs.
    pub latency_us: Option<f64>,
}

/// Why a request cannot be planned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// Unknown service, instance or device.
    #[error("{0}")]
    NotFound(String),
    /// Conflicts with the current state (already deployed, no room, no chain).
    #[error("{0}")]
    Conflict(String),
    /// The request is malformed.
    #[error("{0}")]
    Invalid(String),
}

/// Hosts whose agent stopped answering: nothing is placed on them and no path crosses
/// them until they answer again. Shared by the mediator, the agents' programmer and the
/// heartbeat monitor.
pub type DownHosts = Arc<RwLock<BTreeSet<String>>>;

/// Whether `host` is in `down`.
pub fn is_down(down: &DownHosts, host: &str) -> bool {
    down.read().map(|d| d.contains(host)).unwrap_or(false)
}

/// Which VNFM serves which host.
pub struct VnfmMap {
    by_host: HashMap<String, Arc<dyn Vnfm>>,
    default: Arc<dyn Vnfm>,
}

impl VnfmMap {
    /// Every host served by `default` unless mapped otherwise.
    pub fn new(default: Arc<dyn Vnfm>) -> Self {
        VnfmMap {
            by_host: HashMap::new(),
            default,
        }
    }

    /// Serves `host` with `vnfm`.
    pub fn set(&mut self, host: &str, vnfm: Arc<dyn Vnfm>) {
        self.by_host.insert(host.to_string(), vnfm);
    }

    /// The VNFM of `host`.
    pub fn get(&self, host: &str) -> &Arc<dyn Vnfm> {
        self.by_host.get(host).unwrap_or(&self.default)
    }

    /// Every distinct VNFM.
    pub fn all(&self) -> Vec<Arc<dyn Vnfm>> {
        let mut v: Vec<Arc<dyn Vnfm>> = vec![self.default.clone()];
        for x in self.by_host.values() {
            if !v.iter().any(|y| Arc::ptr_eq(x, y)) {
                v.push(x.clone());
            }
        }
        v
    }
}

/// The mediator.
pub struct Mediator {
    infra: Infrastructure,
    /// Shortest host-to-host latency, integer ns, row-major by host index.
    transfer_ns: Vec<u64>,
    /// Index of each host id in `infra.hosts`.
    host_index: HashMap<String, usize>,
    /// Model indices of each host's devices, in model order.
    host_devices: Vec<Vec<usize>>,
    model: ResourceModel,
    /// A second model that rebuilds replay into (swapped in on success), so that a
    /// rebuild allocates nothing and a failed one leaves the model as it was.
    spare: ResourceModel,
    instances: BTreeMap<String, InstanceRow>,
    paths: BTreeMap<String, PathRow>,
    vnfms: VnfmMap,
    enforcer: Arc<Enforcer>,
    chainer: Chainer,
    widenings: u64,
    down: DownHosts,
    /// The controller's secret the tunnels' IKE keys are derived from (none: the
    /// VNFMs get no keys, which only simulated endpoints do without).
    tunnel_secret: Option<Zeroizing<Vec<u8>>>,
}

impl Mediator {
    /// A mediator over `infra` with no instances.
    pub fn new(
        infra: Infrastructure,
        vnfms: VnfmMap,
        enforcer: Arc<Enforcer>,
    ) -> Result<Self, PlanError> {
        let transfer_ns: Vec<u64> = transfer_matrix(&infra, UNREACHABLE_US)
            .iter()
            .flatten()
            .map(|&us| to_ns(us))
            .collect();
        let model = ResourceModel::from_infrastructure(&infra);
        let (host_index, host_devices) = host_devices(&infra, &model);
        Ok(Mediator {
            infra,
            transfer_ns,
            host_index,
            host_devices,
            spare: model.clone(),
            model,
            instances: BTreeMap::new(),
            paths: BTreeMap::new(),
            vnfms,
            enforcer,
            chainer: Chainer::new(),
            widenings: 0,
            down: DownHosts::default(),
            tunnel_secret: None,
        })
    }

    /// Sets the secret the tunnels' IKE pre-shared keys are derived from
    /// ([`tunnel::endpoint_psk`]): the same secret after a restart gives the same keys,
    /// so no key is ever journaled.
    pub fn set_tunnel_secret(&mut self, secret: Zeroizing<Vec<u8>>) {
        self.tunnel_secret = Some(secret);
    }

    /// The infrastructure descriptor.
    pub fn infra(&self) -> &Infrastructure {
        &self.infra
    }

    /// The resource model (planned state included).
    pub fn model(&self) -> &ResourceModel {
        &self.model
    }

    /// Recorded instances.
    pub fn instances(&self) -> &BTreeMap<String, InstanceRow> {
        &self.instances
    }

    /// Recorded paths.
    pub fn paths(&self) -> &BTreeMap<String, PathRow> {
        &self.paths
    }

    /// The forwarding enforcer.
    pub fn enforcer(&self) -> &Arc<Enforcer> {
        &self.enforcer
    }

    /// The VNFMs.
    pub fn vnfms(&self) -> &VnfmMap {
        &self.vnfms
    }

    /// The set of hosts that are down (shared; the heartbeat monitor writes it).
    pub fn down_hosts(&self) -> DownHosts {
        self.down.clone()
    }

    /// Uses `down` as the set of hosts that are down.
    pub fn set_down_hosts(&mut self, down: DownHosts) {
        self.down = down;
    }

    /// Replaces the recorded rows and rebuilds the resource model from them.
    pub fn load(
        &mut self,
        instances: BTreeMap<String, InstanceRow>,
        paths: BTreeMap<String, PathRow>,
    ) -> Result<(), PlanError> {
        self.instances = instances;
        self.paths = paths;
        self.rebuild()
    }

    /// Applies plan rows (or restored rows) and rebuilds the model.
    pub fn apply_rows(
        &mut self,
        instances: &[(String, Option<InstanceRow>)],
        paths: &[(String, Option<PathRow>)],
    ) -> Result<(), PlanError> {
        for (id, row) in instances {
            match row {
                Some(r) => self.instances.insert(id.clone(), r.clone()),
                None => self.instances.remove(id),
            };
        }
        for (id, row) in paths {
            match row {
                Some(r) => self.paths.insert(id.clone(), r.clone()),
                None => self.paths.remove(id),
            };
        }
        self.rebuild()
    }

    /// Rebuilds the model from the rows: every instance deployed in id order, then every
    /// path's reservations — the same state as a fresh model with the rows replayed.
    fn rebuild(&mut self) -> Result<(), PlanError> {
        let m = &mut self.spare;
        m.reset();
        let bad = |e: nfx_model::ResourceError| PlanError::Conflict(format!("stored state: {e}"));
        for (id, r) in &self.instances {
            m.deploy(
                id,
                &r.spec.function,
                &r.spec.device,
                r.spec.throughput_gbps,
                r.spec.capacity,
            )
            .map_err(bad)?;
        }
        for p in self.paths.values() {
            for (k, h) in p.hops.iter().enumerate() {
                let cap = p.capacities.get(k).copied().unwrap_or(p.capacity);
                m.reserve(&h.instance, p.throughput_gbps, cap)
                    .map_err(bad)?;
            }
        }
        std::mem::swap(&mut self.model, &mut self.spare);
        Ok(())
    }

    /// Chains and places `svc` (HYPER Fig. 2, chaining + deploy branches). A path
    /// through host v costs at least v's lower bound transfer(src, v) + transfer(v, dst)
    /// plus the chain's least processing latency (the floor of v), so only hosts whose
    /// floor is within the SLA bound are candidates, and the first network holds the
    /// [`MAX_CHAIN_NODES`] of them with the smallest lower bound. Its answer is kept when
    /// no candidate was left out, or when it is no slower than the smallest floor of
    /// those left out (certified). Otherwise the candidates whose floor is below that
    /// answer are all planned too and the faster of the two answers is kept, so the
    /// answer is never worse than the unrestricted planner's. Reserves nothing.
    pub fn plan_deploy(&mut self, svc: &Service) -> Result<Plan, PlanError> {
        let least = self.least_processing_us(svc);
        // A host whose lower bound plus the least processing exceeds the SLA bound is on
        // no feasible path: it is left out of both networks.
        let hosts_within = svc.sla.max_latency_us - least + CERTIFY_SLACK_US;
        let (capped, cut_us) = self.plan_capped(svc, MAX_CHAIN_NODES, hosts_within)?;
        let Some(cut_us) = cut_us else {
            return capped;
        };
        let latency = |r: &Result<Plan, PlanError>| {
            r.as_ref()
                .ok()
                .and_then(|p| p.latency_us)
                .unwrap_or(f64::INFINITY)
        };
        let l = latency(&capped);
        if l <= cut_us + least + CERTIFY_SLACK_US {
            return capped;
        }
        // Only hosts that could beat the capped answer matter now.
        self.widenings += 1;
        let within = hosts_within.min(l - least + CERTIFY_SLACK_US);
        let (all, _) = self.plan_capped(svc, usize::MAX, within)?;
        if l < latency(&all) {
            capped
        } else {
            all
        }
    }

    /// Plans that needed a wider chaining network than [`MAX_CHAIN_NODES`] hosts to
    /// certify their answer (see [`Mediator::plan_deploy`]).
    pub fn widenings(&self) -> u64 {
        self.widenings
    }

    /// [`Mediator::plan_deploy`] over at most `max_chain_nodes` candidate hosts, with no
    /// certification (`usize::MAX`: every host the latency bound admits, the reference
    /// the benchmark compares against). Reserves nothing.
    pub fn plan_deploy_within(
        &mut self,
        svc: &Service,
        max_chain_nodes: usize,
    ) -> Result<Plan, PlanError> {
        self.plan_capped(svc, max_chain_nodes, svc.sla.max_latency_us)?
            .0
    }

    /// The least processing latency any chain for `svc` can have: per function, the
    /// fastest device that offers it or instance that runs it.
    fn least_processing_us(&self, svc: &Service) -> f64 {
        svc.chain
            .iter()
            .map(|c| {
                let devices = self
                    .infra
                    .devices
                    .iter()
                    .filter(|d| d.functions.contains(&c.function))
                    .map(|d| d.latency_us);
                let running = self
                    .instances
                    .values()
                    .filter(|r| r.spec.function == c.function)
                    .map(|r| r.latency_us);
                devices.chain(running).fold(f64::INFINITY, f64::min)
            })
            .sum()
    }

    /// The plan over at most `max_chain_nodes` of the hosts whose lower bound is at most
    /// `hosts_within_us`, and the smallest lower bound of the qualifying hosts the cap
    /// left out (`None`: none was). The outer error is a request no wider network can
    /// change (malformed or already deployed); the inner one may be.
    fn plan_capped(
        &mut self,
        svc: &Service,
        max_chain_nodes: usize,
        hosts_within_us: f64,
    ) -> Result<(Result<Plan, PlanError>, Option<f64>), PlanError> {
        if self.paths.contains_key(&svc.id) {
            return Err(PlanError::Conflict(format!(
                "service {:?} is already deployed",
                svc.id
            )));
        }
        for (name, host) in [("ingress", &svc.ingress), ("egress", &svc.egress)] {
            if !self.host_index.contains_key(host.as_str()) {
                return Err(PlanError::Invalid(format!("{name}: unknown host {host:?}")));
            }
        }
        if svc.chain.is_empty() {
            return Err(PlanError::Invalid(
                "chain: needs at least one function".into(),
            ));
        }
        let needs = Needs {
            throughput_gbps: svc.sla.min_throughput_gbps,
            capacity: svc
                .chain
                .iter()
                .map(|c| c.capacity_need)
                .fold(0.0, f64::max),
        };
        let configs: Vec<serde_json::Value> = svc
            .chain
            .iter()
            .map(|c| serde_json::to_value(&c.config).unwrap_or_default())
            .collect();
        let pins = pins::pins(svc, &self.infra)?;
        let (net, hosts, cut_us) =
            self.candidate_network(&svc.ingress, &svc.egress, hosts_within_us, max_chain_nodes)?;
        Ok((
            self.plan_on(svc, net, &hosts, needs, configs, &pins),
            cut_us,
        ))
    }

    /// Chains and places `svc` on the candidate network `net` over `hosts`.
    fn plan_on(
        &mut self,
        svc: &Service,
        mut net: Network,
        hosts: &HashSet<String>,
        needs: Needs,
        configs: Vec<serde_json::Value>,
        pins: &BTreeMap<String, pins::Pin>,
    ) -> Result<Plan, PlanError> {
        self.offer_running(svc, &mut net, hosts, &configs, pins)?;
        let sla = SlaSpec {
            id: svc.id.clone().into(),
            src_node: svc.ingress.clone().into(),
            dst_node: svc.egress.clone().into(),
            chain: svc
                .chain
                .iter()
                .map(|c| c.function.clone().into())
                .collect(),
            latency_bound_us: svc.sla.max_latency_us,
            throughput_gbps: needs.throughput_gbps,
            capacity_need: needs.capacity,
            stage_capacity: svc.chain.iter().map(|c| c.capacity_need).collect(),
        };
        let function_configs: Vec<(String, serde_json::Value)> = svc
            .chain
            .iter()
            .map(|c| c.function.clone())
            .zip(configs.iter().cloned())
            .collect();
        let mut placer = Placer {
            draft: Draft::new(&self.model, &self.host_devices, &self.host_index),
            service: &svc.id,
            configs: &function_configs,
            pins,
            taken: &self.instances,
            placed: Vec::new(),
        };
        let max_requests = 3 * svc.chain.len();
        let ans = solve_with_retry(&mut net, &mut self.chainer, &sla, &mut placer, max_requests)
            .map_err(|e| PlanError::Invalid(e.to_string()))?;
        if ans.outcome.status != Status::Ok {
            let q = net
                .query("<service>", &svc.id, &sla)
                .map_err(|e| PlanError::Invalid(e.to_string()))?;
            let why = nfx_chaining::explain::explain(&net, &q, &ans.outcome, self.chainer.path());
            return Err(PlanError::Conflict(format!(
                "no chain meets the SLA of {}: {why}{}",
                svc.id,
                ans.stopped.map(|s| format!(" ({s})")).unwrap_or_default()
            )));
        }
        let path_ids: Vec<String> = self
            .chainer
            .path()
            .iter()
            .map(|&i| net.inst_id(i).to_string())
            .collect();
        let tunnel = match &svc.tunnel {
            Some(t) => Some(self.place_tunnel(svc, t, &path_ids, &mut placer, needs)?),
            None => None,
        };
        let tunnel_ids: Vec<&str> = tunnel
            .iter()
            .flat_map(|t| [t.from_instance.as_str(), t.to_instance.as_str()])
            .collect();
        let placed = placer.placed;
        let mut plan = Plan {
            steps: Vec::new(),
            instances: Vec::new(),
            paths: Vec::new(),
            placements: Vec::new(),
            latency_us: ans.outcome.latency_ns.map(nfx_chaining::network::to_us),
        };
        let mut rows: BTreeMap<String, InstanceRow> = BTreeMap::new();
        for (row, mut rec) in placed {
            let end = tunnel_ids.contains(&row.spec.id.as_str());
            if path_ids.contains(&row.spec.id) || end {
                let mut row = row;
                if end {
                    row.users.push(svc.id.clone());
                    rec.reason = format!("{} (service {})", rec.reason, svc.id);
                }
                plan.steps.push(Step::Deploy {
                    spec: row.spec.clone(),
                });
                plan.steps.push(Step::Configure {
                    instance: row.spec.id.clone(),
                    config: row.spec.config.clone(),
                });
                plan.placements.push(rec);
                rows.insert(row.spec.id.clone(), row);
            }
        }
        let (hops, nat_config) = self.path_hops(svc, &path_ids, &mut rows, needs)?;
        let inside = match &svc.selector {
            Some(sel) => forwards::inside_selector(sel, nat_config.as_ref())
                .map_err(|e| PlanError::Invalid(format!("service {}: {e}", svc.id)))?,
            None => None,
        };
        plan.steps.push(Step::Steer {
            service: svc.id.clone(),
            hops: hops.clone(),
            previous: None,
        });
        plan.instances = rows.into_iter().map(|(k, v)| (k, Some(v))).collect();
        plan.paths = vec![(
            svc.id.clone(),
            Some(PathRow {
                service: svc.id.clone(),
                hops,
                latency_us: plan.latency_us.unwrap_or(0.0),
                throughput_gbps: needs.throughput_gbps,
                capacity: needs.capacity,
                capacities: svc.chain.iter().map(|c| c.capacity_need).collect(),
                ends: Some(ServiceEnds {
                    ingress: svc.ingress.clone(),
                    egress: svc.egress.clone(),
                    selector: svc.selector.clone(),
                    inside,
                    tunnel,
                }),
                max_latency_us: Some(svc.sla.max_latency_us),
            }),
        )];
        if let Some((_, Some(row))) = plan.paths.first() {
            let steered = crate::enforcer::Steered {
                ends: row.ends.clone(),
                hops: row.hops.clone(),
                hosts: Vec::new(),
            };
            self.enforcer
                .check(&steered)
                .map_err(|e| PlanError::Invalid(format!("path: {e}")))?;
        }
        Ok(plan)
    }

    /// Offers the running instances on `hosts` that `svc` may share to the chaining
    /// network: same function and configuration, not going away, on a tier the
    /// service's pins allow.
    fn offer_running(
        &self,
        svc: &Service,
        net: &mut Network,
        hosts: &HashSet<String>,
        configs: &[serde_json::Value],
        pins: &BTreeMap<String, pins::Pin>,
    ) -> Result<(), PlanError> {
        for (id, r) in &self.instances {
            if !hosts.contains(r.host.as_str()) {
                continue;
            }
            let k = svc.chain.iter().position(|c| c.function == r.spec.function);
            let Some(k) = k else { continue };
            if matches!(r.status.as_str(), "destroying" | "lost")
                || r.spec.config != configs[k]
                || pins
                    .get(&r.spec.function)
                    .is_some_and(|p| !p.allows(r.tier))
            {
                continue;
            }
            let im = self.model.instance(id).ok_or_else(|| {
                PlanError::Conflict(format!("instance {id} missing from the resource model"))
            })?;
            net.add_instance("<state>", id, &chain_spec(r, &r.spec.function, im))
                .map_err(|e| PlanError::Conflict(e.to_string()))?;
        }
        Ok(())
    }

    /// The hops of `svc`'s chosen path (`path_ids`, one instance per stage): each
    /// stage's share reserved on its instance (its own capacity need), the service added
    /// to the instance's users in `rows` (the new rows, else the running instance's),
    /// and the configuration of its NAT stage, if it has one.
    fn path_hops(
        &self,
        svc: &Service,
        path_ids: &[String],
        rows: &mut BTreeMap<String, InstanceRow>,
        needs: Needs,
    ) -> Result<(Vec<Hop>, Option<serde_json::Value>), PlanError> {
        let mut shares = PathShares::default();
        let mut hops = Vec::new();
        let mut nat_config = None;
        for (k, id) in path_ids.iter().enumerate() {
            let hop_needs = Needs {
                throughput_gbps: needs.throughput_gbps,
                capacity: svc.chain[k].capacity_need,
            };
            shares
                .reserve(&self.model, rows, id, hop_needs)
                .map_err(|e| PlanError::Conflict(format!("{id}: {e}")))?;
            let mut row = match rows.get(id) {
                Some(r) => r.clone(),
                None => self.instances[id].clone(),
            };
            row.users.push(svc.id.clone());
            if svc.chain[k].function == "nat" {
                nat_config = Some(row.spec.config.clone());
            }
            hops.push(Hop {
                function: svc.chain[k].function.clone(),
                instance: id.clone(),
                device: row.spec.device.clone(),
                host: row.host.clone(),
            });
            rows.insert(id.clone(), row);
        }
        Ok((hops, nat_config))
    }

    /// Places the endpoints of `svc`'s tunnel once its chain is placed (`path_ids`, the
    /// hops' instances): the path's hosts must cross the tunnel's link in its direction.
    fn place_tunnel(
        &self,
        svc: &Service,
        t: &nfx_model::TunnelSpec,
        path_ids: &[String],
        placer: &mut Placer<'_>,
        needs: Needs,
    ) -> Result<TunnelEnds, PlanError> {
        t.validate("service", "tunnel", &self.infra)
            .map_err(|e| PlanError::Invalid(e.to_string()))?;
        let mut hops = Vec::new();
        for (k, id) in path_ids.iter().enumerate() {
            let row = placer
                .placed
                .iter()
                .map(|(r, _)| r)
                .chain(self.instances.get(id))
                .find(|r| r.spec.id == *id)
                .ok_or_else(|| PlanError::Conflict(format!("hop {id} is not placed")))?;
            hops.push(Hop {
                function: svc.chain[k].function.clone(),
                instance: id.clone(),
                device: row.spec.device.clone(),
                host: row.host.clone(),
            });
        }
        let steered = crate::enforcer::Steered {
            ends: Some(ServiceEnds {
                ingress: svc.ingress.clone(),
                egress: svc.egress.clone(),
                selector: None,
                inside: None,
                tunnel: None,
            }),
            hops,
            hosts: Vec::new(),
        };
        let route = crate::agents::host_route(&self.infra, &self.down_hosts_now(), &steered)
            .map_err(PlanError::Conflict)?;
        tunnel::check_route(t, &route)?;
        tunnel::place(placer, &self.infra, t, needs.throughput_gbps)
    }

    fn down_hosts_now(&self) -> BTreeSet<String> {
        self.down.read().map(|d| d.clone()).unwrap_or_default()
    }

    /// The chaining network restricted to hosts that can lie on a path meeting `bound`:
    /// host v qualifies iff transfer(src, v) + transfer(v, dst) ≤ bound (a lower bound of
    /// any path through v, so no feasible path is lost), capped at the
    /// [`MAX_CHAIN_NODES`] hosts with the smallest such bound.
    fn candidate_network(
        &self,
        src: &str,
        dst: &str,
        bound: f64,
        cap: usize,
    ) -> Result<(Network, HashSet<String>, Option<f64>), PlanError> {
        let idx = |h: &str| {
            self.host_index
                .get(h)
                .copied()
                .ok_or_else(|| PlanError::Invalid(format!("unknown host {h:?}")))
        };
        let (s, t) = (idx(src)?, idx(dst)?);
        let n = self.infra.hosts.len();
        let ns = |a: usize, b: usize| self.transfer_ns[a * n + b];
        // µs exactly as the host-latency matrix had them (ns are whole, so this round-trips).
        let us = |a: usize, b: usize| ns(a, b) as f64 / 1000.0;
        let mut cand: Vec<(f64, usize)> = (0..n)
            .map(|v| (us(s, v) + us(v, t), v))
            .filter(|&(lb, v)| {
                v == s || v == t || (lb <= bound && !is_down(&self.down, &self.infra.hosts[v].id))
            })
            .collect();
        let order = |a: &(f64, usize), b: &(f64, usize)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
        let mut cut_us = None;
        if cand.len() > cap {
            cand.select_nth_unstable_by(cap, order);
            cut_us = cand[cap..].iter().map(|c| c.0).reduce(f64::min);
            cand.truncate(cap);
        }
        cand.sort_unstable_by(order);
        for v in [s, t] {
            if !cand.iter().any(|&(_, x)| x == v) {
                cand.push((0.0, v));
            }
        }
        let nodes: Vec<String> = cand
            .iter()
            .map(|&(_, v)| self.infra.hosts[v].id.clone())
            .collect();
        let m: Vec<u64> = cand
            .iter()
            .flat_map(|&(_, a)| cand.iter().map(move |&(_, b)| ns(a, b)))
            .collect();
        let net = Network::from_ns("<infrastructure>", &nodes, m)
            .map_err(|e| PlanError::Invalid(e.to_string()))?;
        Ok((net, nodes.into_iter().collect(), cut_us))
    }

    /// Destroy branch: withdraw the service's steering, then destruct the instances that no
    /// other service uses.
    pub fn plan_destroy(&self, service: &str) -> Result<Plan, PlanError> {
        let path = self
            .paths
            .get(service)
            .ok_or_else(|| PlanError::NotFound(format!("service {service:?} has no path")))?;
        let mut plan = Plan {
            steps: vec![Step::Unsteer {
                service: service.to_string(),
                hops: path.hops.clone(),
            }],
            instances: Vec::new(),
            paths: vec![(service.to_string(), None)],
            placements: Vec::new(),
            latency_us: None,
        };
        for id in path.members() {
            if !self.instances.contains_key(&id) {
                continue;
            }
            let mut row = self.instances[&id].clone();
            row.users.retain(|u| u != service);
            if row.users.is_empty() {
                row.status = "destroying".into();
                plan.steps.push(Step::Destruct {
                    instance: id.clone(),
                });
            }
            plan.instances.push((id, Some(row)));
        }
        Ok(plan)
    }

    /// Re-placement of `svc` after some of its instances were lost or a host on its path
    /// went down: the service is chained and placed again as if new — on live hosts,
    /// without lost instances — then re-steered from its old path to the new one in one
    /// step, and the old instances it no longer uses (and no other service uses) are
    /// destroyed.
    pub fn plan_replace(&mut self, svc: &Service) -> Result<Plan, PlanError> {
        let old = self
            .paths
            .get(&svc.id)
            .cloned()
            .ok_or_else(|| PlanError::NotFound(format!("service {:?} has no path", svc.id)))?;
        let saved = (self.instances.clone(), self.paths.clone());
        let mut instances = saved.0.clone();
        let mut paths = saved.1.clone();
        paths.remove(&svc.id);
        for id in old.members() {
            if let Some(r) = instances.get_mut(&id) {
                r.users.retain(|u| u != &svc.id);
            }
        }
        self.load(instances, paths)?;
        let planned = self.plan_deploy(svc);
        self.load(saved.0, saved.1)?;
        let mut plan = planned?;
        for s in plan.steps.iter_mut() {
            if let Step::Steer { previous, .. } = s {
                *previous = Some(old.hops.clone());
            }
        }
        let kept: BTreeSet<&str> = plan.instances.iter().map(|(id, _)| id.as_str()).collect();
        let mut gone = Vec::new();
        for id in old.members() {
            if kept.contains(id.as_str()) {
                continue;
            }
            let mut row = self.instances[&id].clone();
            row.users.retain(|u| u != &svc.id);
            if row.users.is_empty() {
                if row.status != "lost" {
                    row.status = "destroying".into();
                }
                plan.steps.push(Step::Destruct {
                    instance: id.clone(),
                });
            }
            gone.push((id, Some(row)));
        }
        plan.instances.extend(gone);
        Ok(plan)
    }

    /// Migrate branch: a new instance of the same function on `device` (or the best device
    /// of the same host and VNFM), flows moved, paths re-steered, old instance destroyed.
    pub fn plan_migrate(&self, instance: &str, device: Option<&str>) -> Result<Plan, PlanError> {
        let old = self
            .instances
            .get(instance)
            .ok_or_else(|| PlanError::NotFound(format!("unknown instance {instance:?}")))?;
        if old.status != "running" {
            return Err(PlanError::Conflict(format!(
                "instance {instance} is {}, not running",
                old.status
            )));
        }
        let tunnel_of = self.paths.values().find(|p| {
            let t = p.ends.as_ref().and_then(|e| e.tunnel.as_ref());
            t.is_some_and(|t| t.from_instance == instance || t.to_instance == instance)
        });
        if let Some(p) = tunnel_of {
            return Err(PlanError::Invalid(format!(
                "instance {instance} is an endpoint of service {}'s tunnel: tunnel endpoints \
                 are not migrated; destroy and deploy the service to move its tunnel",
                p.service
            )));
        }
        let om = self
            .model
            .instance(instance)
            .ok_or_else(|| PlanError::Conflict(format!("{instance} not in the model")))?;
        let (target, chosen_across) = self.migration_target(old, instance, device)?;
        let new_id = self.fresh_id(&format!("{instance}-m"));
        let spec = InstanceSpec {
            id: new_id.clone(),
            device: target.id.clone(),
            ..old.spec.clone()
        };
        let mut plan = Plan {
            steps: vec![
                Step::Deploy { spec: spec.clone() },
                Step::Configure {
                    instance: new_id.clone(),
                    config: spec.config.clone(),
                },
                Step::Migrate {
                    old: instance.to_string(),
                    new: new_id.clone(),
                    flows: Vec::new(),
                },
            ],
            instances: Vec::new(),
            paths: Vec::new(),
            placements: vec![PlacementRecord {
                instance: new_id.clone(),
                function: spec.function.clone(),
                device: target.id.clone(),
                host: target.host.clone(),
                tier: target.tier,
                reason: format!(
                    "migration of {instance} (used {:.3} Gbit/s): best fit on {}",
                    om.throughput_gbps.used, target.host
                ),
            }],
            latency_us: None,
        };
        let across = target.host != old.host;
        for (svc, p) in &self.paths {
            if !p.hops.iter().any(|h| h.instance == instance) {
                continue;
            }
            let mut np = p.clone();
            for h in np.hops.iter_mut().filter(|h| h.instance == instance) {
                h.instance = new_id.clone();
                h.device = target.id.clone();
                h.host = target.host.clone();
            }
            if across {
                np.latency_us =
                    self.check_path_sla(svc, &np, instance, (&new_id, target.latency_us))?;
                let steered = crate::enforcer::Steered {
                    ends: np.ends.clone(),
                    hops: np.hops.clone(),
                    hosts: Vec::new(),
                };
                self.enforcer
                    .check(&steered)
                    .map_err(|e| PlanError::Invalid(format!("path of {svc}: {e}")))?;
            }
            plan.steps.push(Step::Steer {
                service: svc.clone(),
                hops: np.hops.clone(),
                previous: Some(p.hops.clone()),
            });
            plan.paths.push((svc.clone(), Some(np)));
        }
        if across {
            plan.steps.push(Step::CopyState {
                old: instance.to_string(),
                new: new_id.clone(),
            });
            if let Some(p) = plan.placements.first_mut() {
                p.reason = match &chosen_across {
                    Some(why) => format!(
                        "migration of {instance} from {} to {} (used {:.3} Gbit/s): {why}",
                        old.host, target.host, om.throughput_gbps.used
                    ),
                    None => format!(
                        "migration of {instance} from {} to {} (used {:.3} Gbit/s): the \
                         chosen device, every path within its service's latency bound",
                        old.host, target.host, om.throughput_gbps.used
                    ),
                };
            }
        }
        plan.steps.push(Step::Destruct {
            instance: instance.to_string(),
        });
        let mut old_row = old.clone();
        old_row.status = "destroying".into();
        let users = std::mem::take(&mut old_row.users);
        plan.instances.push((instance.to_string(), Some(old_row)));
        plan.instances.push((
            new_id,
            Some(InstanceRow {
                spec,
                host: target.host.clone(),
                tier: target.tier,
                latency_us: target.latency_us,
                status: "planned".into(),
                users,
            }),
        ));
        Ok(plan)
    }

    /// The device a migration of `old` (instance `instance`) goes to: `device` when it
    /// runs the function and has room and either is on the same host, VNFM and tier and
    /// no slower, or is a software device of another host that `old` may move to
    /// ([`crosshost`]; the paths' latency bounds are checked by the caller); without
    /// `device`, the best fit among the host's other such devices, else (none has room)
    /// the device of another host [`Mediator::cross_host_fallback`] chooses, with why.
    fn migration_target(
        &self,
        old: &InstanceRow,
        instance: &str,
        device: Option<&str>,
    ) -> Result<(&nfx_model::DeviceModel, Option<String>), PlanError> {
        let vnfm = self.vnfms.get(&old.host);
        let (tp, cap) = (old.spec.throughput_gbps, old.spec.capacity);
        let dm = match device {
            Some(d) => {
                let dm = self
                    .model
                    .device(d)
                    .ok_or_else(|| PlanError::NotFound(format!("unknown device {d:?}")))?;
                if dm.host != old.host {
                    self.check_cross_host(old, instance, dm)?;
                } else if dm.latency_us > old.latency_us {
                    return Err(PlanError::Invalid(format!(
                        "device {d} ({}, {} µs) would change the paths of {instance}: a migration stays on {} at ≤ {} µs",
                        dm.host, dm.latency_us, old.host, old.latency_us
                    )));
                }
                if d == old.spec.device {
                    return Err(PlanError::Invalid(format!(
                        "{instance} already runs on {d}"
                    )));
                }
                if dm.host == old.host && !Arc::ptr_eq(self.vnfms.get(&dm.host), vnfm) {
                    return Err(PlanError::Invalid(format!(
                        "device {d} is served by another VNFM; flow state moves within one VNFM"
                    )));
                }
                if !dm.functions.contains(&old.spec.function) {
                    return Err(PlanError::Invalid(format!(
                        "device {d} does not run {}",
                        old.spec.function
                    )));
                }
                if dm.tier != old.tier {
                    return Err(PlanError::Invalid(format!(
                        "device {d} is on the {} tier and {instance} on the {}: flow state \
                         moves within one tier",
                        dm.tier.as_str(),
                        old.tier.as_str()
                    )));
                }
                if dm.throughput_gbps.free() < tp || dm.capacity.free() < cap {
                    return Err(PlanError::Conflict(format!(
                        "device {d} has no room for {instance}"
                    )));
                }
                dm
            }
            None => {
                let cands = self.model.devices().iter().filter(|d| {
                    d.host == old.host
                        && d.id != old.spec.device
                        && d.tier == old.tier
                        && d.functions.contains(&old.spec.function)
                        && d.latency_us <= old.latency_us
                });
                if let Some((_, d)) = best_fit(cands.map(|d| ((), d)), tp, cap) {
                    return Ok((d, None));
                }
                let f = old.spec.function.as_str();
                if !crosshost::CROSS_HOST_FUNCTIONS.contains(&f) || old.tier != Tier::Software {
                    return Err(PlanError::Conflict(format!(
                        "no other device on {} can take {instance} without raising its \
                         latency, and {f} on the {} tier does not move to another host",
                        old.host,
                        old.tier.as_str()
                    )));
                }
                let (d, why) = self.cross_host_fallback(old, instance)?;
                return Ok((d, Some(why)));
            }
        };
        Ok((dm, None))
    }

    /// The latency of service `svc`'s re-steered path `np` (`new` = the instance that
    /// replaces `moved` and its latency); refused, naming the service, above its bound.
    fn check_path_sla(
        &self,
        svc: &str,
        np: &PathRow,
        moved: &str,
        new: (&str, f64),
    ) -> Result<f64, PlanError> {
        let (ends, bound) = crosshost::path_bound(svc, np)?;
        let lat = self.hops_latency_us(&ends.ingress, &ends.egress, &np.hops, &[new])?;
        if lat > bound + CERTIFY_SLACK_US {
            return Err(PlanError::Conflict(format!(
                "moving {moved} to {} would break the SLA of service {svc}: its path would \
                 take {lat:.3} µs, over its bound of {bound} µs",
                np.hops
                    .iter()
                    .find(|h| h.instance == new.0)
                    .map(|h| h.device.as_str())
                    .unwrap_or("?"),
            )));
        }
        Ok(lat)
    }

    fn fresh_id(&self, base: &str) -> String {
        (1..)
            .map(|n| format!("{base}{n}"))
            .find(|id| !self.instances.contains_key(id))
            .unwrap_or_default()
    }

    fn vnfm_of(&self, instance: &str) -> Result<&Arc<dyn Vnfm>, VnfmError> {
        let row = self
            .instances
            .get(instance)
            .ok_or_else(|| VnfmError::NotFound(format!("instance {instance:?} is not recorded")))?;
        Ok(self.vnfms.get(&row.host))
    }

    /// Carries out one step; returns what the VNFM or enforcer answered.
    pub fn apply(&mut self, step: &Step) -> Result<serde_json::Value, VnfmError> {
        match step {
            Step::Deploy { spec } => {
                if let (Some(secret), Some(row)) =
                    (&self.tunnel_secret, self.instances.get(&spec.id))
                {
                    if let Some(psk) = tunnel::endpoint_psk(secret, spec, &row.host) {
                        self.vnfm_of(&spec.id)?
                            .provision_tunnel_key(&spec.id, &psk)?;
                    }
                }
                let st = self.vnfm_of(&spec.id)?.deploy_instance(spec)?;
                if let Some(r) = self.instances.get_mut(&spec.id) {
                    r.status = "running".into();
                }
                Ok(json(&st))
            }
            Step::Configure { instance, config } => {
                let st = self
                    .vnfm_of(instance)?
                    .configure_instance(instance, config)?;
                Ok(json(&st))
            }
            Step::Steer { service, hops, .. } => {
                let ends = self.paths.get(service).and_then(|p| p.ends.clone());
                self.enforcer
                    .install(service, hops, ends.as_ref())
                    .map_err(VnfmError::Unavailable)?;
                Ok(serde_json::Value::Null)
            }
            Step::Unsteer { service, .. } => {
                self.enforcer
                    .withdraw(service)
                    .map_err(VnfmError::Unavailable)?;
                Ok(serde_json::Value::Null)
            }
            Step::Migrate { old, new, flows } => Ok(json(&self.copy_flows(old, new, flows)?)),
            Step::CopyState { old, new } => Ok(json(&self.copy_flows(old, new, &[])?)),
            Step::Destruct { instance } => {
                let lost = self
                    .instances
                    .get(instance)
                    .is_some_and(|r| r.status == "lost");
                match self.vnfm_of(instance)?.destruct_instance(instance) {
                    Ok(()) | Err(VnfmError::NotFound(_)) => {}
                    // A lost instance on a host that does not answer is gone with it; the
                    // agent's leftovers are removed when it answers again.
                    Err(VnfmError::Unavailable(e)) if lost => {
                        log::warn!("destruct of lost instance {instance}: {e}");
                    }
                    Err(e) => return Err(e),
                }
                self.instances.remove(instance);
                let _ = self.model.destroy(instance);
                Ok(serde_json::Value::Null)
            }
        }
    }

    /// Undoes a done step during rollback; `false` for a step that cannot be undone.
    pub fn undo(&mut self, step: &Step) -> Result<bool, VnfmError> {
        match step {
            Step::Deploy { spec } => match self.vnfm_of(&spec.id)?.destruct_instance(&spec.id) {
                Ok(()) | Err(VnfmError::NotFound(_)) => Ok(true),
                Err(e) => Err(e),
            },
            Step::Configure { .. } => Ok(true),
            Step::Steer {
                service, previous, ..
            } => {
                match previous {
                    Some(p) => self.enforcer.install(service, p, None),
                    None => self.enforcer.withdraw(service),
                }
                .map_err(VnfmError::Unavailable)?;
                Ok(true)
            }
            Step::Unsteer { service, hops } => {
                self.enforcer
                    .install(service, hops, None)
                    .map_err(VnfmError::Unavailable)?;
                Ok(true)
            }
            Step::Migrate { old, new, flows } => {
                self.copy_back(new, old, flows)?;
                Ok(true)
            }
            Step::CopyState { old, new } => {
                self.copy_back(new, old, &[])?;
                Ok(true)
            }
            Step::Destruct { .. } => Ok(false),
        }
    }

    /// Status branch: the VNFM's view of one instance.
    pub fn instance_state(&self, instance: &str) -> Result<InstanceState, VnfmError> {
        self.vnfm_of(instance)?.get_instance_state(instance)
    }
}

/// The chaining view of recorded instance `r` (its pools from the model's `im`), with
/// `function` as its function id.
pub(crate) fn chain_spec(
    r: &InstanceRow,
    function: &str,
    im: &nfx_model::InstanceModel,
) -> nfx_chaining::InstanceSpec {
    nfx_chaining::InstanceSpec {
        id: r.spec.id.as_str().into(),
        function: function.into(),
        node: r.host.as_str().into(),
        kind: r.tier.as_str().into(),
        processing_latency_us: r.latency_us,
        throughput_total_gbps: im.throughput_gbps.total,
        throughput_used_gbps: im.throughput_gbps.used,
        capacity_total: im.capacity.total,
        capacity_used: im.capacity.used,
    }
}

/// A step answer as JSON.
fn json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// The SLA's reservations on the instances of a new path, checked as the resource model
/// would (`ResourceModel::reserve`) on copies of the instances' pools: a path may use an
/// instance twice, and the second use must find the first one's share taken.
#[derive(Default)]
struct PathShares {
    pools: HashMap<String, (Pool, Pool)>,
}

impl PathShares {
    /// Reserves `needs` on instance `id` — a recorded one (pools from `model`) or one this
    /// plan places (`placed`, pools the size of the needs).
    fn reserve(
        &mut self,
        model: &ResourceModel,
        placed: &BTreeMap<String, InstanceRow>,
        id: &str,
        needs: Needs,
    ) -> Result<(), ResourceError> {
        let (tp, cap) = match self.pools.get(id) {
            Some(&p) => p,
            None => match (placed.get(id), model.instance(id)) {
                (Some(r), _) => (
                    Pool::new("throughput_gbps", r.spec.throughput_gbps),
                    Pool::new("capacity", r.spec.capacity),
                ),
                (None, Some(i)) => (i.throughput_gbps, i.capacity),
                (None, None) => return Err(ResourceError::UnknownInstance(id.to_string())),
            },
        };
        let (mut tp, mut cap) = (tp, cap);
        cap.check(needs.capacity)?;
        tp.reserve(needs.throughput_gbps)?;
        cap.reserve(needs.capacity)?;
        self.pools.insert(id.to_string(), (tp, cap));
        Ok(())
    }
}
