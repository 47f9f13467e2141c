//! The controller's `/metrics` (prometheus-client, through [`nfx_metrics`]): API requests
//! and latencies (recorded by a middleware), instances, services and operations by state
//! (read from the store at scrape time), and — federation — every host agent's metrics,
//! fetched over the agents' mutual-TLS link with a bounded time, with
//! `nfx_agent_up{host}` 1 for an agent that answered and 0 for one that did not.

use crate::agents::Agents;
use crate::controller::{Controller, CtlError, ServiceRow};
use crate::mediator::InstanceRow;
use crate::ops::{OpState, Operation};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use nfx_metrics::prometheus_client::metrics::family::Family;
use nfx_metrics::prometheus_client::metrics::histogram::Histogram;
use nfx_metrics::text::Exposition;
use nfx_metrics::{labels, Count, Families, Histograms, IntGauge};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Latency histogram bucket bounds, seconds.
const BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The request counters of an API server (controller or agent), and the agents the
/// controller federates.
pub struct ApiMetrics {
    requests: Count,
    latency: Histograms,
    agents: Option<Arc<Agents>>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        ApiMetrics {
            requests: Count::default(),
            latency: Family::new_with_constructor(latency_histogram),
            agents: None,
        }
    }
}

impl ApiMetrics {
    /// Request counters whose scrape also carries every agent of `agents`.
    pub fn federating(agents: Option<Arc<Agents>>) -> Self {
        ApiMetrics {
            agents,
            ..Default::default()
        }
    }

    /// Counts one request of `method` on `route` answered with `status` after `secs`.
    pub fn record(&self, method: &str, route: &str, status: u16, secs: f64) {
        let status = status.to_string();
        self.requests
            .get_or_create(&labels(&[
                ("method", method),
                ("route", route),
                ("status", &status),
            ]))
            .inc();
        self.latency
            .get_or_create(&labels(&[("route", route)]))
            .observe(secs);
    }

    /// Runs `req` and records it (the middleware of an API router).
    pub async fn observe(&self, req: Request, next: Next) -> Response {
        let route = req
            .extensions()
            .get::<axum::extract::MatchedPath>()
            .map(|m| m.as_str().to_string())
            .unwrap_or_else(|| "unmatched".into());
        let method = req.method().clone();
        let t = Instant::now();
        let resp = next.run(req).await;
        self.record(
            method.as_str(),
            &route,
            resp.status().as_u16(),
            t.elapsed().as_secs_f64(),
        );
        resp
    }

    /// The request families, registered in `f`.
    pub fn register(&self, f: &mut Families) {
        f.register(
            "nfx_api_requests",
            "REST requests by method, route and status",
            self.requests.clone(),
        );
        f.register(
            "nfx_api_request_duration_seconds",
            "REST request latency",
            self.latency.clone(),
        );
    }

    /// The controller's scrape: its own families, then every agent's (blocking: it
    /// reads the store and calls the agents).
    pub fn scrape(&self, ctl: &Controller) -> Result<String, CtlError> {
        let mut f = Families::default();
        let ops = ctl.operations()?;
        ssm_counters(&mut f, Some(&ops));
        store_gauges(&mut f, Some((&ops, &ctl.instances()?, &ctl.services()?)));
        let energy = ctl.energy()?;
        service_energy(&mut f, Some(&energy));
        worker_knobs(&mut f, Some((&energy, &ctl.power_settings())));
        self.register(&mut f);
        let up = agent_up(&mut f);
        let Some(agents) = &self.agents else {
            return Ok(f.encode());
        };
        let mut agent_text = Vec::new();
        for (host, got) in agents.scrape_metrics() {
            let parsed = got.and_then(|t| Exposition::parse(&t).map_err(|e| e.to_string()));
            let answered = match parsed {
                Ok(e) => {
                    agent_text.push(e);
                    true
                }
                Err(e) => {
                    log::warn!("scraping the agent of {host}: {e}");
                    false
                }
            };
            up.get_or_create(&labels(&[("host", &host)]))
                .set(i64::from(answered));
        }
        let mut all =
            Exposition::parse(&f.encode()).map_err(|e| CtlError::Internal(e.to_string()))?;
        for e in agent_text {
            all.merge(e);
        }
        Ok(all.render())
    }

