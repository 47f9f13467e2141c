//! The loaded program's maps, by name, with typed element and batch operations on
//! their file descriptors (`nfx_io::bpf`).

use super::raw::Raw;
use super::TableError;
use crate::mapping::Mapping;
use aya::maps::{Map, MapData, RingBuf};
use aya::Ebpf;
use nfx_io::bpf;
use std::os::fd::{AsFd, BorrowedFd};

/// One map taken out of the object.
pub(crate) struct TableMap {
    name: &'static str,
    map: Map,
    /// max_entries as loaded.
    pub capacity: u32,
}

fn data(m: &Map) -> &MapData {
    match m {
        Map::Array(d) | Map::HashMap(d) | Map::PerCpuArray(d) | Map::RingBuf(d) => d,
        _ => unreachable!("the object defines only arrays, hashes and a ring buffer"),
    }
}

impl TableMap {
    /// Takes `name` out of `bpf`.
    pub fn take(bpf: &mut Ebpf, name: &'static str) -> Result<Self, TableError> {
        let map = bpf
            .take_map(name)
            .ok_or_else(|| TableError::Load(format!("map {name} missing from the object")))?;
        let capacity = data(&map)
            .info()
            .map_err(|e| TableError::Load(format!("map {name}: {e}")))?
            .max_entries();
        Ok(Self {
            name,
            map,
            capacity,
        })
    }

    /// The map's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        data(&self.map).fd().as_fd()
    }

    /// The aya map (for the per-CPU arrays, read through aya's typed view).
    pub fn map(&self) -> &Map {
        &self.map
    }

    fn err(&self, what: &str, e: impl std::fmt::Display) -> TableError {
        TableError::Map(format!("{} {what}: {e}", self.name))
    }

    /// Writes `k` → `v`.
    pub fn put<K: Raw, V: Raw>(&self, k: &K, v: &V) -> Result<(), TableError> {
        bpf::update(self.fd(), k.bytes(), v.bytes(), bpf::BPF_ANY)
            .map_err(|e| self.err("update", e))
    }

    /// Reads `k`.
    pub fn get<K: Raw, V: Raw>(&self, k: &K) -> Result<Option<V>, TableError> {
        let mut v = V::default();
        // SAFETY: `Raw` values are plain old data; the buffer is exactly one value.
        let buf = unsafe {
            std::slice::from_raw_parts_mut(
                (&mut v as *mut V).cast::<u8>(),
                std::mem::size_of::<V>(),
            )
        };
        match bpf::lookup(self.fd(), k.bytes(), buf) {
            Ok(true) => Ok(Some(v)),
            Ok(false) => Ok(None),
            Err(e) => Err(self.err("lookup", e)),
        }
    }

    /// Removes `k`; false when absent.
    pub fn remove<K: Raw>(&self, k: &K) -> Result<bool, TableError> {
        bpf::delete(self.fd(), k.bytes()).map_err(|e| self.err("delete", e))
    }

    /// Every entry (batched reads).
    pub fn entries<K: Raw, V: Raw>(&self) -> Result<Vec<(K, V)>, TableError> {
        let (ks, kz) = (std::mem::size_of::<K>(), std::mem::size_of::<V>());
        let (keys, vals) =
            bpf::lookup_all(self.fd(), ks, kz, 4096).map_err(|e| self.err("batch lookup", e))?;
        Ok(keys
            .chunks_exact(ks)
            .zip(vals.chunks_exact(kz))
            .map(|(k, v)| (K::read(k), V::read(v)))
            .collect())
    }

    /// Inserts entries that the caller found absent (one batch; the batch command takes
    /// no NOEXIST flag, so a key the program created since is overwritten with the
    /// imported entry). On an error, what the batch wrote is removed again and the error
    /// says how far it got.
    pub fn insert_all<K: Raw, V: Raw>(&self, rows: &[(K, V)]) -> Result<(), (usize, TableError)> {
        let mut keys = Vec::with_capacity(rows.len() * std::mem::size_of::<K>());
        let mut vals = Vec::with_capacity(rows.len() * std::mem::size_of::<V>());
        for (k, v) in rows {
            keys.extend_from_slice(k.bytes());
            vals.extend_from_slice(v.bytes());
        }
        match bpf::update_all(self.fd(), &keys, &vals, rows.len()) {
            Ok(n) if n == rows.len() => Ok(()),
            Ok(n) => {
                let _ = self.remove_all(&rows[..n]);
                Err((n, self.err("batch update", "short count")))
            }
            Err((n, e)) => {
                let _ = self.remove_all(&rows[..n]);
                Err((n, self.err("batch update", e)))
            }
        }
    }

    /// Removes the keys of `rows` (batched); returns how many were present.
    pub fn remove_all<K: Raw, V>(&self, rows: &[(K, V)]) -> Result<usize, TableError> {
        let mut removed = 0;
        // An absent key ends a delete batch, so go on after it one batch at a time.
        let mut rest = rows;
        while !rest.is_empty() {
            let keys: Vec<u8> = rest.iter().flat_map(|(k, _)| k.bytes().to_vec()).collect();
            let n = bpf::delete_all(self.fd(), &keys, rest.len())
                .map_err(|e| self.err("batch delete", e))?;
            removed += n;
            rest = &rest[(n + 1).min(rest.len())..];
        }
        Ok(removed)
    }
}

/// The ring buffer of events.
pub(crate) fn take_ring(bpf: &mut Ebpf) -> Result<RingBuf<MapData>, TableError> {
    let map = bpf
        .take_map("events")
        .ok_or_else(|| TableError::Load("map events missing from the object".into()))?;
    RingBuf::try_from(map).map_err(|e| TableError::Load(format!("map events: {e}")))
}

/// The array map `name` (`len` u64 words, BPF_F_MMAPABLE) mapped into this process, for
/// atomic updates shared with the program. The map stays open (its descriptor is in the
/// programs, which may be loaded later).
pub(crate) fn take_mapped(
    bpf: &mut Ebpf,
    name: &'static str,
    len: usize,
) -> Result<(TableMap, Mapping), TableError> {
    let map = TableMap::take(bpf, name)?;
    let mapping = Mapping::new(map.fd(), 8, len)
        .map_err(|e| TableError::Load(format!("mapping {name}: {e}")))?;
    Ok((map, mapping))
}
