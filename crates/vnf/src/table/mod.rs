//! A bounded flow table: fixed capacity set from config, no allocation after
//! construction, O(1) lookup, insert and removal, and an incremental expiry scan.
//!
//! Layout: buckets of [`BUCKET`] slots; each key lives in one of two buckets chosen
//! by its hash ("two-choice" bucketized hashing), going to the emptier one. Entries
//! are never relocated, so a slot index stays valid for the life of an entry (NAT
//! links the two directions of a mapping by slot index). When both buckets are full
//! the entry goes to the next bucket with room after its first bucket, and every
//! bucket passed counts one overflow (as in F14 hash tables): lookups follow a chain
//! only while the overflow count says something went further. A 16-bit tag per slot
//! filters key comparisons.
//!
//! Eviction policy when the table holds `max_flows` entries: among the 40 slots of
//! the key's two buckets and the buckets right after its first one, the entry
//! closest to expiry that is either already expired or that its owner says is
//! evictable ([`TableValue::evictable`], e.g. not an established TCP connection) is
//! replaced; if there is none the insert fails and the caller counts a `TableFull`
//! drop.

pub mod blob;
pub mod counts;
pub mod hash;

use hash::FlowHasher;
use nfx_packet::FlowKey;

/// Slots per bucket.
pub const BUCKET: usize = 8;
/// Buckets searched for an eviction victim, from the key's first bucket on (plus
/// its second bucket).
pub const EVICT_WINDOW: usize = 4;
/// Slots allocated per requested flow: 10 % headroom keeps two-choice inserts from
/// running into full buckets before the table holds `max_flows` entries.
const HEADROOM: f64 = 1.10;

/// What a node stores per flow; the table only needs to know what may be evicted.
///
/// # Safety
/// The all-zero bit pattern must be a valid value of the type (plain integers and
/// bools): the table allocates its slots zeroed, so that building a table of a million
/// flows costs no page writes until the slots are used (instance deployment time).
pub unsafe trait TableValue: Copy + Default {
    /// True when this entry may be replaced by a new flow when the table is full.
    fn evictable(&self) -> bool;
}

/// Hints the CPU to start loading the cache line holding `r`.
#[inline(always)]
fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is only a hint; it never faults, and `r` is a valid reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (r as *const T).cast::<i8>(),
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// One table slot: the key, when the entry expires and the node's value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Entry<V> {
    /// Lookup key.
    pub key: FlowKey,
    /// Monotonic time after which the entry is dead.
    pub expires_ns: u64,
    /// Node-specific state.
    pub val: V,
}

/// Result of [`FlowTable::insert`].
#[derive(Debug, Clone, Copy)]
pub enum Insert<V> {
    /// Stored in a free slot.
    New(usize),
    /// Stored in `slot` after removing `old` (expired or evictable) from `from`.
    Evicted {
        /// Where the new entry went.
        slot: usize,
        /// Where the evicted entry was.
        from: usize,
        /// The evicted entry.
        old: Entry<V>,
    },
    /// No free slot and nothing evictable.
    Full,
}

/// `n` all-zero slots from the allocator's zeroed pages (no writes, no page faults
/// until a slot is touched).
fn zeroed_entries<V: TableValue>(n: usize) -> Box<[Entry<V>]> {
    let layout = std::alloc::Layout::array::<Entry<V>>(n).expect("table size fits in memory");
    if layout.size() == 0 {
        return Vec::new().into_boxed_slice();
    }
    // SAFETY: the layout has a non-zero size; the memory comes from the global
    // allocator with exactly this layout, as `Box` expects; every field of `Entry<V>`
    // (FlowKey integers, a u64, and `V` by `TableValue`'s contract) is valid when zero.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<Entry<V>>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n))
    }
}

/// The bounded table. See the module documentation for layout and eviction.
pub struct FlowTable<V> {
    tags: Box<[u16]>,
    overflow: Box<[u32]>,
    entries: Box<[Entry<V>]>,
    nbuckets: usize,
    max_flows: usize,
    len: usize,
    cursor: usize,
    hasher: FlowHasher,
    evictions: u64,
}

impl<V: TableValue> FlowTable<V> {
    /// A table for up to `max_flows` entries (at least 1) with a random hash seed.
    pub fn new(max_flows: usize) -> Self {
        Self::with_hasher(max_flows, FlowHasher::random())
    }

    /// A table with a given hasher (reproducible tests).
    pub fn with_hasher(max_flows: usize, hasher: FlowHasher) -> Self {
        let max_flows = max_flows.max(1);
        let slots = ((max_flows as f64 * HEADROOM) as usize).max(2 * BUCKET);
        let nbuckets = slots.div_ceil(BUCKET);
        let n = nbuckets * BUCKET;
        Self {
            tags: vec![0u16; n].into_boxed_slice(),
            overflow: vec![0u32; nbuckets].into_boxed_slice(),
            entries: zeroed_entries(n),
            nbuckets,
            max_flows,
            len: 0,
            cursor: 0,
            hasher,
            evictions: 0,
        }
    }

