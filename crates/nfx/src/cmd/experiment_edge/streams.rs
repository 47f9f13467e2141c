//! The multi-stream cases (the paper's Fig. 4): `n` streams of the clip at once through
//! the chain, each on its own ports and key, all served by one edge and one cloud VNF
//! worker (HW-VNF: one queue pair each, batches across streams). Per run: the mean over the streams of their
//! execution time and E2E latency, the chunks lost and corrupt, and the energy of the
//! VNF threads (edge and cloud) and the lookaside device from the energy meter, labelled
//! with the meter's source (`model` where there is no RAPL).

use super::{finish, start, CaseRun, Env, Run, VnfThreads};
use nfx_energy::{Group, GroupKind, HostBusy, HostModel, Meter, MeterConfig, Source, Target};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// Ports of the streams: a fresh range per run, so no run waits for another's sockets.
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

fn ports(n: u32) -> u16 {
    const BASE: u16 = 9000;
    const SPAN: u16 = 20_000;
    let off = NEXT_PORT.fetch_add(n as u16, Ordering::Relaxed) % (SPAN - 200);
    BASE + off
}

/// Meter sampling period: a thread that ends between two samples loses at most this.
const TICK: Duration = Duration::from_millis(100);

/// Runs `n` streams of case `c` at once; `device` is the lookaside device's pid.
pub fn multi_run(
    env: &Env<'_>,
    c: CaseRun,
    n: u32,
    model: &HostModel,
    device: u32,
) -> anyhow::Result<(Run, Source)> {
    let threads: VnfThreads = Default::default();
    let base = ports(n);
    let ports: Vec<u16> = (0..n).map(|i| base + i as u16).collect();
    let pending = start(env, c, &ports, Some(threads.clone()))?;
    let mut meter = Meter::new(MeterConfig {
        host: "edge".into(),
        model: Some(model.clone()),
        busy: HostBusy::Groups,
        use_rapl: true,
    })?;
    let source = meter.source();
    let registered = Instant::now();
    while threads.lock().map_or(0, |v| v.len()) < 2
        && registered.elapsed() < Duration::from_secs(10)
        && !pending.finished()
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut targets: Vec<Target> = threads
        .lock()
        .map(|v| {
            v.iter()
                .map(|&(pid, tid)| Target::Thread { pid, tid })
                .collect()
        })
        .unwrap_or_default();
    targets.push(Target::Process { pid: device });
    meter.add_group(Group {
        name: "vnf".into(),
        kind: GroupKind::Vnf,
        targets,
        reserved_cores: 1.0,
    });
    meter.sample()?;
    let mut joules = 0.0;
    loop {
        std::thread::sleep(TICK);
        if let Some(g) = meter.sample()?.groups.first() {
            joules = g.energy.joules;
        }
        if pending.finished() {
            break;
        }
    }
    let runs = finish(env, c, pending, true)?;
    Ok((combine(&runs, n, joules), source))
}

/// One run of `n` streams from its streams' runs: means of their times, sums of their
/// chunks; decoded when the first stream (the one ffmpeg decodes) was.
fn combine(runs: &[Run], n: u32, joules: f64) -> Run {
    let k = runs.len().max(1) as f64;
    let first = &runs[0];
    Run {
        streams: n,
        exec_ms: runs.iter().map(|r| r.exec_ms).sum::<f64>() / k,
        engine_ms: runs.iter().map(|r| r.engine_ms).sum::<f64>() / k,
        e2e_ms: runs.iter().map(|r| r.e2e_ms).sum::<f64>() / k,
        lost_chunks: runs.iter().map(|r| r.lost_chunks).sum(),
        corrupt_chunks: runs.iter().map(|r| r.corrupt_chunks).sum(),
        vnf_dropped: runs.iter().map(|r| r.vnf_dropped).sum(),
        ok_chunks: runs.iter().map(|r| r.ok_chunks).sum(),
        decoded: first.decoded,
        energy_j: Some(joules),
        ..first.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_combine_into_one_run() {
        let r = |e2e: f64, lost: u64| Run {
            codec: "h264",
            vnf: "hw",
            proto: "udp",
            chunk: 512,
            streams: 1,
            run: 3,
            exec_ms: 1.0,
            engine_ms: 0.5,
            e2e_ms: e2e,
            lost_chunks: lost,
            corrupt_chunks: 0,
            vnf_dropped: 0,
            ok_chunks: 10,
            decoded: true,
            energy_j: None,
        };
        let c = combine(&[r(2.0, 1), r(4.0, 0)], 2, 7.5);
        assert_eq!((c.streams, c.run, c.e2e_ms, c.lost_chunks), (2, 3, 3.0, 1));
        assert_eq!((c.ok_chunks, c.energy_j), (20, Some(7.5)));
    }

    #[test]
    fn port_ranges_do_not_overlap_between_runs() {
        let a = ports(100);
        let b = ports(100);
        assert!(b >= a + 100 || b < a, "{a} {b}");
    }
}
