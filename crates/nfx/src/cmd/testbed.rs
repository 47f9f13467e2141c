//! `nfx testbed up|down|status`: the namespace testbeds that demos, tests and benchmarks
//! run on (see crates/testbed): the line `src — edge — cloud — dst`, or with `--hosts N`
//! N hosts run by agents (see `testbed_hosts`).

use super::testbed_hosts;
use nfx_testbed::hosts::{self, HostsSpec};
use nfx_testbed::{Spec, Testbed};
use std::path::PathBuf;

use super::output::JsonOut;

/// Arguments of `nfx testbed`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
    /// Topology to build (only `line`: src — edge — cloud — dst).
    #[arg(long, global = true, default_value = "line")]
    topology: Topology,
    /// Prefix of every namespace name.
    #[arg(long, global = true, default_value = "nfx-")]
    prefix: String,
    /// The b of the 10.b.x.x subnets (use a different one per parallel testbed).
    #[arg(long, global = true, default_value_t = 200)]
    subnet_base: u8,
    /// Write the status (or the hosts' layout) as JSON to FILE (`-` or no FILE: stdout).
    #[arg(long, global = true, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
    /// Build N hosts run by agents (with `up`) instead of the line.
    #[arg(long, global = true)]
    hosts: Option<usize>,
    /// Endpoints besides src (on h1) and dst (on hN), attached round-robin (with --hosts).
    #[arg(long, global = true, value_delimiter = ',', requires = "hosts")]
    endpoints: Vec<String>,
    /// Where --hosts writes infrastructure.yaml, endpoints.json, the PKI, the token and the
    /// agents' files (default /run/nfx/testbed/<prefix>out).
    #[arg(long, global = true, requires = "hosts")]
    out: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Create the namespaces, veths, addresses, routes and forwarding (idempotent).
    Up,
    /// Remove the namespaces of this prefix that nfx made.
    Down,
    /// Show which namespaces exist, their addresses, MACs and forwarding state.
    Status,
}

/// Topologies `nfx testbed` can build.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Topology {
    /// src — edge — cloud — dst.
    Line,
}

/// Runs `nfx testbed`.
pub fn run(args: Args) -> anyhow::Result<()> {
    nfx_testbed::root::require_root()?;
    let Topology::Line = args.topology;
    let spec = Spec {
        prefix: args.prefix,
        subnet_base: args.subnet_base,
    };
    match (args.action, args.hosts) {
        (Action::Up, Some(n)) => {
            let hs = HostsSpec {
                prefix: spec.prefix.clone(),
                subnet_base: spec.subnet_base,
                hosts: n,
                extra_endpoints: args.endpoints.clone(),
            };
            let out = args
                .out
                .clone()
                .unwrap_or_else(|| testbed_hosts::default_out(&spec.prefix));
            let lay = testbed_hosts::up(&hs, &out)?;
            if let Some(json) = &args.json {
                json.write(&lay)?;
            } else {
                println!(
                    "{} hosts up with their agents; wrote {} and {}",
                    lay.hosts.len(),
                    out.join("infrastructure.yaml").display(),
                    out.join("endpoints.json").display()
                );
            }
            Ok(())
        }
        (Action::Up, None) => {
            let tb = Testbed::up(spec)?;
            print_status(&tb, args.json.as_ref())
        }
        (Action::Down, _) => {
            let h = hosts::down(&spec.prefix)?;
            let rep = Testbed::attach(spec)?.down()?;
            let removed: Vec<&String> = h.removed.iter().chain(&rep.removed).collect();
            let skipped: Vec<&String> = h.skipped.iter().chain(&rep.skipped).collect();
            for ns in &removed {
                println!("removed {ns}");
            }
            for ns in &skipped {
                println!("left {ns} alone: not made by nfx");
            }
            if removed.is_empty() && skipped.is_empty() {
                println!("nothing to remove");
            }
            Ok(())
        }
        (Action::Status, _) => match hosts::recorded(&spec.prefix) {
            Some(lay) => args.json.unwrap_or(JsonOut::Stdout).write(&lay),
            None => print_status(&Testbed::attach(spec)?, args.json.as_ref()),
        },
    }
}

fn print_status(tb: &Testbed, json: Option<&JsonOut>) -> anyhow::Result<()> {
    let st = tb.status()?;
    if let Some(json) = json {
        json.write(&st)?;
    } else {
        print!("{st}");
    }
    Ok(())
}
