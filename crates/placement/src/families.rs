//! Families of generated placement instances with different structures, so that the
//! exact solver is measured on more than the one generator it was tuned on: many
//! device models with overlapping function sets, latency bounds that exclude most
//! hardware, throughput-bound devices, few expensive devices, the HYPER-style family
//! of `generator.rs`, and mixes of them. Every family is deterministic for a given
//! size and seed, and every instance it makes is hostable (each VNF instance is drawn
//! for a model that can host it alone).

use crate::instance::{Device, DeviceKind, Instance, VnfInstance};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Functions of the new families (the HYPER family uses its own first four).
const FUNCTIONS: [&str; 6] = ["firewall", "nat", "elephant", "dpi", "lb", "ids"];

/// A structure of generated instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// The HYPER-style generator of `generator.rs` (five fixed models).
    Hyper,
    /// 8–12 random models, each with 2–4 of six functions: the models overlap.
    Overlap,
    /// Most instances have latency bounds only one or two small, expensive table-tier
    /// models meet.
    TightLatency,
    /// Throughput, not TCAM or CPU, decides how many instances fit on a device.
    Throughput,
    /// Two or three expensive models with only a few devices each beyond what FFD needs,
    /// so the device counts bind.
    FewExpensive,
    /// Half the instances of one family and half of another, on both device sets.
    Mixed,
}

impl Family {
    /// Every family, in report order.
    pub const ALL: [Family; 6] = [
        Family::Hyper,
        Family::Overlap,
        Family::TightLatency,
        Family::Throughput,
        Family::FewExpensive,
        Family::Mixed,
    ];

    /// The family's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Family::Hyper => "hyper",
            Family::Overlap => "overlap",
            Family::TightLatency => "tight-latency",
            Family::Throughput => "throughput",
            Family::FewExpensive => "few-expensive",
            Family::Mixed => "mixed",
        }
    }

    /// Parses a name of [`Family::name`].
    pub fn parse(s: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == s)
    }

    /// A generated instance with `n` VNF instances; `seed` fixes everything.
    pub fn generate(self, n: usize, seed: u64) -> Instance {
        let mut rng = StdRng::seed_from_u64(
            seed ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (self as u64) << 56,
        );
        let mut inst = match self {
            Family::Hyper => crate::generator::generate(n, seed),
            Family::Overlap => draw(&overlap_models(&mut rng), n, 0.3, &mut rng),
            Family::TightLatency => draw(&tight_latency_models(), n, 0.8, &mut rng),
            Family::Throughput => draw(&throughput_models(&mut rng), n, 0.2, &mut rng),
            Family::FewExpensive => few_expensive(n, &mut rng),
            Family::Mixed => mixed(n, &mut rng),
        };
        inst.name = format!("{}_n{n}_s{seed}", self.name());
        inst
    }
}

/// A device model of a generated infrastructure, and how to size instances for it.
#[derive(Debug, Clone)]
struct ModelSpec {
    name: String,
    kind: DeviceKind,
    functions: Vec<&'static str>,
    cost: u64,
    capacity: u64,
    latency_us: u64,
    throughput_gbps: u64,
    /// Largest share (per mille) of the capacity one instance drawn for this model takes.
    max_need_permille: u64,
    /// Largest share (per mille) of the throughput one instance drawn for it takes.
    max_thr_permille: u64,
    /// Relative odds of drawing an instance for this model.
    weight: u32,
}

fn random_functions(rng: &mut StdRng, k: usize) -> Vec<&'static str> {
    let mut fs: Vec<&'static str> = FUNCTIONS.to_vec();
    for i in 0..k {
        let j = rng.random_range(i..fs.len());
        fs.swap(i, j);
    }
    fs.truncate(k);
    fs.sort_unstable();
    fs
}

fn kind(hw: bool) -> DeviceKind {
    if hw {
        DeviceKind::Hardware
    } else {
        DeviceKind::Software
    }
}

/// Every function when `all` (the model that keeps every instance hostable), else `k`
/// random ones.
fn all_or_random_functions(all: bool, rng: &mut StdRng, k: usize) -> Vec<&'static str> {
    if all {
        FUNCTIONS.to_vec()
    } else {
        random_functions(rng, k)
    }
}

