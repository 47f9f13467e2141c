//! Drives an `nfx table run` process on the testbed's edge: writes its config (a chain
//! of table-tier functions, alone between edge's two ports or before a software worker
//! on `to-src`), starts it, waits until it is attached, stops it and collects the final
//! counters it prints.

use crate::process::ChildGuard;
use crate::runconfig::{self, Chain};
use crate::{Host, Testbed};
use anyhow::{bail, Context};
use nfx_fastpath::table::runconfig::{PlacementConfig, PortConfig, TableRunConfig};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where the table tier runs on edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TablePlace {
    /// It forwards between `to-src` and `to-cloud` by itself.
    Alone,
    /// Before an `nfx run` worker, on `to-src` (a hybrid chain).
    BeforeWorker,
}

/// A running `nfx table run`; killed when dropped.
pub struct TableRun {
    child: ChildGuard,
    log: PathBuf,
}

/// The config of a table-tier `chain` on edge, placed as `place`.
pub fn table_config(
    tb: &Testbed,
    name: &str,
    chain: &Chain,
    place: TablePlace,
    events: Option<PathBuf>,
) -> anyhow::Result<TableRunConfig> {
    let (src_mac, cloud_mac) = tb.edge_peer_macs()?;
    let placement = match place {
        TablePlace::Alone => PlacementConfig::Alone {
            inside: PortConfig {
                iface: "to-src".into(),
                peer_mac: src_mac,
            },
            outside: PortConfig {
                iface: "to-cloud".into(),
                peer_mac: cloud_mac,
            },
        },
        TablePlace::BeforeWorker => PlacementConfig::BeforeSoftware {
            iface: "to-src".into(),
        },
    };
    Ok(TableRunConfig {
        name: name.into(),
        netns: Some(tb.ns(Host::Edge)),
        placement,
        chain: runconfig::chain_nodes(tb, chain)
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<_, _>>()
            .context("a table-tier chain entry")?,
        events,
    })
}

impl TableRun {
    /// Writes `cfg` into `dir`, starts `<nfx_bin> table run` and waits (bounded: loading
    /// and verifying the programs takes about a second, more on a loaded machine) until
    /// it reports the chain attached.
    pub fn start(nfx_bin: &Path, cfg: &TableRunConfig, dir: &Path) -> anyhow::Result<Self> {
        let config = dir.join(format!("{}.table.yaml", cfg.name));
        std::fs::write(&config, cfg.to_yaml())
            .with_context(|| format!("writing {}", config.display()))?;
        let ready = dir.join(format!("{}.ready", cfg.name));
        let _ = std::fs::remove_file(&ready);
        let log = dir.join(format!("{}.table.log", cfg.name));
        let mut cmd = Command::new(nfx_bin);
        cmd.args(["table", "run", "--config"])
            .arg(&config)
            .arg("--ready")
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).context("creating table-tier log")?);
        let mut run = Self {
            child: ChildGuard::spawn(cmd)?,
            log,
        };
        let start = Instant::now();
        while !ready.exists() {
            if run.child.exited() || start.elapsed() > Duration::from_secs(60) {
                bail!("nfx table run did not attach\n{}", run.log_tail());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(run)
    }

    fn log_tail(&self) -> String {
        crate::nfxrun::log_tail("nfx table run", &self.log)
    }

    /// Stops it with SIGINT (bounded) and returns the final counters it printed.
    pub fn stop(self) -> anyhow::Result<Value> {
        crate::nfxrun::stop_for_json(self.child, "nfx table run", &self.log, "final counters")
    }
}
