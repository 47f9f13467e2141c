//! `nfx bench accel`: every engine × algorithm × size against `openssl speed -evp`
//! (normal and with AES-NI/PCLMUL/SHA-NI masked off) measured in the same run, like
//! dpdk-test-crypto-perf; writes JSON records and a calibration file.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nfx_accel::bench::{measure, BenchSpec};
use nfx_accel::lookaside::pin_to_core;
use nfx_accel::{
    bitsliced_engine, cpu_engine, present_isa, soft_engine, Alg, CalPoint, Calibration, Engine,
    EngineKind, LookasideEngine,
};
use serde::Serialize;

use super::output::{JsonOut, Progress};
use crate::say;

/// The `OPENSSL_ia32cap` mask that turns off AES-NI, PCLMULQDQ, SHA-NI, VAES, VPCLMULQDQ.
pub const OPENSSL_MASK: &str = "~0x200000200000000:~0x60020000000";

const SIZES: [usize; 5] = [64, 256, 512, 1420, 8192];
const QUICK_SIZES: [usize; 2] = [64, 1420];

/// Arguments of `nfx bench accel`.
#[derive(clap::Args)]
pub struct Args {
    /// Write `{"records": [...]}` to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
    /// Write the calibration file (engine, alg, bytes → MB/s, ns/op) here.
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// A short run (two sizes, short phases, one OpenSSL baseline) for tests.
    #[arg(long)]
    quick: bool,
    /// Engines to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "soft,cpu,bitsliced,lookaside"
    )]
    engines: Vec<String>,
    /// Core for the lookaside device process (the benchmark itself runs on core 0).
    #[arg(long, default_value_t = 1)]
    device_core: usize,
    /// Skip the OpenSSL baselines.
    #[arg(long)]
    no_openssl: bool,
}

/// One line of the JSON output.
#[derive(Serialize, Clone)]
struct Record {
    engine: String,
    alg: String,
    bytes: usize,
    /// MB/s per CPU-second of the submitting thread (openssl: per CPU user second).
    mbps: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    mbps_wall: Option<f64>,
    lat_p50_ns: u64,
    lat_p99_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_p50_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_p99_ns: Option<u64>,
    ns_per_op: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_openssl: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_openssl_masked: Option<f64>,
    /// MB/s over the portable `soft` engine's for the same algorithm and size, measured
    /// in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_soft: Option<f64>,
    /// How latency was obtained: `measured` or `mean` (openssl reports no distribution).
    lat_kind: &'static str,
}

/// A lookaside device child process, killed when dropped (with its socket directory).
struct DeviceProcess {
    child: Child,
    socket: PathBuf,
}

impl Drop for DeviceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = self.socket.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn start_device(core: usize) -> anyhow::Result<(DeviceProcess, LookasideEngine)> {
    // The device creates this directory private to this user (device sockets must not
    // live where others can write).
    let socket = std::env::temp_dir()
        .join(format!("nfx-bench-accel-{}", std::process::id()))
        .join("accel.sock");
    let exe = std::env::current_exe().context("locate the nfx binary")?;
    let child = Command::new(exe)
        .args([
            "accel",
            "serve",
            "--queue-pairs",
            "1",
            "--core",
            &core.to_string(),
            "--socket",
        ])
        .arg(&socket)
        .spawn()
        .context("start `nfx accel serve`")?;
    let dev = DeviceProcess { child, socket };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match LookasideEngine::connect(&dev.socket, EngineKind::Cpu) {
            Ok(e) => return Ok((dev, e)),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => bail!("lookaside device did not come up: {e}"),
        }
    }
}

/// OpenSSL's name(s) for an algorithm; CTR+HMAC is measured as its two halves.
fn openssl_parts(alg: Alg) -> Option<Vec<Vec<&'static str>>> {
    Some(match alg {
        Alg::Aes128Gcm => vec![vec!["-evp", "aes-128-gcm"]],
        Alg::Aes256Gcm => vec![vec!["-evp", "aes-256-gcm"]],
        Alg::Chacha20Poly1305 => vec![vec!["-evp", "chacha20-poly1305"]],
        Alg::Aes128CtrHmacSha256 => vec![vec!["-evp", "aes-128-ctr"], vec!["-hmac", "sha256"]],
        Alg::Sha256 => vec![vec!["-evp", "sha256"]],
        Alg::Present80CtrHmacSha256
        | Alg::Present128CtrHmacSha256
        | Alg::Present80Ctr
        | Alg::Present128Ctr => return None,
    })
}

