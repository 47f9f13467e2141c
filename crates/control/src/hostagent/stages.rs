//! How a software device's worker is attached to its host: two veth pairs per device,
//! made by the agent in the host's namespace. The worker's ports are the `sw<k>i` and
//! `sw<k>o` ends (no address; the worker keeps the kernel off them); the kernel routes a
//! service's packets out of `sk<k>i` into the worker's inside port and receives the
//! worker's output on `sk<k>o`, then routes it on (see [`super::steering`]). The
//! gateways are link-local addresses with permanent neighbor entries naming the worker
//! ports' MACs, so no ARP ever crosses the worker.

use super::steering::HostTools;
use nfx_proto::run_config::{PortConfig, Ports};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;

/// Most software devices one agent attaches (link-local subnets 169.254.1–64).
pub const MAX_DEVICES: usize = 64;

/// One device's attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stage {
    /// Device id.
    pub device: String,
    /// Kernel end towards the worker's inside port.
    pub kernel_in: String,
    /// The worker's inside port.
    pub worker_in: String,
    /// Kernel end receiving the worker's outside port.
    pub kernel_out: String,
    /// The worker's outside port.
    pub worker_out: String,
    /// Gateway address standing for the worker's inside port.
    pub gw_in: Ipv4Addr,
    /// Gateway address standing for the worker's outside port.
    pub gw_out: Ipv4Addr,
}

impl Stage {
    /// The names and addresses of device number `k` (0-based).
    pub fn new(device: &str, k: usize) -> Stage {
        let net = k as u8 + 1;
        Stage {
            device: device.to_string(),
            kernel_in: format!("sk{k}i"),
            worker_in: format!("sw{k}i"),
            kernel_out: format!("sk{k}o"),
            worker_out: format!("sw{k}o"),
            gw_in: Ipv4Addr::new(169, 254, net, 2),
            gw_out: Ipv4Addr::new(169, 254, net, 6),
        }
    }

    /// Creates (or repairs) the two veth pairs, their addresses and neighbor entries;
    /// returns the `ports:` block of the worker's run config.
    pub fn ensure(&self, tools: &mut dyn HostTools) -> Result<Ports, String> {
        Ok(Ports {
            inside: attach(tools, &self.kernel_in, &self.worker_in, self.gw_in)?,
            outside: attach(tools, &self.kernel_out, &self.worker_out, self.gw_out)?,
        })
    }
}

/// Creates (or repairs) the veth pair `kernel`–`worker` with the kernel end's address
/// and the gateway `gw`'s permanent neighbor entry; returns the worker's port.
fn attach(
    tools: &mut dyn HostTools,
    kernel: &str,
    worker: &str,
    gw: Ipv4Addr,
) -> Result<PortConfig, String> {
    if tools.ip(&["link", "show", "dev", kernel]).is_err() {
        let _ = tools.ip(&["link", "del", worker]);
        tools.ip(&[
            "link", "add", kernel, "type", "veth", "peer", "name", worker,
        ])?;
    }
    let o = gw.octets();
    let local = Ipv4Addr::new(o[0], o[1], o[2], o[3] - 1);
    tools.ip(&["addr", "replace", &format!("{local}/30"), "dev", kernel])?;
    for dev in [kernel, worker] {
        tools.ip(&["link", "set", "dev", dev, "up"])?;
    }
    let worker_mac = mac(tools, worker)?;
    tools.ip(&[
        "neigh",
        "replace",
        &gw.to_string(),
        "lladdr",
        &worker_mac,
        "dev",
        kernel,
        "nud",
        "permanent",
    ])?;
    Ok(PortConfig {
        iface: worker.to_string(),
        peer_mac: mac(tools, kernel)?,
        table_tier: false,
    })
}

/// The MAC address of `dev`.
fn mac(tools: &mut dyn HostTools, dev: &str) -> Result<String, String> {
    #[derive(Deserialize)]
    struct L {
        address: String,
    }
    let out = tools.ip(&["-j", "link", "show", "dev", dev])?;
    let l: Vec<L> = serde_json::from_str(&out).map_err(|e| format!("ip -j link of {dev}: {e}"))?;
    l.into_iter()
        .next()
        .map(|l| l.address)
        .ok_or_else(|| format!("{dev} has no MAC address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_interface_limits_and_subnets_do_not_overlap() {
        let a = Stage::new("h1-sw0", 0);
        let b = Stage::new("h1-sw1", MAX_DEVICES - 1);
        assert_eq!(a.kernel_in, "sk0i");
        assert!(b.worker_out.len() <= 15);
        assert_eq!(a.gw_in.to_string(), "169.254.1.2");
        assert_eq!(a.gw_out.to_string(), "169.254.1.6");
        assert_eq!(b.gw_in.to_string(), "169.254.64.2");
    }
}
