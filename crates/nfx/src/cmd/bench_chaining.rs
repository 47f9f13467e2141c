//! `nfx bench chaining`: exact chaining DP against the function-only strawman and HYPER's
//! loop (marking instances / marking nodes), on 20-instance and 1,000-instance workloads.

use nfx_chaining::bench::{run_case, Case, Method};
use nfx_chaining::generate::Shape;

use super::output::{JsonOut, Progress};
use crate::say;

/// Arguments of `nfx bench chaining`.
#[derive(clap::Args)]
pub struct Args {
    /// Also write the results as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
    /// Instances of the small case.
    #[arg(long, default_value_t = 20)]
    instances: usize,
    /// Nodes of the small case.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// SLAs per case.
    #[arg(long, default_value_t = 10_000)]
    slas: usize,
    /// Seed of the first topology.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Random topologies per case (seeds seed, seed+1, ...), each with --slas SLAs.
    #[arg(long, default_value_t = 1)]
    topologies: u64,
    /// Instances of the large case (0 skips it).
    #[arg(long, default_value_t = 1000)]
    large_instances: usize,
    /// Nodes of the large case.
    #[arg(long, default_value_t = 100)]
    large_nodes: usize,
}

fn row(name: &str, m: &Method) {
    let e = m.errors;
    say!(
        "  {name:<22} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>7.2} {:>8.2} {:>8.2} {:>8.2} {:>6.2}",
        m.batch_mean_us,
        m.batch_best_us,
        m.timing.mean_us,
        m.timing.p99_us,
        e.wrong_pct,
        e.accepts_bad_pct,
        e.suboptimal_pct,
        e.missed_chain_pct,
        m.mean_rounds
    );
}

fn print(c: &Case) {
    say!(
        "{} (seed {}): {} nodes, {} instances, {} SLAs; exact answers: ok {:.1} %, \
         infeasible_latency {:.1} %, infeasible_resources {:.1} %",
        c.name,
        c.seed,
        c.nodes,
        c.instances,
        c.slas,
        c.mix.ok_pct,
        c.mix.infeasible_latency_pct,
        c.mix.infeasible_resources_pct
    );
    say!(
        "  {:<22} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8} {:>8} {:>6}",
        "method",
        "cpu µs",
        "best µs",
        "wall µs",
        "p99 µs",
        "wrong%",
        "bad-ok%",
        "slower%",
        "missed%",
        "rounds"
    );
    row("exact DP", &c.exact);
    row("strawman (function)", &c.strawman);
    row("HYPER mark instance", &c.hyper_mark_instance);
    row("HYPER mark node", &c.hyper_mark_node);
}

fn summary(name: &str, cases: &[&Case]) {
    if cases.len() < 2 {
        return;
    }
    let mean =
        |f: &dyn Fn(&Case) -> f64| cases.iter().map(|c| f(c)).sum::<f64>() / cases.len() as f64;
    let max = |f: &dyn Fn(&Case) -> f64| cases.iter().map(|c| f(c)).fold(0.0, f64::max);
    say!(
        "{name} over {} topologies: exact DP {:.3} µs mean (worst topology {:.3}); wrong answers: \
         strawman {:.2} %, HYPER mark-node {:.2} % (worst {:.2} %), HYPER mark-instance {:.2} %",
        cases.len(),
        mean(&|c| c.exact.batch_mean_us),
        max(&|c| c.exact.batch_mean_us),
        mean(&|c| c.strawman.errors.wrong_pct),
        mean(&|c| c.hyper_mark_node.errors.wrong_pct),
        max(&|c| c.hyper_mark_node.errors.wrong_pct),
        mean(&|c| c.hyper_mark_instance.errors.wrong_pct),
    );
}

/// Runs both cases, prints tables, optionally writes JSON.
pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.instances > 0, "--instances must be >= 1");
    anyhow::ensure!(args.nodes > 0, "--nodes must be >= 1");
    anyhow::ensure!(args.slas > 0, "--slas must be >= 1");
    anyhow::ensure!(args.topologies > 0, "--topologies must be >= 1");
    anyhow::ensure!(args.large_nodes > 0, "--large-nodes must be >= 1");
    let small = Shape {
        nodes: args.nodes,
        instances: args.instances,
        ..Shape::small(args.slas)
    };
    let large = Shape {
        nodes: args.large_nodes,
        instances: args.large_instances,
        ..Shape::large(args.slas)
    };
    let mut shapes = vec![("small", small)];
    if args.large_instances > 0 {
        shapes.push(("large", large));
    }
    let mut cases = Vec::new();
    let progress = Progress::bar("chaining", shapes.len() as u64 * args.topologies);
    for (name, shape) in &shapes {
        for seed in args.seed..args.seed + args.topologies {
            progress.message(format!("{name} seed {seed}"));
            let c = run_case(name, shape, seed);
            progress.inc();
            print(&c);
            cases.push(c);
        }
        let mine: Vec<&Case> = cases.iter().filter(|c| c.name == *name).collect();
        summary(name, &mine);
    }
    say!(
        "cpu µs = mean per SLA in thread CPU time over a whole pass (median of 5 passes), \
         best µs = best pass; wall µs and p99 µs = each SLA timed alone (wall clock)"
    );
    drop(progress);
    if let Some(out) = &args.json {
        out.write(&serde_json::json!({ "cases": cases }))?;
    }
    Ok(())
}
