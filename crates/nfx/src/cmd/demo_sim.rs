//! `nfx demo --simulate`: the demo's control steps (deploy both tenants from YAML, list
//! the instances — tenant B's tunnel endpoints placed on the accelerator tier — migrate
//! tenant A's firewall, destroy) through a real controller whose hosts are served by its
//! simulated VNFM. No namespaces, no packets, no root; every line says SIMULATED. The
//! SSM's reassignment needs live endpoints and their load, so it is not shown.

use super::controlled_bed::ControlledBed;
use super::demo::{self, check, Files, InstanceSummary, Summary};
use super::demo_view;
use nfx_testbed::hosts::HostsSpec;
use std::path::Path;

/// Runs the simulated demo.
pub fn run(spec: &HostsSpec, files: &Files, dir: &Path, sum: &mut Summary) -> anyhow::Result<()> {
    crate::say!(
        "nfx demo --simulate: SIMULATED devices on 3 hosts (h1, h2, h3); no namespaces, no \
         packets — the controller's simulated VNFM stands in for the agents"
    );
    let bed = ControlledBed::simulated(spec, &dir.join("controller"))?;
    demo::deploy(&bed, files, "SIMULATED ")?;
    let list = demo_view::instances(&bed.api)?;
    crate::say!("{}", demo_view::placement_table(&list).trim_end());
    sum.instances = list.iter().map(InstanceSummary::from).collect();
    let all_sim = list.iter().all(|i| i.vnfm == "simulated");
    check(
        sum,
        all_sim && !list.is_empty(),
        format!("SIMULATED: {} instances, every one simulated", list.len()),
    );
    let ends: Vec<String> = list
        .iter()
        .filter(|i| i.service() == "tenant-b" && i.is_tunnel_end())
        .map(|i| format!("{} on {} ({})", i.spec.id, i.spec.device, i.tier))
        .collect();
    check(
        sum,
        ends.len() == 2 && ends.iter().all(|e| e.ends_with("(accelerator)")),
        format!(
            "SIMULATED tunnel of tenant-b: {} (bookkeeping only: no endpoint runs, so the \
             SSM's reassignment by load is not shown)",
            ends.join(", ")
        ),
    );
    let m = demo::migrate(&bed, "tenant-a", "firewall")?;
    check(
        sum,
        m.from != m.to,
        format!(
            "SIMULATED migration of tenant-a's firewall {}: {} → {} in {:.2} s",
            m.instance, m.from, m.to, m.secs
        ),
    );
    sum.migration = Some(m);
    demo::destroy(&bed, "SIMULATED ")?;
    let left = demo_view::instances(&bed.api)?.len();
    check(
        sum,
        left == 0,
        format!("SIMULATED destroy: {left} instances left"),
    );
    crate::say!("tearing down the SIMULATED controller");
    Ok(())
}
