//! BPF map operations by file descriptor, through the `bpf(2)` system call: single
//! elements and the batch commands (BPF_MAP_*_BATCH, kernel ≥ 5.6) that move a table's
//! entries in a few calls — what the table tier's state export and import use.
//!
//! Keys and values are byte slices of the map's key and value sizes; the kernel checks
//! nothing else, so the callers' types must match the map's layout.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// Update flag: create or replace.
pub const BPF_ANY: u64 = 0;
/// Update flag: create only (EEXIST when present).
pub const BPF_NOEXIST: u64 = 1;

/// `union bpf_attr` for the element commands.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for the batch commands.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<()> {
    // SAFETY: `attr` is a valid, initialized bpf_attr variant for `cmd` whose pointers
    // (set by the callers) point to buffers of the sizes the map requires.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn elem(
    cmd: libc::c_long,
    fd: BorrowedFd<'_>,
    key: &[u8],
    value: u64,
    flags: u64,
) -> io::Result<()> {
    let mut a = ElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value,
        flags,
        ..Default::default()
    };
    sys_bpf(cmd, &mut a)
}

/// Reads the value of `key` into `value`; `Ok(false)` when the key is absent.
pub fn lookup(fd: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    match elem(BPF_MAP_LOOKUP_ELEM, fd, key, value.as_mut_ptr() as u64, 0) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes `key` → `value` with `flags` ([`BPF_ANY`], [`BPF_NOEXIST`]).
pub fn update(fd: BorrowedFd<'_>, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
    elem(BPF_MAP_UPDATE_ELEM, fd, key, value.as_ptr() as u64, flags)
}

/// Removes `key`; `Ok(false)` when it was absent.
pub fn delete(fd: BorrowedFd<'_>, key: &[u8]) -> io::Result<bool> {
    match elem(BPF_MAP_DELETE_ELEM, fd, key, 0, 0) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads every entry of a hash or array map with BPF_MAP_LOOKUP_BATCH, `chunk` entries
/// per call; returns the keys and values, concatenated.
pub fn lookup_all(
    fd: BorrowedFd<'_>,
    key_size: usize,
    value_size: usize,
    chunk: usize,
) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut chunk = chunk.max(1);
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    // The batch token is opaque to userspace: bucket index (hash) or key (array).
    let mut token = vec![0u8; key_size.max(8)];
    let mut next = vec![0u8; key_size.max(8)];
    let mut first = true;
    loop {
        let at_k = keys.len();
        let at_v = values.len();
        keys.resize(at_k + chunk * key_size, 0);
        values.resize(at_v + chunk * value_size, 0);
        let mut a = BatchAttr {
            in_batch: if first { 0 } else { token.as_ptr() as u64 },
            out_batch: next.as_mut_ptr() as u64,
            keys: keys[at_k..].as_mut_ptr() as u64,
            values: values[at_v..].as_mut_ptr() as u64,
            count: chunk as u32,
            map_fd: fd.as_raw_fd() as u32,
            ..Default::default()
        };
        let r = sys_bpf(BPF_MAP_LOOKUP_BATCH, &mut a);
        let got = a.count as usize;
        keys.truncate(at_k + got * key_size);
        values.truncate(at_v + got * value_size);
        match r {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok((keys, values)),
            // A hash bucket holds more entries than one call may return: retry larger.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && got == 0 && chunk < 1 << 20 => {
                chunk *= 2;
                continue;
            }
            Err(e) => return Err(e),
        }
        token.copy_from_slice(&next);
        first = false;
    }
}

/// Writes `keys[i]` → `values[i]` for every entry with BPF_MAP_UPDATE_BATCH (create or
/// replace: the batch command takes no NOEXIST). Returns how many were written; on an
/// error the entries before the failing one are written (the count says how many).
pub fn update_all(
    fd: BorrowedFd<'_>,
    keys: &[u8],
    values: &[u8],
    count: usize,
) -> Result<usize, (usize, io::Error)> {
    let mut a = BatchAttr {
        keys: keys.as_ptr() as u64,
        values: values.as_ptr() as u64,
        count: count as u32,
        map_fd: fd.as_raw_fd() as u32,
        ..Default::default()
    };
    match sys_bpf(BPF_MAP_UPDATE_BATCH, &mut a) {
        Ok(()) => Ok(a.count as usize),
        Err(e) => Err((a.count as usize, e)),
    }
}

/// Removes the given keys with BPF_MAP_DELETE_BATCH; returns how many were removed
/// (an absent key stops the batch with ENOENT: callers pass keys they just read).
pub fn delete_all(fd: BorrowedFd<'_>, keys: &[u8], count: usize) -> io::Result<usize> {
    if count == 0 {
        return Ok(0);
    }
    let mut a = BatchAttr {
        keys: keys.as_ptr() as u64,
        count: count as u32,
        map_fd: fd.as_raw_fd() as u32,
        ..Default::default()
    };
    match sys_bpf(BPF_MAP_DELETE_BATCH, &mut a) {
        Ok(()) => Ok(a.count as usize),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(a.count as usize),
        Err(e) => Err(e),
    }
}

/// `f_type` of a BPF file system (`BPF_FS_MAGIC`).
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// True when `dir` lies on a BPF file system (bpffs), where programs, maps and links can
/// be pinned so they outlive the process that made them.
pub fn is_bpffs(dir: &std::path::Path) -> io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `statfs` is plain old data that statfs(2) fills in.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a pointer to a statfs it writes.
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_type as i64 == BPF_FS_MAGIC)
}

/// Makes `dir` a BPF file system: nothing to do when it is one already, else a bpffs
/// instance is mounted on it (created first; mode 0700, needs CAP_SYS_ADMIN). Returns
/// whether it mounted one. The mount belongs to the caller's mount namespace and stays
/// after the caller exits, so what is pinned there survives it.
pub fn ensure_bpffs(dir: &std::path::Path) -> io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    std::fs::create_dir_all(dir)?;
    if is_bpffs(dir)? {
        return Ok(false);
    }
    let target = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            target.as_ptr(),
            c"bpf".as_ptr(),
            0,
            c"mode=0700".as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}