    /// Bytes of memory the table holds (fixed at construction).
    pub fn memory_bytes(&self) -> usize {
        self.tags.len() * std::mem::size_of::<u16>()
            + self.overflow.len() * std::mem::size_of::<u32>()
            + self.entries.len() * std::mem::size_of::<Entry<V>>()
            + std::mem::size_of::<Self>()
    }

    /// Most entries the table holds.
    pub fn capacity(&self) -> usize {
        self.max_flows
    }

    /// Slots to examine per 100 ms expiry tick so the whole table is swept about every
    /// 5 s (at least 4096, at most the whole table once), the budget both stateful
    /// nodes pass to `next_expired`.
    pub fn sweep_budget(&self) -> usize {
        (self.slots() / 50).max(4096).min(self.slots())
    }

    /// Number of slots (capacity plus headroom); slot indices are below this.
    pub fn slots(&self) -> usize {
        self.tags.len()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries replaced by [`Self::insert`] since creation.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    #[inline]
    fn locate(&self, key: &FlowKey) -> (usize, usize, u16) {
        let h = self.hasher.hash(key);
        let n = self.nbuckets as u64;
        let b1 = ((h & 0xffff_ffff) * n) >> 32;
        let b2 = ((h >> 32) * n) >> 32;
        (b1 as usize, b2 as usize, (h as u16) | 1)
    }

    #[inline]
    fn find_in(&self, bucket: usize, tag: u16, key: &FlowKey) -> Option<usize> {
        let base = bucket * BUCKET;
        (base..base + BUCKET).find(|&i| self.tags[i] == tag && self.entries[i].key == *key)
    }

    /// The slot holding `key`, if any.
    #[inline]
    pub fn find(&self, key: &FlowKey) -> Option<usize> {
        let (b1, b2, tag) = self.locate(key);
        if let Some(s) = self
            .find_in(b1, tag, key)
            .or_else(|| self.find_in(b2, tag, key))
        {
            return Some(s);
        }
        // Follow the overflow chain; it can at most go once round the table.
        let mut b = b1;
        for _ in 1..self.nbuckets {
            if self.overflow[b] == 0 {
                break;
            }
            b = self.next_bucket(b);
            if let Some(s) = self.find_in(b, tag, key) {
                return Some(s);
            }
        }
        None
    }

    #[inline]
    fn next_bucket(&self, b: usize) -> usize {
        if b + 1 == self.nbuckets {
            0
        } else {
            b + 1
        }
    }

    /// Vector lookup, stage 1: starts loading the tag lines of both buckets of `key`,
    /// so that a node can overlap the cache misses of a whole vector (as VPP does).
    #[inline]
    pub fn prefetch_buckets(&self, key: &FlowKey) {
        let (b1, b2, _) = self.locate(key);
        prefetch(&self.tags[b1 * BUCKET]);
        prefetch(&self.tags[b2 * BUCKET]);
    }

    /// Vector lookup, stage 2 (tags loaded): starts loading the entries whose tag
    /// matches `key`.
    #[inline]
    pub fn prefetch_entry(&self, key: &FlowKey) {
        let (b1, b2, tag) = self.locate(key);
        for b in [b1, b2] {
            for i in b * BUCKET..(b + 1) * BUCKET {
                if self.tags[i] == tag {
                    prefetch(&self.entries[i]);
                }
            }
        }
    }

    /// Starts loading the entry in `slot` (e.g. the other direction of a mapping).
    #[inline]
    pub fn prefetch_slot(&self, slot: usize) {
        if let Some(e) = self.entries.get(slot) {
            prefetch(e);
        }
    }

    /// The entry in `slot` (a slot returned by this table and not removed since).
    pub fn get(&self, slot: usize) -> &Entry<V> {
        &self.entries[slot]
    }

    /// The entry in `slot`, writable (the key must not be changed).
    pub fn get_mut(&mut self, slot: usize) -> &mut Entry<V> {
        &mut self.entries[slot]
    }

    /// True when `slot` holds an entry.
    pub fn occupied(&self, slot: usize) -> bool {
        self.tags.get(slot).is_some_and(|&t| t != 0)
    }

    fn place(&mut self, slot: usize, tag: u16, entry: Entry<V>) {
        self.tags[slot] = tag;
        self.entries[slot] = entry;
    }

    /// Stores `key` in a free slot without evicting anything; `None` when the table
    /// holds `max_flows` entries. `key` must not be present.
    pub fn insert_free(&mut self, key: FlowKey, expires_ns: u64, val: V) -> Option<usize> {
        (self.len < self.max_flows).then(|| self.insert_unchecked(key, expires_ns, val))
    }

    /// Places an entry; the caller made sure that `len < max_flows`, so a free slot
    /// exists and the walk below ends.
    fn insert_unchecked(&mut self, key: FlowKey, expires_ns: u64, val: V) -> usize {
        let (b1, b2, tag) = self.locate(&key);
        let free = |t: &Self, b: usize| {
            t.tags[b * BUCKET..(b + 1) * BUCKET]
                .iter()
                .filter(|&&x| x == 0)
                .count()
        };
        let mut b = if free(self, b2) > free(self, b1) {
            b2
        } else {
            b1
        };
        let slot = loop {
            if let Some(i) = self.tags[b * BUCKET..(b + 1) * BUCKET]
                .iter()
                .position(|&x| x == 0)
            {
                break b * BUCKET + i;
            }
            // Both of the key's buckets are full: walk on from b1, counting an
            // overflow on every bucket passed.
            self.overflow[b] += 1;
            b = self.next_bucket(b);
        };
        self.place(
            slot,
            tag,
            Entry {
                key,
                expires_ns,
                val,
            },
        );
        self.len += 1;
        slot
    }

    /// Stores `key` (which must not be present): in a free slot if the table has
    /// room, else in place of the expired or evictable entry closest to expiry among
    /// the key's two buckets and the [`EVICT_WINDOW`] buckets from its first.
    pub fn insert(&mut self, key: FlowKey, expires_ns: u64, val: V, now_ns: u64) -> Insert<V> {
        if let Some(slot) = self.insert_free(key, expires_ns, val) {
            return Insert::New(slot);
        }
        let (b1, b2, _) = self.locate(&key);
        let n = self.nbuckets;
        let victim = (0..EVICT_WINDOW.min(n))
            .map(|d| (b1 + d) % n)
            .chain(std::iter::once(b2))
            .flat_map(|b| b * BUCKET..(b + 1) * BUCKET)
            .filter(|&i| {
                self.tags[i] != 0
                    && (self.entries[i].expires_ns <= now_ns || self.entries[i].val.evictable())
            })
            .min_by_key(|&i| self.entries[i].expires_ns);
        let Some(from) = victim else {
            return Insert::Full;
        };
        let old = self.remove(from);
        self.evictions += 1;
        let slot = self.insert_unchecked(key, expires_ns, val);
        Insert::Evicted { slot, from, old }
    }

    /// Removes and returns the entry in `slot`.
    pub fn remove(&mut self, slot: usize) -> Entry<V> {
        debug_assert!(self.occupied(slot));
        if self.tags[slot] != 0 {
            self.unlink(slot);
            self.tags[slot] = 0;
            self.len -= 1;
        }
        self.entries[slot]
    }

    /// Takes back the overflow counts that the entry in `slot` added on its way from
    /// its first bucket (none when it sits in one of its own two buckets).
    fn unlink(&mut self, slot: usize) {
        let (b1, b2, _) = self.locate(&self.entries[slot].key);
        let home = slot / BUCKET;
        if home != b1 && home != b2 {
            let mut b = b1;
            while b != home {
                self.overflow[b] -= 1;
                b = self.next_bucket(b);
            }
        }
    }

    /// Advances the expiry cursor over at most `*budget` slots (decrementing it) and
    /// returns the next slot whose entry expired at `now_ns`, without removing it.
    /// Calling this with a fixed budget per timer tick sweeps the whole table in
    /// `slots() / budget` ticks at O(budget) cost per tick.
    pub fn next_expired(&mut self, now_ns: u64, budget: &mut usize) -> Option<usize> {
        while *budget > 0 {
            *budget -= 1;
            let i = self.cursor;
            self.cursor = if i + 1 == self.tags.len() { 0 } else { i + 1 };
            if self.tags[i] != 0 && self.entries[i].expires_ns <= now_ns {
                return Some(i);
            }
        }
        None
    }

    /// Every occupied slot with its entry (export, stats, tests).
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Entry<V>)> + '_ {
        self.tags
            .iter()
            .enumerate()
            .filter(|(_, &t)| t != 0)
            .map(|(i, _)| (i, &self.entries[i]))
    }

    /// Applies `f` to every entry (e.g. to rebase expiry times after an import).
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&mut Entry<V>)) {
        for (i, e) in self.entries.iter_mut().enumerate() {
            if self.tags[i] != 0 {
                f(e);
            }
        }
    }
}

#[cfg(test)]
mod tests;
