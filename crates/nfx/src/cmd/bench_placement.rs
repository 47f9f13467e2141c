//! `nfx bench placement`: exact, FFD and online placement on the public bin-packing
//! sets (known optima in `optima.csv`) and on generated HYPER-style instances.

use anyhow::Context;
use nfx_placement::bench::{run_instance, summarize, BenchRow, SetSummary};
use nfx_placement::{bpp, generator};
use std::path::PathBuf;
use std::time::Duration;

use super::output::{JsonOut, Progress};

/// Arguments of `nfx bench placement`.
#[derive(clap::Args)]
pub struct Args {
    /// Write per-set summaries and per-instance rows as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
    /// Public sets to run (folders of the data directory), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "hard28,falkenauer_u,falkenauer_t,scholl_1,scholl_2,scholl_3"
    )]
    sets: Vec<String>,
    /// Time limit of the exact solver per instance, in seconds.
    #[arg(long, default_value_t = 10.0)]
    time_limit: f64,
    /// Generated HYPER-style instances per size (30, 60 and 120 VNF instances).
    #[arg(long, default_value_t = 10)]
    generated: usize,
    /// Run at most this many instances of each public set (0 = all).
    #[arg(long, default_value_t = 0)]
    max_per_set: usize,
    /// Data directory (default: $NFX_BPP_DIR, else ../shared/data/bpp next to the repo).
    #[arg(long)]
    data: Option<PathBuf>,
}

/// Runs the benchmark.
pub fn run(args: Args) -> anyhow::Result<()> {
    if !(args.time_limit.is_finite() && args.time_limit > 0.0) {
        anyhow::bail!(
            "--time-limit: must be a positive number of seconds, got {}",
            args.time_limit
        );
    }
    let limit = Duration::from_secs_f64(args.time_limit);
    let mut all_rows: Vec<BenchRow> = Vec::new();
    let mut summaries: Vec<SetSummary> = Vec::new();
    let sets: Vec<String> = args
        .sets
        .iter()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect();
    let progress = Progress::bar("placement", 0);
    if !sets.is_empty() {
        let dir = match args.data.clone().or_else(bpp::data_dir) {
            Some(d) => d,
            None => anyhow::bail!("bin-packing data not found: set --data or NFX_BPP_DIR (expected ../shared/data/bpp)"),
        };
        let optima = bpp::read_optima(&dir)?;
        progress.set_len(planned(&optima, &sets, args.max_per_set, args.generated));
        for set in &sets {
            let mut entries: Vec<_> = optima.iter().filter(|e| &e.set == set).collect();
            if entries.is_empty() {
                anyhow::bail!(
                    "--sets: no instances of set `{set}` in {}",
                    dir.join("optima.csv").display()
                );
            }
            if args.max_per_set > 0 {
                entries.truncate(args.max_per_set);
            }
            let mut rows = Vec::new();
            for e in entries {
                progress.message(e.name.clone());
                let b = bpp::read_bpp(&e.file)?;
                let row = run_instance(set, &b.to_instance(), Some(e.optimum), limit)
                    .with_context(|| format!("instance {}", e.name))?;
                rows.push(row);
                progress.inc();
            }
            report(&summarize(set, &rows));
            summaries.push(summarize(set, &rows));
            all_rows.extend(rows);
        }
    }
    if sets.is_empty() {
        progress.set_len(3 * args.generated as u64);
    }
    for n in [30usize, 60, 120] {
        if args.generated == 0 {
            break;
        }
        let set = format!("hyper_n{n}");
        let mut rows = Vec::new();
        for seed in 0..args.generated as u64 {
            let inst = generator::generate(n, seed);
            progress.message(inst.name.clone());
            rows.push(
                run_instance(&set, &inst, None, limit)
                    .with_context(|| format!("instance {}", inst.name))?,
            );
            progress.inc();
        }
        report(&summarize(&set, &rows));
        summaries.push(summarize(&set, &rows));
        all_rows.extend(rows);
    }
    drop(progress);
    if let Some(out) = &args.json {
        out.write(&serde_json::json!({
            "time_limit_s": args.time_limit,
            "sets": summaries,
            "rows": all_rows,
        }))?;
    }
    Ok(())
}

/// Instances the run will solve: the chosen public sets (capped) and the generated ones.
fn planned(optima: &[bpp::OptimumEntry], sets: &[String], cap: usize, generated: usize) -> u64 {
    let public: usize = sets
        .iter()
        .map(|s| {
            let n = optima.iter().filter(|e| &e.set == s).count();
            if cap > 0 {
                n.min(cap)
            } else {
                n
            }
        })
        .sum();
    (public + 3 * generated) as u64
}

fn report(s: &SetSummary) {
    let known = s
        .reached_known_optimum
        .map(|k| format!(" known-opt {k}/{}", s.instances))
        .unwrap_or_default();
    crate::say!(
        "{:<14} proven {}/{}{known}  exact mean {:.3} s max {:.3} s  cost exact {} ffd {} (+{:.2} %) online {} (+{:.2} %)  gap mean {:.2} % max {:.2} %  worse-than-ffd {}",
        s.set,
        s.proven_optimal,
        s.instances,
        s.exact_mean_seconds,
        s.exact_max_seconds,
        s.exact_total,
        s.ffd_total,
        s.ffd_over_exact_pct,
        s.online_total,
        s.online_over_exact_pct,
        s.exact_gap_mean_pct,
        s.exact_gap_max_pct,
        s.exact_worse_than_ffd
    );
}
