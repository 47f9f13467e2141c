//! `nfx bench_tunnel` (being built; see the issue that owns it).

/// Arguments of this subcommand.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the subcommand.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
