//! Standalone lookaside device process (the same code as `nfx accel serve`), so the
//! crate's own tests can start, stop and kill a real device without the `nfx` binary.
//!
//! Usage: `nfx-accel-device --socket PATH [--queue-pairs N] [--core C] [--ring-size N]
//!         [--slots N] [--slot-size B] [--sessions-per-qp N] [--qps-per-client N]
//!         [--group GID]`
//! or `nfx-accel-device --probe PATH`: attach once as a client and report (exit status 0
//! when a queue pair was granted; the reason on stderr otherwise).

use nfx_accel::lookaside::{serve, DeviceConfig};
use nfx_accel::{EngineKind, LookasideEngine};

enum Mode {
    Serve(DeviceConfig),
    Probe(String),
}

fn number<T: std::str::FromStr>(name: &str, v: String) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    v.parse().map_err(|e| format!("{name}: {e}"))
}

fn parse() -> Result<Mode, String> {
    let mut socket = None;
    let mut cfg = DeviceConfig::new("", 1);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--probe" => return Ok(Mode::Probe(val("--probe")?)),
            "--socket" => socket = Some(val("--socket")?),
            "--queue-pairs" => cfg.queue_pairs = number(&a, val(&a)?)?,
            "--core" => cfg.core = Some(number(&a, val(&a)?)?),
            "--ring-size" => cfg.ring_size = number(&a, val(&a)?)?,
            "--slots" => cfg.slots = number(&a, val(&a)?)?,
            "--slot-size" => cfg.slot_size = number(&a, val(&a)?)?,
            "--sessions-per-qp" => cfg.sessions_per_qp = number(&a, val(&a)?)?,
            "--qps-per-client" => cfg.qps_per_client = number(&a, val(&a)?)?,
            "--group" => cfg.group = Some(number(&a, val(&a)?)?),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    cfg.socket = socket.ok_or("--socket is required")?.into();
    Ok(Mode::Serve(cfg))
}

fn main() {
    let result = match parse() {
        Ok(Mode::Serve(cfg)) => serve(cfg, |_| ()).map_err(|e| e.to_string()),
        Ok(Mode::Probe(path)) => LookasideEngine::connect(path.as_ref(), EngineKind::Cpu)
            .map(|e| println!("granted queue pair {}", e.queue_pair()))
            .map_err(|e| e.to_string()),
        Err(e) => {
            eprintln!("nfx-accel-device: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("nfx-accel-device: {e}");
        std::process::exit(1);
    }
}
