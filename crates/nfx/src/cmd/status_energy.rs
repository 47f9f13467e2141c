//! The energy section of `nfx status` (text): per service its energy (J) and power (W)
//! with their source and its SLA, under it each of its workers held to a CPU limit with
//! the bound that limit puts on a packet's wait (beside the SLA's latency), then per
//! host its figures and its workers', each worker with its
//! packets' measured latency (p50 and p99 of their time in the worker, labelled
//! measured) and the bound its CPU limit puts on a packet's wait — a bound computed from
//! the limit the agent read back from the kernel, never a measured delay, and labelled
//! so.

use nfx_control::energy::{EnergySummary, ServiceEnergy};
use nfx_control::hostagent::power::WorkerPower;
use std::fmt::Write as _;

/// Appends the energy section for `e` to `out`.
pub fn write_energy(out: &mut String, e: &EnergySummary) {
    out.push_str("energy:\n");
    if !e.reported && e.hosts.iter().all(|h| h.error.is_none()) {
        out.push_str("  not reported (no host agent has sent figures yet)\n");
    }
    for s in &e.services {
        let unmetered = if s.unmetered.is_empty() {
            String::new()
        } else {
            format!("  unmetered: {}", s.unmetered.join(","))
        };
        let sla = match &s.sla {
            Some(sla) => format!(
                "  sla latency ≤ {:.0} µs, throughput ≥ {} Gbit/s",
                sla.max_latency_us, sla.min_throughput_gbps
            ),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  {:<20} {:>12.1} J {:>8.2} W  {}{sla}{unmetered}",
            s.service, s.energy_j, s.power_w, s.source
        );
        write_limited(out, s);
    }
    for h in &e.hosts {
        match (&h.source, &h.error) {
            (_, Some(err)) => {
                let _ = writeln!(out, "  host {:<15} not metered: {err}", h.host);
            }
            (Some(src), None) => {
                let _ = writeln!(
                    out,
                    "  host {:<15} {:>12.1} J {:>8.2} W  {src}",
                    h.host, h.energy_j, h.power_w
                );
                for w in &h.workers {
                    write_worker(out, w, src.as_str());
                }
            }
            (None, None) => {}
        }
    }
}

/// A line per worker of service `s` held to a CPU limit: the limit and the wait bound it
/// implies, labelled a bound, beside the SLA's latency.
fn write_limited(out: &mut String, s: &ServiceEnergy) {
    let sla = match &s.sla {
        Some(sla) => format!("sla latency ≤ {:.0} µs", sla.max_latency_us),
        None => "no sla recorded".to_string(),
    };
    for w in &s.limited_workers {
        let _ = writeln!(
            out,
            "    cpu-limited worker {} on {}: limit {:.2} cores, cpu-wait bound ≤ {:.0} µs (bound from the CPU limit, not measured; {sla})",
            w.device, w.host, w.cpu_max_cores, w.cpu_wait_bound_us
        );
    }
}

