//! A chain pinned in a BPF file system, so that it outlives the process that deployed
//! it: its tables (`DIR/maps/<name>`) and its tcx links (`DIR/links/<k>-<program>`) stay
//! in the kernel while they are pinned, and frames keep running the chain with its flow
//! state (connection tracking, NAT mappings, elephant counters, node counters) when
//! that process is killed. A new process takes the chain back with
//! [`TableChain::adopt`]: it loads the programs over the pinned tables and puts them
//! on the pinned links in place of the old ones (`bpf_link_update`, atomic per hook),
//! so no frame finds a port without its chain and no flow loses its state.
//!
//! What is pinned is released by [`TableChain::detach`] or [`unpin`]; dropping a pinned
//! chain keeps it.

use super::raw::{RawPort, RawPortKey};
use super::{plan_all, program_of, Placement, Shape, TableChain, TableError};
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::SchedClassifierLink;
use nfx_io::FileScope;
use nfx_vnf::NodeSpec;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The tables pinned: every map of the object but the per-CPU scratch space.
pub(super) const MAPS: [&str; 15] = [
    "cfg_sel",
    "cfg",
    "ports",
    "svc_sel",
    "counters",
    "gauges",
    "occupancy",
    "fw_rules",
    "fw_ct",
    "nat_map",
    "nat_dnat",
    "nat_public",
    "nat_cursor",
    "ele_flows",
    "events",
];

/// Subdirectory of the tables.
const MAPS_DIR: &str = "maps";
/// Subdirectory of the links.
const LINKS_DIR: &str = "links";

fn pin_err(dir: &Path, e: impl std::fmt::Display) -> TableError {
    TableError::Pinned(format!("{}: {e}", dir.display()))
}

