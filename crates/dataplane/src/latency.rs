//! Each packet's time in the worker: from the kernel's receive stamp (the ring slot's
//! `tp_sec`/`tp_nsec`, taken when the frame arrived, so time spent waiting in the ring
//! while the worker was throttled or asleep counts) to the end of its vector's send,
//! recorded in a fixed log-bucket histogram (no allocation on the packet path) over a
//! window of the last one to two seconds. The stats report its p50, p99 and maximum
//! ([`LatencyStats`]): what the power manager checks a service's latency SLA against.

use nfx_proto::stats::LatencyStats;

/// Sub-buckets per power of two (2^`SUB_BITS`): a bucket spans at most 1/8 of its lower
/// edge, so a quantile read from the histogram is within 12.5 % of the true one.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Largest value kept apart, ns (~550 s); larger ones fall in the last bucket.
const MAX_NS: u64 = (1 << 39) - 1;
/// Buckets: values below [`SUB`] one each, then [`SUB`] per power of two up to 2^39.
pub const BUCKETS: usize = (39 - SUB_BITS as usize + 1) * SUB;
/// A stamp further than this from the worker's clock is not a receive time on that
/// clock (another clock's stamp, or a clock step) and is counted as unstamped.
const PLAUSIBLE_NS: u64 = 10_000_000_000;

/// The bucket of a value in ns.
pub fn bucket(ns: u64) -> usize {
    let v = ns.min(MAX_NS);
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    ((e - SUB_BITS + 1) as usize) * SUB + ((v >> (e - SUB_BITS)) as usize - SUB)
}

/// The values of bucket `i`: `lower..upper` ns.
pub fn bucket_range(i: usize) -> (u64, u64) {
    if i < SUB {
        return (i as u64, i as u64 + 1);
    }
    let (k, s) = ((i / SUB) as u32, (i % SUB) as u64);
    ((SUB as u64 + s) << (k - 1), (SUB as u64 + s + 1) << (k - 1))
}

/// A histogram of latencies in ns.
#[derive(Clone)]
pub struct Histogram {
    counts: [u64; BUCKETS],
    n: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: [0; BUCKETS],
            n: 0,
            max: 0,
        }
    }
}

impl Histogram {
    /// Counts one value.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.n += 1;
        self.max = self.max.max(ns);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// The largest value counted (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Adds another histogram's counts.
    pub fn add(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.n += o.n;
        self.max = self.max.max(o.max);
    }

    /// The `q` quantile (0..=1), ns: the last value of the bucket that holds the
    /// `⌈q·n⌉`-th smallest value (never above the maximum), so it is at least the true
    /// quantile and less than 12.5 % above it. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return (bucket_range(i).1 - 1).min(self.max);
            }
        }
        self.max
    }

    /// Forgets every value.
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.n = 0;
        self.max = 0;
    }
}

/// A worker's latency over a sliding window: the histogram of the current period and
/// of the one before, swapped every [`LatencyWindow::rotate`].
#[derive(Default)]
pub struct LatencyWindow {
    now: Histogram,
    before: Histogram,
    /// When the period before began (monotonic ns); 0 before the first rotation.
    before_ns: u64,
    /// When the current period began.
    now_ns: u64,
    unstamped: u64,
    /// A receive with stamps was seen: the ports carry kernel receive times.
    stamped: bool,
}

impl LatencyWindow {
    /// A window whose first period starts at `now_ns` (monotonic).
    pub fn new(now_ns: u64) -> Self {
        Self {
            before_ns: now_ns,
            now_ns,
            ..Self::default()
        }
    }

    /// Records the frames of one vector: `stamps` are their kernel receive times,
    /// `sent_ns` the end of the vector's send, both on the stamp clock
    /// ([`nfx_io::stamp_clock_ns`]). Stamps that are 0 or implausible are counted as
    /// unstamped.
    #[inline]
    pub fn record(&mut self, stamps: &[u64], sent_ns: u64) {
        self.stamped |= !stamps.is_empty();
        for &s in stamps {
            match sent_ns.checked_sub(s) {
                Some(d) if s != 0 && d <= PLAUSIBLE_NS => self.now.record(d),
                // A stamp a little ahead of the worker's clock read: the same instant.
                None if s - sent_ns <= 1_000 => self.now.record(0),
                _ => self.unstamped += 1,
            }
        }
    }