/// One worker's line: its device, CPU, power and energy (with the host's source), poll
/// mode, CPU limit, the wait bound that limit implies and the measured latency.
fn write_worker(out: &mut String, w: &WorkerPower, source: &str) {
    let mut polls: Vec<&str> = w.threads.iter().map(|t| t.poll.as_str()).collect();
    polls.dedup();
    let poll = if polls.is_empty() {
        "?".to_string()
    } else {
        polls.join(",")
    };
    let limit = match w.threads.iter().find_map(|t| t.cpu_max_cores) {
        Some(c) => format!("{c:.2} cores"),
        None => "none".to_string(),
    };
    let bound = match w.cpu_wait_bound_us {
        Some(us) => format!("≤ {us:.0} µs (bound from the CPU limit, not measured)"),
        None => "unknown (no thread answered)".to_string(),
    };
    let latency = match w.latency {
        Some(l) if l.packets > 0 => format!(
            "p50 {:.0} µs p99 {:.0} µs (measured over {} packets in {:.1} s)",
            l.p50_us, l.p99_us, l.packets, l.window_s
        ),
        Some(l) => format!("none measured (no packet in {:.1} s)", l.window_s),
        None => "not measured (no receive ring, or nothing received yet)".to_string(),
    };
    let _ = writeln!(
        out,
        "    worker {:<14} {:>5.2} cores {:>8.2} W {:>10.1} J  {source}  poll {poll}  cpu limit {limit}  cpu-wait bound {bound}  latency {latency}",
        w.device, w.cpu_cores, w.power_w, w.energy_j
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_control::energy::{HostEnergy, InstanceShare, LimitedWorker};
    use nfx_control::hostagent::power::ThreadKnobs;
    use nfx_energy::Source;

    fn thread(poll: &str, cpu_max_cores: Option<f64>, bound_us: f64) -> ThreadKnobs {
        ThreadKnobs {
            worker: 0,
            tid: 7,
            poll: poll.into(),
            affinity: vec![1],
            cpu_max_cores,
            cpu_wait_bound_us: bound_us,
        }
    }

    fn worker(device: &str, threads: Vec<ThreadKnobs>, bound: Option<f64>) -> WorkerPower {
        WorkerPower {
            device: device.into(),
            pid: 42,
            cpu_cores: 0.25,
            power_w: 7.5,
            energy_j: 120.0,
            traffic: Default::default(),
            wire: None,
            threads,
            wait_cores: 0.0,
            cpu_wait_bound_us: bound,
            latency: None,
        }
    }

    fn summary() -> EnergySummary {
        let share = InstanceShare {
            instance: "web-nat".into(),
            host: "edge".into(),
            device: "edge-sw".into(),
            power_w: 3.25,
            energy_j: 50.0,
            cpu_cores: 0.1,
            shared_by: 1,
            source: Source::Model,
        };
        EnergySummary {
            reported: true,
            hosts: vec![
                HostEnergy {
                    host: "edge".into(),
                    source: Some(Source::Model),
                    power_w: 40.5,
                    energy_j: 1234.5,
                    at_unix_ms: 1,
                    error: None,
                    workers: vec![
                        WorkerPower {
                            latency: Some(nfx_proto::stats::LatencyStats {
                                window_s: 1.5,
                                packets: 3000,
                                p50_us: 42.0,
                                p99_us: 18_000.0,
                                max_us: 30_000.0,
                                unstamped: 0,
                            }),
                            ..worker(
                                "edge-sw",
                                vec![thread("adaptive", Some(0.5), 50_000.0)],
                                Some(50_000.0),
                            )
                        },
                        worker("edge-sw1", Vec::new(), None),
                    ],
                },
                HostEnergy {
                    host: "cloud".into(),
                    source: Some(Source::Rapl),
                    power_w: 60.0,
                    energy_j: 10.0,
                    at_unix_ms: 1,
                    error: None,
                    workers: vec![worker(
                        "cloud-sw",
                        vec![thread("busy", None, 0.0)],
                        Some(0.0),
                    )],
                },
                HostEnergy {
                    host: "dst".into(),
                    source: None,
                    power_w: 0.0,
                    energy_j: 0.0,
                    at_unix_ms: 0,
                    error: Some("no power model and no RAPL".into()),
                    workers: Vec::new(),
                },
            ],
            services: vec![ServiceEnergy {
                service: "web-acme".into(),
                source: "model".into(),
                power_w: 3.25,
                energy_j: 50.0,
                instances: vec![share],
                unmetered: vec!["web-dpi".into()],
                sla: Some(nfx_model::Sla {
                    max_latency_us: 100_000.0,
                    min_throughput_gbps: 0.5,
                }),
                limited_workers: vec![LimitedWorker {
                    host: "edge".into(),
                    device: "edge-sw".into(),
                    cpu_max_cores: 0.5,
                    cpu_wait_bound_us: 50_000.0,
                }],
            }],
        }
    }

    #[test]
    fn services_hosts_and_workers_carry_figures_sources_and_the_bound() {
        let mut out = String::new();
        write_energy(&mut out, &summary());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "energy:");
        let svc = lines[1];
        assert!(svc.starts_with("  web-acme"), "{out}");
        for part in [
            "50.0 J",
            "3.25 W",
            "model",
            "sla latency ≤ 100000 µs, throughput ≥ 0.5 Gbit/s",
            "unmetered: web-dpi",
        ] {
            assert!(svc.contains(part), "{part}: {svc}");
        }
        assert_eq!(
            lines[2],
            "    cpu-limited worker edge-sw on edge: limit 0.50 cores, cpu-wait bound ≤ 50000 µs (bound from the CPU limit, not measured; sla latency ≤ 100000 µs)"
        );
        let lines = [&lines[..2], &lines[3..]].concat();
        assert!(
            lines[2].contains("host edge") && lines[2].ends_with("1234.5 J    40.50 W  model"),
            "{out}"
        );
        let limited = lines[3];
        for part in [
            "worker edge-sw ",
            "0.25 cores",
            "7.50 W",
            "120.0 J",
            "model",
            "poll adaptive",
            "cpu limit 0.50 cores",
            "cpu-wait bound ≤ 50000 µs (bound from the CPU limit, not measured)",
            "latency p50 42 µs p99 18000 µs (measured over 3000 packets in 1.5 s)",
        ] {
            assert!(limited.contains(part), "{part}: {limited}");
        }
        assert!(
            lines[4].contains("worker edge-sw1")
                && lines[4].contains("poll ?")
                && lines[4].contains("cpu-wait bound unknown (no thread answered)")
                && lines[4].contains("latency not measured"),
            "{out}"
        );
        assert!(
            lines[5].contains("host cloud") && lines[5].ends_with("rapl"),
            "{out}"
        );
        assert!(
            lines[6].contains("rapl  poll busy  cpu limit none  cpu-wait bound ≤ 0 µs"),
            "{out}"
        );
        assert_eq!(
            lines[7],
            "  host dst             not metered: no power model and no RAPL"
        );
        assert_eq!(lines.len(), 8, "{out}");
    }

    #[test]
    fn nothing_reported_says_so() {
        let mut out = String::new();
        write_energy(&mut out, &EnergySummary::default());
        assert_eq!(
            out,
            "energy:\n  not reported (no host agent has sent figures yet)\n"
        );
    }
}
