//! `nfx stats`: reads the counters of a running `nfx run` through its control socket and
//! prints them as a table (with Gbit/s over the interval when `--watch`) or as JSON.

use anyhow::{bail, Context};
use nfx_dataplane::config::default_socket;
use nfx_dataplane::stats::render_table;
use nfx_proto::{Client, Stats};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use super::output::JsonOut;

/// Directory where instances put their control sockets by default.
const SOCKET_DIR: &str = "/run/nfx";

/// Arguments of `nfx stats`.
#[derive(clap::Args)]
pub struct Args {
    /// Instance name (socket /run/nfx/NAME.sock); default: the only running instance.
    #[arg(long, conflicts_with = "socket")]
    name: Option<String>,
    /// Control socket path.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Write JSON to FILE (`-` or no FILE: stdout; one line per sample with --watch, a
    /// file then holds the latest sample).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
    /// Print a new sample every SECS seconds until interrupted.
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
}

/// Finds the socket: `--socket`, `--name`, or the only one in /run/nfx.
fn socket_of(args: &Args) -> anyhow::Result<PathBuf> {
    if let Some(s) = &args.socket {
        return Ok(s.clone());
    }
    if let Some(n) = &args.name {
        return Ok(default_socket(n));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(SOCKET_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => bail!("no running instance found in {SOCKET_DIR} (start one with `nfx run`, or pass --socket)"),
        _ => {
            let names: Vec<String> =
                found.iter().filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned())).collect();
            bail!("several instances are running ({}): choose one with --name", names.join(", "))
        }
    }
}

/// Writes one sample to stdout; a closed pipe (`| head`) ends the output quietly.
fn print(
    stats: &Stats,
    prev: Option<&Stats>,
    json: Option<&JsonOut>,
    watch: bool,
) -> anyhow::Result<()> {
    let text = match json {
        Some(f @ JsonOut::File(_)) => return f.write(stats),
        Some(JsonOut::Stdout) if watch => serde_json::to_string(stats)?,
        Some(JsonOut::Stdout) => serde_json::to_string_pretty(stats)?,
        None => render_table(stats, prev),
    };
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => Ok(r?),
    }
}

fn fetch(client: &mut Client) -> anyhow::Result<Stats> {
    let path = client.socket().display().to_string();
    client
        .stats()
        .with_context(|| format!("reading stats from {path}"))
}

/// Prints the stats once, or every `--watch` seconds.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut client = Client::lazy(socket_of(&args)?);
    let Some(secs) = args.watch else {
        return print(&fetch(&mut client)?, None, args.json.as_ref(), false);
    };
    if !(secs.is_finite() && secs > 0.0) {
        bail!("--watch {secs}: must be a positive number of seconds");
    }
    let mut prev: Option<Stats> = None;
    loop {
        let cur = fetch(&mut client)?;
        print(&cur, prev.as_ref(), args.json.as_ref(), true)?;
        prev = Some(cur);
        std::thread::sleep(Duration::from_secs_f64(secs));
    }
}