    /// Starts a new period at `now_ns`: the current one becomes the one before.
    pub fn rotate(&mut self, now_ns: u64) {
        std::mem::swap(&mut self.now, &mut self.before);
        self.now.clear();
        self.before_ns = self.now_ns;
        self.now_ns = now_ns;
    }

    /// The window's figures at `now_ns`, or `None` while no receive carried stamps
    /// (ports without a receive ring, or nothing received yet).
    pub fn stats(&self, now_ns: u64) -> Option<LatencyStats> {
        if !self.stamped {
            return None;
        }
        let mut h = self.before.clone();
        h.add(&self.now);
        let us = |ns: u64| ns as f64 / 1e3;
        Some(LatencyStats {
            window_s: now_ns.saturating_sub(self.before_ns) as f64 / 1e9,
            packets: h.count(),
            p50_us: us(h.quantile(0.5)),
            p99_us: us(h.quantile(0.99)),
            max_us: us(h.max()),
            unstamped: self.unstamped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_contiguous_and_each_value_lies_in_its_own() {
        let mut next = 0;
        for i in 0..BUCKETS {
            let (lo, hi) = bucket_range(i);
            assert_eq!(lo, next, "bucket {i}");
            assert!(hi > lo);
            assert_eq!(bucket(lo), i);
            assert_eq!(bucket(hi - 1), i);
            if lo >= SUB as u64 {
                assert!((hi - lo) * 8 <= lo, "bucket {i} is wider than 1/8 of {lo}");
            }
            next = hi;
        }
        assert_eq!(next, MAX_NS + 1);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_range(bucket(1000)), (960, 1024));
        assert_eq!(bucket(7), 7);
        assert_eq!(bucket(8), 8);
        assert_eq!(bucket(16), 16);
    }

    #[test]
    fn an_empty_histogram_reads_zero_and_one_value_reads_itself() {
        let mut h = Histogram::default();
        assert_eq!((h.quantile(0.5), h.quantile(0.99), h.max()), (0, 0, 0));
        h.record(1234);
        assert_eq!(
            (h.quantile(0.0), h.quantile(0.5), h.quantile(1.0)),
            (1234, 1234, 1234)
        );
    }

    #[test]
    fn the_window_drops_implausible_stamps_and_forgets_old_periods() {
        let mut w = LatencyWindow::new(0);
        assert_eq!(w.stats(5), None);
        let t = 1_700_000_000_000_000_000u64;
        w.record(&[t - 5_000, t - 20_000, 0, 7, t + 500], t);
        let s = w.stats(500_000_000).unwrap();
        assert_eq!((s.packets, s.unstamped), (3, 2));
        assert_eq!(s.max_us, 20.0);
        assert_eq!(s.window_s, 0.5);
        w.rotate(1_000_000_000);
        w.record(&[t - 1_000], t);
        assert_eq!(w.stats(1_500_000_000).unwrap().packets, 4);
        w.rotate(2_000_000_000);
        let s = w.stats(2_000_000_000).unwrap();
        assert_eq!((s.packets, s.window_s), (1, 1.0));
        w.rotate(3_000_000_000);
        let s = w.stats(3_000_000_000).unwrap();
        assert_eq!((s.packets, s.p99_us, s.max_us), (0, 0.0, 0.0));
    }

    proptest! {
        /// Against a sorted reference: every quantile read is at least the true one and
        /// less than 12.5 % (plus 1 ns) above it; count and maximum are exact.
        #[test]
        fn quantiles_follow_the_sorted_values(
            mut v in prop::collection::vec(0u64..(1 << 34), 1..400),
            qs in prop::collection::vec(0.0f64..=1.0, 1..8),
        ) {
            let mut h = Histogram::default();
            for &x in &v {
                h.record(x);
            }
            v.sort_unstable();
            prop_assert_eq!(h.count(), v.len() as u64);
            prop_assert_eq!(h.max(), *v.last().unwrap());
            for q in qs.into_iter().chain([0.5, 0.99, 1.0]) {
                let rank = ((q * v.len() as f64).ceil() as usize).max(1);
                let truth = v[rank - 1];
                let got = h.quantile(q);
                prop_assert!(got >= truth, "q {} got {} truth {}", q, got, truth);
                prop_assert!(got <= truth + truth / 8 + 1, "q {} got {} truth {}", q, got, truth);
            }
        }
    }
}
