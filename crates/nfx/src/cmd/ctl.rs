//! `nfx up | plan | deploy | status | migrate | destroy | agent`: the controller (with its
//! embedded host agent) and the commands that drive it over its REST API.

use anyhow::{bail, Context};
use nfx_control::client::{
    ensure_token, load_services, load_token, token_file_or_new, Client, Refused,
};
use nfx_control::controller::ServiceRow;
use nfx_control::energy::EnergySummary;
use nfx_control::hostagent::AgentConfig as HostAgentConfig;
use nfx_control::mediator::InstanceRow;
use nfx_control::ops::Operation;
use nfx_control::optimize::OptimizePlan;
use nfx_control::server::{default_infra, run_agent, run_up, UpConfig};
use nfx_control::vnfm::local::{LocalConfig, LocalVnfm};
use nfx_control::vnfm::sim::{SimConfig, SimVnfm};
use nfx_control::vnfm::Vnfm;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::output::JsonOut;
use std::time::Duration;

/// Controller subcommands.
#[derive(clap::Subcommand)]
pub enum CtlCmd {
    /// Start the controller and its embedded host agent (state in SQLite, REST API).
    Up(UpArgs),
    /// Dry-run chaining and placement of the services in a file (nothing is reserved);
    /// or export them as `nfx place`/`nfx chain` inputs; or, with `--optimize`, the
    /// exact re-placement of everything deployed.
    Plan(PlanArgs),
    /// Deploy the services in a file and wait for their operations.
    Deploy(ServiceArgs),
    /// Show services, instances and operations (or one of them).
    Status(StatusArgs),
    /// Migrate an instance, with its flow state, to another device.
    Migrate(MigrateArgs),
    /// Destroy a service: steer its traffic away, then destroy its instances.
    Destroy(DestroyArgs),
    /// Run a stand-alone host agent serving the five VNFM calls over REST.
    Agent(AgentArgs),
}

/// `nfx up`'s database unless told otherwise; its token file is this with `.token`.
const DEFAULT_DB: &str = "nfx-state.db";

/// Where the controller is and how to authenticate.
#[derive(clap::Args)]
pub struct Conn {
    /// Controller URL (default: env NFX_URL, else http://127.0.0.1:7878).
    #[arg(long)]
    url: Option<String>,
    /// File holding the bearer token (env NFX_TOKEN takes precedence; default:
    /// ./nfx-state.token, the file `nfx up` writes beside its default database, if it
    /// exists).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Write the raw JSON answers to FILE (`-` or no FILE: stdout, one line each).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
}

