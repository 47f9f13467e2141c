//! `nfx testbed up|down|status`: the namespace testbeds that demos, tests and benchmarks
//! run on (see crates/testbed): the line `src — edge — cloud — dst`, or with `--hosts N`
//! N hosts run by agents, or with `--infra FILE` the hosts, links and devices of an
//! infrastructure descriptor run by agents (see `testbed_hosts`).

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
    #[arg(long, global = true, conflicts_with = "infra")]
    hosts: Option<usize>,
    /// Build the hosts, links and devices of this infrastructure descriptor, run by
    /// agents (with `up`): `src` on its first host, `dst` on its last.
    #[arg(long, global = true, value_name = "FILE")]
    infra: Option<PathBuf>,
    /// Endpoints besides src (on the first host) and dst (on the last), attached
    /// round-robin (with --hosts or --infra).
    #[arg(long, global = true, value_delimiter = ',')]
    endpoints: Vec<String>,
    /// Where --hosts/--infra writes infrastructure.yaml, endpoints.json, the PKI, the
    /// token and the agents' files (default /run/nfx/testbed/<prefix>out).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// A directory the agents' workers may read files from that a VNF configuration
    /// names, e.g. DPI pattern files (absolute; repeatable; with --hosts or --infra).
    #[arg(long = "allowed-dir", global = true, value_name = "DIR")]
    allowed_dirs: Vec<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Create the namespaces, veths, addresses, routes and forwarding (idempotent).
    Up,
    /// Remove the namespaces of this prefix that nfx made, and its agents' pinned
    /// table chains.
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
    let agents = args.hosts.is_some() || args.infra.is_some();
    if !agents
        && (!args.endpoints.is_empty() || args.out.is_some() || !args.allowed_dirs.is_empty())
    {
        anyhow::bail!("--endpoints, --out and --allowed-dir need --hosts or --infra");
    }
    if let Some(d) = args.allowed_dirs.iter().find(|d| !d.is_absolute()) {
        anyhow::bail!("--allowed-dir {}: must be absolute", d.display());
    }
    match (args.action, agents) {
        (Action::Up, true) => {
            let shape = match &args.infra {
                Some(f) => {
                    Some(nfx_model::Infrastructure::load(f).map_err(|e| anyhow::anyhow!("{e}"))?)
                }
                None => None,
            };
            let hs = match &shape {
                Some(i) => testbed_hosts::spec_for(
                    i,
                    &spec.prefix,
                    spec.subnet_base,
                    args.endpoints.clone(),
                ),
                None => HostsSpec {
                    prefix: spec.prefix.clone(),
                    subnet_base: spec.subnet_base,
                    hosts: args.hosts.unwrap_or_default(),
                    extra_endpoints: args.endpoints.clone(),
                    names: Vec::new(),
                    links: Vec::new(),
                },
            };
            let out = args
                .out
                .clone()
                .unwrap_or_else(|| testbed_hosts::default_out(&spec.prefix));
            let lay = testbed_hosts::up_with(&hs, &out, &args.allowed_dirs, shape.as_ref())?;
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
        (Action::Up, false) => {
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
            for dir in &h.unpinned {
                println!("unpinned {}", dir.display());
            }
            if removed.is_empty() && skipped.is_empty() && h.unpinned.is_empty() {
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
