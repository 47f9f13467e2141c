//! `nfx bench chaining`: exact chaining DP against the function-only strawman and HYPER's
//! loop (marking instances / marking nodes), on a 20-instance and a 1,000-instance workload.

use anyhow::Context;
use nfx_chaining::bench::{run_case, Case, Method};
use nfx_chaining::generate::Shape;
use std::path::PathBuf;

/// Arguments of `nfx bench chaining`.
#[derive(clap::Args)]
pub struct Args {
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Instances of the small case.
    #[arg(long, default_value_t = 20)]
    instances: usize,
    /// Nodes of the small case.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// SLAs per case.
    #[arg(long, default_value_t = 10_000)]
    slas: usize,
    /// Workload seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Instances of the large case (0 skips it).
    #[arg(long, default_value_t = 1000)]
    large_instances: usize,
    /// Nodes of the large case.
    #[arg(long, default_value_t = 100)]
    large_nodes: usize,
}

fn row(name: &str, m: &Method) {
    let e = m.errors;
    println!(
        "  {name:<22} {:>8.3} {:>8.3} {:>8.3} {:>7.2} {:>9.2} {:>8.2} {:>8.2} {:>6.2}",
        m.batch_mean_us,
        m.timing.mean_us,
        m.timing.p99_us,
        e.wrong_pct,
        e.accepts_bad_pct,
        e.suboptimal_pct,
        e.wrong_status_pct,
        m.mean_rounds
    );
}

fn print(c: &Case) {
    println!(
        "{}: {} nodes, {} instances, {} SLAs (seed {}); exact answers: ok {:.1} %, \
         infeasible_latency {:.1} %, infeasible_resources {:.1} %",
        c.name,
        c.nodes,
        c.instances,
        c.slas,
        c.seed,
        c.mix.ok_pct,
        c.mix.infeasible_latency_pct,
        c.mix.infeasible_resources_pct
    );
    println!(
        "  {:<22} {:>8} {:>8} {:>8} {:>7} {:>9} {:>8} {:>8} {:>6}",
        "method",
        "mean µs",
        "timed µs",
        "p99 µs",
        "wrong%",
        "bad-ok%",
        "slower%",
        "status%",
        "rounds"
    );
    row("exact DP", &c.exact);
    row("strawman (function)", &c.strawman);
    row("HYPER mark instance", &c.hyper_mark_instance);
    row("HYPER mark node", &c.hyper_mark_node);
    println!(
        "  exact DP vs HYPER mark-instance loop: {:.2}x faster",
        c.hyper_mark_instance.batch_mean_us / c.exact.batch_mean_us.max(1e-9)
    );
}

/// Runs both cases, prints tables, optionally writes JSON.
pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.instances > 0, "--instances must be >= 1");
    anyhow::ensure!(args.nodes > 0, "--nodes must be >= 1");
    anyhow::ensure!(args.slas > 0, "--slas must be >= 1");
    anyhow::ensure!(args.large_nodes > 0, "--large-nodes must be >= 1");
    let small = Shape {
        nodes: args.nodes,
        instances: args.instances,
        slas: args.slas,
        ..Shape::small(args.slas)
    };
    let mut cases = vec![run_case("small", &small, args.seed)];
    print(&cases[0]);
    if args.large_instances > 0 {
        let large = Shape {
            nodes: args.large_nodes,
            instances: args.large_instances,
            ..Shape::large(args.slas)
        };
        cases.push(run_case("large", &large, args.seed));
        print(&cases[1]);
    }
    if let Some(path) = &args.json {
        let v = serde_json::json!({ "cases": cases });
        std::fs::write(path, serde_json::to_string_pretty(&v)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
