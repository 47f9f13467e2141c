//! `nfx table`: the table tier on one host without a controller.
//!
//! - `nfx table run --config FILE` deploys a chain of table-tier functions (firewall,
//!   NAT, elephant in eBPF), attaches it where the config says, writes events, sweeps
//!   expired flows every second, and on SIGINT/SIGTERM or `--duration` prints the final
//!   counters as JSON and detaches.
//! - `nfx table check --config FILE --capacity N` answers the plan-time question for
//!   each function of the chain: how many entries it takes, or why the tier refuses it.

use anyhow::Context;
use nfx_dataplane::signals::TerminationSignals;
use nfx_fastpath::table::runconfig::TableRunConfig;
use nfx_fastpath::table::{check, TableChain};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `nfx table`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Deploy and attach a table-tier chain until SIGINT/SIGTERM or --duration.
    Run(RunArgs),
    /// Check each function of a chain against a device's capacity in entries.
    Check(CheckArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Table-tier config (YAML): name, netns, placement, chain, events.
    #[arg(long)]
    config: PathBuf,
    /// Stop after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Write this file once the chain is attached (for scripts waiting on it).
    #[arg(long)]
    ready: Option<PathBuf>,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Table-tier config whose chain is checked.
    #[arg(long)]
    config: PathBuf,
    /// Free entries on the device.
    #[arg(long)]
    capacity: u64,
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::Run(a) => run_chain(&a),
        What::Check(a) => check_chain(&a),
    }
}

fn base_dir(config: &Path) -> PathBuf {
    config
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn check_chain(a: &CheckArgs) -> anyhow::Result<()> {
    let cfg = TableRunConfig::load(&a.config).map_err(|e| anyhow::anyhow!(e))?;
    let mut refused = 0;
    for (name, spec) in cfg.functions() {
        match check(&spec, a.capacity, base_dir(&a.config)) {
            Ok(need) => println!("{name}: fits, {} entries", need.entries),
            Err(e) => {
                refused += 1;
                println!("{name}: refused: {e}");
            }
        }
    }
    if refused > 0 {
        anyhow::bail!("{refused} function(s) cannot run on this table device");
    }
    Ok(())
}

fn run_chain(a: &RunArgs) -> anyhow::Result<()> {
    let signals = TerminationSignals::block().context("blocking SIGINT/SIGTERM")?;
    let cfg = TableRunConfig::load(&a.config).map_err(|e| anyhow::anyhow!(e))?;
    let deadline = match a.duration {
        Some(d) if d.is_finite() && d > 0.0 => Some(Instant::now() + Duration::from_secs_f64(d)),
        Some(d) => anyhow::bail!("--duration {d}: must be a positive number of seconds"),
        None => None,
    };
    if let Some(ns) = &cfg.netns {
        nfx_io::netns::enter_netns(ns)?;
    }
    let functions = cfg.functions();
    let mut chain = TableChain::deploy(&functions, base_dir(&a.config))
        .with_context(|| format!("{}: deploying", cfg.name))?;
    chain
        .attach(&cfg.placement().map_err(|e| anyhow::anyhow!(e))?)
        .with_context(|| format!("{}: attaching", cfg.name))?;
    let mut events = match &cfg.events {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };
    if let Some(r) = &a.ready {
        std::fs::write(r, "attached\n").with_context(|| format!("writing {}", r.display()))?;
    }
    let mut last_sweep = Instant::now();
    loop {
        if signals.wait(Duration::from_millis(100)).is_some() {
            break;
        }
        if let Some(w) = events.as_mut() {
            for e in chain.events() {
                writeln!(w, "{}", serde_json::to_string(&e)?)?;
            }
            w.flush()?;
        }
        if last_sweep.elapsed() >= Duration::from_secs(1) {
            chain.expire()?;
            last_sweep = Instant::now();
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    let stats = chain.stats()?;
    chain.detach();
    println!("{}", serde_json::to_string_pretty(&stats)?);
    Ok(())
}