/// A generic server with every function: the fallback host of loose-bound instances.
fn generic_server() -> ModelSpec {
    ModelSpec {
        name: "server".into(),
        kind: DeviceKind::Software,
        functions: FUNCTIONS.to_vec(),
        cost: 40,
        capacity: 1600,
        latency_us: 40,
        throughput_gbps: 40,
        max_need_permille: 400,
        max_thr_permille: 300,
        weight: 1,
    }
}

fn overlap_models(rng: &mut StdRng) -> Vec<ModelSpec> {
    let count = rng.random_range(8..=12);
    let mut models: Vec<ModelSpec> = (0..count)
        .map(|i| {
            let hw = rng.random_bool(0.5);
            let k = rng.random_range(2..=4);
            ModelSpec {
                name: format!("m{i}"),
                kind: kind(hw),
                functions: random_functions(rng, k),
                cost: rng.random_range(15..=80),
                capacity: if hw {
                    rng.random_range(512..=4096)
                } else {
                    rng.random_range(400..=2000)
                },
                latency_us: if hw {
                    rng.random_range(1..=10)
                } else {
                    rng.random_range(20..=60)
                },
                throughput_gbps: rng.random_range(10..=100),
                max_need_permille: 500,
                max_thr_permille: 400,
                weight: 1,
            }
        })
        .collect();
    models.push(generic_server());
    models
}

fn tight_latency_models() -> Vec<ModelSpec> {
    let hw =
        |name: &str, fs: &[&'static str], [cost, capacity, latency_us, thr]: [u64; 4], weight| {
            ModelSpec {
                name: name.into(),
                kind: DeviceKind::Hardware,
                functions: fs.to_vec(),
                cost,
                capacity,
                latency_us,
                throughput_gbps: thr,
                max_need_permille: 450,
                max_thr_permille: 350,
                weight,
            }
        };
    vec![
        hw("asic-1us", &["firewall", "nat", "lb"], [90, 768, 1, 100], 8),
        hw(
            "fpga-2us",
            &["firewall", "elephant", "ids"],
            [75, 1024, 2, 80],
            8,
        ),
        hw("smartnic-4us", &["firewall", "nat"], [35, 1024, 4, 40], 1),
        hw(
            "tor-6us",
            &["firewall", "nat", "elephant", "lb"],
            [60, 2048, 6, 100],
            1,
        ),
        hw("dpi-9us", &["dpi", "ids", "firewall"], [70, 4096, 9, 60], 1),
        generic_server(),
        ModelSpec {
            name: "server-small".into(),
            cost: 22,
            capacity: 800,
            latency_us: 45,
            throughput_gbps: 20,
            ..generic_server()
        },
    ]
}

fn throughput_models(rng: &mut StdRng) -> Vec<ModelSpec> {
    let count = rng.random_range(4..=6);
    (0..count)
        .map(|i| {
            let hw = i % 2 == 0;
            ModelSpec {
                name: format!("t{i}"),
                kind: kind(hw),
                functions: all_or_random_functions(i == 1, rng, 3),
                cost: rng.random_range(20..=90),
                capacity: rng.random_range(4000..=8000),
                latency_us: if hw {
                    rng.random_range(1..=8)
                } else {
                    rng.random_range(20..=50)
                },
                throughput_gbps: rng.random_range(40..=100),
                max_need_permille: 60,
                max_thr_permille: 500,
                weight: 1,
            }
        })
        .collect()
}

