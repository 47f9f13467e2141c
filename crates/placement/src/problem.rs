//! The compiled form the solvers work on: identical devices grouped into models (with a
//! count), identical VNF instances grouped into item types (with a demand), and a
//! compatibility table. Grouping removes symmetry: a 1,000-item bin-packing instance
//! with 81 distinct weights becomes 81 types.

use crate::instance::{host_reject, DeviceKind, Instance};
use std::collections::HashMap;

/// What makes two devices interchangeable: kind, functions, cost, capacity,
/// latency and throughput.
type ModelKey<'a> = (DeviceKind, Vec<&'a str>, u64, u64, u64, u64);

/// A group of identical devices.
#[derive(Debug, Clone)]
pub struct Model {
    /// Device indexes (into `Instance::devices`) of this model, in input order.
    pub devices: Vec<usize>,
    /// Tier, deciding which need of an item it consumes.
    pub kind: DeviceKind,
    /// Cost of one used device.
    pub cost: u64,
    /// Resource capacity (TCAM or CPU).
    pub cap: u64,
    /// Throughput capacity.
    pub thr_cap: u64,
}

/// A group of identical VNF instances.
#[derive(Debug, Clone)]
pub struct ItemType {
    /// Instance indexes (into `Instance::vnf_instances`) of this type, in input order.
    pub members: Vec<usize>,
    /// TCAM need.
    pub need_hw: u64,
    /// CPU need.
    pub need_sw: u64,
    /// Throughput need.
    pub thr: u64,
}

/// Items and devices grouped, with compatibility precomputed.
#[derive(Debug, Clone)]
pub struct Problem {
    /// Device models.
    pub models: Vec<Model>,
    /// Item types.
    pub types: Vec<ItemType>,
    compat: Vec<bool>,
    model_of: Vec<usize>,
    type_of: Vec<usize>,
}

/// One device's content: a model and how many items of each type it hosts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pattern {
    /// Model index.
    pub model: usize,
    /// (type index, count) pairs with count > 0, sorted by type.
    pub items: Vec<(u32, u32)>,
}

impl Pattern {
    /// This pattern's items cut down to what `demand` (per type) still needs, with
    /// types it no longer needs left out; empty when it covers nothing.
    pub fn clipped(&self, demand: &[u32]) -> Vec<(u32, u32)> {
        self.items
            .iter()
            .map(|&(t, c)| (t, c.min(demand[t as usize])))
            .filter(|&(_, c)| c > 0)
            .collect()
    }
}

impl Problem {
    /// Groups an instance (assumed validated) into models and types.
    pub fn new(inst: &Instance) -> Problem {
        let mut models: Vec<Model> = Vec::new();
        let mut model_of = Vec::with_capacity(inst.devices.len());
        let mut type_of = Vec::with_capacity(inst.vnf_instances.len());
        let mut model_key: HashMap<ModelKey, usize> = HashMap::new();
        for (h, d) in inst.devices.iter().enumerate() {
            let mut f: Vec<&str> = d.functions.iter().map(String::as_str).collect();
            f.sort_unstable();
            f.dedup();
            let key = (
                d.kind,
                f,
                d.cost,
                d.capacity(),
                d.latency_us,
                d.throughput_gbps,
            );
            let k = *model_key.entry(key).or_insert_with(|| {
                models.push(Model {
                    devices: Vec::new(),
                    kind: d.kind,
                    cost: d.cost,
                    cap: d.capacity(),
                    thr_cap: d.throughput_gbps,
                });
                models.len() - 1
            });
            models[k].devices.push(h);
            model_of.push(k);
        }
        let mut types: Vec<ItemType> = Vec::new();
        let mut type_key: HashMap<(&str, u64, u64, u64, u64), usize> = HashMap::new();
        for (m, v) in inst.vnf_instances.iter().enumerate() {
            let key = (
                v.function.as_str(),
                v.tcam_need,
                v.cpu_need,
                v.latency_bound_us,
                v.throughput_gbps,
            );
            let t = *type_key.entry(key).or_insert_with(|| {
                types.push(ItemType {
                    members: Vec::new(),
                    need_hw: v.tcam_need,
                    need_sw: v.cpu_need,
                    thr: v.throughput_gbps,
                });
                types.len() - 1
            });
            types[t].members.push(m);
            type_of.push(t);
        }
        let mut compat = vec![false; types.len() * models.len()];
        for (t, ty) in types.iter().enumerate() {
            let v = &inst.vnf_instances[ty.members[0]];
            for (k, md) in models.iter().enumerate() {
                compat[t * models.len() + k] =
                    host_reject(&inst.devices[md.devices[0]], v).is_none();
            }
        }
        Problem {
            models,
            types,
            compat,
            model_of,
            type_of,
        }
    }