    /// Every sample name the controller's own scrape can carry (agents' not included).
    pub fn sample_names() -> Vec<String> {
        let mut f = Families::default();
        ssm_counters(&mut f, None);
        store_gauges(&mut f, None);
        service_energy(&mut f, None);
        worker_knobs(&mut f, None);
        ApiMetrics::default().register(&mut f);
        agent_up(&mut f);
        f.sample_names().to_vec()
    }
}

/// The controller SSM's grants and revokes, from the operations journal: `applied`
/// (`COMPLETED`) or `refused` (rolled back).
fn ssm_counters(f: &mut Families, ops: Option<&[Operation]>) {
    use crate::ops::OpKind;
    let c = f.count(
        "nfx_ssm_decisions",
        "The controller SSM's queue-pair grants and revokes of tunnel endpoints, applied or refused",
    );
    let Some(ops) = ops else { return };
    for (kind, name) in [(OpKind::Grant, "grant"), (OpKind::Revoke, "revoke")] {
        for outcome in ["applied", "refused"] {
            let n = ops
                .iter()
                .filter(|o| o.kind == kind && o.state.is_final())
                .filter(|o| (o.state == OpState::Completed) == (outcome == "applied"))
                .count();
            c.get_or_create(&labels(&[("decision", name), ("outcome", outcome)]))
                .inc_by(n as u64);
        }
    }
}

fn agent_up(f: &mut Families) -> IntGauge {
    f.int_gauge(
        "nfx_agent_up",
        "1 if the host's agent answered the controller's scrape, 0 if not",
    )
}

/// Energy and power per service, summed over its instances' shares, as gauges with the
/// service's source (families only when `energy` is `None`). Per instance and per host
/// they come from the agents' scrapes (`nfx_energy_joules_total{host,vnf,source}`).
fn service_energy(f: &mut Families, energy: Option<&crate::energy::EnergySummary>) {
    let joules = f.gauge(
        "nfx_service_energy_joules",
        "Energy of a service's instances since each was first metered, J (drops when an instance is replaced; source: rapl = measured, model = power model driven by CPU time)",
    );
    let watts = f.gauge(
        "nfx_service_power_watts",
        "Power of a service's instances over the agents' last interval, W (source: rapl = measured, model = power model driven by CPU time)",
    );
    for s in energy.map(|e| e.services.as_slice()).unwrap_or_default() {
        let l = labels(&[("service", &s.service), ("source", &s.source)]);
        joules.get_or_create(&l).set(s.energy_j);
        watts.get_or_create(&l).set(s.power_w);
    }
}

/// The power knobs per worker: the power manager's speed setting and the CPU limit the
/// agents read back from the kernel (families only when `knobs` is `None`).
fn worker_knobs(
    f: &mut Families,
    knobs: Option<(
        &crate::energy::EnergySummary,
        &[crate::power_manager::WorkerSetting],
    )>,
) {
    let speed = f.gauge(
        "nfx_power_knob_speed",
        "Power manager's setting of a worker: fraction of full speed (1 = no CPU limit)",
    );
    let settled = f.int_gauge(
        "nfx_power_settled",
        "1 once the power manager's probe of a worker settled and held its level for a few rounds, 0 while it probes",
    );
    let steps = f.int_gauge(
        "nfx_power_probe_steps",
        "Windows the power manager's last completed probe of a worker took to settle",
    );
    let limit = f.gauge(
        "nfx_worker_cpu_limit_cores",
        "CPU bandwidth limit of a worker's dataplane thread, cores, read back from the kernel by its agent (cpu.max or the CFS quota; absent when unlimited)",
    );
    let bound = f.gauge(
        "nfx_worker_cpu_wait_bound_seconds",
        "Longest a worker's thread can wait for CPU under its limit, s: period − quota of the limit its agent read back from the kernel (a bound, not a measured delay; 0 when unlimited); the power manager checks it against the service's latency SLA",
    );
    let waited = f.gauge(
        "nfx_worker_cpu_wait_cores",
        "Cores' worth of time a worker's threads were runnable but waited for a CPU over its agent's last interval (the kernel's run-queue delay, schedstat)",
    );
    let latency = f.gauge(
        "nfx_worker_latency_seconds",
        "Measured time of a worker's packets in its dataplane, s, from the kernel's receive stamp to the end of their vector's send, over the worker's last 1-2 s (quantile 0.5, 0.99, 1 = max; the worst of its threads; absent when nothing was measured); the power manager checks the p99 against the service's latency SLA",
    );
    let measured = f.int_gauge(
        "nfx_worker_latency_packets",
        "Packets behind nfx_worker_latency_seconds (the worker's last 1-2 s)",
    );
    let Some((energy, settings)) = knobs else {
        return;
    };
    for s in settings {
        let l = labels(&[
            ("service", &s.service),
            ("host", &s.host),
            ("device", &s.device),
        ]);
        speed.get_or_create(&l).set(s.speed);
        settled.get_or_create(&l).set(i64::from(s.settled));
        if let Some(n) = s.probe_steps {
            steps.get_or_create(&l).set(i64::from(n));
        }
    }
    for h in &energy.hosts {
        for w in &h.workers {
            let l = labels(&[("host", &h.host), ("device", &w.device)]);
            if let Some(c) = w.threads.iter().find_map(|t| t.cpu_max_cores) {
                limit.get_or_create(&l).set(c);
            }
            if let Some(us) = w.cpu_wait_bound_us {
                bound.get_or_create(&l).set(us / 1e6);
            }
            waited.get_or_create(&l).set(w.wait_cores);
            if let Some(m) = &w.latency {
                measured
                    .get_or_create(&l)
                    .set(i64::try_from(m.packets).unwrap_or(i64::MAX));
                let quantiles = [("0.5", m.p50_us), ("0.99", m.p99_us), ("1", m.max_us)];
                for (q, us) in quantiles.into_iter().filter(|_| m.packets > 0) {
                    let lq = labels(&[("host", &h.host), ("device", &w.device), ("quantile", q)]);
                    latency.get_or_create(&lq).set(us / 1e6);
                }
            }
        }
    }
}

