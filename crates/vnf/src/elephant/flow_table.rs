//! A fixed-size, set-associative flow table: the bounded memory behind the elephant
//! detector, the DPI stream tails and the DPI event de-duplication.
//!
//! The table holds at most [`FlowTable::capacity`] entries, allocated once. A key
//! hashes (SipHash with a per-table random seed, so crafted flows cannot aim at one
//! bucket) to a bucket of [`WAYS`] slots. When a bucket is full, inserting evicts one
//! of its entries: an entry the caller does not ask to keep, least recently seen
//! first; only if every entry is kept, the least recently seen of all.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};

/// Slots per bucket. Eight keeps a flood of new flows from evicting a busy flow:
/// seven newer flows must land in its bucket between two of its packets.
pub const WAYS: usize = 8;

/// One entry: the key, when it was last seen and the caller's value.
#[derive(Debug, Clone, Default)]
pub struct Slot<K, V> {
    /// The key stored here (meaningless while `used` is false).
    pub key: K,
    /// Monotonic time of the last lookup or insert, in nanoseconds.
    pub last_ns: u64,
    /// The caller's per-entry state.
    pub val: V,
    used: bool,
}

impl<K, V> Slot<K, V> {
    /// True when this slot holds an entry.
    pub fn used(&self) -> bool {
        self.used
    }
}

/// Bounded flow table; see the module documentation for the eviction policy.
#[derive(Debug)]
pub struct FlowTable<K, V> {
    slots: Vec<Slot<K, V>>,
    bucket_mask: usize,
    hasher: RandomState,
    len: usize,
    evictions: u64,
    /// Next slot the expiry sweep looks at.
    cursor: usize,
}

/// What [`FlowTable::get_or_insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Slot index of the entry, valid until the next insert or removal.
    pub index: usize,
    /// True when the entry was created by this call (its value is `V::default()`).
    pub inserted: bool,
    /// True when creating it evicted another entry.
    pub evicted: bool,
}

impl<K: Copy + Eq + Hash + Default, V: Default + Clone> FlowTable<K, V> {
    /// Allocates a table for at least `capacity` entries (rounded up to a power of two
    /// number of buckets of [`WAYS`] slots; at least one bucket).
    pub fn with_capacity(capacity: usize) -> Self {
        let buckets = capacity.div_ceil(WAYS).max(1).next_power_of_two();
        Self {
            slots: vec![Slot::default(); buckets * WAYS],
            bucket_mask: buckets - 1,
            hasher: RandomState::new(),
            len: 0,
            evictions: 0,
            cursor: 0,
        }
    }

    fn bucket_start(&self, key: &K) -> usize {
        // Truncating the 64-bit hash is intended: only the low bits pick a bucket.
        (self.hasher.hash_one(key) as usize & self.bucket_mask) * WAYS
    }

    /// Index of the entry holding `key`, if any.
    pub fn find(&self, key: &K) -> Option<usize> {
        let start = self.bucket_start(key);
        (start..start + WAYS).find(|&i| self.slots[i].used && self.slots[i].key == *key)
    }

    /// Finds `key` or creates it, stamping it with `now_ns`. When the bucket is full,
    /// an entry for which `keep` is false is evicted first (least recently seen).
    pub fn get_or_insert(&mut self, key: K, now_ns: u64, keep: impl Fn(&V) -> bool) -> Entry {
        let start = self.bucket_start(&key);
        let mut free = None;
        for i in start..start + WAYS {
            let s = &mut self.slots[i];
            if s.used && s.key == key {
                s.last_ns = now_ns;
                return Entry {
                    index: i,
                    inserted: false,
                    evicted: false,
                };
            }
            if !s.used && free.is_none() {
                free = Some(i);
            }
        }
        let (index, evicted) = match free {
            Some(i) => {
                self.len += 1;
                (i, false)
            }
            None => {
                let victim = (start..start + WAYS)
                    .min_by_key(|&i| (keep(&self.slots[i].val), self.slots[i].last_ns))
                    .unwrap_or(start);
                self.evictions += 1;
                (victim, true)
            }
        };
        self.slots[index] = Slot {
            key,
            last_ns: now_ns,
            val: V::default(),
            used: true,
        };
        Entry {
            index,
            inserted: true,
            evicted,
        }
    }

    /// The slot at `index` (from [`Self::find`] or [`Self::get_or_insert`]).
    pub fn slot(&self, index: usize) -> &Slot<K, V> {
        &self.slots[index]
    }

    /// The slot at `index`, writable.
    pub fn slot_mut(&mut self, index: usize) -> &mut Slot<K, V> {
        &mut self.slots[index]
    }

    /// Frees the entry at `index` (no-op on a free slot).
    pub fn remove(&mut self, index: usize) {
        if let Some(s) = self.slots.get_mut(index) {
            if s.used {
                *s = Slot::default();
                self.len -= 1;
            }
        }
    }

    /// Slots one [`Self::expire`] call looks at: the whole table in at most 50 calls
    /// (5 s at the worker's 100 ms tick), at least 4,096 slots per call, the same
    /// budget as the conntrack table's sweep.
    pub fn sweep_budget(&self) -> usize {
        (self.slots.len() / 50).max(4096)
    }

