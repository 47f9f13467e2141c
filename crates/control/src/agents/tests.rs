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
            inside: None,
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

/// Records the nftables scripts a host's steering loads; answers no route lookup.
#[derive(Clone, Default)]
struct Scripts(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl crate::hostagent::steering::HostTools for Scripts {
    fn nft(&mut self, script: &str) -> Result<(), String> {
        self.0.lock().unwrap().push(script.to_string());
        Ok(())
    }

    fn ip(&mut self, _args: &[&str]) -> Result<String, String> {
        Ok("[]".into())
    }
}

/// The `prerouting` rules host `host` loads for `path` (its links to h1, h2, h3).
fn rules_of(host: &str, path: &HostPath) -> String {
    use crate::hostagent::stages::Stage;
    use crate::hostagent::steering::{NeighborLink, Steering};
    let tools = Scripts::default();
    let neighbors = ["h1", "h2", "h3"]
        .iter()
        .filter(|h| **h != host)
        .map(|h| {
            let link = NeighborLink {
                iface: format!("to-{h}"),
                peer: "10.9.0.1".parse().unwrap(),
            };
            (h.to_string(), link)
        })
        .collect();
    let stages = path
        .stages
        .iter()
        .enumerate()
        .map(|(k, d)| (d.clone(), Stage::new(d, k)))
        .collect();
    let mut s = Steering::new(Box::new(tools.clone()), neighbors, stages);
    s.program("fwd", path).unwrap();
    let scripts = tools.0.lock().unwrap();
    scripts.last().cloned().unwrap_or_default()
}

#[test]
fn after_a_port_forward_the_stages_match_its_target_inside_and_the_public_side_outside() {
    use crate::hostagent::tables::selection_of;
    let nat = serde_json::json!({"dnat": [{"proto": "tcp", "public_ip": "198.51.100.8",
        "public_port": 8080, "to_ip": "10.0.1.2", "to_port": 5301}]});
    let sel: nfx_model::Selector = serde_json::from_value(serde_json::json!(
        {"src": "198.51.100.8/32", "dst": "10.0.3.0/24", "proto": "tcp", "sport": 8080}
    ))
    .unwrap();
    // A firewall inside the NAT (h1), the table-tier NAT and a worker after it (h2).
    let mut p = path(
        vec![
            hop("f", "h1-sw0", "h1"),
            hop("n", "h2-tt", "h2"),
            hop("d", "h2-sw0", "h2"),
        ],
        "h3",
    );
    p.hops[1].function = "nat".into();
    let ends = p.ends.as_mut().unwrap();
    ends.inside = crate::mediator::forwards::inside_selector(&sel, Some(&nat)).unwrap();
    ends.selector = Some(sel);
    let parts = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap();
    let (h1, h2, h3) = (&parts[0].1, &parts[1].1, &parts[2].1);
    assert_eq!(h1.selector.src.unwrap().to_string(), "10.0.1.2/32");
    assert_eq!(h1.selector.sport.unwrap().to_string(), "5301");

    // The steering: forward frames enter h1 from the target; replies (to the target,
    // rewritten by the NAT) are matched by their source, the outside hosts, as before.
    let r1 = rules_of("h1", h1);
    assert!(
        r1.contains("ip saddr 10.0.1.2/32 ip daddr 10.0.3.0/24 meta l4proto tcp th sport 5301 meta mark set"),
        "{r1}"
    );
    assert!(!r1.contains("198.51.100.8"), "{r1}");
    assert!(
        r1.contains("iifname \"to-h2\" ip saddr 10.0.3.0/24 meta l4proto tcp meta mark set"),
        "{r1}"
    );
    // h2: frames from h1 carry the target up to the NAT's stage; after it the
    // destination side alone, as after a source NAT; h3 the same.
    let r2 = rules_of("h2", h2);
    assert!(
        r2.contains("iifname \"to-h1\" ip saddr 10.0.1.2/32 ip daddr 10.0.3.0/24 meta l4proto tcp th sport 5301"),
        "{r2}"
    );
    assert!(
        r2.contains("iifname \"sk0o\" ip daddr 10.0.3.0/24 meta l4proto tcp meta mark set"),
        "{r2}"
    );
    let r3 = rules_of("h3", h3);
    assert!(h3.nat_before && !r3.contains("saddr 10.0.1.2"), "{r3}");

    // The table chain of the NAT's stage takes the target's frames forward and the
    // outside hosts' replies; the worker after it the destination side.
    let nat_stage = selection_of(h2, 0).unwrap();
    let target = Some(("10.0.1.2".parse().unwrap(), 32));
    assert_eq!(nat_stage.forward.src, target);
    assert_eq!(nat_stage.forward.sport, Some((5301, 5301)));
    let outside = Some(("10.0.3.0".parse().unwrap(), 24));
    assert_eq!(
        (
            nat_stage.reverse.src,
            nat_stage.reverse.dst,
            nat_stage.reverse.sport
        ),
        (outside, None, None),
        "replies: from the outside hosts, whatever the NAT made of their destination"
    );
    let after = selection_of(h2, 1).unwrap();
    assert_eq!((after.forward.src, after.forward.sport), (None, None));
    assert_eq!(after.forward.dst, outside);
    assert_eq!(h2.after_nat, ["h2-sw0"]);

    // A software NAT: its worker sees the public endpoint on connections opened from
    // outside and the target on the replies, so it classifies by the destination side.
    p.hops[1].device = "h2-sw1".into();
    let parts = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap();
    assert_eq!(parts[1].1.after_nat, ["h2-sw1", "h2-sw0"]);
    assert!(parts[0].1.after_nat.is_empty(), "the firewall before it");
    p.ends.as_mut().unwrap().inside = None;
    let parts = host_paths(&infra(), &BTreeSet::new(), &p, agent).unwrap();
    assert_eq!(parts[1].1.after_nat, ["h2-sw0"], "no forward named");
}
