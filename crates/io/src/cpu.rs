//! CPU time of the calling thread as the kernel accounts it (user + system), the basis
//! of every per-worker CPU-utilisation figure nfx reports.

use std::time::Duration;

/// User + system CPU time consumed so far by the calling thread (getrusage(RUSAGE_THREAD)).
pub fn thread_cpu_time() -> Duration {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: passes a live rusage. RUSAGE_THREAD cannot fail for the calling thread.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Turns CPU time over wall time into a percentage of one core.
pub fn cpu_pct(cpu: Duration, wall: Duration) -> f64 {
    if wall.is_zero() {
        0.0
    } else {
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn spinning_thread_accrues_cpu_and_sleeping_one_does_not() {
        let busy = std::thread::spawn(|| {
            let c0 = thread_cpu_time();
            let t0 = Instant::now();
            let mut x = 0u64;
            while t0.elapsed() < Duration::from_millis(60) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            (thread_cpu_time() - c0, t0.elapsed())
        })
        .join()
        .unwrap();
        assert!(busy.0 > Duration::ZERO, "spinning thread shows no CPU time");
        let idle = std::thread::spawn(|| {
            let c0 = thread_cpu_time();
            std::thread::park_timeout(Duration::from_millis(60));
            thread_cpu_time() - c0
        })
        .join()
        .unwrap();
        assert!(
            idle < busy.0,
            "parked thread used {idle:?}, spinning one {:?}",
            busy.0
        );
    }

    #[test]
    fn pct_of_wall() {
        assert_eq!(
            cpu_pct(Duration::from_millis(50), Duration::from_millis(100)),
            50.0
        );
        assert_eq!(cpu_pct(Duration::from_millis(5), Duration::ZERO), 0.0);
    }
}
