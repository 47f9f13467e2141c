//! The mediator's side of the chaining retry loop: decides tier and device for a new
//! instance (software if it meets the latency budget, else HYPER's best fit on a faster
//! tier) and reserves it in a draft over the committed resource model. The draft copies
//! only the devices it touches, so a request costs O(devices on one host), not a copy of
//! the whole model.

use super::pins::Pin;
use super::InstanceRow;
use super::PlacementRecord;
use crate::vnfm::InstanceSpec;
use nfx_chaining::Needs;
use nfx_model::{DeviceModel, ResourceModel, Tier};
use nfx_placement::online::Fitness;
use std::collections::{BTreeMap, HashMap};

/// Scales a resource amount to the integers of the placement crate's exact fitness.
fn units(x: f64) -> u64 {
    (x.max(0.0) * 1000.0).round() as u64
}

/// HYPER's best fit among `cands` (each with a key that is handed back): the largest
/// (need/free)·(γ/η_free), ties to the cheaper device (then to the earlier one); only
/// devices with room.
pub(super) fn best_fit<'a, K>(
    cands: impl Iterator<Item = (K, &'a DeviceModel)>,
    throughput: f64,
    capacity: f64,
) -> Option<(K, &'a DeviceModel)> {
    let mut best: Option<(K, &DeviceModel, Fitness)> = None;
    for (k, d) in cands {
        if d.throughput_gbps.free() < throughput || d.capacity.free() < capacity {
            continue;
        }
        let fit = Fitness::new(
            units(capacity),
            units(d.capacity.free()),
            units(throughput),
            units(d.throughput_gbps.free()),
        );
        let better = match &best {
            None => true,
            Some((_, b, bf)) => match fit.cmp_exact(bf) {
                std::cmp::Ordering::Greater => true,
                std::cmp::Ordering::Less => false,
                std::cmp::Ordering::Equal => d.cost < b.cost,
            },
        };
        if better {
            best = Some((k, d, fit));
        }
    }
    best.map(|(k, d, _)| (k, d))
}

/// The committed model plus what this plan has placed: touched devices are copied on
/// first use and reserved on the copy, exactly as `ResourceModel::deploy` would.
pub(super) struct Draft<'a> {
    model: &'a ResourceModel,
    /// Device indices of each host, in model order.
    host_devices: &'a [Vec<usize>],
    host_index: &'a HashMap<String, usize>,
    touched: HashMap<usize, DeviceModel>,
}

impl<'a> Draft<'a> {
    /// A draft with nothing placed yet.
    pub(super) fn new(
        model: &'a ResourceModel,
        host_devices: &'a [Vec<usize>],
        host_index: &'a HashMap<String, usize>,
    ) -> Self {
        Draft {
            model,
            host_devices,
            host_index,
            touched: HashMap::new(),
        }
    }

    /// The devices of `host` (with their model index) as the draft sees them, in model order.
    pub(super) fn devices_on<'s>(
        &'s self,
        host: &str,
    ) -> impl Iterator<Item = (usize, &'s DeviceModel)> + 's {
        let idx = self
            .host_index
            .get(host)
            .map(|&h| self.host_devices[h].as_slice())
            .unwrap_or_default();
        idx.iter()
            .map(|&i| (i, self.touched.get(&i).unwrap_or(&self.model.devices()[i])))
    }

    /// Reserves `throughput`/`capacity` on device `dev` for a new instance of `function`:
    /// the checks and arithmetic of `ResourceModel::deploy`; `false` (nothing changed)
    /// when they fail.
    pub(super) fn deploy(
        &mut self,
        dev: usize,
        function: &str,
        throughput: f64,
        capacity: f64,
    ) -> bool {
        let mut d = self
            .touched
            .get(&dev)
            .unwrap_or(&self.model.devices()[dev])
            .clone();
        let ok = d.functions.iter().any(|f| f == function)
            && d.capacity.check(capacity).is_ok()
            && d.throughput_gbps.reserve(throughput).is_ok()
            && d.capacity.reserve(capacity).is_ok();
        if ok {
            self.touched.insert(dev, d);
        }
        ok
    }
}

/// The mediator's [`nfx_chaining::Mediator`]: places on the draft, records rows and reasons.
pub(super) struct Placer<'a> {
    /// Where placements are reserved.
    pub(super) draft: Draft<'a>,
    /// Service being planned (instance ids derive from it).
    pub(super) service: &'a str,
    /// Configuration of each function of the chain.
    pub(super) configs: &'a [(String, serde_json::Value)],
    /// Functions the service pins to a tier.
    pub(super) pins: &'a BTreeMap<String, Pin>,
    /// Recorded instances (their ids are taken).
    pub(super) taken: &'a BTreeMap<String, InstanceRow>,
    /// What was placed, in order.
    pub(super) placed: Vec<(InstanceRow, PlacementRecord)>,
}

