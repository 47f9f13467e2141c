//! Process entry points: the controller with its embedded agent (`nfx up`) and a
//! stand-alone host agent. Both serve until SIGINT/SIGTERM.

use crate::agents::Agents;
use crate::api::metrics::ApiMetrics;
use crate::api::{router, ApiState};
use crate::controller::Controller;
use crate::enforcer::Enforcer;
use crate::hostagent::{AgentConfig as HostAgentConfig, HostAgent};
use crate::mediator::{DownHosts, Mediator, VnfmMap};
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
    /// Admin bearer token (every route but `/healthz`; also sent to the agents).
    pub token: Zeroizing<String>,
    /// Read-only bearer token (GET/HEAD and the dry-run plan), if any.
    pub read_token: Option<Zeroizing<String>>,
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
    /// Run the power manager ([`crate::power_manager`]) over the host agents' workers.
    pub power_manager: bool,
    /// Only these services are managed (all when empty).
    pub power_services: Vec<String>,
    /// The power manager's load thresholds.
    pub power_tuning: crate::power_manager::Tuning,
    /// Run the SSM ([`crate::tunnel_ssm`]) over the host agents' tunnel endpoints.
    pub ssm: Option<crate::tunnel_ssm::SsmSettings>,
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

/// What [`build`] makes.
pub struct Built {
    /// The controller.
    pub ctl: Arc<Controller>,
    /// The VNFM the embedded agent routes serve.
    pub agent_vnfm: Arc<dyn Vnfm>,
    /// The hosts' agents, when the infrastructure names some.
    pub agents: Option<Arc<Agents>>,
}

/// Clients of the agents named in `infra` (`hosts[].agent`), reached as its `management`
/// says (paths already absolute); `token` when it names no token file.
fn agents_of(
    infra: &Infrastructure,
    token: &Zeroizing<String>,
    down: DownHosts,
) -> anyhow::Result<Option<Arc<Agents>>> {
    if !infra.hosts.iter().any(|h| h.agent.is_some()) {
        return Ok(None);
    }
    let m = infra.management.clone().unwrap_or(nfx_model::Management {
        netns: None,
        tls: None,
        token_file: None,
    });
    let tls = m.tls.as_ref().map(crate::tls::client_config).transpose()?;
    let token = match &m.token_file {
        Some(f) => crate::client::read_token_file(f)?,
        None => token.clone(),
    };
    Ok(Some(Arc::new(Agents::new(
        infra,
        tls,
        m.netns.as_deref(),
        token,
        down,
    )?)))
}

/// The secret the tunnels' IKE keys are derived from, kept beside the database
/// (`DB.tunnel-secret`, mode 0600, created on the first start): the same keys after a
/// restart without any key in the database.
fn tunnel_secret(db: &std::path::Path) -> anyhow::Result<Zeroizing<Vec<u8>>> {
    use std::os::unix::fs::PermissionsExt;
    let file = std::path::PathBuf::from(format!("{}.tunnel-secret", db.display()));
    let t = match std::fs::metadata(&file) {
        Ok(md) if md.permissions().mode() & 0o077 != 0 => anyhow::bail!(
            "{}: other users may read it (mode {:o}); make it 0600",
            file.display(),
            md.permissions().mode() & 0o777
        ),
        Ok(_) => crate::client::read_token_file(&file)?,
        Err(_) => crate::client::write_new_token(&file)?,
    };
    Ok(Zeroizing::new(t.as_bytes().to_vec()))
}

