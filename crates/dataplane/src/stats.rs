//! The stats document (`{"cmd":"stats"}`, `nfx stats --json`, final output of `nfx run`).
//! The same structs serialize on the worker side and deserialize in clients.

use nfx_packet::DropReason;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Every counter of one running dataplane instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    /// Instance name.
    pub name: String,
    /// Seconds since the worker started.
    pub uptime_s: f64,
    /// `vector` or `scalar`.
    pub mode: String,
    /// `busy`, `interrupt` or `adaptive`.
    pub poll: String,
    /// Per worker thread.
    pub workers: Vec<WorkerStats>,
    /// Per port (`inside`, `outside`).
    pub ports: Vec<PortStats>,
    /// Per graph node in Forward order: `parse`, the VNFs, `output`.
    pub nodes: Vec<NodeStats>,
    /// Events raised so far, by kind.
    pub events: BTreeMap<String, u64>,
}

/// One worker thread.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerStats {
    /// Worker index.
    pub id: usize,
    /// CPU utilisation (user + system, from the kernel) over the last ~1 s, in % of a core.
    pub cpu_pct: f64,
    /// CPU seconds (user + system) used since start, for utilisation over any interval.
    pub cpu_s: f64,
    /// Frames received on both ports.
    pub rx_packets: u64,
    /// Bytes received on both ports.
    pub rx_bytes: u64,
    /// Frames transmitted on both ports.
    pub tx_packets: u64,
    /// Bytes transmitted on both ports.
    pub tx_bytes: u64,
    /// Non-empty vectors processed.
    pub vectors: u64,
    /// Mean packets per non-empty vector.
    pub mean_vector: f64,
}

/// One port.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PortStats {
    /// `inside` or `outside`.
    pub name: String,
    /// Interface name.
    pub iface: String,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Sends repeated because the kernel queue was full.
    pub tx_retries: u64,
    /// Drops by the port itself, by reason name (every reason listed).
    pub drops: BTreeMap<String, u64>,
}

/// One graph node.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NodeStats {
    /// Node name (`parse`, `firewall`, `nat-2`, `output`, ...).
    pub name: String,
    /// Packets that entered the node.
    pub packets: u64,
    /// Bytes of those packets.
    pub bytes: u64,
    /// TSC cycles spent in the node per packet.
    pub cycles_per_packet: f64,
    /// Drops decided by this node, by reason name (every reason listed).
    pub drops: BTreeMap<String, u64>,
    /// Node-specific gauges.
    pub stats: serde_json::Value,
}

/// Turns a dense drop-counter array into the by-name map of the stats document.
pub fn drops_map(drops: &[u64; DropReason::COUNT]) -> BTreeMap<String, u64> {
    DropReason::ALL.iter().map(|r| (r.as_str().to_string(), drops[*r as usize])).collect()
}

impl Stats {
    /// Total drops of node `name` (all reasons), 0 if there is no such node.
    pub fn node_drops(&self, name: &str) -> u64 {
        self.nodes.iter().filter(|n| n.name == name).flat_map(|n| n.drops.values()).sum()
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeStats> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_map_lists_every_reason_by_name() {
        let mut d = [0u64; DropReason::COUNT];
        d[DropReason::AclDeny as usize] = 3;
        let m = drops_map(&d);
        assert_eq!(m.len(), DropReason::COUNT);
        assert_eq!(m["acl_deny"], 3);
        assert_eq!(m["tx_error"], 0);
    }

    #[test]
    fn agreed_json_shape_round_trips() {
        let text = r#"{"name":"edge","uptime_s":1.2,"mode":"vector","poll":"adaptive",
 "workers":[{"id":0,"cpu_pct":37.5,"cpu_s":0.4,"rx_packets":0,"rx_bytes":0,"tx_packets":0,"tx_bytes":0,"vectors":0,"mean_vector":0.0}],
 "ports":[{"name":"inside","iface":"to-src","rx_packets":0,"rx_bytes":0,"tx_packets":0,"tx_bytes":0,"tx_retries":0,"drops":{"tx_error":0}}],
 "nodes":[{"name":"firewall","packets":0,"bytes":0,"cycles_per_packet":0.0,"drops":{"acl_deny":2},"stats":{}}],
 "events":{"dpi_match":0,"elephant":0}}"#;
        let s: Stats = serde_json::from_str(text).unwrap();
        assert_eq!(s.workers[0].cpu_pct, 37.5);
        assert_eq!(s.node_drops("firewall"), 2);
        assert_eq!(s.node("firewall").unwrap().drops["acl_deny"], 2);
        let again: Stats = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
    }
}
