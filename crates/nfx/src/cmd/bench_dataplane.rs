//! `nfx bench dataplane`: kernel forwarding, kernel nftables, nfx forward-only and the
//! nfx chain (vector and scalar) measured in one run on one testbed; prints a table of
//! ratios to the kernel baselines and optionally writes the JSON.

use anyhow::Context;
use nfx_testbed::bench::{self, BenchOpts, FloodOpts, Generator, SinkKind};
use nfx_testbed::Spec;
use std::path::PathBuf;

use super::output::{JsonOut, Progress};
use crate::{note, say};

/// Arguments of `nfx bench dataplane`.
#[derive(clap::Args)]
pub struct Args {
    /// Write the results as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
    /// Seconds per measurement (each case runs TCP×1, TCP×4, UDP 64 B and latency).
    #[arg(long, default_value_t = 5)]
    duration: u32,
    /// Poll mode of the nfx cases: busy, interrupt or adaptive.
    #[arg(long, default_value = "adaptive")]
    poll: String,
    /// Run only these cases (comma-separated; default all but `nfx-chain-2w`, the chain
    /// on two workers, and `nfx-fw-nat`, firewall + NAT without the fast path).
    /// `nfx-table-fw-nat`: firewall + NAT on the table tier (eBPF) alone; `nfx-hybrid`:
    /// firewall + NAT on the table tier, elephant + DPI in a software worker.
    /// `nfx-fw`, `nfx-table-fw`, `nfx-fw-nat-ele`, `nfx-table-fw-nat-ele`: HYPER Fig. 4's
    /// single firewall and firewall → NAT → elephant, in software and on the table tier.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// DPI pattern file of the chain.
    #[arg(long, default_value = "configs/dpi/patterns.txt")]
    patterns: PathBuf,
    /// Testbed namespace prefix.
    #[arg(long, default_value = "nfx-bench-")]
    prefix: String,
    /// The b of the testbed's 10.b.x.x subnets.
    #[arg(long, default_value_t = 198)]
    subnet_base: u8,
    /// 64-byte UDP runs per case; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// TCP runs (1 and 4 streams) per case; the median is reported.
    #[arg(long, default_value_t = 1)]
    tcp_repeat: u32,
    /// Latency rounds: each round sets every case up afresh and runs a sockperf
    /// ping-pong through it, the case order reversed every other round; medians of
    /// p50/p99 and of the per-round differences to kernel-forward are reported.
    #[arg(long, default_value_t = 3)]
    lat_repeat: u32,
    /// 64-byte generator in src: `mmsg` (AF_PACKET sendmmsg), `ring` (AF_PACKET TX
    /// ring) or `udp` (sendmmsg on UDP sockets, through src's IP stack).
    #[arg(long, default_value = "mmsg")]
    generator: String,
    /// Frames per system call of the AF_PACKET generators (sendmmsg batch or TX-ring
    /// flush), 1..=256.
    #[arg(long, default_value_t = 64)]
    gen_batch: usize,
    /// Where the 64-byte flood is counted: `ingress` (an nftables netdev ingress rule on
    /// cloud's `to-edge` counts and drops it before cloud's IP stack: the cheapest, since
    /// veth runs cloud's receive inside the sender's transmit), `next-hop` (cloud,
    /// forwarding off for the run, counts the route misses), `counter` (dst's kernel
    /// counters, port unbound) or `socket` (a recvmmsg thread in dst).
    #[arg(long, default_value = "ingress")]
    sink: String,
    /// Do not pin the generator and nfx to separate CPUs during the 64-byte runs.
    #[arg(long)]
    no_isolate: bool,
    /// Port I/O of the nfx cases: `ring` (PACKET_MMAP receive ring of GSO slots, frames
    /// sent in place with sendmmsg), `ring-copy` (2 KiB-slot ring copied out), `mmsg`
    /// (recvmmsg/sendmmsg) or `rings` (receive and transmit rings); default: the run
    /// config's default.
    #[arg(long)]
    io: Option<String>,
    /// Let edge's own IP stack see every frame the nfx cases forward (`nfx run
    /// --kernel-stack keep`): by default nfx keeps it off its ports, as a dataplane that
    /// owns its NIC would be (docs/dataplane.md, "Kernel stack").
    #[arg(long)]
    keep_edge_stack: bool,
}

/// Runs the benchmark.
pub fn run(args: Args) -> anyhow::Result<()> {
    nfx_testbed::root::require_root()?;
    if args.duration == 0 || args.duration > 600 {
        anyhow::bail!("--duration must be 1..=600 seconds");
    }
    if [args.repeat, args.tcp_repeat, args.lat_repeat]
        .iter()
        .any(|r| !(1..=20).contains(r))
    {
        anyhow::bail!("--repeat, --tcp-repeat and --lat-repeat must be 1..=20");
    }
    let flood = FloodOpts {
        generator: Generator::parse(&args.generator)?,
        sink: SinkKind::parse(&args.sink)?,
        secs: args.duration,
        repeat: args.repeat,
        isolate: !args.no_isolate,
        batch: args.gen_batch,
    };
    if !(1..=nfx_testbed::pktgen::MAX_BATCH).contains(&args.gen_batch) {
        anyhow::bail!("--gen-batch must be 1..={}", nfx_testbed::pktgen::MAX_BATCH);
    }
    if let Some(io) = &args.io {
        io.parse::<nfx_dataplane::config::IoMode>()
            .map_err(|e| anyhow::anyhow!("--io: {e}"))?;
    }
    for c in &args.cases {
        if !bench::CASES.contains(&c.as_str()) {
            anyhow::bail!("unknown case {c:?}; cases are {}", bench::CASES.join(", "));
        }
    }
    let data = nfx_testbed::tempfile::tempdir()?;
    let opts = BenchOpts {
        nfx_bin: std::env::current_exe().context("locating the nfx binary")?,
        spec: Spec {
            prefix: args.prefix,
            subnet_base: args.subnet_base,
        },
        secs: args.duration,
        patterns: super::data::resolve(&args.patterns, data.path())?,
        poll: args.poll,
        only: args.cases,
        flood,
        tcp_repeat: args.tcp_repeat,
        lat_repeat: args.lat_repeat,
        io: args.io,
        keep_edge_stack: args.keep_edge_stack,
        tcp1_only: false,
    };
    nfx_testbed::stop::install();
    let progress = Progress::spinner("dataplane");
    let rep = bench::run(&opts, &mut |line| {
        note!("{line}");
        progress.message(line);
    })?;
    drop(progress);
    say!("{}", bench::table(&rep).trim_end());
    if let Some(out) = &args.json {
        out.write(&rep)?;
    }
    Ok(())
}
