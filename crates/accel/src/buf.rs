//! Data buffers. An engine hands out buffers from its pool: plain heap memory for the
//! in-process engines, slots of the shared-memory region for the lookaside device (so the
//! device works on them in place, zero-copy). Any engine accepts any buffer.

use std::sync::{Arc, Mutex};

use crate::lookaside::shm::Mapping;
use crate::AccelError;

/// A fixed pool of equal-size slots inside one shared mapping.
pub(crate) struct SlotPool {
    map: Arc<Mapping>,
    offset: usize,
    slot_size: usize,
    count: u32,
    free: Mutex<Vec<u32>>,
}

impl SlotPool {
    /// Slots `0..count` of `slot_size` bytes starting at `offset` in `map`.
    pub(crate) fn new(map: Arc<Mapping>, offset: usize, slot_size: usize, count: u32) -> Self {
        assert!(offset + slot_size * count as usize <= map.len());
        SlotPool {
            map,
            offset,
            slot_size,
            count,
            free: Mutex::new((0..count).rev().collect()),
        }
    }

    /// Takes a free slot as a buffer.
    pub(crate) fn take(self: &Arc<Self>) -> Result<Buf, AccelError> {
        let slot = self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .ok_or(AccelError::NoBuffers(self.count as usize))?;
        Ok(Buf {
            storage: Storage::Slot {
                pool: Arc::clone(self),
                slot,
            },
            len: 0,
        })
    }

    /// Raw pointer to the first byte of `slot`.
    pub(crate) fn slot_ptr(&self, slot: u32) -> *mut u8 {
        debug_assert!(slot < self.count);
        // SAFETY: `new` checked that every slot lies inside the mapping.
        unsafe {
            self.map
                .ptr()
                .add(self.offset + slot as usize * self.slot_size)
        }
    }

    /// Bytes per slot.
    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }

    fn release(&self, slot: u32) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slot);
    }
}

enum Storage {
    Heap(Vec<u8>),
    Slot { pool: Arc<SlotPool>, slot: u32 },
}

/// A data buffer with a capacity and a current length; operations address it by offsets.
pub struct Buf {
    storage: Storage,
    len: usize,
}

// SAFETY: a slot buffer is the only owner of its slot while it exists (the pool hands a
// slot out once and gets it back on drop), so moving it between threads is like moving
// a Vec.
unsafe impl Send for Buf {}

impl Buf {
    /// A heap buffer of `capacity` bytes (the soft and cpu engines' pool).
    pub fn heap(capacity: usize) -> Buf {
        Buf {
            storage: Storage::Heap(vec![0; capacity]),
            len: 0,
        }
    }

    /// A heap buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Buf {
        Buf {
            storage: Storage::Heap(data.to_vec()),
            len: data.len(),
        }
    }

    /// Maximum length.
    pub fn capacity(&self) -> usize {
        match &self.storage {
            Storage::Heap(v) => v.len(),
            Storage::Slot { pool, .. } => pool.slot_size(),
        }
    }

    /// Current length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the length is 0.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the length (contents up to it are whatever the storage holds).
    pub fn set_len(&mut self, len: usize) -> Result<(), AccelError> {
        if len > self.capacity() {
            return Err(AccelError::BadArgument(format!(
                "buffer length {len} exceeds capacity {}",
                self.capacity()
            )));
        }
        self.len = len;
        Ok(())
    }

    /// Replaces the contents with `data`.
    pub fn fill_from(&mut self, data: &[u8]) -> Result<(), AccelError> {
        self.set_len(data.len())?;
        self.as_mut_slice().copy_from_slice(data);
        Ok(())
    }

    /// The bytes `0..len`.
    pub fn as_slice(&self) -> &[u8] {
        match &self.storage {
            Storage::Heap(v) => &v[..self.len],
            // SAFETY: the slot is owned by this buffer and `len <= slot_size`.
            Storage::Slot { pool, slot } => unsafe {
                std::slice::from_raw_parts(pool.slot_ptr(*slot), self.len)
            },
        }
    }

    /// The bytes `0..len`, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.storage {
            Storage::Heap(v) => &mut v[..self.len],
            // SAFETY: as in `as_slice`; `&mut self` makes the access exclusive.
            Storage::Slot { pool, slot } => unsafe {
                std::slice::from_raw_parts_mut(pool.slot_ptr(*slot), self.len)
            },
        }
    }

    /// The slot index when this buffer lives in `pool` (zero-copy for that device).
    pub(crate) fn slot_in(&self, pool: &Arc<SlotPool>) -> Option<u32> {
        match &self.storage {
            Storage::Slot { pool: p, slot } if Arc::ptr_eq(p, pool) => Some(*slot),
            _ => None,
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Storage::Slot { pool, slot } = &self.storage {
            pool.release(*slot);
        }
    }
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.storage {
            Storage::Heap(_) => "heap",
            Storage::Slot { .. } => "shm",
        };
        write!(f, "Buf({kind}, {}/{})", self.len, self.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_len_and_capacity() {
        let mut b = Buf::heap(8);
        assert!(b.is_empty());
        b.fill_from(b"abc").unwrap();
        assert_eq!(b.as_slice(), b"abc");
        assert!(b.set_len(9).is_err());
        b.set_len(8).unwrap();
        assert_eq!(b.as_slice().len(), 8);
    }

    #[test]
    fn slots_are_returned_on_drop() {
        let map = Arc::new(Mapping::anonymous(4 * 64).unwrap());
        let pool = Arc::new(SlotPool::new(map, 0, 64, 4));
        let bufs: Vec<Buf> = (0..4).map(|_| pool.take().unwrap()).collect();
        assert!(matches!(pool.take(), Err(AccelError::NoBuffers(4))));
        let mut slots: Vec<u32> = bufs.iter().map(|b| b.slot_in(&pool).unwrap()).collect();
        slots.sort();
        assert_eq!(slots, vec![0, 1, 2, 3]);
        drop(bufs);
        let mut b = pool.take().unwrap();
        b.fill_from(&[7; 64]).unwrap();
        assert_eq!(b.as_slice(), &[7; 64]);
        assert!(Buf::heap(4).slot_in(&pool).is_none());
    }
}
