//! `nfx chain`: answers a chaining workload (JSON) with one exact SLA-aware chain per SLA.

use anyhow::Context;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `nfx chain`.
#[derive(clap::Args)]
pub struct Args {
    /// Workload file: {"nodes", "transfer_latency_us", "instances", "slas"}.
    #[arg(long)]
    input: PathBuf,
    /// Print `{"answers": [...], "timing": {...}}` as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Reads the workload, answers every SLA, prints the answers and the timing.
pub fn run(args: Args) -> anyhow::Result<()> {
    let file = args.input.display().to_string();
    let w = nfx_chaining::Workload::load(&args.input)?;
    let report = nfx_chaining::answer_workload(&file, &w)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &report).context("writing the answers")?;
        writeln!(out)?;
        return Ok(());
    }
    for a in &report.answers {
        let lat = a
            .latency_us
            .map_or_else(|| "-".to_string(), |l| format!("{l:.3}"));
        writeln!(
            out,
            "{}\t{}\t{lat} µs\t{}",
            a.id,
            a.status.as_str(),
            a.explanation
        )?;
    }
    let t = report.timing;
    writeln!(
        out,
        "{} SLAs: mean {:.3} µs, p99 {:.3} µs, max {:.3} µs per SLA (DP only)",
        t.slas, t.mean_us, t.p99_us, t.max_us
    )?;
    Ok(())
}