    /// Frees the entries not seen for more than `idle_ns` among the next
    /// [`Self::sweep_budget`] slots of a sweep that goes round the table; returns how
    /// many. Called once per tick, it frees an idle entry at most 50 ticks late at
    /// O(budget) cost per tick, instead of scanning a million-slot table every tick.
    pub fn expire(&mut self, now_ns: u64, idle_ns: u64) -> usize {
        let n = self.slots.len();
        let mut freed = 0;
        for _ in 0..self.sweep_budget().min(n) {
            let s = &mut self.slots[self.cursor];
            if s.used && now_ns.saturating_sub(s.last_ns) > idle_ns {
                *s = Slot::default();
                freed += 1;
            }
            self.cursor = if self.cursor + 1 == n {
                0
            } else {
                self.cursor + 1
            };
        }
        self.len -= freed;
        freed
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most entries the table can hold (its fixed slot count).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Entries evicted to make room since the table was created.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Bytes of slot storage, fixed at creation: the table's memory bound.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<K, V>>()
    }

    /// Iterates over the used slots.
    pub fn iter(&self) -> impl Iterator<Item = &Slot<K, V>> {
        self.slots.iter().filter(|s| s.used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_rounds_up_to_whole_power_of_two_buckets() {
        let t: FlowTable<u32, u8> = FlowTable::with_capacity(100);
        assert_eq!(t.capacity(), 16 * WAYS);
        let t: FlowTable<u32, u8> = FlowTable::with_capacity(0);
        assert_eq!(t.capacity(), WAYS);
        assert_eq!(
            t.memory_bytes(),
            WAYS * std::mem::size_of::<Slot<u32, u8>>()
        );
    }

    #[test]
    fn insert_find_and_remove() {
        let mut t: FlowTable<u32, u64> = FlowTable::with_capacity(64);
        let e = t.get_or_insert(7, 10, |_| false);
        assert!(e.inserted && !e.evicted);
        t.slot_mut(e.index).val = 99;
        let again = t.get_or_insert(7, 20, |_| false);
        assert_eq!(
            again,
            Entry {
                index: e.index,
                inserted: false,
                evicted: false
            }
        );
        assert_eq!(t.slot(e.index).val, 99);
        assert_eq!(t.slot(e.index).last_ns, 20);
        assert_eq!(t.find(&7), Some(e.index));
        assert_eq!(t.len(), 1);
        t.remove(e.index);
        t.remove(e.index);
        assert_eq!(t.find(&7), None);
        assert!(t.is_empty());
    }

    #[test]
    fn never_grows_past_capacity_and_counts_evictions() {
        let mut t: FlowTable<u32, ()> = FlowTable::with_capacity(32);
        for k in 0..10_000u32 {
            t.get_or_insert(k, u64::from(k), |_| false);
            assert!(t.len() <= t.capacity());
        }
        assert_eq!(t.len(), t.capacity());
        assert_eq!(t.evictions(), 10_000 - t.capacity() as u64);
        assert_eq!(t.iter().count(), t.len());
    }

    #[test]
    fn eviction_spares_kept_entries_and_prefers_least_recent() {
        // One bucket: every key collides.
        let mut t: FlowTable<u32, bool> = FlowTable::with_capacity(WAYS);
        let kept = t.get_or_insert(1000, 0, |_| false).index;
        t.slot_mut(kept).val = true;
        for k in 0..WAYS as u32 - 1 {
            t.get_or_insert(k, 1 + u64::from(k), |v| *v);
        }
        // Bucket full; next insert must evict key 0 (oldest not kept), not 1000.
        let e = t.get_or_insert(5000, 100, |v| *v);
        assert!(e.evicted);
        assert!(t.find(&1000).is_some());
        assert!(t.find(&0).is_none());
        assert!(t.find(&1).is_some());
    }

    #[test]
    fn expire_frees_only_idle_entries() {
        let mut t: FlowTable<u32, ()> = FlowTable::with_capacity(64);
        t.get_or_insert(1, 0, |_| false);
        t.get_or_insert(2, 900, |_| false);
        assert_eq!(t.expire(1000, 500), 1);
        assert_eq!(t.len(), 1);
        assert!(t.find(&1).is_none());
        assert!(t.find(&2).is_some());
    }

    #[test]
    fn expiry_of_a_large_table_is_spread_over_fifty_sweeps() {
        let mut t: FlowTable<u32, ()> = FlowTable::with_capacity(1 << 20);
        let n = t.capacity();
        assert_eq!(t.sweep_budget(), n / 50);
        for k in 0..10_000 {
            t.get_or_insert(k, 0, |_| false);
        }
        let per_call: Vec<usize> = (0..51).map(|_| t.expire(1000, 500)).collect();
        assert!(per_call.iter().all(|&f| f < 10_000), "{per_call:?}");
        assert_eq!(per_call.iter().sum::<usize>(), 10_000);
        assert!(t.is_empty());
        assert_eq!(t.expire(1000, 500), 0);
    }
}
