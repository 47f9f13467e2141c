//! What `nfx demo` shows of the controller's state: the instances with their VNFM kind,
//! placement and live counters (from `GET /api/v1/instances` and
//! `GET /api/v1/instances/{id}`), as typed views and printed tables.

use nfx_control::client::Client;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// An instance's deployed spec, as the controller records it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SpecView {
    /// Instance id.
    pub id: String,
    /// Function it runs.
    pub function: String,
    /// Device it runs on.
    pub device: String,
}

impl NodeCounters {
    /// Drops of `reason`.
    pub fn drop_count(&self, reason: &str) -> u64 {
        self.drops.get(reason).copied().unwrap_or(0)
    }

    /// Adds `o` to these counters.
    fn add(&mut self, o: &NodeCounters) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.stats.elephants += o.stats.elephants;
        for (k, v) in &o.drops {
            *self.drops.entry(k.clone()).or_default() += v;
        }
    }
}

/// The counters of `function` of `service` summed over `list` (a migrated function's
/// old and new instances).
pub fn total(list: &[InstanceView], service: &str, function: &str) -> NodeCounters {
    let mut t = NodeCounters::default();
    for i in list
        .iter()
        .filter(|i| i.service() == service && i.spec.function == function)
    {
        t.add(&i.counters());
    }
    t
}

/// A worker node's counters, as the worker reports them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeCounters {
    /// Packets processed.
    pub packets: u64,
    /// Bytes processed.
    pub bytes: u64,
    /// Drops by reason.
    pub drops: BTreeMap<String, u64>,
    /// The node's own figures (those the demo reads).
    pub stats: NodeStats,
}

/// The figures of a node's `stats` the demo reads (absent ones are 0).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeStats {
    /// Flows an elephant detector reported as elephants.
    pub elephants: u64,
}

/// The VNFM's detail of a live instance.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct DetailView {
    node: NodeCounters,
}

/// An instance's live state from its VNFM.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct StateView {
    packets: u64,
    detail: DetailView,
}

/// One instance as `GET /api/v1/instances/{id}` shows it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct InstanceView {
    /// What was deployed.
    pub spec: SpecView,
    /// Host of its device.
    pub host: String,
    /// `running`, `destroying`, ...
    pub status: String,
    /// Services whose path uses it.
    pub users: Vec<String>,
    /// Kind of the VNFM serving its host (`remote` = an agent's real workers,
    /// `simulated`).
    pub vnfm: String,
    state: Option<StateView>,
    state_error: Option<String>,
}

impl InstanceView {
    /// The first service using it.
    pub fn service(&self) -> &str {
        self.users.first().map(String::as_str).unwrap_or("-")
    }

    /// Live counters (zero when the VNFM did not answer).
    pub fn counters(&self) -> NodeCounters {
        match &self.state {
            Some(s) => NodeCounters {
                packets: s.packets.max(s.detail.node.packets),
                ..s.detail.node.clone()
            },
            None => NodeCounters::default(),
        }
    }

    /// How the VNFM kind reads in every listing.
    pub fn kind_label(&self) -> &'static str {
        if self.vnfm == "simulated" {
            "SIMULATED"
        } else {
            "real"
        }
    }
}

/// Every instance the controller records, each with its live state, ordered by service,
/// then host and function.
pub fn instances(api: &Client) -> anyhow::Result<Vec<InstanceView>> {
    let list: Vec<InstanceView> = serde_json::from_value(api.get("/api/v1/instances")?.body)?;
    let mut out: Vec<InstanceView> = Vec::with_capacity(list.len());
    for i in list {
        let a = api.get(&format!("/api/v1/instances/{}", i.spec.id))?;
        if a.status == 200 {
            out.push(serde_json::from_value(a.body)?);
        }
    }
    out.sort_by(|a, b| {
        (a.service(), &a.host, &a.spec.device).cmp(&(b.service(), &b.host, &b.spec.device))
    });
    Ok(out)
}

