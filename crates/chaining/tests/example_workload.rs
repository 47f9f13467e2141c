//! The example workload in configs/examples answers as worked out by hand.

use nfx_chaining::{answer_workload, Status, Workload};
use std::path::PathBuf;

#[test]
fn example_workload_answers() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/examples/chain-workload.json");
    let w = Workload::load(&path).unwrap();
    let r = answer_workload("chain-workload.json", &w).unwrap();
    let a: Vec<_> = r.answers.iter().map(|a| (a.id.to_string(), a)).collect();
    assert_eq!(a[0].0, "web");
    assert_eq!(a[0].1.status, Status::Ok);
    assert_eq!(a[0].1.latency_us, Some(193.0));
    let path: Vec<String> = a[0].1.path.iter().map(ToString::to_string).collect();
    assert_eq!(path, ["fw-tbl", "nat-cloud", "dpi-cloud"]);
    assert_eq!(a[1].1.status, Status::InfeasibleLatency);
    assert_eq!(a[1].1.latency_us, Some(193.0));
    assert!(
        a[1].1.explanation.contains("by 13.000 µs"),
        "{}",
        a[1].1.explanation
    );
    assert_eq!(a[2].1.status, Status::InfeasibleResources);
    assert!(
        a[2].1.explanation.starts_with("stage 2 (esp)"),
        "{}",
        a[2].1.explanation
    );
    assert_eq!(a[3].1.status, Status::Ok);
    assert_eq!(a[3].1.latency_us, Some(105.0));
}

#[test]
fn bad_workload_names_file_and_field() {
    let text = r#"{"nodes":["a"],"transfer_latency_us":[[0]],"instances":[],
        "slas":[{"id":"s","src_node":"a","dst_node":"b","chain":[],"latency_bound_us":1,
        "throughput_gbps":1,"capacity_need":1}]}"#;
    let w: Workload = nfx_model::parse_json("w.json", text).unwrap();
    let e = answer_workload("w.json", &w).unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.field.as_str()),
        ("w.json", "slas[0].dst_node")
    );
    let e = nfx_model::parse_json::<Workload>(
        "w.json",
        &text
            .replace("\"kind\"", "x")
            .replace("\"chain\"", "\"chains\""),
    )
    .unwrap_err();
    assert_eq!(e.field, "slas[0].chains");
}

#[test]
fn integer_ids_are_echoed_as_integers() {
    let text = r#"{"nodes":[0,1],"transfer_latency_us":[[0,5],[5,0]],
        "instances":[{"id":7,"function":2,"node":1,"kind":"hardware","processing_latency_us":1.5,
        "throughput_total_gbps":10,"throughput_used_gbps":0,"capacity_total":4,"capacity_used":0}],
        "slas":[{"id":42,"src_node":0,"dst_node":0,"chain":[2],"latency_bound_us":20,
        "throughput_gbps":1,"capacity_need":1}]}"#;
    let w: Workload = nfx_model::parse_json("w.json", text).unwrap();
    let r = answer_workload("w.json", &w).unwrap();
    let v = serde_json::to_value(&r.answers[0]).unwrap();
    assert_eq!(v["id"], serde_json::json!(42));
    assert_eq!(v["path"], serde_json::json!([7]));
    assert_eq!(v["status"], "ok");
    assert_eq!(v["latency_us"], serde_json::json!(11.5));
}