/// Bytes per second reported by `openssl speed -mr` (the `+F:` line).
fn openssl_rate(args: &[&str], bytes: usize, masked: bool) -> anyhow::Result<f64> {
    let mut cmd = Command::new("openssl");
    cmd.arg("speed").arg("-mr").args(args);
    // openssl divides by CPU user time, as nfx's `mbps` does.
    cmd.args(["-bytes", &bytes.to_string(), "-seconds", "1"]);
    if masked {
        cmd.env("OPENSSL_ia32cap", OPENSSL_MASK);
    }
    let out = cmd
        .output()
        .context("run `openssl speed` (is openssl installed?)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.starts_with("+F"))
        .find_map(|l| l.rsplit(':').next()?.trim().parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .with_context(|| format!("no result from `openssl speed -mr {}`", args.join(" ")))
}

fn openssl_record(alg: Alg, bytes: usize, masked: bool) -> anyhow::Result<Option<Record>> {
    let Some(parts) = openssl_parts(alg) else {
        return Ok(None);
    };
    // Two halves run back to back: time per byte adds up.
    let mut sec_per_byte = 0.0;
    for p in &parts {
        sec_per_byte += 1.0 / openssl_rate(p, bytes, masked)?;
    }
    let mbps = 1.0 / sec_per_byte / 1e6;
    let ns = bytes as f64 * 1000.0 / mbps;
    Ok(Some(Record {
        engine: if masked { "openssl-masked" } else { "openssl" }.into(),
        alg: alg.as_str().into(),
        bytes,
        mbps,
        mbps_wall: None,
        lat_p50_ns: ns.round() as u64,
        lat_p99_ns: ns.round() as u64,
        batch_p50_ns: None,
        batch_p99_ns: None,
        ns_per_op: ns,
        ratio_openssl: None,
        ratio_openssl_masked: None,
        ratio_soft: None,
        lat_kind: "mean",
    }))
}

fn print_table(records: &[Record]) {
    say!(
        "{:<15} {:<28} {:>6} {:>10} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>10}",
        "engine",
        "alg",
        "bytes",
        "MB/s(cpu)",
        "MB/s(wall)",
        "xOpenSSL",
        "xMasked",
        "xSoft",
        "op p50ns",
        "op p99ns",
        "batch p50",
        "batch p99"
    );
    let ratio = |r: Option<f64>| r.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
    for r in records {
        say!(
            "{:<15} {:<28} {:>6} {:>10.1} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>10}",
            r.engine,
            r.alg,
            r.bytes,
            r.mbps,
            r.mbps_wall
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into()),
            ratio(r.ratio_openssl),
            ratio(r.ratio_openssl_masked),
            ratio(r.ratio_soft),
            r.lat_p50_ns,
            r.lat_p99_ns,
            r.batch_p50_ns
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into()),
            r.batch_p99_ns
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
}

/// Runs the benchmark.
pub fn run(args: Args) -> anyhow::Result<()> {
    let kinds: Vec<EngineKind> = args
        .engines
        .iter()
        .map(|s| s.parse::<EngineKind>())
        .collect::<Result<_, _>>()
        .context("--engines")?;
    let sizes: &[usize] = if args.quick { &QUICK_SIZES } else { &SIZES };
    let spec = BenchSpec {
        phase: Duration::from_millis(if args.quick { 15 } else { 200 }),
        ..BenchSpec::default()
    };
    // The benchmark runs on core 0, the device on its own core.
    let _ = pin_to_core(0);
    let mut records = Vec::new();
    let progress = Progress::spinner("accel");
    for kind in kinds {
        let mut dev = None;
        let mut local;
        let mut remote;
        let engine: &mut dyn Engine = match kind {
            EngineKind::Soft | EngineKind::Cpu | EngineKind::Bitsliced => {
                local = match kind {
                    EngineKind::Soft => soft_engine(),
                    EngineKind::Cpu => cpu_engine(),
                    _ => bitsliced_engine(),
                };
                local.as_mut()
            }
            EngineKind::Lookaside => {
                let (d, e) = start_device(args.device_core)?;
                dev = Some(d);
                remote = e;
                &mut remote
            }
        };
        let algs: Vec<Alg> = Alg::ALL
            .into_iter()
            .filter(|a| engine.supports(*a))
            .collect();
        for alg in algs {
            for &bytes in sizes {
                progress.message(format!("{kind} {alg} {bytes} B"));
                let m = measure(engine, alg, bytes, &spec)
                    .with_context(|| format!("{kind} {alg} {bytes} B"))?;
                records.push(Record {
                    engine: kind.as_str().into(),
                    alg: alg.as_str().into(),
                    bytes,
                    mbps: m.mbps,
                    mbps_wall: Some(m.mbps_wall),
                    lat_p50_ns: m.lat_p50_ns,
                    lat_p99_ns: m.lat_p99_ns,
                    batch_p50_ns: Some(m.batch_p50_ns),
                    batch_p99_ns: Some(m.batch_p99_ns),
                    ns_per_op: m.ns_per_op,
                    ratio_openssl: None,
                    ratio_openssl_masked: None,
                    ratio_soft: None,
                    lat_kind: "measured",
                });
                if engine.stats().failovers > 0 {
                    bail!(
                        "the lookaside device failed during {alg} {bytes} B ({}): its figures would be the fallback's",
                        engine.failover_reason().unwrap_or("unknown reason")
                    );
                }
            }
        }
        drop(dev);
    }
    if !args.no_openssl {
        let (algs, osizes): (&[Alg], &[usize]) = if args.quick {
            (&[Alg::Aes128Gcm], &[1420])
        } else {
            (&Alg::ALL, sizes)
        };
        for &alg in algs {
            for &bytes in osizes {
                for masked in [false, true] {
                    progress.message(format!("openssl {alg} {bytes} B"));
                    if let Some(r) = openssl_record(alg, bytes, masked)? {
                        records.push(r);
                    }
                }
            }
        }
    }
    let base = |eng: &str, alg: &str, bytes: usize| {
        records
            .iter()
            .find(|r| r.engine == eng && r.alg == alg && r.bytes == bytes)
            .map(|r| r.mbps)
    };
    let ratios: Vec<[Option<f64>; 3]> = records
        .iter()
        .map(|r| {
            if r.engine.starts_with("openssl") {
                return [None; 3];
            }
            let over = |eng: &str| base(eng, &r.alg, r.bytes).map(|b| r.mbps / b);
            let soft = (r.engine != "soft").then(|| over("soft")).flatten();
            [over("openssl"), over("openssl-masked"), soft]
        })
        .collect();
    for (r, [a, b, c]) in records.iter_mut().zip(ratios) {
        r.ratio_openssl = a;
        r.ratio_openssl_masked = b;
        r.ratio_soft = c;
    }
    drop(progress);
    say!(
        "PRESENT on the cpu, bitsliced and lookaside engines: bitsliced, {}",
        present_isa()
    );
    print_table(&records);
    if let Some(out) = &args.json {
        out.write(&serde_json::json!({ "records": records }))?;
    }
    if let Some(p) = &args.calibration {
        let mut cal = Calibration {
            source: format!(
                "nfx bench accel{} on {}",
                if args.quick { " --quick" } else { "" },
                cpu_model()
            ),
            points: Vec::new(),
        };
        for r in &records {
            cal.insert(CalPoint {
                engine: r.engine.clone(),
                alg: r.alg.clone(),
                bytes: r.bytes as u32,
                mbps: r.mbps,
                ns_per_op: r.ns_per_op,
            });
        }
        cal.save(p)?;
    }
    Ok(())
}

/// The CPU model from /proc/cpuinfo (what a recorded figure was measured on).
pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
