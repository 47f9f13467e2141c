//! `nfx report`: runs (or collects with `--from`) every paper's experiment and writes one
//! self-contained `index.html` and `claims.json` (docs/experiments/report.md). Each
//! experiment runs as its own `nfx experiment …` process writing into `DIR/<experiment>/`,
//! so one that fails leaves the others running; its error goes on the page and the
//! command exits non-zero at the end.

mod claims;
mod html;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::de::DeserializeOwned;

use super::claim::Claim;

/// Arguments of `nfx report`.
#[derive(clap::Args)]
pub struct Args {
    /// Output directory (created): index.html, claims.json, one directory per experiment.
    #[arg(long)]
    out: PathBuf,
    /// Each experiment's quick mode (accel-switch: its shortest run, 20 s).
    #[arg(long)]
    quick: bool,
    /// Collect the outputs in DIR/<experiment>/ instead of running the experiments.
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
    /// Experiments to include, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    only: Vec<Experiment>,
    /// Namespace prefix every experiment's testbed uses (default: each experiment's
    /// own), so a report can run beside another testbed.
    #[arg(long, conflicts_with = "from")]
    prefix: Option<String>,
    /// Subnet base (10.N.x.x) every experiment's testbed uses (default: each one's own).
    #[arg(long, conflicts_with = "from")]
    subnet_base: Option<u8>,
}

/// One paper's experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Experiment {
    /// HYPER Fig. 4 (`nfx experiment hyper`).
    Hyper,
    /// The SSH-tunnel paper's accelerator switch (`nfx experiment accel-switch`).
    AccelSwitch,
    /// The edge-encryption paper (`nfx experiment edge-video`).
    EdgeVideo,
    /// The VPN+ paper's ladder (`nfx experiment vpn-ladder`).
    VpnLadder,
    /// The energy paper (`nfx experiment energy`).
    Energy,
}

impl Experiment {
    /// All, in the page's order.
    pub const ALL: [Experiment; 5] = [
        Experiment::Hyper,
        Experiment::AccelSwitch,
        Experiment::EdgeVideo,
        Experiment::VpnLadder,
        Experiment::Energy,
    ];

    /// The `nfx experiment` subcommand and output directory name.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Hyper => "hyper",
            Experiment::AccelSwitch => "accel-switch",
            Experiment::EdgeVideo => "edge-video",
            Experiment::VpnLadder => "vpn-ladder",
            Experiment::Energy => "energy",
        }
    }

    /// The paper it reproduces.
    pub fn paper(self) -> &'static str {
        match self {
            Experiment::Hyper => claims::HYPER,
            Experiment::AccelSwitch => claims::ACCEL_SWITCH,
            Experiment::EdgeVideo => claims::EDGE,
            Experiment::VpnLadder => super::experiment_vpn::report::PAPER,
            Experiment::Energy => claims::ENERGY,
        }
    }

    /// What in its figures is modelled rather than measured on the real thing.
    pub fn modelled(self) -> &'static str {
        match self {
            Experiment::Hyper => "HYPER's FPGA tier is nfx's table tier: eBPF programs at tcx ingress in the kernel, not hardware.",
            Experiment::AccelSwitch => "The accelerator is modelled: the lookaside device is `nfx accel serve` on a CPU core, not an FPGA.",
            Experiment::EdgeVideo => "HW-VNF is modelled: a reserved core running the bitsliced PRESENT engine on the lookaside device, not an FPGA. Energy figures (when present) come from the energy model.",
            Experiment::VpnLadder => "A3's crypto offload is modelled: the lookaside device on a reserved CPU core, not an FPGA.",
            Experiment::Energy => "Power and energy come from the host power model unless the summary says `rapl` (see the energy source below).",
        }
    }

    /// `nfx experiment` arguments after `--out DIR`.
    fn extra_args(self, quick: bool) -> Vec<&'static str> {
        match (self, quick) {
            (Experiment::AccelSwitch, true) => vec!["--duration", "20"],
            (Experiment::AccelSwitch, false) => vec![],
            (_, true) => vec!["--quick"],
            (_, false) => vec![],
        }
    }

    /// Longest a run may take before it is stopped.
    fn limit(self, quick: bool) -> Duration {
        Duration::from_secs(if quick { 900 } else { 4 * 3600 })
    }

    /// The claims judged on the summary in `dir` (unmeasured, with the error, when it
    /// cannot be read), and the energy source the summary names when it names one.
    fn claims(self, dir: &Path) -> (Vec<Claim>, Result<Option<String>, String>) {
        fn read<T: DeserializeOwned>(dir: &Path) -> Result<T, String> {
            let p = dir.join("summary.json");
            let text = std::fs::read_to_string(&p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
        }
        fn judge<T: DeserializeOwned>(
            dir: &Path,
            f: fn(Option<&T>) -> Vec<Claim>,
            source: fn(&T) -> Option<String>,
        ) -> (Vec<Claim>, Result<Option<String>, String>) {
            match read::<T>(dir) {
                Ok(s) => (f(Some(&s)), Ok(source(&s))),
                Err(e) => (
                    f(None).into_iter().map(|c| c.unmeasured(&e)).collect(),
                    Err(e),
                ),
            }
        }
        match self {
            Experiment::Hyper => judge(dir, claims::hyper, |_| None),
            Experiment::AccelSwitch => judge(dir, claims::accel_switch, |_| None),
            Experiment::EdgeVideo => judge(dir, claims::edge_video, |_| None),
            Experiment::VpnLadder => {
                judge(dir, claims::vpn_ladder, |s| Some(s.accelerator.clone()))
            }
            Experiment::Energy => judge(dir, claims::energy, |s| {
                Some(format!(
                    "energy source: {} (host {}: {} cores, {} W idle, {} W at full load)",
                    s.energy_source, s.model.host, s.model.cores, s.model.idle_w, s.model.max_w
                ))
            }),
        }
    }

    /// The claims with no figures, for an experiment that did not run.
    fn unmeasured(self, reason: &str) -> Vec<Claim> {
        let none: Vec<Claim> = match self {
            Experiment::Hyper => claims::hyper(None),
            Experiment::AccelSwitch => claims::accel_switch(None),
            Experiment::EdgeVideo => claims::edge_video(None),
            Experiment::VpnLadder => claims::vpn_ladder(None),
            Experiment::Energy => claims::energy(None),
        };
        none.into_iter().map(|c| c.unmeasured(reason)).collect()
    }
}

