//! The table tier's VNFs (HYPER's hardware VNFs, "H-VNFs"): firewall, NAT and
//! elephant detection running entirely in the kernel, as a tc program over bounded BPF
//! maps (`bpf/hvnf.bpf.c`), configured with the software VNFs' own configuration types.
//!
//! A [`TableChain`] is one ordered chain of such functions (at most one of each kind) on
//! one host. Its life, as a host agent drives it (HYPER's unified VNFM calls):
//! - [`TableChain::deploy`] — load the object with every table sized from its
//!   function's configuration (capacity = entries) and install the entries (rules,
//!   port forwards, parameters);
//! - [`TableChain::attach`] — hook it to the ports of a [`Placement`]: alone (it forwards
//!   between two ports itself), before a software worker or after one (a hybrid chain);
//! - [`TableChain::configure`] — new rules or parameters for one function: map updates
//!   into the inactive of two configuration slots, then one word flips them; no reload,
//!   no packet sees half a configuration;
//! - [`TableChain::export_state`] / [`TableChain::import_state`] — flow state for a
//!   migration, moved with batch map operations, in the software nodes' blob format
//!   (IPv4 state is interchangeable with the software firewall and NAT);
//! - [`TableChain::select`] — take only one service's frames, so that several chains (one
//!   per service) share a device's ports, each its own tcx program;
//! - [`TableChain::take_over`] — replace another chain's program on its hooks atomically;
//! - [`TableChain::migrate_to`] — move traffic and flow state to a new chain on the same
//!   host (bulk copy, atomic switch, copy of what was created meanwhile);
//! - [`TableChain::stats`], [`TableChain::events`], [`TableChain::expire`];
//! - [`TableChain::detach`] (and drop).
//!
//! What the tier cannot run is refused at plan time by [`check`].

mod function;
mod maps;
mod migrate;
mod pin;
pub mod raw;
pub mod runconfig;
mod select;
mod state;
mod stats;
pub mod testrun;

pub use function::{check, ElephantPlan, FirewallPlan, Function, NatPlan, Need, Refusal};
pub use migrate::Migration;
pub use pin::{agent_root, names_agent_root, unpin};
pub use select::{FrameMatch, Selection};
pub use stats::{FunctionStats, NodeCounters, TableEvent, TableStats};

use crate::mapping::Mapping;
use aya::maps::{MapData, RingBuf};
use aya::programs::tc::{SchedClassifierLinkId, TcAttachType};
use aya::programs::SchedClassifier;
use aya::Ebpf;
use maps::TableMap;
use nfx_io::FileScope;
use nfx_vnf::{NodeSpec, StateError};
use raw::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The compiled object.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/hvnf.bpf.o"));

/// After a configuration flip, the old slot may still be read by a packet in flight for
/// this long; the next configuration waits before overwriting it.
const FLIP_GRACE: Duration = Duration::from_millis(5);

/// What went wrong with a table-tier operation.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The function cannot run here, or its configuration is invalid.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Loading the object or a program (needs root and kernel ≥ 6.6).
    #[error("table tier: loading: {0}")]
    Load(String),
    /// Attaching to or detaching from an interface.
    #[error("table tier: attach: {0}")]
    Attach(String),
    /// A map operation the kernel refused.
    #[error("table tier: map {0}")]
    Map(String),
    /// A request that does not fit the deployed chain.
    #[error("table tier: {0}")]
    Request(String),
    /// Pinning a chain, or taking a pinned one back.
    #[error("table tier: pinned chain {0}")]
    Pinned(String),
}

/// One port of a table tier that forwards by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// Interface (in the calling thread's network namespace).
    pub iface: String,
    /// MAC address of the next hop on that interface.
    pub peer_mac: [u8; 6],
}

