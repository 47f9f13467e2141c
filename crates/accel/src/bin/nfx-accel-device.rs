//! Standalone lookaside device process (the same code as `nfx accel serve`), so the
//! crate's own tests can start and kill a real device without the `nfx` binary.
//!
//! Usage: `nfx-accel-device --socket PATH [--queue-pairs N] [--core C]`

use nfx_accel::lookaside::{serve, DeviceConfig};

fn parse() -> Result<DeviceConfig, String> {
    let mut socket = None;
    let mut qps = 1usize;
    let mut core = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--socket" => socket = Some(val("--socket")?),
            "--queue-pairs" => {
                qps = val("--queue-pairs")?
                    .parse()
                    .map_err(|e| format!("--queue-pairs: {e}"))?
            }
            "--core" => core = Some(val("--core")?.parse().map_err(|e| format!("--core: {e}"))?),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let mut cfg = DeviceConfig::new(socket.ok_or("--socket is required")?, qps);
    cfg.core = core;
    Ok(cfg)
}

fn main() {
    let cfg = match parse() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nfx-accel-device: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = serve(cfg) {
        eprintln!("nfx-accel-device: {e}");
        std::process::exit(1);
    }
}
