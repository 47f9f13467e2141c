//! Solves generated HYPER-style instances with the exact solver and prints, per
//! instance, the root column-generation LP bound, the exact objective and bound and the
//! FFD cost: the quick way to see whether a gap is on the bound or the primal side.
//! Usage: `cargo run --release -p nfx-placement --example solve_generated -- [FAMILY]
//! SECONDS N SEED...` (FAMILY: a name of `families::Family`, default `hyper`).

use nfx_placement::colgen::ColGen;
use nfx_placement::families::Family;
use nfx_placement::problem::Problem;
use nfx_placement::{place, Algorithm};
use std::time::{Duration, Instant};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let family = match args.first().and_then(|a| Family::parse(a)) {
        Some(f) => {
            args.remove(0);
            f
        }
        None => Family::Hyper,
    };
    let parsed: Option<(f64, usize)> = args
        .first()
        .and_then(|s| s.parse().ok())
        .zip(args.get(1).and_then(|s| s.parse().ok()));
    let Some((limit, n)) = parsed else {
        eprintln!("usage: solve_generated [FAMILY] SECONDS N SEED...");
        std::process::exit(2);
    };
    for seed in args[2..].iter().filter_map(|s| s.parse::<u64>().ok()) {
        let inst = family.generate(n, seed);
        let p = Problem::new(&inst);
        let t = Instant::now();
        let root = ColGen::new(&p).solve(
            &p.demands(),
            &p.counts(),
            None,
            f64::INFINITY,
            true,
            t + Duration::from_secs_f64(limit),
        );
        let root_s = t.elapsed().as_secs_f64();
        let ffd = place(&inst, Algorithm::Ffd, Duration::ZERO).map(|r| r.objective);
        match place(&inst, Algorithm::Exact, Duration::from_secs_f64(limit)) {
            Ok(r) => println!(
                "{} root LP {:.2} ({root_s:.2} s) objective {} bound {} gap {:.2} % ffd {:?} {:.2} s",
                inst.name,
                root.bound,
                r.objective,
                r.bound,
                100.0 * (r.objective as f64 - r.bound as f64) / r.bound.max(1) as f64,
                ffd.ok(),
                r.seconds
            ),
            Err(e) => println!("{}: error {e}", inst.name),
        }
    }
}
