//! Generator of HYPER-style placement instances (in the spirit of HYPER §VII-D): a
//! hybrid infrastructure of table-tier switches and software servers of a few models
//! with different costs, capacities, latencies, throughputs and function sets, and a
//! mix of NAT, firewall, elephant-detection and DPI instances, some with latency
//! bounds only the table tier meets. Deterministic for a given seed.

use crate::instance::{Device, DeviceKind, Instance, VnfInstance};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const FUNCTIONS: [&str; 4] = ["firewall", "nat", "elephant", "dpi"];
const TABLE_FUNCTIONS: [&str; 3] = ["firewall", "nat", "elephant"];

/// A device model of the generated infrastructure.
struct ModelSpec {
    name: &'static str,
    kind: DeviceKind,
    functions: &'static [&'static str],
    cost: u64,
    capacity: u64,
    latency_us: u64,
    throughput_gbps: u64,
}

const MODELS: [ModelSpec; 5] = [
    ModelSpec {
        name: "tor-switch",
        kind: DeviceKind::Hardware,
        functions: &TABLE_FUNCTIONS,
        cost: 60,
        capacity: 2048,
        latency_us: 2,
        throughput_gbps: 100,
    },
    ModelSpec {
        name: "smartnic",
        kind: DeviceKind::Hardware,
        functions: &["firewall", "nat"],
        cost: 35,
        capacity: 1024,
        latency_us: 4,
        throughput_gbps: 40,
    },
    ModelSpec {
        name: "server-large",
        kind: DeviceKind::Software,
        functions: &FUNCTIONS,
        cost: 40,
        capacity: 1600,
        latency_us: 30,
        throughput_gbps: 40,
    },
    ModelSpec {
        name: "server-small",
        kind: DeviceKind::Software,
        functions: &FUNCTIONS,
        cost: 22,
        capacity: 800,
        latency_us: 45,
        throughput_gbps: 20,
    },
    ModelSpec {
        name: "dpi-appliance",
        kind: DeviceKind::Hardware,
        functions: &["dpi", "firewall"],
        cost: 70,
        capacity: 4096,
        latency_us: 8,
        throughput_gbps: 60,
    },
];

/// A generated instance with `n` VNF instances; `seed` fixes everything.
pub fn generate(n: usize, seed: u64) -> Instance {
    let mut rng = StdRng::seed_from_u64(seed ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut vnfs = Vec::with_capacity(n);
    for i in 0..n {
        let tight = rng.random_bool(0.3);
        let function = FUNCTIONS[rng.random_range(0..FUNCTIONS.len())];
        let latency_bound_us = if tight {
            if function == "dpi" {
                rng.random_range(8..=20)
            } else {
                rng.random_range(2..=10)
            }
        } else {
            rng.random_range(50..=200)
        };
        let heavy = rng.random_bool(0.25);
        vnfs.push(VnfInstance {
            id: format!("vnf{i}"),
            function: function.to_string(),
            tcam_need: if heavy {
                rng.random_range(400..=1000)
            } else {
                rng.random_range(32..=400)
            },
            cpu_need: if heavy {
                rng.random_range(250..=700)
            } else {
                rng.random_range(40..=250)
            },
            latency_bound_us,
            throughput_gbps: if heavy {
                rng.random_range(8..=20)
            } else {
                rng.random_range(1..=8)
            },
        });
    }
    let mut devices = Vec::new();
    for m in &MODELS {
        let count = n.div_ceil(2).max(2);
        for j in 0..count {
            devices.push(Device {
                id: format!("{}-{j}", m.name),
                model: m.name.to_string(),
                kind: m.kind,
                functions: m.functions.iter().map(|f| f.to_string()).collect(),
                cost: m.cost,
                tcam_capacity: (m.kind == DeviceKind::Hardware).then_some(m.capacity),
                cpu_capacity: (m.kind == DeviceKind::Software).then_some(m.capacity),
                latency_us: m.latency_us,
                throughput_gbps: m.throughput_gbps,
            });
        }
    }
    Instance {
        name: format!("hyper_n{n}_s{seed}"),
        functions: FUNCTIONS.iter().map(|f| f.to_string()).collect(),
        devices,
        vnf_instances: vnfs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_instances_are_valid_and_deterministic() {
        for seed in 0..20 {
            let a = generate(40, seed);
            a.validate("generated").unwrap();
            assert_eq!(a, generate(40, seed));
        }
        assert_ne!(generate(40, 1), generate(40, 2));
    }
}
