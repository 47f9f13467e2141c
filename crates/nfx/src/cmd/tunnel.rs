//! `nfx tunnel`: one ESP-in-UDP tunnel endpoint (see docs/tunnel.md).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of this subcommand.
#[derive(clap::Args)]
pub struct Args {
    /// Endpoint configuration (YAML).
    #[arg(long)]
    pub config: PathBuf,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long)]
    pub duration: Option<f64>,
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let cfg = nfx_tunnel::Config::load(&args.config)?;
    let duration = match args.duration {
        Some(d) if d.is_finite() && d > 0.0 => Some(Duration::from_secs_f64(d)),
        Some(d) => anyhow::bail!("--duration: {d} is not a positive number of seconds"),
        None => None,
    };
    let report = nfx_tunnel::run(cfg, duration, Arc::new(AtomicBool::new(false)))?;
    println!("{report}");
    Ok(())
}
