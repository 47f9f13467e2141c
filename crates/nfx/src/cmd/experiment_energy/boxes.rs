//! The NAT box of each case on the testbed's edge — kernel forwarding with an nftables
//! source NAT (the paper's iptables NAT), or `nfx run` with the `nat` VNF in busy or
//! adaptive poll mode — and the threads whose CPU time is the box's: the dataplane's
//! process and the kernel's receive threads of edge's interfaces (threaded NAPI, so that
//! the kernel's forwarding is not charged to whoever sent the frame).

use anyhow::Context;
use nfx_energy::Target;
use nfx_testbed::nfxrun::NfxRun;
use nfx_testbed::runconfig::{Chain, RunSpec};
use nfx_testbed::{netns, nftables, Host, Testbed};
use std::path::Path;

/// The four dataplanes compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Linux forwarding with an nftables SNAT (the paper's in-kernel NAT).
    Kernel,
    /// nfx busy polling (the OvS-DPDK case).
    Busy,
    /// nfx adaptive polling.
    Adaptive,
    /// nfx adaptive polling with the power manager.
    Manager,
}

impl Case {
    /// Every case, in run order.
    pub const ALL: [Case; 4] = [Case::Kernel, Case::Busy, Case::Adaptive, Case::Manager];

    /// Name in the outputs.
    pub fn name(self) -> &'static str {
        match self {
            Case::Kernel => "kernel",
            Case::Busy => "nfx-busy",
            Case::Adaptive => "nfx-adaptive",
            Case::Manager => "nfx-adaptive+manager",
        }
    }

    /// Poll mode of the nfx dataplane (`None` for kernel forwarding).
    pub fn poll(self) -> Option<&'static str> {
        match self {
            Case::Kernel => None,
            Case::Busy => Some("busy"),
            Case::Adaptive | Case::Manager => Some("adaptive"),
        }
    }
}

/// The nftables table of the kernel case.
const NFT_TABLE: &str = "nfx_energy_nat";

/// The NAT box of one case; stopped and cleaned up when dropped.
pub struct NatBox {
    ns: String,
    run: Option<NfxRun>,
    kernel: bool,
}

impl NatBox {
    /// Sets the box up on edge for `case`.
    pub fn start(case: Case, tb: &Testbed, nfx: &Path, dir: &Path) -> anyhow::Result<Self> {
        let ns = tb.ns(Host::Edge);
        let mut b = Self {
            ns: ns.clone(),
            run: None,
            kernel: false,
        };
        match case.poll() {
            None => {
                tb.set_edge_forwarding(true)?;
                let rules = format!(
                    "add table ip {NFT_TABLE}\ndelete table ip {NFT_TABLE}\n\
                     table ip {NFT_TABLE} {{\n  chain postrouting {{\n    \
                     type nat hook postrouting priority srcnat; policy accept;\n    \
                     oifname \"to-cloud\" snat to {}\n  }}\n}}\n",
                    tb.nat_ip()
                );
                nftables::load(&ns, &rules)?;
                b.kernel = true;
            }
            Some(poll) => {
                tb.set_edge_forwarding(false)?;
                let spec = RunSpec {
                    name: format!("energy-{}", case.name().replace('+', "-")),
                    control_socket: dir.join("nat.sock"),
                    events: None,
                    vector: 256,
                    poll: poll.into(),
                    chain: Chain::Nat,
                };
                b.run = Some(NfxRun::start(nfx, tb, &spec, &[], dir)?);
            }
        }
        Ok(b)
    }

    /// The dataplane's control socket (nfx cases).
    pub fn socket(&self) -> Option<&Path> {
        self.run.as_ref().map(|r| r.socket())
    }

    /// The dataplane's process and worker thread (nfx cases).
    pub fn dataplane(&self) -> anyhow::Result<Option<(u32, u32)>> {
        let Some(r) = &self.run else { return Ok(None) };
        let st = r.stats()?;
        let tid = st
            .workers
            .first()
            .map(|w| w.tid)
            .context("the dataplane reports no worker thread id")?;
        Ok(Some((r.pid(), tid)))
    }

    /// The box's own threads: the dataplane's process (nfx cases).
    pub fn targets(&self) -> Vec<Target> {
        self.run
            .iter()
            .map(|r| Target::Process { pid: r.pid() })
            .collect()
    }
}

impl Drop for NatBox {
    fn drop(&mut self) {
        if let Some(r) = self.run.take() {
            let _ = r.stop();
        }
        if self.kernel {
            let _ = nftables::load(&self.ns, &format!("delete table ip {NFT_TABLE}\n"));
        }
    }
}

/// Gives edge's two interfaces and cloud's inside one threaded NAPI (see
/// [`netns::threaded_napi`]); returns the edge threads (the NAT box's kernel work).
pub fn kernel_threads(tb: &Testbed) -> anyhow::Result<Vec<Target>> {
    let edge = tb.ns(Host::Edge);
    let mut tids = netns::threaded_napi(&edge, "to-src")?;
    tids.extend(netns::threaded_napi(&edge, "to-cloud")?);
    // Cloud's receive gets a thread of its own too, or edge's transmit would run it.
    netns::threaded_napi(&tb.ns(Host::Cloud), "to-edge")?;
    anyhow::ensure!(
        !tids.is_empty(),
        "no NAPI thread appeared for edge's interfaces (kernel without threaded NAPI on veth?)"
    );
    Ok(tids
        .into_iter()
        .map(|tid| Target::Thread { pid: tid, tid })
        .collect())
}
