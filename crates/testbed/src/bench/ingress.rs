//! Keeps edge's own IPv4 stack away from the traffic an nfx case forwards. AF_PACKET
//! sockets only tap a veth: every frame nfx takes is also handed to edge's kernel, which
//! (forwarding off) looks up a route for it, finds none, and rate-limits an ICMP error —
//! per frame, on the CPU that delivers it, i.e. the sender's (the 64-byte generator's,
//! iperf3's). A netdev-family ingress chain on `to-src` and `to-cloud` drops IPv4 after
//! the packet taps have their copy and before the IP stack (ARP still reaches the
//! kernel, which answers for the gateway and NAT addresses). This is what a dataplane
//! that owns its NIC (AF_XDP, DPDK) gets for free; removed when dropped.

use crate::{netns, Host, Testbed};
use std::time::Duration;

/// Name of the netdev table.
pub const TABLE: &str = "nfx_edge_ingress";

/// The ingress drop, applied on edge; removed on drop.
pub struct EdgeIngressDrop {
    ns: String,
}

/// The ruleset text (idempotent: replaces an earlier copy of the table).
pub fn ruleset() -> String {
    let mut s = format!("add table netdev {TABLE}\ndelete table netdev {TABLE}\n");
    s.push_str(&format!("table netdev {TABLE} {{\n"));
    for dev in ["to-src", "to-cloud"] {
        let chain = dev.replace('-', "_");
        s.push_str(&format!(
            "  chain {chain} {{\n    type filter hook ingress device \"{dev}\" priority filter; policy accept;\n    meta protocol ip counter drop\n  }}\n"
        ));
    }
    s.push_str("}\n");
    s
}

impl EdgeIngressDrop {
    /// Loads [`ruleset`] into edge's namespace.
    pub fn apply(tb: &Testbed) -> anyhow::Result<Self> {
        let ns = tb.ns(Host::Edge);
        let file = tempfile::NamedTempFile::new()?;
        std::fs::write(file.path(), ruleset())?;
        let path = file.path().to_string_lossy().into_owned();
        netns::exec(&ns, &["nft", "-f", &path], Duration::from_secs(10))
            .map_err(|e| anyhow::anyhow!("edge ingress drop in {ns}: {e:#}"))?;
        Ok(Self { ns })
    }
}

impl Drop for EdgeIngressDrop {
    fn drop(&mut self) {
        let _ = netns::exec(
            &self.ns,
            &["nft", "delete", "table", "netdev", TABLE],
            Duration::from_secs(10),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_drops_ipv4_on_both_edge_ports_only() {
        let r = ruleset();
        assert!(r.starts_with(&format!(
            "add table netdev {TABLE}\ndelete table netdev {TABLE}\n"
        )));
        assert_eq!(r.matches("meta protocol ip counter drop").count(), 2);
        assert!(r.contains("device \"to-src\""));
        assert!(r.contains("device \"to-cloud\""));
        assert!(!r.contains("policy drop"), "ARP must pass: {r}");
    }
}
