//! What `nfx demo` shows of the controller's state: the instances with their VNFM kind,
//! tier, placement and live counters (from `GET /api/v1/instances` and
//! `GET /api/v1/instances/{id}`; a tunnel endpoint's engine, queue pair, IKE state and
//! ESP counters), as typed views and printed tables.

use nfx_control::client::{Client, Refused};
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

/// A tunnel endpoint's live state, as its host's agent reads it from the endpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TunnelState {
    /// Crypto engine in use: `lookaside` (a queue pair of the device) or `cpu`.
    pub engine: String,
    /// The device's queue pair it holds, if on the lookaside engine.
    pub queue_pair: Option<u32>,
    /// IKEv2 state (`established` once keyed).
    pub ike: String,
    /// ESP datagrams the endpoint sent into the tunnel.
    pub tx_packets: u64,
    /// Inner (plaintext) bytes they carried.
    pub tx_bytes: u64,
    /// Inner packets it took out of the tunnel (decrypted, authenticated) and delivered.
    pub rx_packets: u64,
    /// Bytes of them.
    pub rx_bytes: u64,
    /// Drops by reason (`auth_failed`, ...).
    pub drops: BTreeMap<String, u64>,
}

/// The VNFM's detail of a live instance: a worker node's counters, or a tunnel
/// endpoint's state (its fields beside them).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct DetailView {
    node: NodeCounters,
    #[serde(flatten)]
    tunnel: TunnelState,
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
    /// Tier of its device (`software`, `accelerator`, `table`).
    pub tier: String,
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

    /// Live counters (zero when the VNFM did not answer): a worker node's, or a tunnel
    /// endpoint's packets and inner bytes both ways (sent as ESP, delivered from ESP)
    /// with its drops.
    pub fn counters(&self) -> NodeCounters {
        match (&self.state, self.tunnel()) {
            (Some(_), Some(t)) => NodeCounters {
                packets: t.tx_packets + t.rx_packets,
                bytes: t.tx_bytes + t.rx_bytes,
                drops: t.drops.clone(),
                stats: NodeStats::default(),
            },
            (Some(s), None) => NodeCounters {
                packets: s.packets.max(s.detail.node.packets),
                ..s.detail.node.clone()
            },
            (None, _) => NodeCounters::default(),
        }
    }

    /// Whether it is a tunnel endpoint (function `esp`).
    pub fn is_tunnel_end(&self) -> bool {
        self.spec.function == "esp"
    }

    /// A tunnel endpoint's live state (none for other instances, or when its VNFM did not
    /// answer).
    pub fn tunnel(&self) -> Option<&TunnelState> {
        match &self.state {
            Some(s) if self.is_tunnel_end() => Some(&s.detail.tunnel),
            _ => None,
        }
    }

    /// A tunnel endpoint's engine as listings show it: `lookaside qp N` or `cpu`.
    pub fn engine_label(&self) -> Option<String> {
        let t = self.tunnel()?;
        Some(match t.queue_pair {
            Some(q) if t.engine == "lookaside" => format!("lookaside qp {q}"),
            _ if t.engine.is_empty() => "-".into(),
            _ => t.engine.clone(),
        })
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
    let list: Vec<InstanceView> = api.get_as("/api/v1/instances")?;
    let mut out: Vec<InstanceView> = Vec::with_capacity(list.len());
    for i in list {
        match api.get_as(&format!("/api/v1/instances/{}", i.spec.id)) {
            Ok(v) => out.push(v),
            Err(e) if e.downcast_ref::<Refused>().is_some() => {}
            Err(e) => return Err(e),
        }
    }
    out.sort_by(|a, b| {
        (a.service(), &a.host, &a.spec.device).cmp(&(b.service(), &b.host, &b.spec.device))
    });
    Ok(out)
}

/// The placement table: service, function, host, device, tier, VNFM kind, status.
pub fn placement_table(list: &[InstanceView]) -> String {
    let mut out = format!(
        "   {:<10} {:<9} {:<5} {:<8} {:<11} {:<21} {:<10} instance\n",
        "service", "function", "host", "device", "tier", "vnfm", "status"
    );
    for i in list {
        out.push_str(&format!(
            "   {:<10} {:<9} {:<5} {:<8} {:<11} {:<21} {:<10} {}\n",
            i.service(),
            i.spec.function,
            i.host,
            i.spec.device,
            i.tier,
            format!("{} ({})", i.kind_label(), i.vnfm),
            i.status,
            i.spec.id
        ));
    }
    out
}

/// One second of the live view: per instance (service, function, host) packets, pps
/// since `prev` and drops by reason; a tunnel endpoint's engine first.
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
        let engine = i
            .engine_label()
            .map(|e| format!("engine {e}  "))
            .unwrap_or_default();
        out.push_str(&format!(
            "            {:<10} {:<9} {:<5} {:<8} {:<9} {:>10} {:>9.0} {:>7.3}  {engine}{}{err}\n",
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
    fn a_tunnel_endpoint_shows_its_engine_and_esp_counters() {
        let v: InstanceView = serde_json::from_value(serde_json::json!({
            "spec": {"id": "b-esp-h2", "function": "esp", "device": "h2-acc0", "config": {}},
            "host": "h2", "tier": "accelerator", "status": "running", "users": ["b"],
            "vnfm": "remote",
            "state": {"packets": 12, "detail": {"vnfm": "real", "engine": "lookaside",
                      "queue_pair": 1, "ike": "established", "tx_packets": 10,
                      "tx_bytes": 15000, "rx_packets": 2, "rx_bytes": 104,
                      "drops": {"auth_failed": 0, "replay": 3}}}
        }))
        .unwrap();
        let t = v.tunnel().expect("an esp instance has a tunnel state");
        assert_eq!((t.ike.as_str(), t.queue_pair), ("established", Some(1)));
        assert_eq!(v.engine_label().as_deref(), Some("lookaside qp 1"));
        let c = v.counters();
        assert_eq!((c.packets, c.bytes, c.drop_count("replay")), (12, 15104, 3));
        let table = live_table("t=1s", std::slice::from_ref(&v), None);
        assert!(table.contains("engine lookaside qp 1  replay=3"), "{table}");
        let cpu = InstanceView {
            state: Some(StateView::default()),
            ..v.clone()
        };
        assert_eq!(cpu.engine_label().as_deref(), Some("-"));
        let fw = InstanceView {
            spec: SpecView {
                function: "firewall".into(),
                ..v.spec.clone()
            },
            ..v
        };
        assert!(fw.tunnel().is_none() && fw.engine_label().is_none());
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
