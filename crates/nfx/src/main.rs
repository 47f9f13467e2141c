//! `nfx`: the one binary of the nfx NFV platform.
//!
//! Every subcommand lives in its own module under `cmd/`, which owns its arguments.

mod cmd;
mod logging;

use clap::{CommandFactory, Parser, Subcommand};

/// nfx — a hybrid hardware/software NFV platform.
#[derive(Parser)]
#[command(name = "nfx", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the testbed, run the firewall → NAT → elephant → DPI chain on real traffic, report, tear down.
    Demo(cmd::demo::Args),
    /// Create, remove or inspect the namespace testbed (src — edge — cloud — dst).
    Testbed(cmd::testbed::Args),
    /// Run a chain of VNFs between two interfaces (inside a namespace).
    Run(cmd::run::Args),
    /// Read the counters of a running dataplane.
    Stats(cmd::stats::Args),
    /// Run or check a chain of table-tier VNFs (eBPF firewall, NAT, elephant).
    Table(cmd::table::Args),
    /// Benchmarks that print ratios against baselines measured in the same run.
    Bench(cmd::bench::Args),
    /// Crypto accelerator device process and tools.
    Accel(cmd::accel::Args),
    /// Solve an offline placement instance (JSON) and print the result.
    Place(cmd::place::Args),
    /// Answer a chaining workload (JSON): one SLA-aware chain per SLA.
    Chain(cmd::chain::Args),
    /// Run one ESP-in-UDP tunnel endpoint with its element manager.
    Tunnel(cmd::tunnel::Args),
    /// Run the transcoding VNF (ffmpeg: MPEG-TS over UDP in, lower bitrate out).
    Transcode(cmd::transcode::Args),
    /// Run the service-specific manager that grants lookaside queue pairs.
    Ssm(cmd::ssm::Args),
    /// Rerun an experiment of the papers and write its report.
    Experiment(cmd::experiment::Args),
    /// Run (or collect with --from) every paper's experiment into one self-contained
    /// index.html and claims.json.
    Report(cmd::report::Args),
    /// Controller and host-agent commands (up, plan, deploy, status, migrate, destroy, agent).
    #[command(flatten)]
    Ctl(cmd::ctl::CtlCmd),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::shell::CompletionsArgs),
    /// Print the nfx(1) man page (roff).
    Man,
}

/// Keeps every allocation of 256 KiB or more on its own fresh `mmap` pages. glibc
/// otherwise raises its mmap threshold after the first large block is freed, and later
/// flow tables come from reused heap memory that `calloc` must clear byte by byte —
/// a redeploy of a 262,144-flow firewall then costs a 10 MB memset instead of nothing
/// (the tables rely on zero pages: `nfx_vnf` table `zeroed_entries`).
fn fix_mmap_threshold() {
    // SAFETY: mallopt only changes a glibc tuning parameter; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

fn main() {
    fix_mmap_threshold();
    logging::init();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Demo(a) => cmd::demo::run(a),
        Cmd::Testbed(a) => cmd::testbed::run(a),
        Cmd::Run(a) => cmd::run::run(a),
        Cmd::Stats(a) => cmd::stats::run(a),
        Cmd::Table(a) => cmd::table::run(a),
        Cmd::Bench(a) => cmd::bench::run(a),
        Cmd::Accel(a) => cmd::accel::run(a),
        Cmd::Place(a) => cmd::place::run(a),
        Cmd::Chain(a) => cmd::chain::run(a),
        Cmd::Tunnel(a) => cmd::tunnel::run(a),
        Cmd::Transcode(a) => cmd::transcode::run(a),
        Cmd::Ssm(a) => cmd::ssm::run(a),
        Cmd::Experiment(a) => cmd::experiment::run(a),
        Cmd::Report(a) => cmd::report::run(a),
        Cmd::Ctl(c) => cmd::ctl::run(c),
        Cmd::Completions(a) => cmd::shell::completions(a, Cli::command()),
        Cmd::Man => cmd::shell::man(Cli::command()),
    };
    if let Err(e) = res {
        eprintln!("nfx: error: {e:#}");
        std::process::exit(1);
    }
}
