//! The exact solver reaches the proven optimum of a sample of classical bin-packing
//! instances (hard28, Falkenauer U and T, Scholl 1–2); the full sweep is
//! `nfx bench placement`. Skipped with a notice when the data directory is absent.

use nfx_placement::{bpp, place, validate, Algorithm};
use std::time::Duration;

const SAMPLE: &[&str] = &[
    "Hard28_BPP531",
    "Hard28_BPP175",
    "Falkenauer_u120_08",
    "Falkenauer_u250_00",
    "Falkenauer_t60_00",
    "Falkenauer_t120_03",
    "N1C1W1_A",
    "N2C2W2_B",
    "N1W1B1R0",
    "N2W2B1R0",
];

#[test]
fn exact_reaches_known_optima_on_a_sample() {
    let Some(dir) = bpp::data_dir() else {
        eprintln!("notice: bin-packing data not found (set NFX_BPP_DIR); skipping");
        return;
    };
    let optima = bpp::read_optima(&dir).unwrap();
    for name in SAMPLE {
        let e = optima
            .iter()
            .find(|e| e.name == *name)
            .unwrap_or_else(|| panic!("{name} not in optima.csv"));
        let b = bpp::read_bpp(&e.file).unwrap();
        assert_eq!((b.weights.len(), b.capacity), (e.n, e.capacity), "{name}");
        let inst = b.to_instance();
        let p = place(&inst, Algorithm::Exact, Duration::from_secs(60)).unwrap();
        let f = place(&inst, Algorithm::Ffd, Duration::from_secs(1)).unwrap();
        assert_eq!(
            validate::check(&inst, &p.device_of),
            Ok(p.objective),
            "{name}"
        );
        assert!(
            p.objective <= f.objective,
            "{name}: exact {} > ffd {}",
            p.objective,
            f.objective
        );
        assert_eq!(p.objective, e.optimum, "{name}: bound {}", p.bound);
        assert!(p.proven_optimal, "{name}");
        eprintln!(
            "{name}: {} bins in {:.3} s (ffd {})",
            p.objective, p.seconds, f.objective
        );
    }
}
