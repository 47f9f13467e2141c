//! `nfx place`: solves one offline placement instance (JSON, or a BPPLIB text file
//! with `--bpp`) with the exact solver, HYPER's enhanced FFD or the online best fit.

use anyhow::Context;
use nfx_placement::{bpp, place, Algorithm, Instance};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `nfx place`.
#[derive(clap::Args)]
pub struct Args {
    /// Placement instance (JSON schema of `docs/placement.md`).
    #[arg(long)]
    input: PathBuf,
    /// Algorithm: exact, ffd or online.
    #[arg(long, default_value = "exact")]
    algorithm: Algorithm,
    /// Time limit of the exact solver, in seconds.
    #[arg(long, default_value_t = 10.0)]
    time_limit: f64,
    /// Read `--input` as a BPPLIB text file (n, C, weights) instead of JSON.
    #[arg(long)]
    bpp: bool,
    /// Write the answer as one JSON object to FILE (`-` or no FILE: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<super::output::JsonOut>,
}

/// Runs `nfx place`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if !(args.time_limit.is_finite() && args.time_limit > 0.0) {
        anyhow::bail!(
            "--time-limit: must be a positive number of seconds, got {}",
            args.time_limit
        );
    }
    let inst = if args.bpp {
        bpp::read_bpp(&args.input)?.to_instance()
    } else {
        Instance::load(&args.input)?
    };
    let p = place(
        &inst,
        args.algorithm,
        Duration::from_secs_f64(args.time_limit),
    )
    .with_context(|| format!("placing {}", args.input.display()))?;
    if let Some(json) = &args.json {
        json.write(&p)?;
    } else {
        println!(
            "objective {} ({}; bound {}) in {:.3} s",
            p.objective,
            if p.proven_optimal {
                "proven optimal"
            } else {
                "not proven optimal"
            },
            p.bound,
            p.seconds
        );
        for (vnf, dev) in &p.assignment {
            println!("  {vnf} -> {dev}");
        }
    }
    Ok(())
}
