//! `nfx chain`: answers a chaining workload (JSON) with one exact SLA-aware chain per SLA.

use anyhow::Context;
use std::io::Write;
use std::path::PathBuf;

use super::output::JsonOut;

/// Arguments of `nfx chain`.
#[derive(clap::Args)]
pub struct Args {
    /// Workload file: {"nodes", "transfer_latency_us", "instances", "slas"}.
    #[arg(long)]
    input: PathBuf,
    /// Write `{"answers": [...], "timing": {...}}` as JSON to FILE instead of the table
    /// (`-` or no FILE: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
}

/// Reads the workload, answers every SLA, prints the answers and the timing.
pub fn run(args: Args) -> anyhow::Result<()> {
    let file = args.input.display().to_string();
    let w = nfx_chaining::Workload::load(&args.input)?;
    let report = nfx_chaining::answer_workload(&file, &w)?;
    if let Some(json) = &args.json {
        return json.write(&report).context("writing the answers");
    }
    let mut out = std::io::stdout().lock();
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
