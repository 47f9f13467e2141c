//! `nfx accel serve`: the lookaside crypto device process (a reserved core standing in
//! for a QAT/FPGA lookaside card), with a fixed number of queue pairs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use nfx_accel::lookaside::{metrics, serve, DeviceConfig, DeviceProbe};
use nfx_metrics::http as metrics_http;

/// Default socket of the device (its directory must be private to the device's user,
/// or group-readable only with `--group`).
pub const DEFAULT_SOCKET: &str = "/run/nfx/accel.sock";

/// Arguments of `nfx accel`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Run the device until killed; clients attach over the unix socket.
    Serve(ServeArgs),
}

/// Arguments of `nfx accel serve`.
#[derive(clap::Args)]
struct ServeArgs {
    /// Number of queue pairs (the device's capacity; extra clients are refused).
    #[arg(long, default_value_t = 1)]
    queue_pairs: usize,
    /// Unix socket clients connect to.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Core to pin the device to (sched_setaffinity).
    #[arg(long)]
    core: Option<usize>,
    /// Entries per submission ring (power of two, at most 4096).
    #[arg(long, default_value_t = 256)]
    ring_size: u32,
    /// Zero-copy buffer slots per queue pair.
    #[arg(long, default_value_t = 768)]
    slots: u32,
    /// Bytes per buffer slot (largest operation buffer).
    #[arg(long, default_value_t = 16384)]
    slot_size: u32,
    /// Microseconds the device keeps polling after its last work before it sleeps
    /// (default: the device's own, `DeviceConfig::new`).
    #[arg(long)]
    spin_us: Option<u64>,
    /// Sessions one queue pair may hold (a full table refuses new ones).
    #[arg(long, default_value_t = 1024)]
    sessions_per_qp: usize,
    /// Queue pairs one client process may hold.
    #[arg(long, default_value_t = 4)]
    qps_per_client: usize,
    /// Serve Prometheus metrics on `http://ADDR/metrics` (grants, revocations, per queue
    /// pair occupancy, sessions, ops and bytes).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Require `Authorization: Bearer <token>` on `/metrics`, the token read from this
    /// file (as the controller's `--token-file`; give Prometheus the same file).
    #[arg(long, value_name = "FILE", requires = "metrics_listen")]
    metrics_token_file: Option<std::path::PathBuf>,
    /// A group (name or gid) whose members may use the device besides this user; the
    /// socket's directory is then created 0750 and the socket 0660, owned by it.
    #[arg(long)]
    group: Option<String>,
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::Serve(a) => {
            let mut cfg = DeviceConfig::new(&a.socket, a.queue_pairs);
            cfg.core = a.core;
            cfg.ring_size = a.ring_size;
            cfg.slots = a.slots;
            cfg.slot_size = a.slot_size;
            if let Some(us) = a.spin_us {
                cfg.spin = Duration::from_micros(us);
            }
            cfg.sessions_per_qp = a.sessions_per_qp;
            cfg.qps_per_client = a.qps_per_client;
            cfg.group = a
                .group
                .as_deref()
                .map(nfx_io::peer::group_id)
                .transpose()
                .map_err(anyhow::Error::msg)?;
            eprintln!(
                "nfx accel: device on {} with {} queue pair(s){}",
                a.socket.display(),
                a.queue_pairs,
                a.core
                    .map(|c| format!(", pinned to core {c}"))
                    .unwrap_or_default()
            );
            let listener = a.metrics_listen.map(metrics_http::bind).transpose()?;
            let token = metrics_http::token_file(a.metrics_token_file.as_deref())?;
            let device = a.socket.display().to_string();
            serve(cfg, move |probe| {
                if let Some(l) = listener {
                    match serve_metrics(l, device, probe, token) {
                        Ok(addr) => eprintln!("nfx accel: metrics on http://{addr}/metrics"),
                        Err(e) => eprintln!("nfx accel: metrics endpoint: {e:#}"),
                    }
                }
            })
            .with_context(|| format!("accelerator device on {}", a.socket.display()))
        }
    }
}

/// Serves the device's metrics on `listener`.
fn serve_metrics(
    listener: std::net::TcpListener,
    device: String,
    probe: DeviceProbe,
    token: Option<nfx_io::token::Token>,
) -> anyhow::Result<std::net::SocketAddr> {
    let render = move || -> anyhow::Result<String> {
        Ok(metrics::render(
            &device,
            probe.queue_pairs(),
            &probe.stats(),
            &probe.held(),
        ))
    };
    metrics_http::serve(listener, std::sync::Arc::new(render), token)
}
