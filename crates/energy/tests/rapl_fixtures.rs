//! The RAPL reader on recorded sysfs trees (tests/fixtures, laid out as the kernel
//! documents them), copied to a temporary directory so the counters can move.

use nfx_energy::rapl::{DomainKind, RaplReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// A private copy of fixture `name` (one per call: tests run in parallel).
fn fixture(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let dst = std::env::temp_dir().join(format!("nfx-energy-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    copy_tree(&src, &dst);
    dst
}

#[test]
fn powercap_zones_are_found_and_the_package_wraps() {
    let root = fixture("powercap-intel");
    let r = RaplReader::discover_in(&root, Path::new("/nonexistent")).unwrap();
    let names: Vec<(&str, DomainKind)> = r
        .domains()
        .iter()
        .map(|d| (d.name.as_str(), d.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("package-0", DomainKind::Package),
            ("core", DomainKind::Core),
            ("uncore", DomainKind::Uncore),
            ("dram", DomainKind::Dram),
            ("psys", DomainKind::Psys),
        ]
    );
    let before = r.read().unwrap();
    // Package: 1 J before its wrap point (262143.328850 J), then 2.5 J past zero → 3.5 J.
    // Core: +2 J. DRAM: 0.5 J to its wrap point + 0.5 J → 1 J.
    std::fs::write(root.join("intel-rapl:0/energy_uj"), "2500000\n").unwrap();
    std::fs::write(root.join("intel-rapl:0:0/energy_uj"), "122000000\n").unwrap();
    std::fs::write(root.join("intel-rapl:0:2/energy_uj"), "500000\n").unwrap();
    std::fs::write(root.join("intel-rapl:1/energy_uj"), "510000000\n").unwrap();
    let after = r.read().unwrap();
    let j = r.joules_between(&before, &after);
    assert!((j[0] - 3.5).abs() < 1e-9, "{j:?}");
    assert!((j[1] - 2.0).abs() < 1e-9);
    assert!((j[3] - 1.0).abs() < 1e-9, "{j:?}");
    assert!((j[4] - 10.0).abs() < 1e-9);
    // Host = package + DRAM (core and uncore are inside the package; psys not added).
    assert!((r.host_joules(&j) - 4.5).abs() < 1e-9);
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_disabled_or_unreadable_zone_is_skipped() {
    let root = fixture("powercap-intel");
    std::fs::write(root.join("intel-rapl:1/enabled"), "0\n").unwrap();
    std::fs::write(root.join("intel-rapl:0:1/energy_uj"), "garbage\n").unwrap();
    let r = RaplReader::discover_in(&root, Path::new("/nonexistent")).unwrap();
    let names: Vec<&str> = r.domains().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["package-0", "core", "dram"]);
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn psys_alone_is_the_host() {
    let root = fixture("powercap-intel");
    for z in [
        "intel-rapl:0",
        "intel-rapl:0:0",
        "intel-rapl:0:1",
        "intel-rapl:0:2",
    ] {
        std::fs::remove_dir_all(root.join(z)).unwrap();
    }
    let r = RaplReader::discover_in(&root, Path::new("/nonexistent")).unwrap();
    assert_eq!(r.host_joules(&[7.0]), 7.0);
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn amd_energy_hwmon_is_read_when_there_is_no_powercap() {
    let root = fixture("hwmon-amd");
    let r = RaplReader::discover_in(Path::new("/nonexistent"), &root).unwrap();
    let names: Vec<(&str, DomainKind)> = r
        .domains()
        .iter()
        .map(|d| (d.name.as_str(), d.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("Ecore000", DomainKind::Core),
            ("Ecore001", DomainKind::Core),
            ("Esocket0", DomainKind::Package),
        ]
    );
    let before = r.read().unwrap();
    std::fs::write(root.join("hwmon2/energy3_input"), "95000000\n").unwrap();
    let j = r.joules_between(&before, &r.read().unwrap());
    assert_eq!(r.host_joules(&j), 5.0);
    std::fs::remove_dir_all(root).unwrap();
}
