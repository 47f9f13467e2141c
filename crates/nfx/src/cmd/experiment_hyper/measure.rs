//! The experiment's two measurements outside the traffic cases, in a scratch namespace
//! of idle veth ports: deploy time per tier (HYPER §VI-B: a stateful firewall with 16
//! table entries) and the table tier's live migration rate (HYPER §VI-C).

use super::super::bench_migration::{acl16, flow_frame, start_run, table_specs};
use anyhow::{bail, Context};
use nfx_fastpath::table::raw::HOOK_INGRESS;
use nfx_fastpath::table::testrun::Verdict;
use nfx_fastpath::table::{Function, Placement, PortSpec, Shape, TableChain};
use nfx_vnf::NodeSpec;
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Instant;

/// Flow-table size of the deployed 16-rule firewalls.
const DEPLOY_FLOWS: u32 = 4096;

/// Deploy samples per tier, ms.
#[derive(Debug, Clone, Serialize)]
pub struct Deploy {
    /// `nfx run` of a worker with the 16-rule firewall, from spawn until its control
    /// socket answers with stats (polled every 20 ms).
    pub software_ms: Vec<f64>,
    /// Table tier, HYPER's deploy + configure: install the 16 rules and the firewall's
    /// parameters into a prepared device (map updates and a configuration flip).
    pub table_ms: Vec<f64>,
    /// Table tier, steering afterwards: attach the installed chain to its two ports
    /// (two tcx links).
    pub table_attach_ms: Vec<f64>,
    /// Table tier, done ahead of the deploy: loading and verifying the programs with
    /// tables of the firewall's size (HYPER programs its cards before deploying too).
    pub table_prepare_ms: Vec<f64>,
}

/// The migration of a filled table-tier chain.
#[derive(Debug, Clone, Serialize)]
pub struct MigrationRun {
    /// Connections installed (each a firewall flow and a NAT mapping).
    pub connections: usize,
    /// Flow records moved (firewall flows + NAT mappings).
    pub records: usize,
    /// Records the old chain created during the copy (0 here: no traffic).
    pub after_switch: usize,
    /// NAT mappings the new chain does not hold identically afterwards.
    pub remapped: usize,
    /// Bulk copy, ms.
    pub copy_ms: f64,
    /// Switch of every hook, ms.
    pub switch_ms: f64,
    /// The whole migration, ms.
    pub total_ms: f64,
    /// Connections moved per second.
    pub connections_per_s: f64,
    /// Records moved per second.
    pub records_per_s: f64,
    /// Time to install the connections through the old chain's program, s (not timed
    /// in the rate).
    pub fill_s: f64,
}

fn node_spec(v: Value) -> anyhow::Result<NodeSpec> {
    serde_json::from_value(v).context("node spec")
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A placement between two idle ports of the scratch namespace.
fn alone(inside: &str, outside: &str) -> Placement {
    let port = |iface: &str, mac: [u8; 6]| PortSpec {
        iface: iface.into(),
        peer_mac: mac,
    };
    Placement::Alone {
        inside: port(inside, [2, 0, 0, 0, 0, 1]),
        outside: port(outside, [2, 0, 0, 0, 0, 2]),
    }
}

/// Runs `f` in a thread inside network namespace `ns` (the table tier attaches to the
/// interfaces of the calling thread's namespace).
fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&ns)?;
        f()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("measurement thread panicked"))?
}

/// `repeat` deploys of the 16-rule firewall on each tier.
pub fn deploy(nfx: &Path, dir: &Path, ns: &str, repeat: usize) -> anyhow::Result<Deploy> {
    let fw = json!({ "firewall": acl16(Some(DEPLOY_FLOWS as usize)) });
    let spec = node_spec(fw.clone())?;
    let (table_ms, table_attach_ms, table_prepare_ms) = in_netns(ns, move || {
        let (mut run, mut att, mut prep) = (Vec::new(), Vec::new(), Vec::new());
        let shape = Shape {
            rules: 16,
            fw_flows: DEPLOY_FLOWS,
            ..Shape::default()
        };
        for _ in 0..repeat {
            let t = Instant::now();
            let mut chain = TableChain::prepare(shape)?;
            prep.push(ms(t));
            let t = Instant::now();
            chain.install(&[("acl16".into(), spec.clone())], Path::new("."))?;
            run.push(ms(t));
            let t = Instant::now();
            chain.attach(&alone("d0", "d1"))?;
            att.push(ms(t));
            if !matches!(chain.functions(), [Function::Firewall(p)] if p.rules.len() == 16)
                || !chain.is_attached()
            {
                bail!("the deployed firewall is not attached with its 16 rules");
            }
        }
        Ok((run, att, prep))
    })?;
    let mut software_ms = Vec::new();
    for i in 0..repeat {
        let name = format!("hyper-sw{i}");
        let cfg = json!({
            "name": name, "netns": ns,
            "control_socket": dir.join(format!("{name}.sock")).to_string_lossy(),
            "ports": {"inside": {"iface": "d2", "peer_mac": "02:00:00:00:00:01"},
                      "outside": {"iface": "d3", "peer_mac": "02:00:00:00:00:02"}},
            "poll": "interrupt", "chain": [fw],
        });
        let t = Instant::now();
        let (child, _sock) = start_run(nfx, dir, &cfg)?;
        software_ms.push(ms(t));
        drop(child);
    }
    Ok(Deploy {
        software_ms,
        table_ms,
        table_attach_ms,
        table_prepare_ms,
    })
}

/// Fills a table-tier firewall + NAT with `flows` connections (frames through its own
/// program), deploys a second chain and migrates the first to it.
pub fn migration(ns: &str, flows: usize) -> anyhow::Result<MigrationRun> {
    let fns: Vec<(String, NodeSpec)> = ["firewall", "nat"]
        .into_iter()
        .zip(table_specs(flows))
        .map(|(n, v)| Ok((n.to_string(), node_spec(v)?)))
        .collect::<anyhow::Result<_>>()?;
    in_netns(ns, move || {
        let mut old = TableChain::deploy(&fns, Path::new("."))?;
        old.attach(&alone("d4", "d5"))?;
        let inside = nfx_io::sys::ifindex("d4").context("d4")?;
        let t = Instant::now();
        let mut frame = [0u8; 60];
        for i in 0..flows {
            flow_frame(i, &mut frame);
            let run = old.run_frame(HOOK_INGRESS, inside, &frame, 0)?;
            if run.verdict != Verdict::Redirect {
                bail!("connection {i} was not forwarded: {:?}", run.verdict);
            }
        }
        let fill_s = t.elapsed().as_secs_f64();
        let mut new = TableChain::deploy(&fns, Path::new("."))?;
        let m = old.migrate_to(&mut new)?;
        let held: Vec<u64> = new.stats()?.functions.iter().map(|f| f.flows).collect();
        if m.flows != 2 * flows || m.remapped != 0 || held != [flows as u64; 2] {
            bail!("migration moved {m:?}, the new chain holds {held:?} of {flows} connections");
        }
        let total_s = m.total.as_secs_f64().max(1e-9);
        Ok(MigrationRun {
            connections: flows,
            records: m.flows,
            after_switch: m.after_switch,
            remapped: m.remapped,
            copy_ms: m.copy.as_secs_f64() * 1e3,
            switch_ms: m.switch.as_secs_f64() * 1e3,
            total_ms: total_s * 1e3,
            connections_per_s: flows as f64 / total_s,
            records_per_s: m.flows_per_s(),
            fill_s,
        })
    })
}
