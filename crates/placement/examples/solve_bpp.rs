//! Solves BPPLIB files with the exact solver and prints one line per file (objective,
//! bound, proof flag, seconds): a quick way to profile single benchmark instances.
//! Usage: `cargo run --release -p nfx-placement --example solve_bpp -- SECONDS FILE...`

use nfx_placement::{bpp, place, Algorithm};
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(limit) = args.next().and_then(|s| s.parse::<f64>().ok()) else {
        eprintln!("usage: solve_bpp SECONDS FILE...");
        std::process::exit(2);
    };
    for file in args {
        match bpp::read_bpp(std::path::Path::new(&file)).and_then(|b| {
            place(
                &b.to_instance(),
                Algorithm::Exact,
                Duration::from_secs_f64(limit),
            )
        }) {
            Ok(p) => println!(
                "{file}: objective {} bound {} proven {} {:.3} s",
                p.objective, p.bound, p.proven_optimal, p.seconds
            ),
            Err(e) => println!("{file}: error {e}"),
        }
    }
}
