//! `nfx run --config FILE`: runs a VNF chain between two interfaces (optionally inside a
//! network namespace) until SIGINT/SIGTERM, a `shutdown` request or `--duration`, then
//! prints the final stats JSON on stdout. Counters are readable meanwhile through the
//! control socket (`nfx stats`).

use anyhow::Context;
use nfx_dataplane::signals::TerminationSignals;
use nfx_dataplane::{vnf_builder, ControlServer, Dataplane};
use nfx_io::PollMode;
use nfx_metrics::http as metrics_http;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `nfx run`.
#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (YAML): name, netns, ports, vector, poll, events, chain.
    #[arg(long)]
    config: PathBuf,
    /// Scalar mode: vectors of one packet, one packet per syscall (overrides `vector`).
    #[arg(long)]
    scalar: bool,
    /// Poll mode, overriding the config: busy, interrupt or adaptive.
    #[arg(long)]
    poll: Option<PollMode>,
    /// Receive and send path of the ports, overriding the config: ring, mmsg, rings or
    /// ring-copy.
    #[arg(long)]
    io: Option<String>,
    /// Whether the kernel of the ports' namespace sees their frames, overriding the config
    /// (`kernel_stack`): isolate, keep or external (the ports' owner installed the drop).
    #[arg(long)]
    kernel_stack: Option<String>,
    /// Worker threads, overriding the config (`workers`).
    #[arg(long)]
    workers: Option<usize>,
    /// Run the table tier (kernel fast path) with a flow table of this many entries,
    /// overriding the config (`fast_path.capacity`).
    #[arg(long, value_name = "CAPACITY")]
    fast_path: Option<u32>,
    /// Stop after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Serve the counters in the Prometheus text format on http://ADDR/metrics (bound in
    /// the namespace nfx run starts in, before it opens the ports).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Require `Authorization: Bearer <token>` on `/metrics`, the token read from this
    /// file (as the controller's `--token-file`; give Prometheus the same file).
    #[arg(long, value_name = "FILE", requires = "metrics_listen")]
    metrics_token_file: Option<std::path::PathBuf>,
}

/// Runs the dataplane and prints its final stats.
pub fn run(args: Args) -> anyhow::Result<()> {
    let signals = TerminationSignals::block().context("blocking SIGINT/SIGTERM")?;
    let mut cfg = nfx_dataplane::config::load(&args.config)?;
    if args.scalar {
        cfg.vector = 1;
    }
    if let Some(p) = args.poll {
        cfg.poll = p;
    }
    if let Some(io) = &args.io {
        cfg.io = io.parse().map_err(|e| anyhow::anyhow!("--io: {e}"))?;
    }
    if let Some(k) = &args.kernel_stack {
        cfg.kernel_stack = match k.as_str() {
            "isolate" => nfx_dataplane::config::KernelStack::Isolate,
            "keep" => nfx_dataplane::config::KernelStack::Keep,
            "external" => nfx_dataplane::config::KernelStack::External,
            other => {
                anyhow::bail!("--kernel-stack {other:?}: expected isolate, keep or external")
            }
        };
    }
    if let Some(w) = args.workers {
        cfg.workers = w;
    }
    if let Some(capacity) = args.fast_path {
        cfg.fast_path = Some(nfx_dataplane::config::FastPathConfig { capacity });
    }
    if args.workers.is_some() || args.fast_path.is_some() {
        let file = cfg.source.clone();
        nfx_dataplane::config::validate(&cfg, &file)?;
    }
    let deadline = match args.duration {
        Some(d) if d.is_finite() && d > 0.0 => Some(Instant::now() + Duration::from_secs_f64(d)),
        Some(d) => anyhow::bail!("--duration {d}: must be a positive number of seconds"),
        None => None,
    };
    let metrics = args.metrics_listen.map(metrics_http::bind).transpose()?;
    let metrics_token = metrics_http::token_file(args.metrics_token_file.as_deref())?;
    let dp = Dataplane::start(&cfg, vnf_builder(cfg.file_scope()))?;
    let server = ControlServer::start(&cfg.socket_path(), dp.controller(), cfg.control_gid()?)?;
    if let Some(listener) = metrics {
        let ctl = dp.controller();
        let render =
            move || -> anyhow::Result<String> { Ok(nfx_dataplane::metrics::render(&ctl.stats()?)) };
        let addr = metrics_http::serve(listener, std::sync::Arc::new(render), metrics_token)?;
        eprintln!("nfx run: metrics on http://{addr}/metrics");
    }
    // A supervisor that gave this process a `$NOTIFY_SOCKET` (the host agent, systemd's
    // `Type=notify`) learns here, without probing, that the ports are open and the
    // control socket answers. A notify socket that has gone (a variable inherited from
    // an ended supervisor) does not stop the dataplane.
    if let Err(e) = nfx_io::notify::ready() {
        eprintln!("nfx run: telling the supervisor we are ready ($NOTIFY_SOCKET): {e}");
    }
    eprintln!(
        "nfx run: `{}` forwarding {} <-> {} ({} mode, {} poll, {} worker(s){}); control socket {}",
        cfg.name,
        cfg.ports.inside.iface,
        cfg.ports.outside.iface,
        if cfg.scalar() { "scalar" } else { "vector" },
        cfg.poll.as_str(),
        cfg.workers,
        match cfg.fast_path {
            Some(f) => format!(", fast path of {} flows", f.capacity),
            None => String::new(),
        },
        server.path().display()
    );
    loop {
        if dp.finished() {
            break;
        }
        let mut step = Duration::from_millis(100);
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            step = step.min(left);
        }
        if signals.wait(step).is_some() {
            break;
        }
    }
    drop(server);
    let stats = dp.stop()?;
    println!("{}", serde_json::to_string_pretty(&stats)?);
    Ok(())
}