impl Placer<'_> {
    /// Records a new instance (`planned`, no user yet) on `host` and why it went there.
    pub(super) fn record(
        &mut self,
        spec: InstanceSpec,
        host: &str,
        tier: Tier,
        latency_us: f64,
        reason: String,
    ) {
        let rec = PlacementRecord {
            instance: spec.id.clone(),
            function: spec.function.clone(),
            device: spec.device.clone(),
            host: host.to_string(),
            tier,
            reason,
        };
        let row = InstanceRow {
            spec,
            host: host.to_string(),
            tier,
            latency_us,
            status: "planned".into(),
            users: Vec::new(),
        };
        self.placed.push((row, rec));
    }

    pub(super) fn id_is_free(&self, id: &str) -> bool {
        !self.taken.contains_key(id)
            && self.draft.model.instance(id).is_none()
            && !self.placed.iter().any(|(r, _)| r.spec.id == id)
    }
}

/// Each host's index in the infrastructure, and the model's device indices on each host
/// (the per-host candidate lists the placer scans).
pub fn host_devices(
    infra: &nfx_model::Infrastructure,
    model: &ResourceModel,
) -> (HashMap<String, usize>, Vec<Vec<usize>>) {
    let index: HashMap<String, usize> = infra
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.id.clone(), i))
        .collect();
    let mut devices = vec![Vec::new(); infra.hosts.len()];
    for (i, d) in model.devices().iter().enumerate() {
        if let Some(&h) = index.get(&d.host) {
            devices[h].push(i);
        }
    }
    (index, devices)
}