/// The placement table: service, function, host, device, VNFM kind, status.
pub fn placement_table(list: &[InstanceView]) -> String {
    let mut out = format!(
        "   {:<10} {:<9} {:<5} {:<8} {:<21} {:<10} instance\n",
        "service", "function", "host", "device", "vnfm", "status"
    );
    for i in list {
        out.push_str(&format!(
            "   {:<10} {:<9} {:<5} {:<8} {:<21} {:<10} {}\n",
            i.service(),
            i.spec.function,
            i.host,
            i.spec.device,
            format!("{} ({})", i.kind_label(), i.vnfm),
            i.status,
            i.spec.id
        ));
    }
    out
}

/// One second of the live view: per instance (service, function, host) packets, pps
/// since `prev` and drops by reason.
pub fn live_table(
    title: &str,
    list: &[InstanceView],
    prev: Option<(&[InstanceView], Duration)>,
) -> String {
    let mut out = format!(
        "── {title:<7}  {:<10} {:<9} {:<5} {:<8} {:<9} {:>10} {:>9} {:>7}  drops\n",
        "service", "function", "host", "device", "vnfm", "packets", "pps", "Gbit/s"
    );
    for i in list {
        let c = i.counters();
        let (pps, bps) = prev
            .and_then(|(p, dt)| {
                let x = p.iter().find(|x| x.spec.id == i.spec.id)?.counters();
                let secs = dt.as_secs_f64().max(1e-3);
                Some((
                    c.packets.saturating_sub(x.packets) as f64 / secs,
                    c.bytes.saturating_sub(x.bytes) as f64 * 8.0 / secs,
                ))
            })
            .unwrap_or((0.0, 0.0));
        let err = i
            .state_error
            .as_deref()
            .map(|e| format!(" (state: {e})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "            {:<10} {:<9} {:<5} {:<8} {:<9} {:>10} {:>9.0} {:>7.3}  {}{err}\n",
            i.service(),
            i.spec.function,
            i.host,
            i.spec.device,
            i.kind_label(),
            c.packets,
            pps,
            bps / 1e9,
            drops(&c)
        ));
    }
    out
}

/// Non-zero drop counters as `reason=n ...`.
pub fn drops(c: &NodeCounters) -> String {
    c.drops
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_parse_the_controller_answer() {
        let v: InstanceView = serde_json::from_value(serde_json::json!({
            "spec": {"id": "i-1", "function": "firewall", "device": "h1-sw0", "config": {}},
            "host": "h1", "tier": "software", "status": "running", "users": ["tenant-a"],
            "vnfm": "remote",
            "state": {"packets": 7, "detail": {"node": {"name": "firewall", "packets": 9,
                      "bytes": 900, "drops": {"acl_deny": 2, "other": 0},
                      "stats": {"elephants": 1, "engine": "x"}}}}
        }))
        .unwrap();
        assert_eq!(v.service(), "tenant-a");
        assert_eq!(v.counters().packets, 9);
        assert_eq!(v.counters().drop_count("acl_deny"), 2);
        assert_eq!(v.counters().stats.elephants, 1);
        assert_eq!(
            total(&[v.clone(), v.clone()], "tenant-a", "firewall").packets,
            18
        );
        assert_eq!(drops(&v.counters()), "acl_deny=2");
        assert_eq!(v.kind_label(), "real");
        let t = live_table(
            "t=1s",
            std::slice::from_ref(&v),
            Some((std::slice::from_ref(&v), Duration::from_secs(1))),
        );
        assert!(t.contains("firewall") && t.contains("acl_deny=2"), "{t}");
    }

    #[test]
    fn a_simulated_instance_says_so() {
        let v = InstanceView {
            vnfm: "simulated".into(),
            ..Default::default()
        };
        assert!(placement_table(&[v]).contains("SIMULATED"));
    }
}
