//! A worker's [`Stats`] in the Prometheus text format (OpenMetrics text, which Prometheus
//! scrapes), rendered with `prometheus-client`: the same counters as the JSON stats
//! document, one series per node, port, worker, service and drop reason, every series
//! labelled with the instance name. `nfx run --metrics-listen ADDR` serves it on
//! `/metrics`; docs/dataplane.md lists the names.

use crate::stats::Stats;
use nfx_metrics::{Families, Labels};

/// Labels of one series: `instance` first, then the series' own.
fn labels(instance: &str, more: &[(&'static str, &str)]) -> Labels {
    std::iter::once(("instance", instance.to_string()))
        .chain(more.iter().map(|(k, v)| (*k, v.to_string())))
        .collect()
}

/// Every sample name [`render`] can export, from its registry (for dashboards and their
/// checks).
pub fn sample_names() -> Vec<String> {
    families(&Stats::default()).sample_names().to_vec()
}

/// Renders `s` as Prometheus text (ending in `# EOF`).
pub fn render(s: &Stats) -> String {
    families(s).encode()
}

/// The families of one scrape of `s`.
fn families(s: &Stats) -> Families {
    let mut f = Families::default();
    let i = s.name.as_str();
    f.gauge("nfx_uptime_seconds", "Seconds since the worker started")
        .get_or_create(&labels(i, &[]))
        .set(s.uptime_s);
    render_nodes(&mut f, s);
    render_ports(&mut f, s);
    render_workers(&mut f, s);
    render_services(&mut f, s);
    let events = f.count("nfx_events", "Events raised, by kind");
    for (kind, n) in &s.events {
        events
            .get_or_create(&labels(i, &[("kind", kind)]))
            .inc_by(*n);
    }
    f.count(
        "nfx_control_rejected",
        "Control-socket connections refused by the peer-credential check",
    )
    .get_or_create(&labels(i, &[]))
    .inc_by(s.control_rejected);
    let fast_path = f.count(
        "nfx_fast_path_packets",
        "Packets the table tier (kernel fast path) forwarded, as synced",
    );
    if let Some(fp) = &s.fast_path {
        fast_path.get_or_create(&labels(i, &[])).inc_by(fp.packets);
    }
    f
}

fn render_nodes(f: &mut Families, s: &Stats) {
    let i = s.name.as_str();
    let packets = f.count("nfx_node_packets", "Packets that entered the graph node");
    let bytes = f.count(
        "nfx_node_bytes",
        "Bytes of the packets that entered the node",
    );
    let drops = f.count("nfx_node_drops", "Drops decided by the node, by reason");
    let cycles = f.gauge(
        "nfx_node_cycles_per_packet",
        "TSC cycles spent in the node per packet",
    );
    for n in &s.nodes {
        let l = labels(i, &[("node", &n.name)]);
        packets.get_or_create(&l).inc_by(n.packets);
        bytes.get_or_create(&l).inc_by(n.bytes);
        cycles.get_or_create(&l).set(n.cycles_per_packet);
        for (reason, c) in &n.drops {
            drops
                .get_or_create(&labels(i, &[("node", &n.name), ("reason", reason)]))
                .inc_by(*c);
        }
    }
}

fn render_ports(f: &mut Families, s: &Stats) {
    let i = s.name.as_str();
    let rx_p = f.count("nfx_port_rx_packets", "Frames received on the port");
    let rx_b = f.count("nfx_port_rx_bytes", "Bytes received on the port");
    let tx_p = f.count("nfx_port_tx_packets", "Frames sent on the port");
    let tx_b = f.count("nfx_port_tx_bytes", "Bytes sent on the port");
    let drops = f.count("nfx_port_drops", "Drops by the port itself, by reason");
    let sock = f.count(
        "nfx_port_socket_drops",
        "Frames the kernel dropped because the port's receive buffer was full",
    );
    for p in &s.ports {
        let l = labels(i, &[("port", &p.name), ("iface", &p.iface)]);
        rx_p.get_or_create(&l).inc_by(p.rx_packets);
        rx_b.get_or_create(&l).inc_by(p.rx_bytes);
        tx_p.get_or_create(&l).inc_by(p.tx_packets);
        tx_b.get_or_create(&l).inc_by(p.tx_bytes);
        sock.get_or_create(&l).inc_by(p.socket_drops);
        for (reason, c) in &p.drops {
            drops
                .get_or_create(&labels(i, &[("port", &p.name), ("reason", reason)]))
                .inc_by(*c);
        }
    }
}

fn render_workers(f: &mut Families, s: &Stats) {
    let i = s.name.as_str();
    let cpu = f.float_count(
        "nfx_worker_cpu_seconds",
        "CPU seconds (user + system, from the kernel) the worker thread used",
    );
    let util = f.gauge(
        "nfx_worker_cpu_ratio",
        "CPU the worker used over the last second, in cores",
    );
    let rx = f.count("nfx_worker_rx_packets", "Frames the worker received");
    let tx = f.count("nfx_worker_tx_packets", "Frames the worker sent");
    let per_packet = f.gauge(
        "nfx_worker_cpu_ns_per_packet",
        "CPU nanoseconds per received frame since start",
    );
    for w in &s.workers {
        let id = w.id.to_string();
        let l = labels(i, &[("worker", &id)]);
        cpu.get_or_create(&l).inc_by(w.cpu_s.max(0.0));
        util.get_or_create(&l).set(w.cpu_pct / 100.0);
        rx.get_or_create(&l).inc_by(w.rx_packets);
        tx.get_or_create(&l).inc_by(w.tx_packets);
        if w.rx_packets > 0 {
            per_packet
                .get_or_create(&l)
                .set(w.cpu_s * 1e9 / w.rx_packets as f64);
        }
    }
}

fn render_services(f: &mut Families, s: &Stats) {
    let i = s.name.as_str();
    let packets = f.count(
        "nfx_service_packets",
        "Packets of the service, by direction (forward, reverse) and stage (rx: entered the chain, tx: left it)",
    );
    let bytes = f.count(
        "nfx_service_bytes",
        "Bytes of the service, by direction and stage",
    );
    let drops = f.count(
        "nfx_service_drops",
        "Drops by the service's instances, by reason",
    );
    for v in &s.services {
        for (dir, t) in [("forward", &v.forward), ("reverse", &v.reverse)] {
            for (stage, p, b) in [
                ("rx", t.rx_packets, t.rx_bytes),
                ("tx", t.tx_packets, t.tx_bytes),
            ] {
                let l = labels(
                    i,
                    &[("service", &v.id), ("direction", dir), ("stage", stage)],
                );
                packets.get_or_create(&l).inc_by(p);
                bytes.get_or_create(&l).inc_by(b);
            }
        }
        for (reason, c) in &v.drops {
            drops
                .get_or_create(&labels(i, &[("service", &v.id), ("reason", reason)]))
                .inc_by(*c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{NodeStats, PortStats, WorkerStats};
    use std::collections::BTreeMap;

    fn sample() -> Stats {
        Stats {
            name: "edge-1".into(),
            uptime_s: 2.5,
            workers: vec![WorkerStats {
                id: 0,
                cpu_pct: 50.0,
                cpu_s: 0.5,
                rx_packets: 1000,
                tx_packets: 990,
                ..Default::default()
            }],
            ports: vec![PortStats {
                name: "inside".into(),
                iface: "to-src".into(),
                rx_packets: 600,
                rx_bytes: 60_000,
                drops: BTreeMap::from([("no_buffer".into(), 3)]),
                ..Default::default()
            }],
            nodes: vec![NodeStats {
                name: "firewall".into(),
                packets: 1000,
                bytes: 100_000,
                cycles_per_packet: 120.5,
                drops: BTreeMap::from([("acl_deny".into(), 7), ("bad_ip".into(), 0)]),
                stats: serde_json::Value::Null,
            }],
            events: BTreeMap::from([("elephant".into(), 2)]),
            ..Default::default()
        }
    }

    #[test]
    fn counters_match_the_stats_document() {
        let t = render(&sample());
        for line in [
            r#"nfx_node_packets_total{instance="edge-1",node="firewall"} 1000"#,
            r#"nfx_node_bytes_total{instance="edge-1",node="firewall"} 100000"#,
            r#"nfx_node_drops_total{instance="edge-1",node="firewall",reason="acl_deny"} 7"#,
            r#"nfx_node_drops_total{instance="edge-1",node="firewall",reason="bad_ip"} 0"#,
            r#"nfx_node_cycles_per_packet{instance="edge-1",node="firewall"} 120.5"#,
            r#"nfx_port_rx_packets_total{instance="edge-1",port="inside",iface="to-src"} 600"#,
            r#"nfx_port_drops_total{instance="edge-1",port="inside",reason="no_buffer"} 3"#,
            r#"nfx_worker_cpu_seconds_total{instance="edge-1",worker="0"} 0.5"#,
            r#"nfx_worker_cpu_ratio{instance="edge-1",worker="0"} 0.5"#,
            r#"nfx_worker_cpu_ns_per_packet{instance="edge-1",worker="0"} 500000.0"#,
            r#"nfx_events_total{instance="edge-1",kind="elephant"} 2"#,
            r#"nfx_uptime_seconds{instance="edge-1"} 2.5"#,
        ] {
            assert!(t.contains(line), "missing {line}:\n{t}");
        }
        assert!(t.contains("# TYPE nfx_node_packets counter"), "{t}");
        assert!(t.trim_end().ends_with("# EOF"));
    }

    #[test]
    fn every_rendered_family_is_in_sample_names() {
        let mut s = sample();
        s.services = vec![crate::stats::ServiceStats {
            id: "svc".into(),
            drops: BTreeMap::from([("acl_deny".into(), 1)]),
            ..Default::default()
        }];
        s.fast_path = Some(Default::default());
        let t = render(&s);
        let names = sample_names();
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(
                names.iter().any(|n| n == name),
                "{name} not in sample_names"
            );
        }
        for n in &names {
            assert!(t.contains(n.as_str()), "{n} not rendered");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let mut s = sample();
        s.name = "a\"b\\c\nd".into();
        let t = render(&s);
        assert!(t.contains(r#"instance="a\"b\\c\nd""#), "{t}");
    }
}