impl nfx_chaining::Mediator for Placer<'_> {
    fn place_faster(
        &mut self,
        function: &str,
        near_node: &str,
        latency_budget_us: f64,
        needs: Needs,
    ) -> Option<nfx_chaining::InstanceSpec> {
        let pin = self.pins.get(function).copied().unwrap_or(Pin {
            tier: None,
            table_entries: None,
        });
        let fits = |(_, d): &(usize, &DeviceModel)| {
            d.latency_us <= latency_budget_us
                && d.functions.iter().any(|f| f == function)
                && pin.allows(d.tier)
        };
        let draft = &self.draft;
        let software = best_fit(
            draft
                .devices_on(near_node)
                .filter(fits)
                .filter(|(_, d)| d.tier == Tier::Software),
            needs.throughput_gbps,
            needs.capacity,
        );
        let ((dev_index, dev), reason) = match software {
            Some((i, d)) => (
                (i, d),
                format!(
                    "software tier meets the SLA (latency {} ≤ budget {latency_budget_us:.3} µs)",
                    d.latency_us
                ),
            ),
            None => {
                let faster = |tier: Tier| {
                    best_fit(
                        draft
                            .devices_on(near_node)
                            .filter(fits)
                            .filter(move |(_, d)| d.tier == tier),
                        needs.throughput_gbps,
                        pin.capacity(tier, needs.capacity),
                    )
                };
                let d = faster(Tier::Table).or_else(|| faster(Tier::Accelerator))?;
                let why = match pin.tier {
                    Some(t) => format!("pinned to the {} tier", t.as_str()),
                    None => format!("no software device on {near_node} meets latency budget {latency_budget_us:.3} µs with room"),
                };
                (d, format!("{why}; best-fit {} device", d.1.tier.as_str()))
            }
        };
        let (dev_id, host, tier, lat) =
            (dev.id.clone(), dev.host.clone(), dev.tier, dev.latency_us);
        let capacity = pin.capacity(tier, needs.capacity);
        let base = format!("{}-{function}-", self.service);
        let id = (1..)
            .map(|n| format!("{base}{n}"))
            .find(|id| self.id_is_free(id))?;
        if !self
            .draft
            .deploy(dev_index, function, needs.throughput_gbps, capacity)
        {
            return None;
        }
        let config = self
            .configs
            .iter()
            .find(|(f, _)| f == function)
            .map(|(_, c)| c.clone())
            .unwrap_or_default();
        let spec = InstanceSpec {
            id: id.clone(),
            function: function.to_string(),
            device: dev_id,
            config,
            throughput_gbps: needs.throughput_gbps,
            capacity,
        };
        self.record(spec, &host, tier, lat, reason);
        Some(nfx_chaining::InstanceSpec {
            id: id.into(),
            function: function.into(),
            node: host.into(),
            kind: tier.as_str().into(),
            processing_latency_us: lat,
            throughput_total_gbps: needs.throughput_gbps,
            throughput_used_gbps: 0.0,
            capacity_total: capacity,
            capacity_used: 0.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_chaining::Mediator as _;

    /// Entries every function takes on a table device in the test below.
    const TABLE_ENTRIES: f64 = 2.0;

    /// The placement the mediator made before drafts: filter every device of the model,
    /// best fit per tier (software, table, accelerator), deploy on a full copy of the model.
    fn straightforward(
        model: &mut ResourceModel,
        id: &str,
        function: &str,
        near_node: &str,
        budget: f64,
        needs: Needs,
    ) -> Option<String> {
        let fits = |d: &&DeviceModel| {
            d.host == near_node
                && d.latency_us <= budget
                && d.functions.iter().any(|f| f == function)
        };
        let need = |tier: Tier| {
            if tier == Tier::Table {
                TABLE_ENTRIES
            } else {
                needs.capacity
            }
        };
        let devs = model.devices();
        let pick = |tier: Tier| {
            best_fit(
                devs.iter()
                    .filter(fits)
                    .filter(|d| d.tier == tier)
                    .map(|d| ((), d)),
                needs.throughput_gbps,
                need(tier),
            )
            .map(|(_, d)| (d.id.clone(), d.tier))
        };
        let (dev, tier) = pick(Tier::Software)
            .or_else(|| pick(Tier::Table))
            .or_else(|| pick(Tier::Accelerator))?;
        model
            .deploy(id, function, &dev, needs.throughput_gbps, need(tier))
            .ok()?;
        Some(dev)
    }

    #[test]
    fn draft_places_exactly_like_a_full_model_copy() {
        let infra = crate::scale::synthetic_infra(12).unwrap();
        let mut base = ResourceModel::from_infrastructure(&infra);
        base.deploy("old-1", "nat", "sw0", 6.0, 4.0).unwrap();
        base.deploy("old-2", "firewall", "tt0", 30.0, 1000.0)
            .unwrap();
        let (hosts, host_devices) = host_devices(&infra, &base);
        let taken = BTreeMap::new();
        let configs: Vec<(String, serde_json::Value)> = Vec::new();
        let pins: BTreeMap<String, Pin> = crate::scale::CHAIN6
            .iter()
            .map(|f| {
                let pin = Pin {
                    tier: None,
                    table_entries: Some(TABLE_ENTRIES),
                };
                (f.to_string(), pin)
            })
            .collect();
        let mut placer = Placer {
            draft: Draft::new(&base, &host_devices, &hosts),
            service: "s",
            configs: &configs,
            pins: &pins,
            taken: &taken,
            placed: Vec::new(),
        };
        let mut reference = base.clone();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let (mut placed, mut refused) = (0, 0);
        for _ in 0..400 {
            let function = crate::scale::CHAIN6[next(6) as usize];
            let host = format!("h{}", [0, 5, 10, 3][next(4) as usize]);
            let budget = [1.0, 3.0, 5.0, 30.0, 60.0][next(5) as usize];
            let needs = Needs {
                throughput_gbps: 0.5 * (1 + next(12)) as f64,
                capacity: 0.5 * (1 + next(8)) as f64,
            };
            let got = placer.place_faster(function, &host, budget, needs);
            let id = got.as_ref().map(|g| g.id.to_string());
            let want = straightforward(
                &mut reference,
                id.as_deref().unwrap_or("probe"),
                function,
                &host,
                budget,
                needs,
            );
            if want.is_some() && got.is_none() {
                panic!("draft refused {function} on {host} within {budget} µs: {want:?}");
            }
            if let Some(g) = &got {
                let dev = &placer.placed.last().unwrap().0.spec.device;
                assert_eq!(Some(dev), want.as_ref(), "{function} on {host}");
                assert_eq!(g.node.to_string(), host);
                placed += 1;
            } else {
                refused += 1;
            }
            for (i, d) in reference.devices().iter().enumerate() {
                let mine = placer.draft.touched.get(&i).unwrap_or(&base.devices()[i]);
                assert_eq!(mine, d);
            }
        }
        assert!(
            placed > 50 && refused > 50,
            "placed {placed}, refused {refused}"
        );
        let tiers: std::collections::HashSet<Tier> =
            placer.placed.iter().map(|(r, _)| r.tier).collect();
        assert_eq!(tiers.len(), 3, "{tiers:?}");
    }
}