/// Where a chain runs relative to the ports and a software worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The whole chain is on the table tier: frames from `inside` run the chain forward
    /// and leave on `outside` (TTL − 1, next hop's MACs), and back.
    Alone {
        /// Inside port.
        inside: PortSpec,
        /// Outside port.
        outside: PortSpec,
    },
    /// The table tier runs first: on `iface` (the software worker's inside port) the
    /// forward chain runs at ingress before the worker's socket, the reverse chain at
    /// egress after the worker sent. The worker's port must receive after tc ingress
    /// (bound to ETH_P_IP) and send through the qdisc layer (no PACKET_QDISC_BYPASS).
    BeforeSoftware {
        /// The worker's inside interface.
        iface: String,
    },
    /// The software worker runs first: on `iface` (its outside port) the forward chain
    /// runs at egress, the reverse chain at ingress before the worker's socket.
    AfterSoftware {
        /// The worker's outside interface.
        iface: String,
    },
}

/// A deployed chain of table-tier functions.
pub struct TableChain {
    bpf: Ebpf,
    cfg_sel: TableMap,
    cfg: TableMap,
    ports: TableMap,
    svc_sel: TableMap,
    counters: TableMap,
    gauges: TableMap,
    /// The `occupancy` array, mapped (the map itself is kept open beside it).
    occupancy: Mapping,
    _occupancy_map: TableMap,
    fw_rules: TableMap,
    fw_ct: TableMap,
    nat_map: TableMap,
    nat_dnat: TableMap,
    nat_public: TableMap,
    nat_cursor: TableMap,
    ele_flows: TableMap,
    events: RingBuf<MapData>,
    shape: Shape,
    names: Vec<String>,
    functions: Vec<Function>,
    raw: RawCfg,
    slot: u32,
    flipped: Option<Instant>,
    links: Vec<(&'static str, SchedClassifierLinkId)>,
    port_rows: Vec<RawPortKey>,
    swept: [u64; 3],
    /// The bpffs directory its maps and links are pinned in ([`TableChain::deploy_pinned`]).
    pins: Option<PathBuf>,
    /// The frames it takes when it shares its ports ([`TableChain::select`]).
    selection: Option<Selection>,
}

/// The program behind each hook.
fn program_of(hook: u32) -> &'static str {
    if hook == HOOK_EGRESS {
        "hvnf_egress"
    } else {
        "hvnf_ingress"
    }
}

fn kind_code(f: &Function) -> u8 {
    match f {
        Function::Firewall(_) => K_FW,
        Function::Nat(_) => K_NAT,
        Function::Elephant(_) => K_ELE,
    }
}

/// Table sizes of a prepared chain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    /// ACL rules (per configuration bank).
    pub rules: u32,
    /// Connection-tracking entries.
    pub fw_flows: u32,
    /// NAT mappings (two entries each).
    pub nat_flows: u32,
    /// Port forwards (per bank).
    pub dnat: u32,
    /// Public addresses (per bank).
    pub publics: u32,
    /// Elephant-detection flows.
    pub ele_flows: u32,
}

impl Shape {
    /// Exactly what `plans` need.
    pub fn of(plans: &[Function]) -> Self {
        let mut s = Shape::default();
        for p in plans {
            match p {
                Function::Firewall(f) => {
                    s.rules = f.rules.len() as u32;
                    s.fw_flows = f.max_flows;
                }
                Function::Nat(n) => {
                    s.nat_flows = n.max_flows;
                    s.dnat = n.dnat.len() as u32;
                    s.publics = n.publics.len() as u32;
                }
                Function::Elephant(e) => s.ele_flows = e.max_flows,
            }
        }
        s
    }

    /// True when every table of `self` is at least as large as `need`'s.
    pub fn holds(&self, need: &Shape) -> bool {
        self.rules >= need.rules
            && self.fw_flows >= need.fw_flows
            && self.nat_flows >= need.nat_flows
            && self.dnat >= need.dnat
            && self.publics >= need.publics
            && self.ele_flows >= need.ele_flows
    }
}

