//! `nfx experiment hyper`: HYPER's Fig. 4 rerun on the namespace testbed — (a) the
//! firewall alone, (b) firewall → NAT → elephant, each in a software worker and on the
//! table tier (eBPF), and (c) the hybrid chain (firewall + NAT on the table tier →
//! elephant + DPI in a software worker) against the same four functions all in software.
//! Latency (sockperf TCP ping-pong) and 1-stream TCP throughput come from the dataplane
//! benchmark's own cases (`nfx_testbed::bench`); deploy time per tier and the table
//! tier's migration rate are measured in a scratch namespace. Writes `summary.json`,
//! `details.json`, `chart.png` and `report.md`.

mod measure;
pub(crate) mod report;

use anyhow::Context;
use nfx_testbed::bench::{self, BenchOpts, FloodOpts, Generator, SinkKind};
use nfx_testbed::runconfig::locate;
use nfx_testbed::Spec;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `nfx experiment hyper`.
#[derive(clap::Args)]
pub struct Args {
    /// Output directory (created).
    #[arg(long)]
    out: PathBuf,
    /// One short round of everything (for CI; under a minute on a quiet machine).
    #[arg(long)]
    quick: bool,
    /// Seconds per TCP and per latency measurement (default 5, 1 with --quick).
    #[arg(long)]
    duration: Option<u32>,
    /// Latency rounds, case order alternating (default 3, 1 with --quick).
    #[arg(long)]
    lat_repeat: Option<u32>,
    /// Connections installed in the table tier before the migration (default 50,000,
    /// 5,000 with --quick).
    #[arg(long)]
    flows: Option<usize>,
    /// Deploy measurements per tier; the median is reported (default 9, 3 with --quick).
    #[arg(long)]
    deploy_repeat: Option<usize>,
    /// DPI pattern file of the chains with DPI.
    #[arg(long, default_value = "configs/dpi/patterns.txt")]
    patterns: PathBuf,
    /// Namespace prefix of the testbed and the scratch namespace.
    #[arg(long, default_value = "nfx-hyper-")]
    prefix: String,
    /// Second octet of the testbed's 10.b.x.x addresses.
    #[arg(long, default_value_t = 194)]
    subnet_base: u8,
}

/// One case of the figure: the benchmark case, its tier and its panel of Fig. 4.
#[derive(Debug, Clone, Copy)]
pub struct Fig4Case {
    /// Case name in `nfx bench dataplane`.
    pub name: &'static str,
    /// `software`, `table`, `hybrid` or `kernel`.
    pub tier: &'static str,
    /// Panel of HYPER's Fig. 4 (`a`, `b`, `c`; `-` for the kernel reference).
    pub panel: &'static str,
}

/// The cases, in run order.
pub const CASES: [Fig4Case; 6] = [
    Fig4Case {
        name: "nfx-fw",
        tier: "software",
        panel: "a",
    },
    Fig4Case {
        name: "nfx-table-fw",
        tier: "table",
        panel: "a",
    },
    Fig4Case {
        name: "nfx-fw-nat-ele",
        tier: "software",
        panel: "b",
    },
    Fig4Case {
        name: "nfx-table-fw-nat-ele",
        tier: "table",
        panel: "b",
    },
    Fig4Case {
        name: "nfx-chain",
        tier: "software",
        panel: "c",
    },
    Fig4Case {
        name: "nfx-hybrid",
        tier: "hybrid",
        panel: "c",
    },
];

/// The reference case of a full run: plain kernel forwarding on the same testbed.
pub const KERNEL: Fig4Case = Fig4Case {
    name: "kernel-forward",
    tier: "kernel",
    panel: "-",
};

/// Runs the subcommand.
pub fn run(a: Args) -> anyhow::Result<()> {
    nfx_testbed::root::require_root()?;
    let secs = a.duration.unwrap_or(if a.quick { 1 } else { 5 });
    let lat_repeat = a.lat_repeat.unwrap_or(if a.quick { 1 } else { 3 });
    let flows = a.flows.unwrap_or(if a.quick { 5_000 } else { 50_000 });
    let repeat = a.deploy_repeat.unwrap_or(if a.quick { 3 } else { 9 });
    anyhow::ensure!((1..=600).contains(&secs), "--duration {secs}: 1..=600");
    anyhow::ensure!((1..=20).contains(&lat_repeat), "--lat-repeat: 1..=20");
    anyhow::ensure!((100..=1_000_000).contains(&flows), "--flows: 100..=1000000");
    anyhow::ensure!((1..=100).contains(&repeat), "--deploy-repeat: 1..=100");
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let started = Instant::now();
    let nfx = std::env::current_exe().context("locating the nfx binary")?;
    let mut cases: Vec<Fig4Case> = Vec::new();
    if !a.quick {
        cases.push(KERNEL);
    }
    cases.extend(CASES);
    let opts = BenchOpts {
        nfx_bin: nfx.clone(),
        spec: Spec {
            prefix: a.prefix.clone(),
            subnet_base: a.subnet_base,
        },
        secs,
        patterns: locate(&a.patterns)?,
        poll: "adaptive".into(),
        only: cases.iter().map(|c| c.name.to_string()).collect(),
        flood: FloodOpts {
            generator: Generator::parse("mmsg")?,
            sink: SinkKind::parse("ingress")?,
            secs,
            repeat: 1,
            isolate: true,
            batch: 64,
        },
        tcp_repeat: 1,
        lat_repeat,
        io: None,
        keep_edge_stack: false,
        tcp1_only: true,
    };
    nfx_testbed::stop::install();
    eprintln!("HYPER Fig. 4 cases ...");
    let bench = bench::run(&opts, &mut |line| eprintln!("{line}"))?;
    let work = nfx_testbed::tempfile::Builder::new()
        .prefix("hyper-")
        .tempdir()?;
    let scratch = super::bench_migration::ScratchNs::new(&format!("{}scratch", a.prefix))?;
    eprintln!("deploy time per tier ({repeat} each) ...");
    let deploy = measure::deploy(&nfx, work.path(), &scratch.0, repeat)?;
    eprintln!("migrating a table-tier firewall + NAT holding {flows} connections ...");
    let migration = measure::migration(&scratch.0, flows)?;
    drop(scratch);
    let inputs = report::Inputs {
        cases: &cases,
        bench: &bench,
        deploy: &deploy,
        migration: &migration,
        quick: a.quick,
        secs,
        lat_repeat,
        elapsed_s: started.elapsed().as_secs_f64(),
        loadavg: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_string(),
    };
    let summary = report::write(&a.out, &inputs)?;
    print!("{}", report::console(&summary, &inputs));
    println!("wrote {}", a.out.display());
    Ok(())
}