/// How an experiment went.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// It ran (or its outputs were collected) and its summary was read.
    Done,
    /// It failed or its summary could not be read.
    Failed(String),
    /// Left out by `--only`.
    Skipped,
}

/// One experiment's part of the page.
pub struct Section {
    /// Which.
    pub experiment: Experiment,
    /// How it went.
    pub status: Status,
    /// The command line that produced its outputs.
    pub command: String,
    /// Wall time, s (`None` when collected).
    pub elapsed_s: Option<f64>,
    /// Its claims.
    pub claims: Vec<Claim>,
    /// What the summary says stands in for hardware or a meter.
    pub source_note: Option<String>,
    /// Its charts: file name and PNG bytes.
    pub charts: Vec<(String, Vec<u8>)>,
    /// Its report.md, when it wrote one.
    pub report_md: Option<String>,
}

/// The machine the page was written on.
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Cores available.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// /proc/loadavg when the report started.
    pub load_start: String,
    /// /proc/loadavg when it ended.
    pub load_end: String,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn machine(load_start: String) -> Machine {
    Machine {
        cpu: super::bench_accel::cpu_model(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        load_start,
        load_end: loadavg(),
    }
}

/// Runs `nfx experiment <name> --out dir …`, its output into `dir/run.log`.
fn run_one(a: &Args, e: Experiment, dir: &Path) -> (String, Result<(), String>) {
    let quick = a.quick;
    let mut args = vec!["experiment".to_string(), e.name().into(), "--out".into()];
    args.push(dir.to_string_lossy().into());
    args.extend(e.extra_args(quick).into_iter().map(String::from));
    if let Some(p) = &a.prefix {
        args.extend(["--prefix".into(), p.clone()]);
    }
    if let Some(n) = a.subnet_base {
        args.extend(["--subnet-base".into(), n.to_string()]);
    }
    let command = format!("nfx {}", args.join(" "));
    let run = || -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("command.txt"), format!("{command}\n"))?;
        let log_path = dir.join("run.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let mut cmd = Command::new(std::env::current_exe().context("locating nfx")?);
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let status = nfx_testbed::process::output_within(cmd, e.limit(quick))?.status;
        if !status.success() {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let errors: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("nfx: error:"))
                .collect();
            anyhow::bail!("{status} (see run.log): {}", errors.join(" / "));
        }
        Ok(())
    };
    let outcome = run().map_err(|e| format!("{e:#}"));
    (command, outcome)
}