/// Instances of `n` drawn for random models of `models`, with a share `tight` of them
/// bounded close to their model's latency; devices: `max(2, ⌈n/2⌉)` per model.
fn draw(models: &[ModelSpec], n: usize, tight: f64, rng: &mut StdRng) -> Instance {
    let loose = models.iter().map(|m| m.latency_us).max().unwrap_or(0);
    let total: u32 = models.iter().map(|m| m.weight).sum();
    let pick = |rng: &mut StdRng| {
        let mut r = rng.random_range(0..total);
        models
            .iter()
            .find(|m| {
                let hit = r < m.weight;
                r = r.saturating_sub(m.weight);
                hit
            })
            .unwrap_or(&models[0])
    };
    let vnf_instances = (0..n)
        .map(|i| {
            let m = pick(rng);
            let function = m.functions[rng.random_range(0..m.functions.len())];
            let bound = if rng.random_bool(tight) {
                m.latency_us + rng.random_range(0..=1)
            } else {
                loose + rng.random_range(10..=150)
            };
            let need = |rng: &mut StdRng, cap: u64| {
                let max = (cap * m.max_need_permille / 1000).max(1);
                rng.random_range(1..=max)
            };
            let (hw_cap, sw_cap) = match m.kind {
                DeviceKind::Hardware => (m.capacity, 1600),
                DeviceKind::Software => (2048, m.capacity),
            };
            VnfInstance {
                id: format!("vnf{i}"),
                function: function.to_string(),
                tcam_need: need(rng, hw_cap),
                cpu_need: need(rng, sw_cap),
                latency_bound_us: bound,
                throughput_gbps: rng
                    .random_range(1..=(m.throughput_gbps * m.max_thr_permille / 1000).max(1)),
            }
        })
        .collect();
    let per_model = n.div_ceil(2).max(2);
    Instance {
        name: String::new(),
        functions: FUNCTIONS.iter().map(|f| f.to_string()).collect(),
        devices: devices(models, &vec![per_model; models.len()]),
        vnf_instances,
    }
}

fn devices(models: &[ModelSpec], counts: &[usize]) -> Vec<Device> {
    models
        .iter()
        .zip(counts)
        .flat_map(|(m, &count)| {
            (0..count).map(move |j| Device {
                id: format!("{}-{j}", m.name),
                model: m.name.clone(),
                kind: m.kind,
                functions: m.functions.iter().map(|f| f.to_string()).collect(),
                cost: m.cost,
                tcam_capacity: (m.kind == DeviceKind::Hardware).then_some(m.capacity),
                cpu_capacity: (m.kind == DeviceKind::Software).then_some(m.capacity),
                latency_us: m.latency_us,
                throughput_gbps: m.throughput_gbps,
            })
        })
        .collect()
}

/// Two or three expensive models; each keeps the devices FFD uses plus one.
fn few_expensive(n: usize, rng: &mut StdRng) -> Instance {
    let count = rng.random_range(2..=3);
    let models: Vec<ModelSpec> = (0..count)
        .map(|i| {
            let hw = i == 0;
            ModelSpec {
                name: format!("x{i}"),
                kind: kind(hw),
                functions: all_or_random_functions(i == 1, rng, 4),
                cost: rng.random_range(300..=1000),
                capacity: rng.random_range(2000..=5000),
                latency_us: if hw { 3 } else { rng.random_range(20..=40) },
                throughput_gbps: rng.random_range(60..=100),
                max_need_permille: 500,
                max_thr_permille: 300,
                weight: 1,
            }
        })
        .collect();
    let mut inst = draw(&models, n, 0.2, rng);
    let used = crate::ffd::ffd(&inst).expect("every generated instance is hostable by its model");
    let mut counts = vec![1usize; models.len()];
    let mut seen = std::collections::HashSet::new();
    for h in used {
        if seen.insert(h) {
            let model = &inst.devices[h].model;
            counts[models.iter().position(|m| &m.name == model).unwrap_or(0)] += 1;
        }
    }
    inst.devices = devices(&models, &counts);
    inst
}

