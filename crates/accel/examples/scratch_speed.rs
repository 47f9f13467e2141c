use nfx_accel::bench::{measure, BenchSpec};
use nfx_accel::*;
use std::time::Duration;
fn cpu_ns() -> u64 {
    let mut ts = libc_ts();
    unsafe { clock_gettime(3, &mut ts) };
    ts.0 as u64 * 1_000_000_000 + ts.1 as u64
}
#[repr(C)]
struct Ts(i64, i64);
fn libc_ts() -> Ts {
    Ts(0, 0)
}
extern "C" {
    fn clock_gettime(c: i32, t: *mut Ts) -> i32;
}
fn main() {
    let algs: Vec<Alg> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    for alg in algs {
        let mut e = soft_engine();
        let spec = BenchSpec {
            phase: Duration::from_millis(300),
            ..Default::default()
        };
        let t0 = cpu_ns();
        let w0 = std::time::Instant::now();
        let m = measure(e.as_mut(), alg, 1420, &spec).unwrap();
        let cpu = (cpu_ns() - t0) as f64;
        let wall = w0.elapsed().as_nanos() as f64;
        println!(
            "{alg}: {:.1} MB/s wall, cpu share {:.2} => {:.1} MB/s per cpu",
            m.mbps,
            cpu / wall,
            m.mbps * wall / cpu
        );
    }
}
