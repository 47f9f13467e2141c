//! The agent's `/metrics`: each of its workers' metrics (read from the worker's control
//! socket and rendered by `nfx_dataplane::metrics`, exactly what `nfx run
//! --metrics-listen` would serve) with `host` and `worker` (the device) labels added,
//! and the agent's own, with the `host` label: workers running, workers that ended
//! without the agent stopping them, whether each worker answered, and the agent's API
//! requests; and the power agent's energy per instance and for the host
//! (`nfx_energy_joules_total` and `nfx_power_watts` with `host`, `vnf` and `source`,
//! [`nfx_energy::metrics`]).

use super::HostAgent;
use crate::api::metrics::ApiMetrics;
use nfx_metrics::text::Exposition;
use nfx_metrics::{labels, Families, IntGauge};
use std::sync::atomic::Ordering;

/// The agent's own families.
struct Own {
    workers: IntGauge,
    exits: nfx_metrics::Count,
    worker_up: IntGauge,
}

fn own(f: &mut Families, api: &ApiMetrics) -> Own {
    let o = Own {
        workers: f.int_gauge("nfx_agent_workers", "Workers (`nfx run`) the agent runs"),
        exits: f.count(
            "nfx_agent_worker_exits",
            "Workers that ended without the agent stopping them (killed, crashed)",
        ),
        worker_up: f.int_gauge(
            "nfx_agent_worker_up",
            "1 if the worker answered the agent's stats request during this scrape, 0 if not",
        ),
    };
    api.register(f);
    o
}

/// Every sample name of the agent's own families (its workers' are the dataplane's),
/// the energy names included.
pub fn sample_names() -> Vec<String> {
    let mut f = Families::default();
    own(&mut f, &ApiMetrics::default());
    let mut names = f.sample_names().to_vec();
    names.extend(nfx_energy::metrics::sample_names());
    names
}

impl HostAgent {
    /// The agent's scrape (blocking: it asks every worker).
    pub fn metrics(&self) -> String {
        let workers = self.local.running_workers();
        let mut f = Families::default();
        let o = own(&mut f, &self.api);
        o.workers.get_or_create(&vec![]).set(workers.len() as i64);
        o.exits
            .get_or_create(&vec![])
            .inc_by(self.exits.load(Ordering::Relaxed));
        let host = self.host.as_str();
        let mut scraped = Vec::new();
        for (device, sock) in &workers {
            let got = nfx_proto::Client::connect(sock)
                .and_then(|mut c| c.stats())
                .map_err(anyhow::Error::from)
                .and_then(|s| Ok(Exposition::parse(&nfx_dataplane::metrics::render(&s))?));
            let answered = match got {
                Ok(mut e) => {
                    e.add_labels(&[("host", host), ("worker", device)]);
                    scraped.push(e);
                    true
                }
                Err(e) => {
                    log::warn!("metrics of worker {device}: {e:#}");
                    false
                }
            };
            o.worker_up
                .get_or_create(&labels(&[("worker", device)]))
                .set(i64::from(answered));
        }
        let mut out = Exposition::parse(&f.encode()).unwrap_or_else(|e| {
            log::error!("the agent's own metrics do not parse: {e}");
            Exposition::default()
        });
        out.add_labels(&[("host", host)]);
        for e in scraped {
            out.merge(e);
        }
        if let Ok(Some(r)) = self.power.report() {
            let text = nfx_energy::metrics::render(&[super::power::as_reading(&r)]);
            match Exposition::parse(&text) {
                Ok(e) => out.merge(e),
                Err(e) => log::error!("the energy metrics do not parse: {e}"),
            }
        }
        out.render()
    }
}