/// Arguments of `nfx up`.
#[derive(clap::Args)]
pub struct UpArgs {
    /// SQLite state database.
    #[arg(long, default_value = DEFAULT_DB)]
    db: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: std::net::SocketAddr,
    /// Bearer token file (created with a random token if missing; env NFX_TOKEN wins).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Read-only bearer token file, accepted on GET/HEAD and `plan` only (created with a
    /// random token if missing); without it only the admin token is accepted.
    #[arg(long)]
    read_token_file: Option<PathBuf>,
    /// Infrastructure descriptor (YAML); default: this machine as one software device.
    #[arg(long)]
    infra: Option<PathBuf>,
    /// Local agent config (YAML): devices run as real `nfx run` workers.
    #[arg(long)]
    local_config: Option<PathBuf>,
    /// Serve HOST through a remote agent: HOST=URL (repeatable).
    #[arg(long = "agent", value_name = "HOST=URL")]
    agents: Vec<String>,
    /// Simulated deploy latency per instance, ms.
    #[arg(long, default_value_t = 0)]
    sim_deploy_ms: u64,
    /// Simulated devices' state file (default: <db>.sim.json).
    #[arg(long)]
    sim_state: Option<PathBuf>,
    /// Write the bound address here once listening.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Run the power manager: per service, probe each exclusive worker's CPU limit down
    /// while its delivered throughput holds and the SLA is kept, choose its poll mode by
    /// load; every decision is an operation record (docs/energy.md). Off by default.
    #[arg(long)]
    power_manager: bool,
    /// Run the power manager on this service only (repeatable; implies --power-manager).
    #[arg(long, value_name = "SERVICE")]
    power_manager_service: Vec<String>,
    /// Power manager: frames/s at a worker's ports above which it busy-polls (adaptive
    /// again below half of it).
    #[arg(long, value_name = "PPS", default_value_t = nfx_control::power_manager::BUSY_ABOVE_PPS)]
    power_busy_above_pps: f64,
    /// Power manager: CPU need (cores) of a service below which its workers on one host
    /// share the host's first core (spread again above 1.5 × it).
    #[arg(long, value_name = "CORES", default_value_t = nfx_control::power_manager::CONSOLIDATE_BELOW_CORES)]
    power_consolidate_below_cores: f64,
    /// Run the SSM: per accelerator device, grant its queue pairs to the tunnel
    /// endpoints with the most sustained CPU load and revoke them from the least, live,
    /// through the agents; every grant and revoke is an operation record (docs/ssm.md).
    /// Off by default: endpoints placed without a queue pair then stay on their CPU engine.
    #[arg(long)]
    ssm: bool,
    /// SSM decision round period, ms.
    #[arg(long, default_value_t = 500)]
    ssm_period_ms: u64,
    /// SSM: CPU % of an endpoint above which it wants a queue pair.
    #[arg(long, default_value_t = 50.0)]
    ssm_upper: f64,
    /// SSM: CPU % below which a holder gives its queue pair back.
    #[arg(long, default_value_t = 10.0)]
    ssm_lower: f64,
    /// SSM: consecutive rounds needed above upper (or below lower).
    #[arg(long, default_value_t = 3)]
    ssm_samples: usize,
    /// SSM: time after a change during which an endpoint is not changed again, ms.
    #[arg(long, default_value_t = 2000)]
    ssm_cooldown_ms: u64,
    /// SSM: measured engine figures (the file `nfx bench accel --calibration` writes,
    /// as `nfx ssm --calibration` reads): a grant whose lookaside throughput does not beat the
    /// endpoint's current engine is vetoed. Without it, no veto.
    #[arg(long, value_name = "FILE")]
    ssm_calibration: Option<std::path::PathBuf>,
}

