//! Per-flow TCP stream tails, so that a pattern split across two segments is found.
//!
//! For each TCP flow (bounded table, least recently seen evicted) the node keeps the
//! last `window` payload bytes it passed and the next expected sequence number. When
//! the next in-order segment arrives, the tail and the first `window` bytes of the new
//! payload form a small haystack that the engine scans once more; a match there that
//! is not wholly inside the tail crossed the boundary. Matches up to `window` bytes
//! long are found across any number of in-order segments. Out-of-order segments and
//! retransmissions restart the tail (no reassembly); FIN/RST free the entry.

use crate::elephant::FlowTable;
use nfx_packet::FlowKey;

#[derive(Debug, Clone, Copy, Default)]
struct TailState {
    next_seq: u32,
    len: u16,
}

/// Bounded store of stream tails: `flows × (window + slot)` bytes, fixed at creation.
#[derive(Debug)]
pub struct StreamTails {
    table: FlowTable<FlowKey, TailState>,
    window: usize,
    tails: Vec<u8>,
    scratch: Vec<u8>,
}

/// The haystack for a cross-boundary scan: tail then payload head.
pub struct Window<'a> {
    /// Tail bytes followed by up to `window + 1` payload bytes.
    pub hay: &'a [u8],
    /// Length of the tail part.
    pub tail_len: usize,
    /// End of the scan span: tail plus at most `window` payload bytes (one more byte,
    /// if the payload has it, stays after the span so `$` does not match there).
    pub span_end: usize,
}

impl StreamTails {
    /// Allocates room for `flows` tails of `window` (1..=65535) bytes.
    pub fn new(flows: usize, window: usize) -> Self {
        let table = FlowTable::with_capacity(flows);
        let tails = vec![0u8; table.capacity() * window];
        Self {
            table,
            window,
            tails,
            scratch: Vec::with_capacity(2 * window + 1),
        }
    }

    /// Flows with a tail now.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when no tail is held.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Most flows held at once.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Bytes of fixed storage (table slots and tail bytes).
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes() + self.tails.len() + self.scratch.capacity()
    }

    /// The cross-boundary haystack for an in-order segment of `key` starting at
    /// `seq`, or `None` when the flow has no tail or the segment is not the next one.
    pub fn window(&mut self, key: &FlowKey, seq: u32, payload: &[u8]) -> Option<Window<'_>> {
        let idx = self.table.find(key)?;
        let st = self.table.slot(idx).val;
        if st.len == 0 || st.next_seq != seq || payload.is_empty() {
            return None;
        }
        let tail_len = usize::from(st.len);
        let start = idx * self.window;
        self.scratch.clear();
        self.scratch
            .extend_from_slice(&self.tails[start..start + tail_len]);
        let head = payload.len().min(self.window);
        let with_context = payload.len().min(self.window + 1);
        self.scratch.extend_from_slice(&payload[..with_context]);
        Some(Window {
            hay: &self.scratch,
            tail_len,
            span_end: tail_len + head,
        })
    }

    /// Records a segment that passed: appends its payload to the flow's tail, or
    /// frees the entry on FIN/RST.
    pub fn update(&mut self, key: &FlowKey, seq: u32, payload: &[u8], closing: bool, now_ns: u64) {
        if closing {
            if let Some(idx) = self.table.find(key) {
                self.table.remove(idx);
            }
            return;
        }
        if payload.is_empty() {
            return;
        }
        let e = self.table.get_or_insert(*key, now_ns, |_| false);
        let st = self.table.slot(e.index).val;
        let w = self.window;
        let tail = &mut self.tails[e.index * w..(e.index + 1) * w];
        let old_len = if !e.inserted && st.next_seq == seq {
            usize::from(st.len)
        } else {
            0
        };
        let new_len = if payload.len() >= w {
            tail.copy_from_slice(&payload[payload.len() - w..]);
            w
        } else {
            let keep = old_len.min(w - payload.len());
            tail.copy_within(old_len - keep..old_len, 0);
            tail[keep..keep + payload.len()].copy_from_slice(payload);
            keep + payload.len()
        };
        // `new_len` ≤ window ≤ 65535 by construction.
        let len = u16::try_from(new_len).unwrap_or(u16::MAX);
        // Sequence numbers wrap modulo 2^32; payloads are < 2^32 bytes.
        let next_seq = seq.wrapping_add(payload.len() as u32);
        self.table.slot_mut(e.index).val = TailState { next_seq, len };
    }

    /// Frees tails idle for more than `idle_ns`; returns how many.
    pub fn expire(&mut self, now_ns: u64, idle_ns: u64) -> usize {
        self.table.expire(now_ns, idle_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> FlowKey {
        FlowKey {
            src: 1,
            dst: 2,
            sport: 3,
            dport: 4,
            proto: 6,
        }
    }

    #[test]
    fn window_joins_tail_and_head_for_in_order_segments() {
        let mut s = StreamTails::new(16, 4);
        assert!(s.window(&key(), 100, b"abc").is_none());
        s.update(&key(), 100, b"hello", false, 0);
        assert!(
            s.window(&key(), 104, b"x").is_none(),
            "not the next segment"
        );
        let w = s.window(&key(), 105, b"world!").unwrap();
        assert_eq!(w.hay, b"elloworld");
        assert_eq!((w.tail_len, w.span_end), (4, 8));
        let w = s.window(&key(), 105, b"ab").unwrap();
        assert_eq!((w.hay, w.span_end), (&b"elloab"[..], 6));
    }

    #[test]
    fn short_segments_accumulate_in_the_tail() {
        let mut s = StreamTails::new(16, 4);
        s.update(&key(), 0, b"a", false, 0);
        s.update(&key(), 1, b"bc", false, 0);
        s.update(&key(), 3, b"de", false, 0);
        assert_eq!(s.window(&key(), 5, b"f").unwrap().hay, b"bcdef");
        // A gap restarts the tail from the new payload alone.
        s.update(&key(), 50, b"xy", false, 0);
        assert_eq!(s.window(&key(), 52, b"z").unwrap().hay, b"xyz");
    }

    #[test]
    fn close_frees_and_memory_is_fixed() {
        let mut s = StreamTails::new(16, 4);
        let mem = s.memory_bytes();
        for i in 0..1000u32 {
            let k = FlowKey { src: i, ..key() };
            s.update(&k, 0, b"data", false, u64::from(i));
        }
        assert_eq!(s.len(), s.capacity());
        assert_eq!(s.memory_bytes(), mem);
        let last = FlowKey { src: 999, ..key() };
        s.update(&last, 4, b"", true, 0);
        assert!(s.window(&last, 4, b"x").is_none());
        assert_eq!(s.len(), s.capacity() - 1);
        assert_eq!(s.expire(10_000, 1), s.capacity() - 1);
        assert!(s.is_empty());
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut s = StreamTails::new(16, 4);
        s.update(&key(), u32::MAX - 1, b"abc", false, 0);
        assert_eq!(s.window(&key(), 1, b"d").unwrap().hay, b"abcd");
    }
}
