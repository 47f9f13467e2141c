//! The sequence space of one outbound SA, shared by every worker lane that sends with
//! it. Each lane draws numbers from a block of its own, reserved from the shared
//! counter with one atomic `fetch_add`, so the hot path takes no lock and no number
//! (no AEAD nonce) is handed out twice, whatever the lanes' interleaving. At the end of
//! a batch a lane gives the unused rest of its block back when no other lane reserved
//! after it (one compare-and-swap), so a single busy lane leaves no gaps; with several
//! lanes a gap is at most one block per batch, which the receiver's window slides over.
//!
//! A static key's persisted reservation (`SeqState`) is extended under a mutex only
//! when a block crosses its end (once per `seq_block` numbers, 4 Mi by default).

use std::ops::Range;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::{Arc, Mutex};

use crate::seqstate::SeqState;

/// Numbers a lane reserves at a time (one crypto batch).
pub const BLOCK: u64 = 64;

/// The shared counter of one SA.
#[derive(Debug)]
pub struct SeqSpace {
    /// First number no lane has reserved.
    next: AtomicU64,
    /// Highest usable number (2^32 - 1 without ESN).
    last: u64,
    /// A static key's persisted reservation, and its end (read without the lock).
    persisted: Option<Mutex<SeqState>>,
    until: AtomicU64,
}

impl SeqSpace {
    /// A space starting at `start` whose numbers end at `last`, with the persisted
    /// reservation `state` if the key outlives the process.
    pub fn new(start: u64, last: u64, state: Option<SeqState>) -> Arc<SeqSpace> {
        let until = state.as_ref().map_or(u64::MAX, SeqState::until);
        Arc::new(SeqSpace {
            next: AtomicU64::new(start),
            last,
            persisted: state.map(Mutex::new),
            until: AtomicU64::new(until),
        })
    }

    /// Reserves up to `n` numbers (fewer at the end of the space); `None` when the
    /// space is used up or the persisted reservation cannot be extended.
    fn reserve(&self, n: u64) -> Option<Range<u64>> {
        let start = self.next.fetch_add(n, Relaxed);
        if start > self.last {
            return None;
        }
        let end = start.saturating_add(n).min(self.last.saturating_add(1));
        if end > self.until.load(Acquire) {
            let p = self.persisted.as_ref()?;
            let mut st = p.lock().unwrap_or_else(|e| e.into_inner());
            while end > st.until() {
                let from = st.until().max(start);
                st.reserve_from(from).ok()?;
            }
            self.until.store(st.until(), Release);
        }
        Some(start..end)
    }

    /// The first number no lane has reserved (everything below may have been sent).
    pub fn reserved(&self) -> u64 {
        self.next.load(Relaxed)
    }
}

/// One lane's handle on a [`SeqSpace`]: the block it draws from.
#[derive(Debug)]
pub struct SeqLane {
    space: Arc<SeqSpace>,
    block: Range<u64>,
}

impl SeqLane {
    /// A lane with no block yet.
    pub fn new(space: Arc<SeqSpace>) -> SeqLane {
        SeqLane { space, block: 0..0 }
    }

    /// Another lane on the same space.
    pub fn sibling(&self) -> SeqLane {
        SeqLane::new(Arc::clone(&self.space))
    }

    /// The next sequence number for this lane, or `None` when the space is used up.
    pub fn take(&mut self) -> Option<u64> {
        if self.block.is_empty() {
            self.block = self.space.reserve(BLOCK)?;
        }
        let s = self.block.start;
        self.block.start += 1;
        Some(s)
    }

    /// Ends a batch: the rest of the block goes back to the space if nobody reserved
    /// after it (else it stays unused: a gap, never a repeat).
    pub fn end_batch(&mut self) {
        if !self.block.is_empty() {
            let _ =
                self.space
                    .next
                    .compare_exchange(self.block.end, self.block.start, AcqRel, Relaxed);
        }
        self.block = 0..0;
    }

    /// The space this lane draws from.
    pub fn space(&self) -> &SeqSpace {
        &self.space
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// Lanes on several threads, ending batches at random points: every number is
    /// handed out once at most, and never beyond the end of the space.
    fn no_repeats(threads: usize, draws: &[Vec<u8>], last: u64) -> Vec<u64> {
        let space = SeqSpace::new(1, last, None);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mut lane = SeqLane::new(Arc::clone(&space));
                let plan = draws[t % draws.len()].clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for k in plan {
                        for _ in 0..k {
                            if let Some(s) = lane.take() {
                                got.push(s);
                            }
                        }
                        lane.end_batch();
                    }
                    got
                })
            })
            .collect();
        let all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let mut seen = HashSet::new();
        for &s in &all {
            assert!(s >= 1 && s <= last, "{s} outside 1..={last}");
            assert!(seen.insert(s), "sequence number {s} handed out twice");
        }
        all
    }

    #[test]
    fn one_lane_leaves_no_gaps() {
        let all = no_repeats(1, &[vec![3, 64, 1, 100, 7]], u64::MAX);
        assert_eq!(all, (1..=175).collect::<Vec<_>>());
    }

    #[test]
    fn the_32_bit_space_ends() {
        let space = SeqSpace::new(u32::MAX as u64 - 2, u32::MAX as u64, None);
        let mut a = SeqLane::new(Arc::clone(&space));
        let mut b = a.sibling();
        let got: Vec<Option<u64>> = (0..3).map(|_| a.take()).collect();
        assert_eq!(got, [Some(4294967293), Some(4294967294), Some(4294967295)]);
        assert_eq!(a.take(), None);
        assert_eq!(b.take(), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn threads_never_repeat_a_number(
            threads in 2usize..5,
            draws in proptest::collection::vec(
                proptest::collection::vec(0u8..150, 1..40), 1..4),
            last in prop_oneof![Just(u64::MAX), 100u64..3000],
        ) {
            no_repeats(threads, &draws, last);
        }
    }
}
