//! Engine measurement in the style of dpdk-test-crypto-perf: pipelined throughput with a
//! batch size, then latency per batch and per single operation.

use std::time::{Duration, Instant};

use crate::{AccelError, Alg, Completion, Direction, Engine, Iv, Layout, Op, SessionSpec, Status};

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// Operations per submitted batch.
    pub batch: usize,
    /// Batches kept in flight in the throughput phase.
    pub depth: usize,
    /// AAD bytes per operation (ESP header size by default).
    pub aad_len: usize,
    /// Time spent in each of the three phases.
    pub phase: Duration,
}

impl Default for BenchSpec {
    fn default() -> Self {
        BenchSpec {
            batch: 32,
            depth: 4,
            aad_len: 8,
            phase: Duration::from_millis(200),
        }
    }
}

/// One engine × algorithm × size result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Throughput in MB/s (data bytes, 10^6) per second of CPU time of the submitting
    /// thread — comparable with `openssl speed`, which also divides by CPU time, and
    /// stable on a shared machine; on an idle machine it equals `mbps_wall`.
    pub mbps: f64,
    /// Throughput in MB/s per second of wall-clock time.
    pub mbps_wall: f64,
    /// Mean CPU nanoseconds per operation in the throughput phase.
    pub ns_per_op: f64,
    /// Median latency of one operation submitted alone.
    pub lat_p50_ns: u64,
    /// 99th percentile of that latency.
    pub lat_p99_ns: u64,
    /// Median latency of a whole batch (submit to last completion).
    pub batch_p50_ns: u64,
    /// 99th percentile of batch latency.
    pub batch_p99_ns: u64,
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn percentile(samples: &mut [u64], q: f64) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    samples.sort_unstable();
    let i = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[i]
}

fn wait_all(e: &mut dyn Engine, out: &mut Vec<Completion>) -> Result<(), AccelError> {
    e.drain(out)?;
    if let Some(c) = out.iter().find(|c| c.status != Status::Ok) {
        return Err(AccelError::BadArgument(format!(
            "benchmark operation failed: {}",
            c.status.as_str()
        )));
    }
    Ok(())
}

/// Measures `alg` with `bytes`-byte operations on `e`.
pub fn measure(
    e: &mut dyn Engine,
    alg: Alg,
    bytes: usize,
    spec: &BenchSpec,
) -> Result<Measurement, AccelError> {
    let key: Vec<u8> = (0..alg.cipher_key_len() as u8).collect();
    let auth: &[u8] = if alg.needs_auth_key() {
        &[0x5a; 32]
    } else {
        &[]
    };
    let sid = e.create_session(SessionSpec::new(alg, Direction::Encrypt, &key, auth))?;
    let total = spec.aad_len + bytes + 32;
    let n_bufs = spec.batch * spec.depth.max(1);
    let layout = Layout::packed(spec.aad_len, bytes);
    let mut iv_bytes = [0u8; 16];
    iv_bytes[..4].copy_from_slice(&[0xca, 0xfe, 0xba, 0xbe]);
    let iv = Iv::new(&iv_bytes[..alg.iv_len()]);
    let mut free: Vec<Op> = Vec::with_capacity(n_bufs);
    for i in 0..n_bufs {
        let mut buf = e.alloc_buf(total)?;
        buf.set_len(total)?;
        buf.as_mut_slice().fill(i as u8);
        free.push(Op {
            session: sid,
            iv,
            layout,
            buf,
            user: i as u64,
        });
    }
    let mut batch: Vec<Op> = Vec::with_capacity(spec.batch);
    let mut out: Vec<Completion> = Vec::with_capacity(n_bufs);

    // Phase 1: pipelined throughput.
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    let mut ops_done = 0u64;
    while start.elapsed() < spec.phase {
        while free.len() >= spec.batch {
            batch.extend(free.drain(free.len() - spec.batch..));
            while !batch.is_empty() {
                if e.submit(&mut batch)? == 0 {
                    break;
                }
            }
            free.append(&mut batch);
            if e.in_flight() >= n_bufs {
                break;
            }
        }
        e.poll(&mut out, usize::MAX);
        if out.is_empty() {
            std::hint::spin_loop();
        }
        for c in out.drain(..) {
            if c.status != Status::Ok {
                return Err(AccelError::BadArgument(format!(
                    "benchmark operation failed: {}",
                    c.status.as_str()
                )));
            }
            ops_done += 1;
            free.push(c.op);
        }
    }
    wait_all(e, &mut out)?;
    let elapsed = start.elapsed().as_nanos() as f64;
    let cpu = (thread_cpu_ns() - cpu0).max(1) as f64;
    ops_done += out.len() as u64;
    free.extend(out.drain(..).map(|c| c.op));
    let ns_per_op = cpu / ops_done.max(1) as f64;
    let mbps = bytes as f64 * ops_done as f64 * 1000.0 / cpu;
    let mbps_wall = bytes as f64 * ops_done as f64 * 1000.0 / elapsed;

    // Phase 2: latency of whole batches.
    let mut batch_lat: Vec<u64> = Vec::with_capacity(100_000);
    let start = Instant::now();
    while start.elapsed() < spec.phase && batch_lat.len() < batch_lat.capacity() {
        batch.extend(free.drain(free.len() - spec.batch..));
        let t0 = Instant::now();
        while !batch.is_empty() {
            e.submit(&mut batch)?;
        }
        wait_all(e, &mut out)?;
        batch_lat.push(t0.elapsed().as_nanos() as u64);
        free.extend(out.drain(..).map(|c| c.op));
    }

    // Phase 3: latency of single operations.
    let mut op_lat: Vec<u64> = Vec::with_capacity(400_000);
    let start = Instant::now();
    while start.elapsed() < spec.phase && op_lat.len() < op_lat.capacity() {
        batch.push(free.pop().expect("buffers are returned"));
        let t0 = Instant::now();
        while !batch.is_empty() {
            e.submit(&mut batch)?;
        }
        wait_all(e, &mut out)?;
        op_lat.push(t0.elapsed().as_nanos() as u64);
        free.extend(out.drain(..).map(|c| c.op));
    }
    drop(free);
    e.destroy_session(sid)?;
    Ok(Measurement {
        mbps,
        mbps_wall,
        ns_per_op,
        lat_p50_ns: percentile(&mut op_lat, 0.5),
        lat_p99_ns: percentile(&mut op_lat, 0.99),
        batch_p50_ns: percentile(&mut batch_lat, 0.5),
        batch_p99_ns: percentile(&mut batch_lat, 0.99),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut v, 0.5), 51);
        assert_eq!(percentile(&mut v, 0.99), 99);
        assert_eq!(percentile(&mut [], 0.5), 0);
    }

    #[test]
    fn measures_soft_engine_quickly() {
        let mut e = crate::soft_engine();
        let spec = BenchSpec {
            phase: Duration::from_millis(10),
            ..BenchSpec::default()
        };
        let m = measure(e.as_mut(), Alg::Aes128Gcm, 256, &spec).unwrap();
        assert!(m.mbps > 0.0 && m.ns_per_op > 0.0 && m.mbps_wall > 0.0);
        assert!(thread_cpu_ns() > 0);
        assert!(m.lat_p50_ns > 0 && m.lat_p99_ns >= m.lat_p50_ns);
        assert!(m.batch_p99_ns >= m.batch_p50_ns && m.batch_p50_ns > 0);
        assert_eq!(e.in_flight(), 0);
    }
}
