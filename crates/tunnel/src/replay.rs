//! The ESP anti-replay window (RFC 4303 §3.4.3, bitmap kept in 64-bit blocks as in
//! RFC 6479 so sliding the window clears whole words instead of shifting bits).

/// A sliding window over received sequence numbers (64-bit, ESN or not).
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    top: u64,
    size: u64,
    blocks: Vec<u64>,
}

impl ReplayWindow {
    /// A window accepting `size` sequence numbers below the highest seen (`size` is
    /// rounded up to a multiple of 64, minimum 64).
    pub fn new(size: u64) -> Self {
        let size = size.max(64).div_ceil(64) * 64;
        ReplayWindow {
            top: 0,
            size,
            blocks: vec![0; (size / 64 + 1) as usize],
        }
    }

    /// The window size in packets.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The highest sequence number accepted so far (0 before the first packet).
    pub fn top(&self) -> u64 {
        self.top
    }

    fn slot(&self, seq: u64) -> (usize, u64) {
        let n = self.blocks.len() as u64;
        (((seq / 64) % n) as usize, 1u64 << (seq % 64))
    }

    /// Whether `seq` would be accepted (new, or inside the window and not yet seen).
    pub fn check(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top {
            return true;
        }
        if seq + self.size <= self.top {
            return false;
        }
        let (b, m) = self.slot(seq);
        self.blocks[b] & m == 0
    }

    /// Marks `seq` as received after its ICV checked out; false if it is a replay.
    pub fn accept(&mut self, seq: u64) -> bool {
        if !self.check(seq) {
            return false;
        }
        if seq > self.top {
            let old = self.top / 64;
            let new = seq / 64;
            let n = self.blocks.len() as u64;
            let clear = (new - old).min(n);
            for i in 1..=clear {
                let b = ((old + i) % n) as usize;
                self.blocks[b] = 0;
            }
            self.top = seq;
        }
        let (b, m) = self.slot(seq);
        self.blocks[b] |= m;
        true
    }

    /// The full 64-bit sequence number of a received low half (RFC 4303 Appendix A2.2).
    pub fn infer_esn(&self, seq_lo: u32) -> u64 {
        let tl = self.top as u32;
        let th = (self.top >> 32) as u32;
        let w = (self.size - 1).min(u32::MAX as u64) as u32;
        let hi = if tl >= w {
            if seq_lo >= tl - w {
                th
            } else {
                th.wrapping_add(1)
            }
        } else if seq_lo >= tl.wrapping_sub(w) {
            th.checked_sub(1).unwrap_or(th)
        } else {
            th
        };
        ((hi as u64) << 32) | seq_lo as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_zero_duplicates_and_old() {
        let mut w = ReplayWindow::new(64);
        assert!(!w.accept(0));
        assert!(w.accept(1));
        assert!(!w.accept(1));
        assert!(w.accept(100));
        assert!(!w.check(36));
        assert!(w.accept(37));
        assert!(!w.accept(37));
        assert!(w.accept(99));
        assert_eq!(w.top(), 100);
    }

    #[test]
    fn size_is_rounded() {
        assert_eq!(ReplayWindow::new(1).size(), 64);
        assert_eq!(ReplayWindow::new(100).size(), 128);
    }

    #[test]
    fn big_jump_clears_window() {
        let mut w = ReplayWindow::new(128);
        for s in 1..=200 {
            assert!(w.accept(s));
        }
        assert!(w.accept(10_000));
        assert!(w.accept(9_990));
        assert!(!w.accept(9_990));
        assert!(w.accept(9_900));
    }

    #[test]
    fn esn_inference_across_wrap() {
        let mut w = ReplayWindow::new(64);
        assert!(w.accept(u32::MAX as u64 - 2));
        assert_eq!(w.infer_esn(5), (1u64 << 32) | 5);
        assert_eq!(w.infer_esn(u32::MAX - 10), u32::MAX as u64 - 10);
        assert!(w.accept((1u64 << 32) | 5));
        assert_eq!(w.infer_esn(u32::MAX - 3), u32::MAX as u64 - 3);
        assert_eq!(w.infer_esn(7), (1u64 << 32) | 7);
    }

    proptest! {
        #[test]
        fn each_seq_accepted_at_most_once(seqs in proptest::collection::vec(1u64..400, 1..300)) {
            let mut w = ReplayWindow::new(64);
            let mut seen = std::collections::HashSet::new();
            for s in seqs {
                if w.accept(s) {
                    prop_assert!(seen.insert(s));
                }
            }
        }
    }
}
