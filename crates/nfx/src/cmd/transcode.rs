//! `nfx transcode --config FILE`: runs the transcoding VNF (an `ffmpeg` child that
//! transcodes an MPEG-TS/UDP stream to a lower bitrate and forwards it) until
//! SIGINT/SIGTERM or `--duration`, then stops ffmpeg and prints its final figures (frames,
//! output bytes, CPU seconds of its threads from the kernel) as JSON.

use anyhow::{bail, Context};
use nfx_dataplane::signals::TerminationSignals;
use nfx_vnf::transcode::process::Transcoder;
use nfx_vnf::transcode::ProcessSpec;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `nfx transcode`.
#[derive(clap::Args)]
pub struct Args {
    /// Config (YAML): `transcode: { listen_port, output, bitrate_kbps, codec, threads, netns }`.
    #[arg(long)]
    config: PathBuf,
    /// File for ffmpeg's error output.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Stop after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
}

/// Runs the transcoder and prints its final figures.
pub fn run(args: Args) -> anyhow::Result<()> {
    let signals = TerminationSignals::block().context("blocking SIGINT/SIGTERM")?;
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    let ProcessSpec::Transcode(cfg) = ProcessSpec::from_yaml(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    let mut t = Transcoder::start(&cfg, args.log.as_deref())?;
    let pid = t.pid();
    let start = Instant::now();
    let mut cpu = std::time::Duration::ZERO;
    loop {
        if let Ok(c) = nfx_io::cpu::process_cpu_time(pid) {
            cpu = c;
        }
        if signals.wait(Duration::from_millis(200)).is_some() {
            break;
        }
        if args
            .duration
            .is_some_and(|d| start.elapsed().as_secs_f64() >= d)
        {
            break;
        }
        if !t.running() {
            bail!(
                "ffmpeg (pid {pid}) exited; see {}",
                args.log
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or("its error output (--log)".into())
            );
        }
    }
    let p = t.stop(Duration::from_secs(3));
    let out = serde_json::json!({
        "pid": pid, "frames": p.frames, "out_bytes": p.out_bytes, "speed": p.speed,
        "cpu_s": cpu.as_secs_f64(), "uptime_s": start.elapsed().as_secs_f64(),
    });
    println!("{out}");
    Ok(())
}