/// Unpins everything under `dir` and removes it (nothing to do when it does not exist):
/// its links are detached and its tables freed once no process holds them.
pub fn unpin(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// The directory under the BPF file system `fs` where the agent of `host` with run
/// directory `run_dir` pins its chains: `nfx/<host>-<hash of the canonical run
/// directory>`, the host's name cut to 64 characters with every one but ASCII letters
/// and digits as `_`. One home for the name: agents pin there, and a testbed removes
/// exactly its own agents' directories by it ([`names_agent_root`]).
pub fn agent_root(fs: &Path, host: &str, run_dir: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::fs::canonicalize(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
    fs.join("nfx").join(format!(
        "{}-{:016x}",
        host_label(host),
        fnv1a(dir.as_os_str().as_bytes())
    ))
}

/// True when `name` is a directory name [`agent_root`] gives an agent of `host`.
pub fn names_agent_root(name: &str, host: &str) -> bool {
    name.strip_prefix(host_label(host).as_str())
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `host` as it appears in its agent's pin directory name.
fn host_label(host: &str) -> String {
    host.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(64)
        .collect()
}

/// FNV-1a, 64 bits: a name for a run directory that stays the same across builds.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `shape` as the tables are loaded (an empty table still has its minimum size).
fn loaded(shape: Shape) -> Shape {
    Shape {
        rules: shape.rules.max(1),
        fw_flows: shape.fw_flows.max(1),
        nat_flows: shape.nat_flows.max(1),
        dnat: shape.dnat.max(1),
        publics: shape.publics.max(1),
        ele_flows: shape.ele_flows.max(1),
    }
}

/// The pinned links of `dir`, in order: (program, pin).
fn pinned_links(dir: &Path) -> Result<Vec<(&'static str, PathBuf)>, TableError> {
    let links = dir.join(LINKS_DIR);
    let mut found = Vec::new();
    for e in std::fs::read_dir(&links).map_err(|e| pin_err(&links, e))? {
        let e = e.map_err(|e| pin_err(&links, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let parsed = name.split_once('-').and_then(|(k, prog)| {
            let prog = [
                program_of(super::HOOK_INGRESS),
                program_of(super::HOOK_EGRESS),
            ]
            .into_iter()
            .find(|p| *p == prog)?;
            Some((k.parse::<usize>().ok()?, prog))
        });
        let (k, prog) = parsed.ok_or_else(|| pin_err(&e.path(), "not a link of a chain"))?;
        found.push((k, prog, e.path()));
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p, path)| (p, path)).collect())
}

impl TableChain {
    /// Deploys `functions` as [`TableChain::deploy`] does, with every table pinned under
    /// `dir` (on a BPF file system; whatever was pinned there is removed first) and its
    /// links pinned there when it is attached: the chain then keeps running, tables and
    /// all, after this process ends, until [`TableChain::detach`] or [`unpin`].
    pub fn deploy_pinned(
        functions: &[(String, NodeSpec)],
        files: impl Into<FileScope>,
        dir: &Path,
    ) -> Result<Self, TableError> {
        let plans = plan_all(functions, &files.into())?;
        unpin(dir).map_err(|e| pin_err(dir, e))?;
        for sub in [MAPS_DIR, LINKS_DIR] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| pin_err(dir, e))?;
        }
        let mut chain = match Self::load(Shape::of(&plans), Some(&dir.join(MAPS_DIR))) {
            Ok(c) => c,
            Err(e) => {
                let _ = unpin(dir);
                return Err(e);
            }
        };
        chain.pins = Some(dir.to_path_buf());
        if let Err(e) = chain.install_plans(functions, plans) {
            chain.detach();
            return Err(e);
        }
        Ok(chain)
    }

    /// Takes back the chain pinned under `dir` by [`TableChain::deploy_pinned`] (by
    /// another process, e.g. before it was killed): loads the programs over its pinned
    /// tables of `shape`, installs `functions` (the configuration it runs; flow state,
    /// counters and NAT port cursors stay) and replaces the program on each pinned link
    /// with this one's, atomically. Refused, with nothing of `dir` changed but the
    /// configuration slot, when the pins are not a chain of `shape` attached at
    /// `placement`; the caller then unpins `dir` and deploys anew.
    pub fn adopt(
        functions: &[(String, NodeSpec)],
        files: impl Into<FileScope>,
        shape: Shape,
        dir: &Path,
        placement: &Placement,
    ) -> Result<Self, TableError> {
        let plans = plan_all(functions, &files.into())?;
        if !shape.holds(&Shape::of(&plans)) {
            return Err(pin_err(dir, "its tables are smaller than the chain needs"));
        }
        let maps = dir.join(MAPS_DIR);
        if let Some(m) = MAPS.iter().find(|m| !maps.join(m).exists()) {
            return Err(pin_err(dir, format!("table {m} is not pinned")));
        }
        let links = pinned_links(dir)?;
        let rows = Self::rows_of(placement)?;
        let mut chain = Self::load(shape, Some(&maps))?;
        if chain.loaded_shape() != loaded(shape) {
            return Err(pin_err(
                dir,
                format!("pinned tables {:?}, not {shape:?}", chain.loaded_shape()),
            ));
        }
        let found: Vec<(RawPortKey, RawPort)> = chain.ports.entries()?;
        let same = |(k, p): &(RawPortKey, RawPort)| {
            use super::raw::Raw;
            rows.iter()
                .any(|(_, rk, rp)| rk.bytes() == k.bytes() && rp.bytes() == p.bytes())
        };
        if found.len() != rows.len() || !found.iter().all(same) || links.len() != rows.len() {
            return Err(pin_err(
                dir,
                "not attached where the device's ports are now",
            ));
        }
        chain.slot = chain.cfg_sel.get(&0u32)?.unwrap_or(0);
        chain.flipped = Some(Instant::now());
        chain.set_plans(functions, plans, false)?;
        for (prog, path) in links {
            let link = PinnedLink::from_pin(&path)
                .map_err(|e| pin_err(&path, e))
                .and_then(|p| {
                    SchedClassifierLink::try_from(FdLink::from(p)).map_err(|e| pin_err(&path, e))
                })?;
            let id = chain
                .program(prog)?
                .attach_to_link(link)
                .map_err(|e| pin_err(&path, format!("replacing its program: {e}")))?;
            chain.links.push((prog, id));
        }
        chain.port_rows = rows.iter().map(|(_, k, _)| *k).collect();
        chain.pins = Some(dir.to_path_buf());
        Ok(chain)
    }

    /// The directory the chain is pinned in, if it is.
    pub fn pinned_at(&self) -> Option<&Path> {
        self.pins.as_deref()
    }

    /// The table sizes as loaded (from the kernel's view of the maps).
    fn loaded_shape(&self) -> Shape {
        Shape {
            rules: self.fw_rules.capacity / 2,
            fw_flows: self.fw_ct.capacity,
            nat_flows: self.nat_map.capacity / 2,
            dnat: self.nat_dnat.capacity / 2,
            publics: self.nat_public.capacity / 2,
            ele_flows: self.ele_flows.capacity,
        }
    }

    /// Pins every link of a pinned chain (nothing to do for another).
    pub(super) fn pin_links(&mut self) -> Result<(), TableError> {
        let Some(dir) = self.pins.clone() else {
            return Ok(());
        };
        let links = dir.join(LINKS_DIR);
        for (k, (name, id)) in std::mem::take(&mut self.links).into_iter().enumerate() {
            let path = links.join(format!("{k}-{name}"));
            let link = self
                .program(name)?
                .take_link(id)
                .map_err(|e| pin_err(&path, e))?;
            let fd = FdLink::try_from(link).map_err(|e| pin_err(&path, e))?;
            let _ = std::fs::remove_file(&path);
            let pinned = fd.pin(&path).map_err(|e| pin_err(&path, e))?;
            let link = SchedClassifierLink::try_from(FdLink::from(pinned))
                .map_err(|e| pin_err(&path, e))?;
            let id = self
                .program(name)?
                .attach_to_link(link)
                .map_err(|e| pin_err(&path, e))?;
            self.links.push((name, id));
        }
        Ok(())
    }
}
