//! `nfx ssm`: runs the service-specific manager that polls the tunnels' element managers
//! and moves the lookaside queue pairs to the VNFs that need them (crates/ssm).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use nfx_metrics::http as metrics_http;
use nfx_ssm::{EmClient, Policy, PolicyConfig, Ssm};

/// Arguments of this subcommand.
#[derive(clap::Args)]
pub struct Args {
    /// An element manager to poll, as NAME=URL (e.g. t1=http://127.0.0.1:7301); repeat.
    #[arg(long = "em", required = true)]
    pub em: Vec<String>,
    /// File holding the element managers' bearer token (their `em_token_file`; env
    /// NFX_TOKEN takes precedence).
    #[arg(long)]
    pub em_token_file: Option<PathBuf>,
    /// Socket path of the lookaside device (`nfx accel serve --socket`).
    #[arg(long)]
    pub device: String,
    /// Queue pairs the device has.
    #[arg(long)]
    pub queue_pairs: usize,
    /// Calibration file (`nfx bench accel` output); without it no grant is vetoed.
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    /// Poll period in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub period_ms: u64,
    /// Upper CPU threshold (%).
    #[arg(long, default_value_t = 90.0)]
    pub upper: f64,
    /// Lower CPU threshold (%).
    #[arg(long, default_value_t = 40.0)]
    pub lower: f64,
    /// Consecutive samples needed beyond a threshold.
    #[arg(long, default_value_t = 3)]
    pub samples: usize,
    /// Cool-down after every change, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub cooldown_ms: u64,
    /// Minimum calibrated gain (accelerator / current engine throughput) for a grant.
    #[arg(long, default_value_t = 1.0)]
    pub min_gain: f64,
    /// Append decision events (JSON lines) to this file; default stdout.
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// Serve Prometheus metrics on `http://ADDR/metrics` (polls, decisions per VNF and
    /// kind, holders, each VNF's last CPU sample and engine, the last grant's times).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Require `Authorization: Bearer <token>` on `/metrics`, the token read from this file.
    #[arg(long, value_name = "FILE", requires = "metrics_listen")]
    pub metrics_token_file: Option<PathBuf>,
    /// Stop after this many seconds (default: run until killed; events are flushed per line).
    #[arg(long)]
    pub duration_s: Option<u64>,
}

/// Parses `NAME=URL` pairs; the error names the offending argument.
pub fn parse_ems(specs: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    specs
        .iter()
        .map(|s| {
            let (n, u) = s
                .split_once('=')
                .filter(|(n, u)| !n.is_empty() && u.starts_with("http://"))
                .with_context(|| format!("--em {s}: expected NAME=http://HOST:PORT"))?;
            Ok((n.to_string(), u.to_string()))
        })
        .collect()
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let cfg = PolicyConfig {
        upper: args.upper,
        lower: args.lower,
        samples: args.samples,
        cooldown_ns: args.cooldown_ms.saturating_mul(1_000_000),
        queue_pairs: args.queue_pairs,
        min_gain: args.min_gain,
    };
    cfg.validate()
        .map_err(|e| anyhow::anyhow!("nfx ssm: --{}", e.replace('_', "-")))?;
    anyhow::ensure!(args.period_ms > 0, "nfx ssm: --period-ms must be positive");
    let cal = match &args.calibration {
        Some(p) => Some(nfx_accel::Calibration::load(p)?),
        None => None,
    };
    let timeout = Duration::from_millis(args.period_ms.clamp(100, 2000));
    let token = nfx_control::client::load_token(args.em_token_file.as_deref())?
        .context("nfx ssm: give --em-token-file or NFX_TOKEN (every EM call needs the token)")?;
    let ems = parse_ems(&args.em)?
        .into_iter()
        .map(|(n, u)| (n, EmClient::new(&u, token.clone(), timeout)))
        .collect();
    let sink: Box<dyn std::io::Write + Send> = match &args.events {
        Some(p) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("--events {}", p.display()))?,
        ),
        None => Box::new(std::io::stdout()),
    };
    let mut ssm = Ssm::new(Policy::new(cfg, cal), ems, &args.device).with_sink(sink);
    if let Some(listen) = args.metrics_listen {
        let token = metrics_http::token_file(args.metrics_token_file.as_deref())?;
        let stats = ssm.stats();
        let render = move || -> anyhow::Result<String> {
            let snapshot = stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
            Ok(nfx_ssm::metrics::render(&snapshot))
        };
        let addr = metrics_http::serve(metrics_http::bind(listen)?, Arc::new(render), token)?;
        eprintln!("nfx ssm: metrics on http://{addr}/metrics");
    }
    let stop = Arc::new(AtomicBool::new(false));
    if let Some(s) = args.duration_s {
        let st = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(s));
            st.store(true, Ordering::Relaxed);
        });
    }
    ssm.run(Duration::from_millis(args.period_ms), &stop);
    eprintln!(
        "nfx ssm: stopped; holders {:?}; EM unreachable counts {:?}",
        ssm.policy().holders(),
        ssm.policy().unreachable_counts()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn em_specs_parse_or_name_the_bad_one() {
        let ok = parse_ems(&["t1=http://127.0.0.1:7301".into()]).unwrap();
        assert_eq!(ok, vec![("t1".into(), "http://127.0.0.1:7301".into())]);
        let e = parse_ems(&["t1:7301".into()]).unwrap_err().to_string();
        assert!(e.contains("--em t1:7301"), "{e}");
    }
}
