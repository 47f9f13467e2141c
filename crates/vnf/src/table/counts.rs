//! A bounded table of counts per key: flows per source address (the per-source quota of
//! the firewall and the NAT) and NAT mappings per remote endpoint (port-pool use).
//!
//! Open addressing with linear probing and backward-shift deletion, so a removed key
//! leaves no tombstone and probe runs stay short; keys are hashed with a per-table
//! random seed ([`FlowHasher`]), so an outside sender cannot aim its keys at one run.
//! The capacity (most keys held) is fixed at construction, with 25 % slack in the
//! slot array; no allocation after that. A key whose count drops to zero is removed.

use super::hash::FlowHasher;

/// One key's count and a word its owner may use (the NAT keeps its per-remote port
/// cursor there). A count of zero marks a free slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    /// The key.
    pub key: u64,
    /// How many (flows, mappings) the key holds; 0 = free slot.
    pub count: u32,
    /// Owner-defined word, kept while the key is present.
    pub aux: u32,
}

/// The bounded count table.
pub struct CountTable {
    slots: Box<[Count]>,
    len: usize,
    max_keys: usize,
    hasher: FlowHasher,
}

impl CountTable {
    /// A table for up to `max_keys` distinct keys (at least 1) with a random seed.
    pub fn new(max_keys: usize) -> Self {
        Self::with_hasher(max_keys, FlowHasher::random())
    }

    /// A table with a given hasher (reproducible tests).
    pub fn with_hasher(max_keys: usize, hasher: FlowHasher) -> Self {
        let max_keys = max_keys.max(1);
        let n = max_keys + max_keys / 4 + 8;
        Self {
            slots: vec![Count::default(); n].into_boxed_slice(),
            len: 0,
            max_keys,
            hasher,
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of memory the table holds (fixed at construction).
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Count>() + std::mem::size_of::<Self>()
    }

    fn home(&self, key: u64) -> usize {
        ((u128::from(self.hasher.hash_u64(key)) * self.slots.len() as u128) >> 64) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// The slot holding `key`, or the free slot ending its probe run.
    fn probe(&self, key: u64) -> (usize, bool) {
        let mut i = self.home(key);
        loop {
            let s = &self.slots[i];
            if s.count == 0 {
                return (i, false);
            }
            if s.key == key {
                return (i, true);
            }
            i = self.next(i);
        }
    }

    /// The entry of `key`, if it holds anything.
    pub fn get(&self, key: u64) -> Option<&Count> {
        let (i, found) = self.probe(key);
        found.then(|| &self.slots[i])
    }

    /// The entry of `key`, writable (its `aux` word; the count changes only through
    /// [`Self::increment`] and [`Self::decrement`]).
    pub fn get_mut(&mut self, key: u64) -> Option<&mut Count> {
        let (i, found) = self.probe(key);
        found.then(|| &mut self.slots[i])
    }

    /// How much `key` holds (0 when absent).
    pub fn count(&self, key: u64) -> u32 {
        self.get(key).map_or(0, |c| c.count)
    }

    /// Adds one to `key` (a new key starts with `aux`); returns its entry, or `None`
    /// when the key is new and the table already holds its most keys.
    pub fn increment(&mut self, key: u64, aux: u32) -> Option<&mut Count> {
        let (i, found) = self.probe(key);
        if !found {
            if self.len == self.max_keys {
                return None;
            }
            self.slots[i] = Count { key, count: 0, aux };
            self.len += 1;
        }
        let s = &mut self.slots[i];
        s.count = s.count.saturating_add(1);
        Some(s)
    }

    /// Takes one from `key`; the key goes when its count reaches zero. Nothing happens
    /// for an absent key.
    pub fn decrement(&mut self, key: u64) {
        let (i, found) = self.probe(key);
        if !found {
            return;
        }
        self.slots[i].count -= 1;
        if self.slots[i].count == 0 {
            self.remove_at(i);
        }
    }

    /// Frees slot `i` and shifts later members of its probe run back (Knuth's
    /// algorithm R), so lookups never need tombstones.
    fn remove_at(&mut self, mut hole: usize) {
        self.slots[hole].count = 0;
        self.len -= 1;
        let mut j = self.next(hole);
        while self.slots[j].count != 0 {
            let h = self.home(self.slots[j].key);
            // Move j into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                self.slots[hole] = self.slots[j];
                self.slots[j].count = 0;
                hole = j;
            }
            j = self.next(j);
        }
    }

    /// Every held key with its entry (tests, stats).
    pub fn iter(&self) -> impl Iterator<Item = &Count> + '_ {
        self.slots.iter().filter(|s| s.count != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn counts_go_up_and_down_and_keys_leave_at_zero() {
        let mut t = CountTable::new(3);
        assert_eq!(t.increment(7, 99).map(|c| (c.count, c.aux)), Some((1, 99)));
        assert_eq!(t.increment(7, 5).map(|c| (c.count, c.aux)), Some((2, 99)));
        t.increment(8, 0);
        t.increment(9, 0);
        assert!(t.increment(10, 0).is_none(), "a fourth key does not fit");
        assert!(t.increment(9, 0).is_some(), "an existing key still counts");
        t.decrement(7);
        t.decrement(7);
        assert_eq!((t.count(7), t.len()), (0, 2));
        assert!(t.increment(10, 0).is_some(), "the freed key made room");
        t.decrement(12345);
        assert_eq!(t.len(), 3);
    }

    proptest! {
        /// Random increments and decrements over a small key space, with a
        /// colliding hash (seeded) and tiny capacities: the table agrees with a
        /// HashMap model and never holds more keys than its capacity.
        #[test]
        fn agrees_with_a_model(
            cap in 1usize..40,
            ops in proptest::collection::vec((any::<bool>(), 0u64..60), 0..400),
            seed in any::<u64>(),
        ) {
            let mut t = CountTable::with_hasher(cap, FlowHasher::with_seed(seed, !seed));
            let mut m: HashMap<u64, u32> = HashMap::new();
            for (inc, k) in ops {
                if inc {
                    let fits = m.contains_key(&k) || m.len() < cap;
                    prop_assert_eq!(t.increment(k, 0).is_some(), fits);
                    if fits {
                        *m.entry(k).or_insert(0) += 1;
                    }
                } else {
                    t.decrement(k);
                    if let Some(c) = m.get_mut(&k) {
                        *c -= 1;
                        if *c == 0 {
                            m.remove(&k);
                        }
                    }
                }
                prop_assert_eq!(t.len(), m.len());
                prop_assert!(t.len() <= cap);
            }
            for k in 0..60 {
                prop_assert_eq!(t.count(k), m.get(&k).copied().unwrap_or(0));
            }
        }
    }
}
