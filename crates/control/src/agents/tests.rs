//! Host routes and host paths of services, without agents.

use super::*;
use crate::enforcer::{Hop, ServiceEnds};

const INFRA: &str = "
hosts: [{id: h1, cores: 2}, {id: h2, cores: 2}, {id: h3, cores: 2}, {id: sim, cores: 2}]
devices:
  - {id: h1-sw0, host: h1, tier: software, functions: [firewall, nat], latency_us: 30, throughput_gbps: 10, cpu_cores: 1}
  - {id: h2-sw0, host: h2, tier: software, functions: [firewall, nat], latency_us: 30, throughput_gbps: 10, cpu_cores: 1}
  - {id: h2-sw1, host: h2, tier: software, functions: [firewall, nat], latency_us: 30, throughput_gbps: 10, cpu_cores: 1}
  - {id: h2-tt, host: h2, tier: table, functions: [firewall], latency_us: 5, throughput_gbps: 40, table_entries: 100}
  - {id: h2-acc, host: h2, tier: accelerator, functions: [firewall], latency_us: 5, throughput_gbps: 4, queue_pairs: 2, algorithms: [aes-128-gcm]}
links:
  - {a: h1, b: h2, latency_us: 20}
  - {a: h2, b: h3, latency_us: 20}
  - {a: h1, b: h3, latency_us: 60}
  - {a: h3, b: sim, latency_us: 20}
";

fn infra() -> Infrastructure {
    Infrastructure::from_yaml("infra.yaml", INFRA).unwrap()
}

fn hop(i: &str, dev: &str, host: &str) -> Hop {
    Hop {
        function: "firewall".into(),
        instance: i.into(),
        device: dev.into(),
        host: host.into(),
    }
}

fn path(hops: Vec<Hop>, egress: &str) -> Steered {
    Steered {
        ends: Some(ServiceEnds {
            ingress: "h1".into(),
            egress: egress.into(),
            selector: Some(serde_json::from_str(r#"{"dst": "10.0.3.0/24"}"#).unwrap()),
            tunnel: None,
        }),
        hops,
        hosts: Vec::new(),
    }
}

fn agent(h: &str) -> bool {
    h != "sim"
}

#[test]
fn hosts_between_hops_follow_the_least_latency_and_avoid_down_hosts() {
    let p = path(vec![hop("a", "h1-sw0", "h1")], "h3");
    let parts = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap();
    let hosts: Vec<&str> = parts.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        hosts,
        ["h1", "h2", "h3"],
        "40 µs along the line beats the 60 µs chord"
    );
    let (_, h1) = &parts[0];
    assert_eq!((h1.prev.as_deref(), h1.next.as_deref()), (None, Some("h2")));
    assert_eq!(h1.stages, ["h1-sw0"]);
    let (_, h2) = &parts[1];
    assert_eq!(
        (h2.prev.as_deref(), h2.next.as_deref()),
        (Some("h1"), Some("h3"))
    );
    assert!(h2.stages.is_empty(), "transit");
    let down = BTreeSet::from(["h2".to_string()]);
    let around = host_paths(&infra(), &down, &p, agent).unwrap();
    let hosts: Vec<&str> = around.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(hosts, ["h1", "h3"], "the chord around the down host");
}

#[test]
fn consecutive_hops_on_one_device_are_one_stage_and_hosts_without_agents_are_skipped() {
    let p = path(
        vec![
            hop("a", "h2-sw0", "h2"),
            hop("b", "h2-sw0", "h2"),
            hop("c", "h2-sw1", "h2"),
        ],
        "sim",
    );
    let parts = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap();
    let hosts: Vec<&str> = parts.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(hosts, ["h1", "h2", "h3"], "sim has no agent");
    assert_eq!(parts[1].1.stages, ["h2-sw0", "h2-sw1"]);
    assert_eq!(parts[2].1.next.as_deref(), Some("sim"));
}

#[test]
fn unsteerable_paths_are_refused_with_the_reason() {
    let mut p = path(vec![hop("a", "h2-acc", "h2")], "h3");
    let e = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap_err();
    assert!(e.contains("accelerator"), "{e}");
    // A table-tier hop is a stage like a worker: its agent runs the table chain there.
    p.hops = vec![hop("a", "h2-tt", "h2"), hop("b", "h2-sw0", "h2")];
    p.hops[0].function = "nat".into();
    let parts = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap();
    assert_eq!(parts[1].1.stages, ["h2-tt", "h2-sw0"]);
    // The worker after the NAT classifies by the destination side only.
    assert_eq!(parts[1].1.after_nat, ["h2-sw0"]);
    assert!(!parts[1].1.nat_before && parts[2].1.nat_before, "{parts:?}");
    p.hops = vec![
        hop("a", "h2-sw0", "h2"),
        hop("b", "h1-sw0", "h1"),
        hop("c", "h2-sw1", "h2"),
    ];
    let e = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap_err();
    assert!(e.contains("twice"), "{e}");
    let mut p = path(vec![hop("a", "h1-sw0", "h1")], "h3");
    p.ends.as_mut().unwrap().selector = None;
    let e = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap_err();
    assert!(e.contains("selector"), "{e}");
    let down = BTreeSet::from(["h2".to_string(), "h3".to_string()]);
    let p = path(vec![hop("a", "h1-sw0", "h1")], "sim");
    let e = host_paths(&infra(), &down, &p, agent).unwrap_err();
    assert!(e.contains("no route"), "{e}");
}

#[test]
fn a_tunnel_hop_names_its_endpoints_on_both_hosts_and_a_path_off_its_link_is_refused() {
    let mut p = path(vec![hop("a", "h1-sw0", "h1")], "h3");
    p.ends.as_mut().unwrap().tunnel = Some(TunnelEnds {
        from: "h2".into(),
        to: "h3".into(),
        from_instance: "s-esp-h2".into(),
        to_instance: "s-esp-h3".into(),
    });
    let parts = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap();
    let sides: Vec<(&str, Option<&str>, Option<&str>)> = parts
        .iter()
        .map(|(h, hp)| {
            let (prev, next) = (hp.tunnel_prev.as_deref(), hp.tunnel_next.as_deref());
            (h.as_str(), prev, next)
        })
        .collect();
    assert_eq!(
        sides,
        [
            ("h1", None, None),
            ("h2", None, Some("s-esp-h2")),
            ("h3", Some("s-esp-h3"), None)
        ]
    );
    // h2 down: the path takes the h1–h3 chord and no longer crosses the tunnel's link.
    let down = BTreeSet::from(["h2".to_string()]);
    let e = host_paths(&infra(), &down, &p, agent).unwrap_err();
    assert!(e.contains("no longer goes from h2 straight to h3"), "{e}");
}