/// Plans every function of a chain (a refusal names the function and why).
fn plan_all(
    functions: &[(String, NodeSpec)],
    files: &FileScope,
) -> Result<Vec<Function>, TableError> {
    if functions.is_empty() || functions.len() > MAX_CHAIN {
        return Err(TableError::Request(format!(
            "a table-tier chain holds 1..={MAX_CHAIN} functions, not {}",
            functions.len()
        )));
    }
    let plans = functions
        .iter()
        .map(|(_, s)| Function::plan(s, files.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, p) in plans.iter().enumerate() {
        if plans[..i].iter().any(|q| q.kind() == p.kind()) {
            return Err(TableError::Request(format!(
                "one `{}` per table-tier chain",
                p.kind()
            )));
        }
    }
    Ok(plans)
}

impl TableChain {
    /// Deploys `functions` (instance name and configuration, in forward order) cold:
    /// [`TableChain::prepare`] with the tables they need, then [`TableChain::install`].
    /// Nothing is attached yet. Needs root (CAP_BPF, CAP_NET_ADMIN).
    /// A file a configuration names (a rules file) is read within `files`.
    pub fn deploy(
        functions: &[(String, NodeSpec)],
        files: impl Into<FileScope>,
    ) -> Result<Self, TableError> {
        let plans = plan_all(functions, &files.into())?;
        let mut chain = Self::prepare(Shape::of(&plans))?;
        chain.install_plans(functions, plans)?;
        Ok(chain)
    }

    /// Programs a blank table device: loads the object with tables of `shape` and has
    /// the kernel verify both programs — the slow step (hundreds of milliseconds), which
    /// a host agent does ahead of time, as HYPER's hardware is programmed before VNFs
    /// are deployed on it. Frames are not touched until a chain is installed and
    /// attached.
    pub fn prepare(shape: Shape) -> Result<Self, TableError> {
        Self::load(shape, None)
    }

    /// Loads the object with tables of `shape`; with `pins`, every table is the one
    /// pinned at `pins/<name>`, or a new one pinned there.
    fn load(shape: Shape, pins: Option<&std::path::Path>) -> Result<Self, TableError> {
        let mut loader = aya::EbpfLoader::new();
        loader
            .map_max_entries("fw_rules", 2 * shape.rules.max(1))
            .map_max_entries("fw_ct", shape.fw_flows.max(1))
            .map_max_entries("nat_map", 2 * shape.nat_flows.max(1))
            .map_max_entries("nat_dnat", 2 * shape.dnat.max(1))
            .map_max_entries("nat_public", 2 * shape.publics.max(1))
            .map_max_entries("ele_flows", shape.ele_flows.max(1));
        if let Some(dir) = pins {
            for name in pin::MAPS {
                loader.map_pin_path(name, dir.join(name));
            }
        }
        let mut bpf = loader
            .load(OBJECT)
            .map_err(|e| TableError::Load(format!("{e} (needs root and kernel ≥ 6.6)")))?;
        let take = |bpf: &mut Ebpf, n| TableMap::take(bpf, n);
        let occupancy = maps::take_mapped(&mut bpf, "occupancy", 3)?;
        let mut chain = Self {
            cfg_sel: take(&mut bpf, "cfg_sel")?,
            cfg: take(&mut bpf, "cfg")?,
            ports: take(&mut bpf, "ports")?,
            svc_sel: take(&mut bpf, "svc_sel")?,
            counters: take(&mut bpf, "counters")?,
            gauges: take(&mut bpf, "gauges")?,
            occupancy: occupancy.1,
            _occupancy_map: occupancy.0,
            fw_rules: take(&mut bpf, "fw_rules")?,
            fw_ct: take(&mut bpf, "fw_ct")?,
            nat_map: take(&mut bpf, "nat_map")?,
            nat_dnat: take(&mut bpf, "nat_dnat")?,
            nat_public: take(&mut bpf, "nat_public")?,
            nat_cursor: take(&mut bpf, "nat_cursor")?,
            ele_flows: take(&mut bpf, "ele_flows")?,
            events: maps::take_ring(&mut bpf)?,
            bpf,
            shape,
            names: Vec::new(),
            functions: Vec::new(),
            raw: RawCfg::default(),
            slot: 1,
            flipped: None,
            links: Vec::new(),
            port_rows: Vec::new(),
            swept: [0; 3],
            pins: None,
            selection: None,
        };
        chain.load_hook(HOOK_INGRESS)?;
        chain.load_hook(HOOK_EGRESS)?;
        Ok(chain)
    }

    /// Deploys `functions` on a prepared device whose tables are large enough: installs
    /// rules, port forwards, parameters and table limits (capacity = each function's
    /// configured entries) — map updates only, well under a millisecond.
    pub fn install(
        &mut self,
        functions: &[(String, NodeSpec)],
        files: impl Into<FileScope>,
    ) -> Result<(), TableError> {
        let plans = plan_all(functions, &files.into())?;
        self.install_plans(functions, plans)
    }

    fn install_plans(
        &mut self,
        functions: &[(String, NodeSpec)],
        plans: Vec<Function>,
    ) -> Result<(), TableError> {
        self.set_plans(functions, plans, true)
    }

    /// Installs `plans` and publishes them; `fresh`: the NAT's port cursors start at
    /// the bottom of its range (a chain taken back keeps where they are).
    fn set_plans(
        &mut self,
        functions: &[(String, NodeSpec)],
        plans: Vec<Function>,
        fresh: bool,
    ) -> Result<(), TableError> {
        if !self.functions.is_empty() {
            return Err(TableError::Request("a chain is installed already".into()));
        }
        let need = Shape::of(&plans);
        if !self.shape.holds(&need) {
            return Err(TableError::Request(format!(
                "the prepared tables ({:?}) are smaller than the chain needs ({need:?})",
                self.shape
            )));
        }
        let mut raw = RawCfg::default();
        for (i, f) in plans.iter().enumerate() {
            raw.chain[0][i] = kind_code(f);
        }
        for (i, f) in plans.iter().rev().enumerate() {
            raw.chain[1][i] = kind_code(f);
        }
        raw.limits = [
            u64::from(need.fw_flows),
            2 * u64::from(need.nat_flows),
            u64::from(need.ele_flows),
        ];
        if let Some(Function::Nat(n)) = plans.iter().find(|f| fresh && f.kind() == "nat") {
            let lo = n.snat.map_or(1024, |s| u32::from(s.2));
            for ci in 0..3u32 {
                self.nat_cursor.put(&ci, &lo)?;
            }
        }
        self.raw = raw;
        self.names = functions.iter().map(|(n, _)| n.clone()).collect();
        self.functions = plans;
        if let Err(e) = self.publish() {
            self.functions.clear();
            self.names.clear();
            return Err(e);
        }
        Ok(())
    }

    /// The tables this chain was prepared with.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The functions' instance names, in forward order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The validated functions, in forward order.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// Writes every function's rows and parameters into the inactive configuration
    /// slot and flips to it.
    fn publish(&mut self) -> Result<(), TableError> {
        if let Some(at) = self.flipped {
            let since = at.elapsed();
            if since < FLIP_GRACE {
                std::thread::sleep(FLIP_GRACE - since);
            }
        }
        let slot = 1 - self.slot;
        let mut raw = self.raw;
        for f in &self.functions {
            match f {
                Function::Firewall(p) => self.write_firewall(&mut raw, p, slot)?,
                Function::Nat(p) => self.write_nat(&mut raw, p, slot)?,
                Function::Elephant(p) => {
                    raw.ele_min_bytes = p.config.min_bytes;
                    raw.ele_min_window_bytes = p.min_window_bytes;
                    raw.ele_window_ns = p.config.window_ms.saturating_mul(1_000_000);
                }
            }
        }
        self.cfg.put(&slot, &raw)?;
        self.cfg_sel.put(&0u32, &slot)?;
        self.raw = raw;
        self.slot = slot;
        self.flipped = Some(Instant::now());
        Ok(())
    }

    fn write_firewall(
        &self,
        raw: &mut RawCfg,
        p: &FirewallPlan,
        slot: u32,
    ) -> Result<(), TableError> {
        let bank = self.fw_rules.capacity / 2;
        if p.rules.len() as u32 > bank {
            return Err(Refusal::TooLarge {
                function: "firewall",
                need: p.rules.len() as u64,
                capacity: u64::from(bank),
                detail: "ACL rules; the ACL table was sized at deploy: redeploy to grow it".into(),
            }
            .into());
        }
        for (i, r) in p.rules.iter().enumerate() {
            self.fw_rules.put(&(slot * bank + i as u32), r)?;
        }
        raw.fw_rule_base = slot * bank;
        raw.fw_nrules = p.rules.len() as u32;
        raw.fw_default_allow = u8::from(p.default_allow);
        raw.fw_loose = u8::from(p.loose);
        raw.fw_reverse_acl = u8::from(p.reverse_acl);
        raw.fw_timeouts = p.timeouts;
        raw.fw_unacknowledged = p.unacknowledged;
        Ok(())
    }

    fn write_nat(&self, raw: &mut RawCfg, p: &NatPlan, slot: u32) -> Result<(), TableError> {
        let bank = slot as u8;
        if p.dnat.len() as u32 > self.nat_dnat.capacity / 2
            || p.publics.len() as u32 > self.nat_public.capacity / 2
        {
            return Err(Refusal::TooLarge {
                function: "nat",
                need: p.dnat.len() as u64,
                capacity: u64::from(self.nat_dnat.capacity / 2),
                detail: "port forwards; their table was sized at deploy: redeploy to grow it"
                    .into(),
            }
            .into());
        }
        // Clear this bank's rows of an older configuration, then write the new ones.
        for (k, _) in self.nat_dnat.entries::<RawDnatKey, RawDnatVal>()? {
            if k.bank == bank {
                self.nat_dnat.remove(&k)?;
            }
        }
        for (k, _) in self.nat_public.entries::<RawDnatKey, u32>()? {
            if k.bank == bank {
                self.nat_public.remove(&k)?;
            }
        }
        for (k, v) in &p.dnat {
            self.nat_dnat.put(&RawDnatKey { bank, ..*k }, v)?;
        }
        for k in &p.publics {
            self.nat_public.put(&RawDnatKey { bank, ..*k }, &1u32)?;
        }
        raw.nat_bank = bank;
        match p.snat {
            Some((addr, family, lo, hi)) => {
                raw.nat_snat = 1;
                raw.nat_family = family;
                raw.nat_public = addr;
                raw.nat_lo = lo;
                raw.nat_hi = hi;
            }
            None => {
                raw.nat_snat = 0;
                raw.nat_family = p.publics.first().map_or(4, |k| k.family);
            }
        }
        raw.nat_timeouts = p.timeouts;
        Ok(())
    }

    /// Replaces the configuration of function `index` (same kind, same table sizes): map
    /// updates and one flip, no reload; flow state stays.
    pub fn configure(
        &mut self,
        index: usize,
        spec: &NodeSpec,
        files: impl Into<FileScope>,
    ) -> Result<(), TableError> {
        let old = self
            .functions
            .get(index)
            .ok_or_else(|| TableError::Request(format!("no function {index}")))?;
        let new = Function::plan(spec, files)?;
        if new.kind() != old.kind() {
            return Err(TableError::Request(format!(
                "function {index} is a `{}`, not a `{}`",
                old.kind(),
                new.kind()
            )));
        }
        let flows = |f: &Function| match f {
            Function::Firewall(p) => p.max_flows,
            Function::Nat(p) => p.max_flows,
            Function::Elephant(p) => p.max_flows,
        };
        if flows(&new) != flows(old) {
            return Err(TableError::Request(format!(
                "max_flows {} differs from the deployed table of {}: table sizes are fixed at deploy (redeploy and migrate)",
                flows(&new),
                flows(old)
            )));
        }
        let kept = std::mem::replace(&mut self.functions[index], new);
        if let Err(e) = self.publish() {
            self.functions[index] = kept;
            return Err(e);
        }
        Ok(())
    }

    /// Freezes the program's clock at `ns` (`None`: CLOCK_MONOTONIC again), in place in
    /// the active configuration slot. For in-process runs and simulations that control
    /// time; a chain carrying traffic keeps the real clock.
    pub fn set_clock(&mut self, ns: Option<u64>) -> Result<(), TableError> {
        self.raw.clock_ns = ns.unwrap_or(0);
        self.cfg.put(&self.slot, &self.raw)
    }

    /// The time the program sees now (its frozen clock, or CLOCK_MONOTONIC).
    pub fn now_ns(&self) -> u64 {
        if self.raw.clock_ns != 0 {
            return self.raw.clock_ns;
        }
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec it is given.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn program(&mut self, name: &str) -> Result<&mut SchedClassifier, TableError> {
        let prog: &mut SchedClassifier = self
            .bpf
            .program_mut(name)
            .ok_or_else(|| TableError::Load(format!("program {name} missing")))?
            .try_into()
            .map_err(|e| TableError::Load(format!("program {name}: {e}")))?;
        if prog.fd().is_err() {
            prog.load()
                .map_err(|e| TableError::Load(format!("verifier, {name}: {e}")))?;
        }
        Ok(prog)
    }

    /// Loads (verifies) the program of `hook` if it is not loaded yet.
    pub fn load_hook(&mut self, hook: u32) -> Result<(), TableError> {
        self.program(program_of(hook)).map(|_| ())
    }

    /// The port rows and hooks of a placement.
    fn rows_of(placement: &Placement) -> Result<Vec<(String, RawPortKey, RawPort)>, TableError> {
        let idx = |i: &str| {
            nfx_io::sys::ifindex(i).map_err(|e| TableError::Attach(format!("`{i}`: {e}")))
        };
        let mac = |i: &str| {
            nfx_io::sys::iface_mac(i).map_err(|e| TableError::Attach(format!("`{i}`: {e}")))
        };
        let pass = |iface: &str, hook, dir| -> Result<_, TableError> {
            let key = RawPortKey {
                ifindex: idx(iface)?,
                hook,
            };
            let port = RawPort {
                dir,
                action: ACT_PASS,
                ..Default::default()
            };
            Ok((iface.to_string(), key, port))
        };
        Ok(match placement {
            Placement::Alone { inside, outside } => {
                let (i, o) = (idx(&inside.iface)?, idx(&outside.iface)?);
                let row = |from: &PortSpec, fi, to: &PortSpec, ti, dir| -> Result<_, TableError> {
                    Ok((
                        from.iface.clone(),
                        RawPortKey {
                            ifindex: fi,
                            hook: HOOK_INGRESS,
                        },
                        RawPort {
                            dir,
                            action: ACT_REDIRECT,
                            out_ifindex: ti,
                            dst_mac: to.peer_mac,
                            src_mac: mac(&to.iface)?,
                        },
                    ))
                };
                vec![
                    row(inside, i, outside, o, DIR_FWD)?,
                    row(outside, o, inside, i, DIR_REV)?,
                ]
            }
            Placement::BeforeSoftware { iface } => vec![
                pass(iface, HOOK_INGRESS, DIR_FWD)?,
                pass(iface, HOOK_EGRESS, DIR_REV)?,
            ],
            Placement::AfterSoftware { iface } => vec![
                pass(iface, HOOK_EGRESS, DIR_FWD)?,
                pass(iface, HOOK_INGRESS, DIR_REV)?,
            ],
        })
    }

    /// Attaches the chain where `placement` says, in the calling thread's network
    /// namespace (tcx, kernel ≥ 6.6). Detached by [`TableChain::detach`] or on drop.
    pub fn attach(&mut self, placement: &Placement) -> Result<(), TableError> {
        if !self.links.is_empty() {
            return Err(TableError::Request("already attached".into()));
        }
        let rows = Self::rows_of(placement)?;
        for (_, key, port) in &rows {
            self.ports.put(key, port)?;
            self.port_rows.push(*key);
        }
        for (iface, key, _) in &rows {
            let name = program_of(key.hook);
            let at = if key.hook == HOOK_EGRESS {
                TcAttachType::Egress
            } else {
                TcAttachType::Ingress
            };
            let attached = self
                .program(name)?
                .attach(iface, at)
                .map_err(|e| TableError::Attach(format!("{name} on `{iface}`: {e}")));
            match attached {
                Ok(id) => self.links.push((name, id)),
                Err(e) => {
                    self.detach();
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.pin_links() {
            self.detach();
            return Err(e);
        }
        Ok(())
    }

    /// Takes over `old`'s hooks: writes its port rows here, then replaces its program on
    /// every link atomically (bpf_link_update): each frame runs either the old chain or
    /// this one. `old` is left detached. Load this chain's programs first. A chain
    /// given no selection of its own takes `old`'s ([`TableChain::select`]).
    pub fn take_over(&mut self, old: &mut TableChain) -> Result<(), TableError> {
        if !self.links.is_empty() {
            return Err(TableError::Request("already attached".into()));
        }
        if self.selection.is_none() {
            if let Some(s) = old.selection {
                self.select(Some(&s))?;
            }
        }
        for key in &old.port_rows {
            let port: RawPort = old
                .ports
                .get(key)?
                .ok_or_else(|| TableError::Request("the old chain lost a port row".into()))?;
            self.ports.put(key, &port)?;
            self.port_rows.push(*key);
        }
        for (name, id) in std::mem::take(&mut old.links) {
            let link = old
                .program(name)?
                .take_link(id)
                .map_err(|e| TableError::Attach(format!("taking {name}'s link: {e}")))?;
            let id = self
                .program(name)?
                .attach_to_link(link)
                .map_err(|e| TableError::Attach(format!("replacing {name}: {e}")))?;
            self.links.push((name, id));
        }
        self.pin_links()
    }

    /// Detaches from every hook and forgets the port rows; a pinned chain is unpinned
    /// (its links and tables leave the BPF file system with it).
    pub fn detach(&mut self) {
        if let Some(dir) = self.pins.take() {
            // Unpinned first, so that closing the links below detaches them. What could
            // not be removed is owned by no chain: its owner's sweep removes it.
            let _ = pin::unpin(&dir);
        }
        for (name, id) in std::mem::take(&mut self.links) {
            if let Ok(p) = self.program(name) {
                // The link may be gone with its interface; nothing else can fail here.
                let _ = p.detach(id);
            }
        }
        for key in std::mem::take(&mut self.port_rows) {
            let _ = self.ports.remove(&key);
        }
    }

    /// True while attached to at least one hook.
    pub fn is_attached(&self) -> bool {
        !self.links.is_empty()
    }

    /// Index of the function of `kind`.
    fn index_of(&self, kind: &str) -> Option<usize> {
        self.functions.iter().position(|f| f.kind() == kind)
    }
}

impl Drop for TableChain {
    /// An unpinned chain is detached; a pinned one stays attached and keeps its tables
    /// (that is what pinning is for), until [`TableChain::detach`] or [`unpin`].
    fn drop(&mut self) {
        if self.pins.is_none() {
            self.detach();
        }
    }
}

/// How many tcx programs (ingress and egress) are attached to `iface` in the calling
/// thread's network namespace: what a control plane or a test reads back to see that a
/// destroyed chain left nothing attached.
pub fn tcx_programs(iface: &str) -> Result<usize, TableError> {
    let mut n = 0;
    for at in [TcAttachType::Ingress, TcAttachType::Egress] {
        let (_, progs) = SchedClassifier::query_tcx(iface, at)
            .map_err(|e| TableError::Attach(format!("querying `{iface}`: {e}")))?;
        n += progs.len();
    }
    Ok(n)
}

/// Imported flow state that did not fit, or a malformed blob (the software's error type,
/// so a mediator handles both tiers alike).
pub type ImportResult = Result<usize, StateError>;

#[cfg(test)]
mod tests;
