//! Process entry points: the controller with its embedded agent (`nfx up`) and a
//! stand-alone host agent. Both serve until SIGINT/SIGTERM.

use crate::api::{router, ApiState};
use crate::controller::Controller;
use crate::enforcer::Enforcer;
use crate::mediator::{Mediator, VnfmMap};
use crate::store::Store;
use crate::vnfm::local::{LocalConfig, LocalVnfm};
use crate::vnfm::remote::RemoteVnfm;
use crate::vnfm::sim::{SimConfig, SimVnfm};
use crate::vnfm::Vnfm;
use anyhow::Context;
use nfx_model::Infrastructure;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use zeroize::Zeroizing;

/// Everything `nfx up` needs.
pub struct UpConfig {
    /// State database.
    pub db: PathBuf,
    /// Address to serve on.
    pub listen: SocketAddr,
    /// Bearer token for mutating calls.
    pub token: Zeroizing<String>,
    /// Infrastructure descriptor.
    pub infra: Infrastructure,
    /// Simulated VNFM settings (serves every host not otherwise mapped).
    pub sim: SimConfig,
    /// Local agent configuration: its worker devices' hosts are served by real workers.
    pub local: Option<LocalConfig>,
    /// Hosts served by remote agents: (host, base URL).
    pub agents: Vec<(String, String)>,
    /// File written with the bound address once the server listens.
    pub ready_file: Option<PathBuf>,
}

/// A small default infrastructure for a single machine: one host, one software device.
pub fn default_infra() -> Infrastructure {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    Infrastructure::from_yaml(
        "<built-in infrastructure>",
        &format!(
            "hosts: [{{ id: local, cores: {cores} }}]
devices:
  - {{ id: local-sw, host: local, tier: software, functions: [firewall, nat, elephant, dpi],
      latency_us: 30, throughput_gbps: 10, cpu_cores: {cores} }}
"
        ),
    )
    .expect("built-in infrastructure is valid")
}

/// Builds the controller (VNFMs, mediator, store) and reconciles it.
pub fn build(cfg: &UpConfig) -> anyhow::Result<(Arc<Controller>, Arc<dyn Vnfm>)> {
    let sim: Arc<dyn Vnfm> = Arc::new(SimVnfm::new(&cfg.infra, cfg.sim.clone())?);
    let mut map = VnfmMap::new(sim.clone());
    let mut agent_vnfm = sim;
    if let Some(lc) = &cfg.local {
        for dev in lc.workers.keys() {
            if cfg.infra.device(dev).is_none() {
                anyhow::bail!(
                    "local agent config: workers.{dev}: no such device in the infrastructure"
                );
            }
        }
        let local: Arc<dyn Vnfm> = Arc::new(LocalVnfm::new(lc.clone())?);
        for d in &cfg.infra.devices {
            if lc.workers.contains_key(&d.id) {
                map.set(&d.host, local.clone());
            }
        }
        agent_vnfm = local;
    }
    for (host, url) in &cfg.agents {
        if cfg.infra.host_index(host).is_none() {
            anyhow::bail!("--agent {host}={url}: no such host in the infrastructure");
        }
        map.set(
            host,
            Arc::new(RemoteVnfm::new(url, Some(cfg.token.to_string()))),
        );
    }
    let med = Mediator::new(cfg.infra.clone(), map, Arc::new(Enforcer::default()))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let store = Store::open(&cfg.db)?;
    let ctl = Controller::open(store, med).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((ctl, agent_vnfm))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

/// Runs controller + embedded agent until a signal arrives.
pub fn run_up(cfg: UpConfig) -> anyhow::Result<()> {
    let (ctl, agent_vnfm) = build(&cfg)?;
    let summary = ctl
        .recover()
        .map_err(|e| anyhow::anyhow!("reconciling: {e}"))?;
    eprintln!("nfx up: reconciled: {summary}");
    ctl.start_executor();
    let state = Arc::new(ApiState {
        ctl,
        token: cfg.token.clone(),
        metrics: Default::default(),
    });
    let app = router(state, Some(agent_vnfm));
    serve(app, cfg.listen, cfg.ready_file.as_ref())
}

/// Runs a stand-alone host agent for `vnfm`.
pub fn run_agent(
    vnfm: Arc<dyn Vnfm>,
    listen: SocketAddr,
    token: Zeroizing<String>,
    ready_file: Option<&PathBuf>,
) -> anyhow::Result<()> {
    let app = crate::agent::router(vnfm, token);
    serve(app, listen, ready_file)
}

fn serve(app: axum::Router, listen: SocketAddr, ready: Option<&PathBuf>) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let l = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        let addr = l.local_addr()?;
        eprintln!("nfx: serving on http://{addr}");
        if let Some(f) = ready {
            std::fs::write(f, addr.to_string()).with_context(|| format!("{}", f.display()))?;
        }
        axum::serve(l, app)
            .with_graceful_shutdown(shutdown_signal())
            .await
            .context("serving")
    })
}
