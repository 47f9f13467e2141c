//! `nfx testbed up|down|status`: the namespace testbed that demos, tests and benchmarks
//! run on (see crates/testbed).

use nfx_testbed::{Spec, Testbed};

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
    /// Print status as JSON.
    #[arg(long, global = true)]
    json: bool,
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
    match args.action {
        Action::Up => {
            let tb = Testbed::up(spec)?;
            print_status(&tb, args.json)
        }
        Action::Down => {
            let rep = Testbed::attach(spec)?.down()?;
            for ns in &rep.removed {
                println!("removed {ns}");
            }
            for ns in &rep.skipped {
                println!("left {ns} alone: not made by nfx");
            }
            if rep.removed.is_empty() && rep.skipped.is_empty() {
                println!("nothing to remove");
            }
            Ok(())
        }
        Action::Status => print_status(&Testbed::attach(spec)?, args.json),
    }
}

fn print_status(tb: &Testbed, json: bool) -> anyhow::Result<()> {
    let st = tb.status()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&st)?);
    } else {
        print!("{st}");
    }
    Ok(())
}