/// Copies the regular files of `from` into `to` (an experiment's outputs, collected).
fn collect_one(from: &Path, to: &Path) -> anyhow::Result<String> {
    anyhow::ensure!(from.is_dir(), "no outputs in {}", from.display());
    if from.canonicalize()? != to.canonicalize().unwrap_or_default() {
        std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::copy(entry.path(), to.join(entry.file_name()))?;
            }
        }
    }
    let recorded = std::fs::read_to_string(from.join("command.txt")).ok();
    Ok(recorded.map_or_else(
        || format!("collected from {}", from.display()),
        |c| format!("{} (collected from {})", c.trim(), from.display()),
    ))
}

/// The PNGs in `dir`, by name.
fn charts(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let png = std::fs::read(e.path()).ok()?;
            (name.ends_with(".png") && png.starts_with(b"\x89PNG\r\n\x1a\n")).then_some((name, png))
        })
        .collect();
    v.sort();
    v
}

/// Runs or collects one experiment into `dir` and judges its claims.
fn section(a: &Args, e: Experiment, dir: &Path) -> Section {
    let started = Instant::now();
    let (command, outcome, elapsed_s) = match &a.from {
        Some(from) => match collect_one(&from.join(e.name()), dir) {
            Ok(c) => (c, Ok(()), None),
            Err(err) => (
                format!("collected from {}", from.join(e.name()).display()),
                Err(format!("{err:#}")),
                None,
            ),
        },
        None => {
            let (c, r) = run_one(a, e, dir);
            (c, r, Some(started.elapsed().as_secs_f64()))
        }
    };
    let (claims, status, source_note) = match outcome {
        Err(err) => (e.unmeasured(&err), Status::Failed(err), None),
        Ok(()) => match e.claims(dir) {
            (c, Ok(note)) => (c, Status::Done, note),
            (c, Err(err)) => (c, Status::Failed(err), None),
        },
    };
    Section {
        experiment: e,
        status,
        command,
        elapsed_s,
        claims,
        source_note,
        charts: charts(dir),
        report_md: std::fs::read_to_string(dir.join("report.md")).ok(),
    }
}

/// Runs the subcommand.
pub fn run(a: Args) -> anyhow::Result<()> {
    let load_start = loadavg();
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let chosen: Vec<Experiment> = if a.only.is_empty() {
        Experiment::ALL.to_vec()
    } else {
        a.only.clone()
    };
    let progress = super::output::Progress::bar("report: experiments", chosen.len() as u64);
    let started = Instant::now();
    let mut sections = Vec::new();
    for e in Experiment::ALL {
        if !chosen.contains(&e) {
            sections.push(Section {
                experiment: e,
                status: Status::Skipped,
                command: String::new(),
                elapsed_s: None,
                claims: e.unmeasured("skipped (not in --only)"),
                source_note: None,
                charts: Vec::new(),
                report_md: None,
            });
            continue;
        }
        progress.message(e.name());
        let s = section(&a, e, &a.out.join(e.name()));
        progress.inc();
        crate::note!(
            "[{:>6.1} s] {}: {}",
            started.elapsed().as_secs_f64(),
            e.name(),
            match &s.status {
                Status::Failed(err) => format!("FAILED: {err}"),
                _ => format!(
                    "{} of {} claims hold",
                    s.claims.iter().filter(|c| c.holds).count(),
                    s.claims.len()
                ),
            }
        );
        sections.push(s);
    }
    drop(progress);
    let m = machine(load_start);
    let all: Vec<&Claim> = sections.iter().flat_map(|s| &s.claims).collect();
    std::fs::write(
        a.out.join("claims.json"),
        serde_json::to_string_pretty(&all)? + "\n",
    )?;
    let cli = std::env::args().collect::<Vec<_>>().join(" ");
    std::fs::write(a.out.join("index.html"), html::page(&sections, &m, &cli))?;
    crate::say!(
        "wrote {0}/index.html and {0}/claims.json: {1} of {2} claims hold",
        a.out.display(),
        all.iter().filter(|c| c.holds).count(),
        all.len()
    );
    let failed: Vec<&str> = sections
        .iter()
        .filter(|s| matches!(s.status, Status::Failed(_)))
        .map(|s| s.experiment.name())
        .collect();
    anyhow::ensure!(
        failed.is_empty(),
        "experiment(s) failed: {} (their errors are on the page)",
        failed.join(", ")
    );
    Ok(())
}