/// What the store holds, as the scrape counts it.
type Store<'a> = (&'a [Operation], &'a [InstanceRow], &'a [ServiceRow]);

/// Operations, instances and services by state, as gauges (families only when `store`
/// is `None`).
fn store_gauges(f: &mut Families, store: Option<Store<'_>>) {
    let ops = f.int_gauge("nfx_operations", "Operations by SOL003 state");
    let inst = f.int_gauge("nfx_instances", "VNF instances by status");
    let svc = f.int_gauge("nfx_services", "Services by status");
    let Some((o, i, s)) = store else { return };
    for st in OpState::ALL {
        ops.get_or_create(&labels(&[("state", st.as_str())])).set(0);
    }
    let count = |g: &IntGauge, label: &'static str, values: &mut dyn Iterator<Item = &str>| {
        let mut by: BTreeMap<&str, i64> = BTreeMap::new();
        for v in values {
            *by.entry(v).or_default() += 1;
        }
        for (k, n) in by {
            g.get_or_create(&labels(&[(label, k)])).set(n);
        }
    };
    count(&ops, "state", &mut o.iter().map(|x| x.state.as_str()));
    count(&inst, "status", &mut i.iter().map(|x| x.status.as_str()));
    count(&svc, "status", &mut s.iter().map(|x| x.status.as_str()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = ApiMetrics::default();
        m.record("GET", "/a", 200, 0.002);
        m.record("GET", "/a", 200, 3.0);
        let mut f = Families::default();
        m.register(&mut f);
        let s = f.encode();
        assert!(
            s.contains(r#"nfx_api_requests_total{method="GET",route="/a",status="200"} 2"#),
            "{s}"
        );
        assert!(
            s.contains(r#"nfx_api_request_duration_seconds_bucket{le="0.0025",route="/a"} 1"#)
                || s.contains(r#"route="/a",le="0.0025"} 1"#),
            "{s}"
        );
        assert!(
            s.contains(r#"le="+Inf""#)
                && s.contains("nfx_api_request_duration_seconds_count{route=\"/a\"} 2"),
            "{s}"
        );
        for n in Exposition::parse(&s).unwrap().render().lines() {
            assert!(!n.is_empty());
        }
        let names = ApiMetrics::sample_names();
        for n in [
            "nfx_api_requests_total",
            "nfx_api_request_duration_seconds_bucket",
            "nfx_operations",
            "nfx_instances",
            "nfx_services",
            "nfx_agent_up",
            "nfx_service_energy_joules",
            "nfx_service_power_watts",
            "nfx_ssm_decisions_total",
            "nfx_worker_latency_seconds",
            "nfx_worker_latency_packets",
        ] {
            assert!(names.iter().any(|x| x == n), "{n}: {names:?}");
        }
    }
}