/// A service file and connection.
#[derive(clap::Args)]
pub struct ServiceArgs {
    /// Service descriptor (YAML, `services: [...]`).
    #[arg(required_unless_present = "optimize")]
    file: Option<PathBuf>,
    /// Instead of a file's services: re-place every deployed instance with the exact
    /// solver (plan: print the cost now, the optimum, its proven gap and the migrations;
    /// deploy: carry the migrations out, one `nfx migrate` operation each).
    #[arg(long, conflicts_with_all = ["file", "service"])]
    optimize: bool,
    /// Time limit of the exact solver with `--optimize`, seconds.
    #[arg(long, default_value_t = 10.0, requires = "optimize")]
    time_limit: f64,
    /// Only this service of the file.
    #[arg(long)]
    service: Option<String>,
    /// Return after the operation is accepted instead of waiting for it.
    #[arg(long)]
    no_wait: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `nfx plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    svc: ServiceArgs,
    /// Write the `nfx place` input projected from the controller's infrastructure and
    /// the file's services to F (docs/descriptors.md, "Projections").
    #[arg(long, value_name = "F", requires = "file")]
    export_placement: Option<PathBuf>,
    /// Write the `nfx chain` input projected from the controller's infrastructure, its
    /// running instances and the file's services to F.
    #[arg(long, value_name = "F", requires = "file")]
    export_chaining: Option<PathBuf>,
}

/// Arguments of `nfx status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// One service.
    #[arg(long)]
    service: Option<String>,
    /// One instance (with live state from its VNFM).
    #[arg(long)]
    instance: Option<String>,
    /// One operation.
    #[arg(long)]
    operation: Option<String>,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `nfx migrate`.
#[derive(clap::Args)]
pub struct MigrateArgs {
    /// Instance id.
    instance: String,
    /// Target device (default: the best other device on the same host).
    #[arg(long)]
    device: Option<String>,
    /// Return after the operation is accepted.
    #[arg(long)]
    no_wait: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `nfx destroy`.
#[derive(clap::Args)]
pub struct DestroyArgs {
    /// Service id.
    service: String,
    /// Return after the operation is accepted.
    #[arg(long)]
    no_wait: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `nfx agent`.
#[derive(clap::Args)]
pub struct AgentArgs {
    /// Run the host agent of this configuration (YAML, written by `nfx testbed up
    /// --hosts`): workers, steering, heartbeat, TLS.
    #[arg(long, conflicts_with_all = ["local_config", "infra", "token_file"])]
    config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7879")]
    listen: std::net::SocketAddr,
    /// Bearer token file (env NFX_TOKEN wins).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Serve real workers from this local agent config (YAML).
    #[arg(long, conflicts_with = "infra")]
    local_config: Option<PathBuf>,
    /// Serve simulated devices of this infrastructure descriptor.
    #[arg(long)]
    infra: Option<PathBuf>,
    /// Simulated deploy latency per instance, ms.
    #[arg(long, default_value_t = 0)]
    sim_deploy_ms: u64,
    /// Write the bound address here once listening.
    #[arg(long)]
    ready_file: Option<PathBuf>,
}

/// Runs one controller subcommand.
pub fn run(cmd: CtlCmd) -> anyhow::Result<()> {
    match cmd {
        CtlCmd::Up(a) => up(a),
        CtlCmd::Plan(a) => plan(a),
        CtlCmd::Deploy(a) => services(a, false),
        CtlCmd::Status(a) => status(a),
        CtlCmd::Migrate(a) => migrate(a),
        CtlCmd::Destroy(a) => destroy(a),
        CtlCmd::Agent(a) => agent(a),
    }
}

fn up(a: UpArgs) -> anyhow::Result<()> {
    let infra = match &a.infra {
        Some(p) => with_absolute_paths(nfx_model::Infrastructure::load(p)?, p),
        None => default_infra(),
    };
    let power_tuning = nfx_control::power_manager::Tuning {
        busy_above_pps: a.power_busy_above_pps,
        consolidate_below_cores: a.power_consolidate_below_cores,
    };
    // Checked before anything is written (the token file).
    power_tuning
        .check()
        .map_err(|e| anyhow::anyhow!("--power-{}", e.replace('_', "-")))?;
    let token_file = a
        .token_file
        .clone()
        .unwrap_or_else(|| a.db.with_extension("token"));
    let (token, from) = ensure_token(&token_file)?;
    eprintln!("nfx up: bearer token from {from}");
    let read_token = match &a.read_token_file {
        Some(f) => {
            let (t, from) = token_file_or_new(f)?;
            eprintln!("nfx up: read-only bearer token from {from}");
            Some(t)
        }
        None => None,
    };
    let local = a
        .local_config
        .as_deref()
        .map(LocalConfig::load)
        .transpose()?;
    let mut agents = Vec::new();
    for s in &a.agents {
        let Some((h, u)) = s.split_once('=') else {
            bail!("--agent {s:?}: expected HOST=URL");
        };
        agents.push((h.to_string(), u.to_string()));
    }
    let ssm_calibration = match &a.ssm_calibration {
        Some(p) => Some(
            nfx_ssm::Calibration::load(p).map_err(|e| anyhow::anyhow!("--ssm-calibration: {e}"))?,
        ),
        None => None,
    };
    run_up(UpConfig {
        sim: SimConfig {
            deploy_delay: Duration::from_millis(a.sim_deploy_ms),
            state_file: Some(
                a.sim_state
                    .unwrap_or_else(|| a.db.with_extension("sim.json")),
            ),
        },
        db: a.db,
        listen: a.listen,
        token,
        read_token,
        infra,
        local,
        agents,
        ready_file: a.ready_file,
        power_manager: a.power_manager || !a.power_manager_service.is_empty(),
        power_services: a.power_manager_service,
        power_tuning,
        ssm: a.ssm.then(|| nfx_control::tunnel_ssm::SsmSettings {
            period: Duration::from_millis(a.ssm_period_ms),
            upper: a.ssm_upper,
            lower: a.ssm_lower,
            samples: a.ssm_samples,
            cooldown: Duration::from_millis(a.ssm_cooldown_ms),
            calibration: ssm_calibration,
        }),
    })
}

/// The descriptor with its management files taken relative to its own directory.
fn with_absolute_paths(
    mut infra: nfx_model::Infrastructure,
    file: &std::path::Path,
) -> nfx_model::Infrastructure {
    let dir = file.parent().map(|d| d.to_path_buf()).unwrap_or_default();
    if let Some(m) = infra.management.as_mut() {
        if let Some(t) = m.tls.as_mut() {
            *t = nfx_control::tls::relative_to(t, &dir);
        }
        if let Some(f) = m.token_file.as_mut() {
            if f.is_relative() {
                *f = dir.join(&*f);
            }
        }
    }
    infra
}

fn client(c: &Conn) -> anyhow::Result<Client> {
    let url = c
        .url
        .clone()
        .or_else(|| std::env::var("NFX_URL").ok())
        .unwrap_or_else(|| "http://127.0.0.1:7878".into());
    let default = Path::new(DEFAULT_DB).with_extension("token");
    let file = c
        .token_file
        .clone()
        .or_else(|| default.exists().then_some(default));
    Ok(Client::new(&url, load_token(file.as_deref())?))
}

/// Prints an answer; a closed stdout (e.g. `| head`) is not an error.
fn show<T: serde::Serialize>(c: &Conn, v: &T) -> anyhow::Result<()> {
    let text = match &c.json {
        Some(f @ JsonOut::File(_)) => return f.write(v),
        Some(JsonOut::Stdout) => serde_json::to_string(v)?,
        None => serde_json::to_string_pretty(v)?,
    };
    print_text(&format!("{text}\n"))
}

/// `what` failed: the controller's message, with a hint for a missing or read-only
/// token.
fn refused(e: anyhow::Error, what: &str) -> anyhow::Error {
    let hint = match e.downcast_ref::<Refused>().map(|r| r.status) {
        Some(401) => " (give --token-file FILE or set NFX_TOKEN)",
        Some(403) => " (this needs the admin token, not the read-only one)",
        _ => "",
    };
    anyhow::anyhow!("{what}: {e:#}{hint}")
}

/// Follows a started operation to its end unless `no_wait`; fails unless it completed.
fn operation(
    cl: &Client,
    started: anyhow::Result<Operation>,
    what: &str,
    no_wait: bool,
) -> anyhow::Result<Operation> {
    let op = started.map_err(|e| refused(e, what))?;
    if no_wait {
        return Ok(op);
    }
    cl.wait_completed(&op.id, Duration::from_secs(600))
        .map_err(|e| anyhow::anyhow!("{what}: {e:#}"))
}

/// `nfx plan`: the projections if asked for, then the dry run of each service.
fn plan(a: PlanArgs) -> anyhow::Result<()> {
    if a.export_placement.is_some() || a.export_chaining.is_some() {
        let (cl, chosen) = chosen_services(&a.svc)?;
        let p = cl
            .projection(&chosen)
            .map_err(|e| refused(e, "projection"))?;
        if let Some(f) = &a.export_placement {
            write_json(f, &p.placement)?;
            eprintln!("nfx plan: wrote the nfx place input to {}", f.display());
        }
        if let Some(f) = &a.export_chaining {
            write_json(f, &p.chaining)?;
            eprintln!("nfx plan: wrote the nfx chain input to {}", f.display());
        }
    }
    services(a.svc, true)
}

/// Writes `v` as pretty JSON to `f`.
fn write_json<T: serde::Serialize>(f: &Path, v: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(v)? + "\n";
    std::fs::write(f, text).with_context(|| format!("writing {}", f.display()))
}

/// The client and the services of `a`'s file (only `--service` if given).
fn chosen_services(a: &ServiceArgs) -> anyhow::Result<(Client, Vec<nfx_model::Service>)> {
    let cl = client(&a.conn)?;
    let file = a.file.as_deref().context("give a service file")?;
    let chosen: Vec<_> = load_services(file)?
        .into_iter()
        .filter(|s| a.service.as_deref().is_none_or(|id| s.id == id))
        .collect();
    if chosen.is_empty() {
        bail!("{}: no service matches", file.display());
    }
    Ok((cl, chosen))
}

fn services(a: ServiceArgs, dry: bool) -> anyhow::Result<()> {
    if a.optimize {
        return optimize(&a, dry);
    }
    let (cl, chosen) = chosen_services(&a)?;
    for s in chosen {
        let what = format!("service {}", s.id);
        if dry {
            let plan = cl.plan(&s).map_err(|e| refused(e, &what))?;
            show(&a.conn, &plan)?;
            continue;
        }
        let op = operation(&cl, cl.deploy(&s), &what, a.no_wait)?;
        show(&a.conn, &op)?;
    }
    Ok(())
}

/// `nfx plan --optimize` (dry run) and `nfx deploy --optimize` (carried out).
fn optimize(a: &ServiceArgs, dry: bool) -> anyhow::Result<()> {
    if !(a.time_limit.is_finite() && a.time_limit > 0.0 && a.time_limit <= 600.0) {
        bail!(
            "--time-limit: must be a number of seconds in (0, 600], got {}",
            a.time_limit
        );
    }
    let cl = client(&a.conn)?;
    if dry {
        let p = cl
            .optimize_plan(a.time_limit)
            .map_err(|e| refused(e, "optimize"))?;
        if a.conn.json.is_some() {
            return show(&a.conn, &p);
        }
        return print_text(&optimize_text(&p));
    }
    let cl = cl.with_timeout(Duration::from_secs(3600));
    let run = cl
        .optimize(a.time_limit)
        .map_err(|e| refused(e, "optimize"))?;
    if a.conn.json.is_some() {
        show(&a.conn, &run)?;
    } else {
        use std::fmt::Write as _;
        let mut out = optimize_text(&run.plan);
        for op in &run.operations {
            let _ = writeln!(
                out,
                "  {} migrate {} {}",
                op.id,
                op.target,
                op.state.as_str()
            );
        }
        print_text(&out)?;
    }
    match run.error {
        Some(e) => bail!("optimize stopped: {e}"),
        None => Ok(()),
    }
}

/// The optimize plan as text: costs, bound and gap, then the moves.
fn optimize_text(p: &OptimizePlan) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "cost now {}, optimal {} ({}; bound {}, gap {}), saves {}; {} movable, {} pinned; solved in {:.3} s\n",
        p.cost_now,
        p.cost_optimal,
        if p.proven_optimal { "proven optimal" } else { "not proven optimal" },
        p.bound,
        p.gap,
        p.saved,
        p.movable,
        p.pinned,
        p.seconds
    );
    let _ = writeln!(out, "migrations: {}", p.migrations.len());
    for m in &p.migrations {
        let hosts = if m.to_host == m.host {
            m.host.clone()
        } else {
            format!("{} -> {} (another host)", m.host, m.to_host)
        };
        let _ = writeln!(
            out,
            "  {:<28} {:<9} {} -> {}  on {hosts}",
            m.instance, m.function, m.from, m.to
        );
    }
    if !p.blocked.is_empty() {
        let _ = writeln!(
            out,
            "blocked (no order frees their target first): {}",
            p.blocked.len()
        );
        for m in &p.blocked {
            let _ = writeln!(out, "  {:<28} {} -> {}", m.instance, m.from, m.to);
        }
    }
    out
}

/// `nfx status --json` without a selection: everything the controller records.
#[derive(serde::Serialize)]
struct StatusDoc {
    services: Vec<ServiceRow>,
    instances: Vec<InstanceRow>,
    operations: Vec<Operation>,
    energy: EnergySummary,
}

fn status(a: StatusArgs) -> anyhow::Result<()> {
    let cl = client(&a.conn)?;
    let why = |e| refused(e, "status");
    if let Some(s) = &a.service {
        return show(&a.conn, &cl.service(s).map_err(why)?);
    }
    if let Some(i) = &a.instance {
        return show(&a.conn, &cl.instance(i).map_err(why)?);
    }
    if let Some(o) = &a.operation {
        return show(&a.conn, &cl.operation(o).map_err(why)?);
    }
    let doc = StatusDoc {
        services: cl.services().map_err(|e| refused(e, "services"))?,
        instances: cl.instances().map_err(|e| refused(e, "instances"))?,
        operations: cl.operations().map_err(|e| refused(e, "operations"))?,
        energy: cl.energy().map_err(|e| refused(e, "energy"))?,
    };
    if a.conn.json.is_some() {
        return show(&a.conn, &doc);
    }
    print_text(&status_text(&doc))
}

/// `nfx status` as text: services, instances, energy, operations.
fn status_text(doc: &StatusDoc) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("services:\n");
    for s in &doc.services {
        let _ = writeln!(
            out,
            "  {:<20} {:<11} op {}",
            s.service.id, s.status, s.operation
        );
    }
    out.push_str("instances:\n");
    for i in &doc.instances {
        let _ = writeln!(
            out,
            "  {:<28} {:<9} {:<12} {:<10} {}",
            i.spec.id,
            i.spec.function,
            i.spec.device,
            i.tier.as_str(),
            i.status
        );
    }
    super::status_energy::write_energy(&mut out, &doc.energy);
    out.push_str("operations:\n");
    for o in &doc.operations {
        let _ = writeln!(
            out,
            "  {:<8} {:<8} {:<20} {}{}",
            o.id,
            o.kind.as_str(),
            o.target,
            o.state.as_str(),
            o.reason
                .as_deref()
                .map(|r| format!("  {r}"))
                .unwrap_or_default()
        );
    }
    out
}