/// Half the instances from one family, half from another, on both device sets.
fn mixed(n: usize, rng: &mut StdRng) -> Instance {
    let pool = [
        Family::Hyper,
        Family::Overlap,
        Family::TightLatency,
        Family::Throughput,
    ];
    let a = pool[rng.random_range(0..pool.len())];
    let b = pool[(pool.iter().position(|&f| f == a).unwrap_or(0)
        + rng.random_range(1..pool.len()))
        % pool.len()];
    let seed = rng.random();
    let first = a.generate(n / 2, seed);
    let second = b.generate(n - n / 2, seed);
    let mut functions = first.functions.clone();
    for f in &second.functions {
        if !functions.contains(f) {
            functions.push(f.clone());
        }
    }
    let prefixed = |inst: &Instance, p: &str| {
        let devices = inst.devices.iter().map(|d| Device {
            id: format!("{p}{}", d.id),
            model: format!("{p}{}", d.model),
            ..d.clone()
        });
        let vnfs = inst.vnf_instances.iter().map(|v| VnfInstance {
            id: format!("{p}{}", v.id),
            ..v.clone()
        });
        (devices.collect::<Vec<_>>(), vnfs.collect::<Vec<_>>())
    };
    let (mut devices, mut vnf_instances) = prefixed(&first, "a-");
    let (d2, v2) = prefixed(&second, "b-");
    devices.extend(d2);
    vnf_instances.extend(v2);
    Instance {
        name: String::new(),
        functions,
        devices,
        vnf_instances,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::host_reject;
    use crate::problem::Problem;

    #[test]
    fn every_family_is_valid_deterministic_and_seed_dependent() {
        for f in Family::ALL {
            for (n, seed) in [(1, 0), (7, 1), (30, 2), (60, 3)] {
                let a = f.generate(n, seed);
                a.validate(f.name()).unwrap();
                assert_eq!(a.vnf_instances.len(), n, "{}", f.name());
                assert_eq!(a, f.generate(n, seed));
            }
            assert_ne!(f.generate(30, 1), f.generate(30, 2), "{}", f.name());
            assert_eq!(Family::parse(f.name()), Some(f));
        }
        assert_eq!(Family::parse("nope"), None);
    }

    #[test]
    fn overlap_has_many_models_with_overlapping_functions() {
        for seed in 0..10 {
            let p = Problem::new(&Family::Overlap.generate(60, seed));
            assert!(
                p.models.len() >= 9,
                "seed {seed}: {} models",
                p.models.len()
            );
            let inst = Family::Overlap.generate(60, seed);
            let hosts = |v: &VnfInstance| {
                let mut models: Vec<&str> = inst
                    .devices
                    .iter()
                    .filter(|d| host_reject(d, v).is_none())
                    .map(|d| d.model.as_str())
                    .collect();
                models.dedup();
                models.len()
            };
            let shared = inst.vnf_instances.iter().filter(|v| hosts(v) >= 2).count();
            assert!(shared * 2 >= inst.vnf_instances.len(), "seed {seed}");
        }
    }

    #[test]
    fn tight_latency_excludes_most_hardware() {
        let inst = Family::TightLatency.generate(120, 4);
        let hw: Vec<&Device> = inst
            .devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Hardware)
            .collect();
        let tight = inst
            .vnf_instances
            .iter()
            .filter(|v| v.latency_bound_us < 20)
            .filter(|v| {
                let ok = hw.iter().filter(|d| d.latency_us <= v.latency_bound_us);
                ok.count() * 2 < hw.len()
            })
            .count();
        assert!(tight * 2 >= inst.vnf_instances.len(), "{tight} of 120");
    }

    #[test]
    fn throughput_binds_before_the_resource() {
        let inst = Family::Throughput.generate(60, 5);
        let (mut pairs, mut thr_binds) = (0, 0);
        for v in &inst.vnf_instances {
            let hosts = inst.devices.iter().filter(|d| host_reject(d, v).is_none());
            for d in hosts {
                let need_share = v.need_on(d.kind) as f64 / d.capacity() as f64;
                let thr_share = v.throughput_gbps as f64 / d.throughput_gbps as f64;
                assert!(need_share <= 0.125, "{} on {}", v.id, d.id);
                pairs += 1;
                thr_binds += usize::from(thr_share > need_share);
            }
        }
        assert!(thr_binds * 10 >= pairs * 8, "{thr_binds} of {pairs}");
    }

    #[test]
    fn few_expensive_keeps_few_devices_and_stays_feasible() {
        for seed in 0..10 {
            let inst = Family::FewExpensive.generate(40, seed);
            let p = Problem::new(&inst);
            assert!(p.models.len() <= 3);
            assert!(p.models.iter().all(|m| m.cost >= 300));
            assert!(inst.devices.len() <= 40, "seed {seed}");
            crate::ffd::ffd(&inst).unwrap();
        }
    }

    #[test]
    fn mixed_combines_two_device_sets() {
        let inst = Family::Mixed.generate(30, 6);
        assert!(inst.devices.iter().any(|d| d.id.starts_with("a-")));
        assert!(inst.devices.iter().any(|d| d.id.starts_with("b-")));
        assert_eq!(
            inst.vnf_instances
                .iter()
                .filter(|v| v.id.starts_with("a-"))
                .count(),
            15
        );
    }
}
