//! JSON input errors name the file and the field; the output has the documented shape.

use nfx_placement::{place, Algorithm, Instance, PlacementError};
use std::time::Duration;

const GOOD: &str = r#"{
  "name": "demo",
  "functions": ["firewall", "nat"],
  "devices": [
    {"id": "sw1", "model": "tor", "kind": "hardware", "functions": ["firewall", "nat"], "cost": 10,
     "tcam_capacity": 100, "latency_us": 2, "throughput_gbps": 40},
    {"id": "srv1", "model": "x86", "kind": "software", "functions": ["firewall", "nat"], "cost": 4,
     "cpu_capacity": 8, "latency_us": 30, "throughput_gbps": 10}
  ],
  "vnf_instances": [
    {"id": "fw1", "function": "firewall", "tcam_need": 60, "cpu_need": 4, "latency_bound_us": 5, "throughput_gbps": 10},
    {"id": "nat1", "function": "nat", "tcam_need": 30, "cpu_need": 4, "latency_bound_us": 50, "throughput_gbps": 5},
    {"id": "nat2", "function": "nat", "tcam_need": 30, "cpu_need": 4, "latency_bound_us": 50, "throughput_gbps": 5}
  ]
}"#;

fn err(text: &str) -> String {
    Instance::from_json(text, "in.json")
        .unwrap_err()
        .to_string()
}

#[test]
fn good_instance_solves_to_documented_shape() {
    let inst = Instance::from_json(GOOD, "in.json").unwrap();
    let p = place(&inst, Algorithm::Exact, Duration::from_secs(5)).unwrap();
    // fw1 needs the switch (latency); only one NAT fits beside it (60 + 30 + 30 > 100),
    // so the server is needed too: optimum = 10 + 4.
    assert_eq!(p.objective, 14);
    assert!(p.proven_optimal);
    let v: serde_json::Value = serde_json::to_value(&p).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "assignment",
            "bound",
            "objective",
            "proven_optimal",
            "seconds"
        ]
    );
    assert_eq!(v["assignment"]["fw1"], "sw1");
    assert!(v["objective"].is_u64() && v["bound"].is_u64() && v["seconds"].is_f64());
    for alg in [Algorithm::Ffd, Algorithm::Online] {
        let h = place(&inst, alg, Duration::from_secs(1)).unwrap();
        assert!(h.objective >= p.objective && h.bound <= p.objective);
    }
}

#[test]
fn bad_json_and_unknown_fields_are_errors_naming_the_file() {
    assert!(err("{").starts_with("in.json: "));
    let e = err(&GOOD.replace("\"cost\": 4,", "\"cost\": 4, \"colour\": 1,"));
    assert!(e.contains("colour"), "{e}");
    let e = err(&GOOD.replace("\"cost\": 4,", "\"cost\": -4,"));
    assert!(e.starts_with("in.json"), "{e}");
    let e = err(&GOOD.replace("\"tcam_need\": 60,", ""));
    assert!(e.contains("tcam_need"), "{e}");
}

#[test]
fn field_errors_name_the_field() {
    let e = err(&GOOD.replace("\"cpu_capacity\": 8,", ""));
    assert!(e.contains("devices[1].cpu_capacity"), "{e}");
    let e = err(&GOOD.replace("\"id\": \"srv1\"", "\"id\": \"sw1\""));
    assert!(
        e.contains("devices[1].id") && e.contains("duplicate"),
        "{e}"
    );
    let e = err(&GOOD.replace("\"id\": \"nat2\"", "\"id\": \"nat1\""));
    assert!(e.contains("vnf_instances[2].id"), "{e}");
    let e = err(&GOOD.replace("\"function\": \"nat\", \"tcam_need\": 30, \"cpu_need\": 4, \"latency_bound_us\": 50, \"throughput_gbps\": 5}\n  ]", "\"function\": \"dpi\", \"tcam_need\": 30, \"cpu_need\": 4, \"latency_bound_us\": 50, \"throughput_gbps\": 5}\n  ]"));
    assert!(
        e.contains("vnf_instances[2].function") && e.contains("dpi"),
        "{e}"
    );
}

#[test]
fn costs_that_overflow_are_an_error_and_huge_values_solve() {
    let e = err(&GOOD
        .replace("\"cost\": 10,", "\"cost\": 18446744073709551615,")
        .replace("\"cost\": 4,", "\"cost\": 1,"));
    assert!(e.contains("devices[1].cost") && e.contains("2^64"), "{e}");
    // Capacities and needs near u64::MAX are fine: sums are never formed in u64.
    let m = u64::MAX;
    let text = GOOD
        .replace(
            "\"tcam_capacity\": 100,",
            &format!("\"tcam_capacity\": {m},"),
        )
        .replace(
            "\"throughput_gbps\": 40",
            &format!("\"throughput_gbps\": {m}"),
        )
        .replace("\"tcam_need\": 60,", &format!("\"tcam_need\": {},", m / 2))
        .replace("\"tcam_need\": 30,", &format!("\"tcam_need\": {},", m / 4));
    let inst = Instance::from_json(&text, "in.json").unwrap();
    for alg in [Algorithm::Exact, Algorithm::Ffd, Algorithm::Online] {
        let p = place(&inst, alg, Duration::from_secs(2)).unwrap();
        assert!(
            p.bound <= p.objective && p.objective <= 14,
            "{alg:?}: {p:?}"
        );
        assert_eq!(
            nfx_placement::validate::check(&inst, &p.device_of),
            Ok(p.objective)
        );
    }
}

#[test]
fn unhostable_instance_is_named() {
    let text = GOOD.replace("\"latency_bound_us\": 5,", "\"latency_bound_us\": 1,");
    match Instance::from_json(&text, "in.json") {
        Err(PlacementError::Unhostable { id, reason }) => {
            assert_eq!(id, "fw1");
            assert!(reason.contains("latency"), "{reason}");
        }
        other => panic!("expected Unhostable, got {other:?}"),
    }
}

#[test]
fn too_few_devices_is_a_clear_error() {
    // Three instances that each fill the only fast device: no placement exists.
    let text = GOOD
        .replace("\"tcam_need\": 60", "\"tcam_need\": 100")
        .replace("\"latency_bound_us\": 50", "\"latency_bound_us\": 5")
        .replace("\"tcam_need\": 30", "\"tcam_need\": 100");
    let inst = Instance::from_json(&text, "in.json").unwrap();
    for alg in [Algorithm::Exact, Algorithm::Ffd, Algorithm::Online] {
        let e = place(&inst, alg, Duration::from_secs(2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no feasible placement"), "{e}");
    }
}
