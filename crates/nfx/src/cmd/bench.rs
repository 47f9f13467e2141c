//! `nfx bench ...`: dispatch to one benchmark module per subject.

use super::{
    bench_accel, bench_chaining, bench_control, bench_dataplane, bench_migration, bench_placement,
    bench_tunnel,
};

/// Arguments of `nfx bench`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Kernel forwarding, nftables, nfx forward-only, nfx chain (vector and scalar).
    Dataplane(bench_dataplane::Args),
    /// Crypto engines against `openssl speed -evp`, written as a calibration file.
    Accel(bench_accel::Args),
    /// Exact, online and FFD placement on the public bin-packing sets.
    Placement(bench_placement::Args),
    /// SLA-aware chaining DP against a function-only strawman.
    Chaining(bench_chaining::Args),
    /// ESP tunnel engines against WireGuard, boringtun, OpenVPN and SSH forwards.
    Tunnel(bench_tunnel::Args),
    /// Flow-state migration: flows/s, bytes per flow, loss under traffic, deploy time.
    Migration(bench_migration::Args),
    /// Control plane at scale: chain + place per service on N simulated hosts.
    Control(bench_control::Args),
}

/// Runs the chosen benchmark.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::Dataplane(a) => bench_dataplane::run(a),
        What::Accel(a) => bench_accel::run(a),
        What::Placement(a) => bench_placement::run(a),
        What::Chaining(a) => bench_chaining::run(a),
        What::Tunnel(a) => bench_tunnel::run(a),
        What::Migration(a) => bench_migration::run(a),
        What::Control(a) => bench_control::run(a),
    }
}