/// Writes `text` to stdout; a closed stdout (e.g. `| head -1`) is not an error.
fn print_text(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn migrate(a: MigrateArgs) -> anyhow::Result<()> {
    let cl = client(&a.conn)?;
    let what = format!("migrate {}", a.instance);
    let started = cl.migrate(&a.instance, a.device.as_deref());
    show(&a.conn, &operation(&cl, started, &what, a.no_wait)?)
}

fn destroy(a: DestroyArgs) -> anyhow::Result<()> {
    let cl = client(&a.conn)?;
    let what = format!("destroy {}", a.service);
    let started = cl.destroy(&a.service);
    show(&a.conn, &operation(&cl, started, &what, a.no_wait)?)
}

fn agent(a: AgentArgs) -> anyhow::Result<()> {
    if let Some(c) = &a.config {
        return nfx_control::server::run_host_agent(&HostAgentConfig::load(c)?);
    }
    let Some(token) = load_token(a.token_file.as_deref())? else {
        bail!("nfx agent: give --token-file or NFX_TOKEN (mutating agent calls need a token)");
    };
    let vnfm: Arc<dyn Vnfm> = match (&a.local_config, &a.infra) {
        (Some(p), _) => Arc::new(LocalVnfm::new(LocalConfig::load(p)?)?),
        (None, Some(p)) => Arc::new(SimVnfm::new(
            &nfx_model::Infrastructure::load(p)?,
            SimConfig {
                deploy_delay: Duration::from_millis(a.sim_deploy_ms),
                state_file: None,
            },
        )?),
        (None, None) => bail!("nfx agent: give --local-config or --infra"),
    };
    run_agent(vnfm, a.listen, token, a.ready_file.as_ref())
}
