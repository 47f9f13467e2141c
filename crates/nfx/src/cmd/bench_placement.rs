//! `nfx bench placement`: exact, FFD and online placement on the public bin-packing
//! sets (known optima in `optima.csv`), on generated HYPER-style instances and on the
//! generated instance families of `nfx_placement::families`.

use anyhow::Context;
use nfx_placement::bench::{
    family_instance, run_instance, summarize, summarize_family, BenchRow, FamilySummary, SetSummary,
};
use nfx_placement::families::Family;
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
    /// Public sets to run (folders of the data directory), comma-separated [default:
    /// hard28,falkenauer_u,falkenauer_t,scholl_1,scholl_2,scholl_3, none with --families].
    #[arg(long, value_delimiter = ',')]
    sets: Option<Vec<String>>,
    /// Generated instance families to run, comma-separated, or `all` (hyper, overlap,
    /// tight-latency, throughput, few-expensive, mixed).
    #[arg(long, value_delimiter = ',')]
    families: Option<Vec<String>>,
    /// Instances per family (sizes 30, 60, 120 in turn, seeds 0, 0, 0, 1, 1, 1, ...)
    /// [default: 9, 2 with --quick].
    #[arg(long)]
    per_family: Option<usize>,
    /// Time limit of the exact solver per instance, in seconds [default: 10, 1 with
    /// --quick].
    #[arg(long)]
    time_limit: Option<f64>,
    /// A short CI-sized run: 2 instances per family (30 and 60 VNF instances), 1 s
    /// each, unless --per-family or --time-limit say otherwise.
    #[arg(long)]
    quick: bool,
    /// Generated HYPER-style instances per size (30, 60 and 120 VNF instances)
    /// [default: 10, 0 with --families].
    #[arg(long)]
    generated: Option<usize>,
    /// Run at most this many instances of each public set (0 = all).
    #[arg(long, default_value_t = 0)]
    max_per_set: usize,
    /// Data directory (default: $NFX_BPP_DIR, else ../shared/data/bpp next to the repo).
    #[arg(long)]
    data: Option<PathBuf>,
}

/// Runs the benchmark.
pub fn run(args: Args) -> anyhow::Result<()> {
    let time_limit = args
        .time_limit
        .unwrap_or(if args.quick { 1.0 } else { 10.0 });
    if !(time_limit.is_finite() && time_limit > 0.0) {
        anyhow::bail!("--time-limit: must be a positive number of seconds, got {time_limit}");
    }
    let per_family = args.per_family.unwrap_or(if args.quick { 2 } else { 9 });
    let limit = Duration::from_secs_f64(time_limit);
    let families = match &args.families {
        Some(names) => parse_families(names)?,
        None => Vec::new(),
    };
    let with_families = args.families.is_some();
    let generated = args.generated.unwrap_or(if with_families { 0 } else { 10 });
    let mut all_rows: Vec<BenchRow> = Vec::new();
    let mut summaries: Vec<SetSummary> = Vec::new();
    let sets: Vec<String> = match &args.sets {
        Some(s) => s.iter().filter(|s| !s.is_empty()).cloned().collect(),
        None if with_families => Vec::new(),
        None => DEFAULT_SETS.iter().map(|s| s.to_string()).collect(),
    };
    let progress = Progress::bar("placement", 0);
    let extra = (3 * generated + families.len() * per_family) as u64;
    if !sets.is_empty() {
        let dir = match args.data.clone().or_else(bpp::data_dir) {
            Some(d) => d,
            None => anyhow::bail!("bin-packing data not found: set --data or NFX_BPP_DIR (expected ../shared/data/bpp)"),
        };
        let optima = bpp::read_optima(&dir)?;
        progress.set_len(planned(&optima, &sets, args.max_per_set) + extra);
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
        progress.set_len(extra);
    }
    for n in [30usize, 60, 120] {
        if generated == 0 {
            break;
        }
        let set = format!("hyper_n{n}");
        let mut rows = Vec::new();
        for seed in 0..generated as u64 {
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
    let mut family_summaries: Vec<FamilySummary> = Vec::new();
    for family in families {
        let mut rows = Vec::new();
        for i in 0..per_family {
            let inst = family_instance(family, i);
            progress.message(inst.name.clone());
            rows.push(
                run_instance(family.name(), &inst, None, limit)
                    .with_context(|| format!("instance {}", inst.name))?,
            );
            progress.inc();
        }
        let s = summarize_family(family.name(), &rows);
        report_family(&s);
        family_summaries.push(s);
        all_rows.extend(rows);
    }
    drop(progress);
    if let Some(out) = &args.json {
        out.write(&serde_json::json!({
            "time_limit_s": time_limit,
            "sets": summaries,
            "families": family_summaries,
            "rows": all_rows,
        }))?;
    }
    Ok(())
}

const DEFAULT_SETS: [&str; 6] = [
    "hard28",
    "falkenauer_u",
    "falkenauer_t",
    "scholl_1",
    "scholl_2",
    "scholl_3",
];

/// The families named on the command line (`all`: every family).
fn parse_families(names: &[String]) -> anyhow::Result<Vec<Family>> {
    let mut out = Vec::new();
    for name in names.iter().filter(|n| !n.is_empty()) {
        let chosen = match name.as_str() {
            "all" => Family::ALL.to_vec(),
            _ => Family::parse(name).into_iter().collect(),
        };
        match chosen.is_empty() {
            false => out.extend(
                chosen
                    .into_iter()
                    .filter(|f| !out.contains(f))
                    .collect::<Vec<_>>(),
            ),
            true => {
                let known: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
                anyhow::bail!(
                    "--families: unknown family `{name}` (all, {})",
                    known.join(", ")
                )
            }
        }
    }
    Ok(out)
}

/// Public instances the run will solve: the chosen sets, capped.
fn planned(optima: &[bpp::OptimumEntry], sets: &[String], cap: usize) -> u64 {
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
    public as u64
}

fn report_family(s: &FamilySummary) {
    crate::say!(
        "{:<14} proven {}/{}  within 1 % {}/{}  gap mean {:.2} % max {:.2} %  max {:.3} s  worse-than-ffd {}  vs ffd worst {:+.2} %",
        s.family,
        s.proven,
        s.instances,
        s.within_1pct,
        s.instances,
        s.mean_gap_pct,
        s.max_gap_pct,
        s.max_seconds,
        s.worse_than_ffd,
        s.vs_ffd_worst
    );
}

fn report(s: &SetSummary) {
    let known = s
        .reached_known_optimum
        .map(|k| format!(" known-opt {k}/{}", s.instances))
        .unwrap_or_default();
    crate::say!(
        "{:<14} proven {}/{}{known}  exact mean {:.3} s max {:.3} s  cost exact {} ffd {} (+{:.2} %) online {} (+{:.2} %, no placement on {})  gap mean {:.2} % max {:.2} %  worse-than-ffd {}",
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
        s.online_failed,
        s.exact_gap_mean_pct,
        s.exact_gap_max_pct,
        s.exact_worse_than_ffd
    );
}
