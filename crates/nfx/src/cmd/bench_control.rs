//! `nfx bench control`: the control plane at scale — N simulated hosts, 6-function services
//! chained and placed one after the other by the mediator (chaining network first capped at
//! the nearest candidate hosts, widened when that answer is not certified), against the unrestricted chaining network in the same run,
//! with the two planners' answers compared service by service. With `--real`, the control
//! plane on a 3-host testbed run by agents instead (`bench_control_real`).

use nfx_control::scale::{run_with_progress, PlannerTimes, ScaleOptions, ScaleReport};

use super::output::{JsonOut, Progress};
use crate::say;

/// Arguments of `nfx bench control`.
#[derive(clap::Args)]
pub struct Args {
    /// Simulated hosts (software device on each, table device on every 5th, accelerator
    /// on every 10th; ring with chords).
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Services deployed one after the other.
    #[arg(long, default_value_t = 50)]
    services: usize,
    /// Mixed services (near and far endpoints, bounds 90–600 µs) instead of the issue's
    /// far endpoints with 600 / 200 µs bounds.
    #[arg(long)]
    mixed: bool,
    /// Skip the unrestricted baseline (no ratio, no answer comparison).
    #[arg(long)]
    no_baseline: bool,
    /// Also write the results as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
    /// Measure the real control plane on a 3-host testbed run by agents (root).
    #[arg(long)]
    real: bool,
    /// Namespace prefix of the --real testbed.
    #[arg(long, default_value = "nfxbc-")]
    prefix: String,
    /// Subnet base of the --real testbed.
    #[arg(long, default_value_t = 235)]
    subnet_base: u8,
    /// sockperf seconds per steering sample (--real).
    #[arg(long, default_value_t = 3)]
    sockperf_secs: u32,
}

fn row(name: &str, t: &PlannerTimes) {
    let w = &t.wall_ms;
    say!(
        "  {name:<34} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        w.mean,
        w.p50,
        w.p99,
        w.max,
        t.cpu_ms_mean
    );
}

fn print(r: &ScaleReport) {
    say!(
        "{} hosts, {} devices, {} {} services of 6 functions; chaining network first capped at {} hosts, widened for {} services whose capped answer was not certified",
        r.hosts,
        r.devices,
        r.services,
        if r.mixed { "mixed" } else { "far" },
        r.max_chain_nodes,
        r.widened
    );
    say!(
        "setup: infrastructure {:.1} ms, mediator (host latencies, resource model) {:.1} ms",
        r.build_infra_ms,
        r.mediator_setup_ms
    );
    say!(
        "answers: {} deployed, {} refused with an explanation; placements by tier: {}",
        r.feasible,
        r.infeasible,
        r.placements_by_tier
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    say!(
        "  {:<34} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "per service (ms)",
        "mean",
        "p50",
        "p99",
        "max",
        "cpu mean"
    );
    row("place + chain (plan + commit)", &r.place_and_chain);
    row("  plan", &r.plan);
    row("  commit (deployed services)", &r.commit);
    if let Some(b) = &r.unrestricted_plan {
        row("baseline: plan, unrestricted", b);
    }
    if let (Some(w), Some(c), Some(a)) = (r.speedup_wall, r.speedup_cpu, r.agreement) {
        say!(
            "unrestricted baseline / plan time: {w:.1}x (wall), {c:.1}x (cpu); answers: \
             {} same, {} better unrestricted, {} better capped",
            a.same,
            a.unrestricted_better,
            a.capped_better
        );
    }
}

/// Runs the measurement, prints the table, optionally writes JSON.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.real {
        let r = super::bench_control_real::run(&super::bench_control_real::RealOptions {
            prefix: args.prefix,
            subnet_base: args.subnet_base,
            sockperf_secs: args.sockperf_secs.clamp(1, 60),
        })?;
        super::bench_control_real::print(&r);
        if let Some(out) = &args.json {
            out.write(&r)?;
        }
        return Ok(());
    }
    let progress = Progress::bar("control: services", args.services as u64);
    let r = run_with_progress(
        &ScaleOptions {
            hosts: args.hosts,
            services: args.services,
            mixed: args.mixed,
            baseline: !args.no_baseline,
        },
        &mut |n| progress.set(n as u64),
    )?;
    drop(progress);
    print(&r);
    if let Some(out) = &args.json {
        out.write(&r)?;
    }
    Ok(())
}