    /// Whether a device of model `k` can host one item of type `t` on its own.
    #[inline]
    pub fn compat(&self, t: usize, k: usize) -> bool {
        self.compat[t * self.models.len() + k]
    }

    /// Resource need of type `t` on model `k`.
    #[inline]
    pub fn size(&self, t: usize, k: usize) -> u64 {
        match self.models[k].kind {
            DeviceKind::Hardware => self.types[t].need_hw,
            DeviceKind::Software => self.types[t].need_sw,
        }
    }

    /// Number of instances of each type.
    pub fn demands(&self) -> Vec<u32> {
        self.types.iter().map(|t| t.members.len() as u32).collect()
    }

    /// Number of devices of each model.
    pub fn counts(&self) -> Vec<u32> {
        self.models.iter().map(|m| m.devices.len() as u32).collect()
    }

    /// Whether the pattern respects compatibility and both capacities of its model.
    pub fn fits(&self, p: &Pattern) -> bool {
        let (mut need, mut thr) = (0u128, 0u128);
        for &(t, c) in &p.items {
            let t = t as usize;
            if !self.compat(t, p.model) {
                return false;
            }
            need += u128::from(self.size(t, p.model)) * u128::from(c);
            thr += u128::from(self.types[t].thr) * u128::from(c);
        }
        let m = &self.models[p.model];
        need <= u128::from(m.cap) && thr <= u128::from(m.thr_cap)
    }

    /// Total cost of a list of patterns.
    pub fn cost(&self, pats: &[Pattern]) -> u64 {
        pats.iter().map(|p| self.models[p.model].cost).sum()
    }

    /// A scale-free size of type `t` (largest share of a compatible model's capacity),
    /// used to sort items decreasingly in the greedy heuristics.
    pub fn rel_size(&self, t: usize) -> f64 {
        let share = |x: u64, cap: u64| if cap == 0 { 0.0 } else { x as f64 / cap as f64 };
        (0..self.models.len())
            .filter(|&k| self.compat(t, k))
            .map(|k| {
                let m = &self.models[k];
                share(self.size(t, k), m.cap).max(share(self.types[t].thr, m.thr_cap))
            })
            .fold(0.0, f64::max)
    }

    /// Turns patterns (one per used device) into a device index per VNF instance;
    /// `None` if the patterns use more devices of a model than exist or do not cover
    /// every instance exactly once.
    pub fn to_assignment(&self, pats: &[Pattern], n_instances: usize) -> Option<Vec<usize>> {
        let mut next_dev = vec![0usize; self.models.len()];
        let mut next_item = vec![0usize; self.types.len()];
        let mut assign = vec![usize::MAX; n_instances];
        for p in pats {
            let dev = *self.models[p.model].devices.get(next_dev[p.model])?;
            next_dev[p.model] += 1;
            for &(t, c) in &p.items {
                let ty = &self.types[t as usize];
                for _ in 0..c {
                    let m = *ty.members.get(next_item[t as usize])?;
                    next_item[t as usize] += 1;
                    assign[m] = dev;
                }
            }
        }
        if assign.contains(&usize::MAX) {
            return None;
        }
        Some(assign)
    }

    /// The patterns of a placement given as a device index per VNF instance.
    pub fn patterns_of(&self, assign: &[usize]) -> Vec<Pattern> {
        let mut per_dev: std::collections::BTreeMap<usize, Vec<(u32, u32)>> = Default::default();
        for (m, &h) in assign.iter().enumerate() {
            let items = per_dev.entry(h).or_default();
            let t = self.type_of[m] as u32;
            match items.iter_mut().find(|(x, _)| *x == t) {
                Some((_, c)) => *c += 1,
                None => items.push((t, 1)),
            }
        }
        per_dev
            .into_iter()
            .map(|(h, mut items)| {
                items.sort_unstable();
                Pattern {
                    model: self.model_of[h],
                    items,
                }
            })
            .collect()
    }
}