/// Builds the controller (VNFMs, mediator, store) and reconciles it.
pub fn build(cfg: &UpConfig) -> anyhow::Result<Built> {
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
    let down = DownHosts::default();
    let agents = agents_of(&cfg.infra, &cfg.token, down.clone())?;
    let enforcer = match &agents {
        Some(a) => {
            for (host, client) in a.clients() {
                let v: Arc<dyn Vnfm> = client.clone();
                map.set(host, v);
            }
            let p: Arc<dyn crate::enforcer::Programmer> = a.clone();
            Enforcer::with_programmer(p)
        }
        None => Enforcer::default(),
    };
    let mut med = Mediator::new(cfg.infra.clone(), map, Arc::new(enforcer))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    med.set_down_hosts(down);
    if agents.is_some() {
        med.set_tunnel_secret(tunnel_secret(&cfg.db)?);
    }
    let store = Store::open(&cfg.db)?;
    let ctl = Controller::open(store, med).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Built {
        ctl,
        agent_vnfm,
        agents,
    })
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
    let Built {
        ctl,
        agent_vnfm,
        agents,
    } = build(&cfg)?;
    let summary = ctl
        .recover()
        .map_err(|e| anyhow::anyhow!("reconciling: {e}"))?;
    eprintln!("nfx up: reconciled: {summary}");
    ctl.start_executor();
    if let Some(a) = &agents {
        eprintln!(
            "nfx up: {} host agent(s), heartbeat every {:?}",
            a.clients().len(),
            crate::agents::HEARTBEAT
        );
        a.start_monitor(&ctl);
        if cfg.power_manager {
            eprintln!(
                "nfx up: power manager on (every {:?})",
                crate::power_manager::MANAGE_EVERY
            );
            crate::power_manager::start(
                &ctl,
                a,
                &cfg.infra,
                cfg.power_services.clone(),
                cfg.power_tuning,
            );
        }
        if let Some(s) = &cfg.ssm {
            crate::tunnel_ssm::start(&ctl, a, &cfg.infra, s.clone())
                .map_err(|e| anyhow::anyhow!("nfx up: --ssm-{}", e.replace('_', "-")))?;
            eprintln!("nfx up: SSM on (every {:?})", s.period);
        }
    }
    let state = Arc::new(ApiState {
        ctl,
        tokens: crate::api::Tokens {
            admin: cfg.token.clone(),
            read: cfg.read_token.clone(),
        },
        metrics: ApiMetrics::federating(agents),
    });
    let app = router(state, Some(agent_vnfm));
    serve(app, cfg.listen, None, cfg.ready_file.as_ref())
}

/// Runs a stand-alone host agent for `vnfm`.
pub fn run_agent(
    vnfm: Arc<dyn Vnfm>,
    listen: SocketAddr,
    token: Zeroizing<String>,
    ready_file: Option<&PathBuf>,
) -> anyhow::Result<()> {
    let app = crate::api::json_fallbacks(
        crate::api::protect(crate::agent::router(vnfm), crate::api::Tokens::admin(token)),
        "",
    );
    serve(app, listen, None, ready_file)
}

/// Runs the host agent of `cfg` (inside its host's namespace) until a signal arrives.
pub fn run_host_agent(cfg: &HostAgentConfig) -> anyhow::Result<()> {
    let token = crate::client::read_token_file(&cfg.token_file)?;
    let tls = cfg
        .tls
        .as_ref()
        .map(crate::tls::server_config)
        .transpose()?;
    let agent = HostAgent::start(cfg)?;
    let app = crate::hostagent::api::router(agent, token);
    serve(app, cfg.listen, tls, cfg.ready_file.as_ref())
}

fn serve(
    app: axum::Router,
    listen: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    ready: Option<&PathBuf>,
) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let l = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        let addr = l.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        eprintln!("nfx: serving on {scheme}://{addr}");
        if let Some(f) = ready {
            std::fs::write(f, addr.to_string()).with_context(|| format!("{}", f.display()))?;
        }
        nfx_io::notify::ready().context("notifying systemd ($NOTIFY_SOCKET)")?;
        match tls {
            Some(cfg) => axum::serve(crate::tls::TlsListener::new(l, cfg)?, app)
                .with_graceful_shutdown(shutdown_signal())
                .await
                .context("serving"),
            None => axum::serve(l, app)
                .with_graceful_shutdown(shutdown_signal())
                .await
                .context("serving"),
        }
    })
}
