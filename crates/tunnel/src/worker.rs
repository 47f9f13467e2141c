//! The packet worker: TUN → batch encrypt → sendmmsg, recvmmsg → batch decrypt → TUN,
//! all crypto as one submit/poll batch per vector on the current engine, which can be
//! replaced between two batches (live engine switching).
//!
//! On a lookaside queue pair the worker pipelines: it submits the batch it just read and
//! finishes the batches of earlier rounds (sendmmsg / TUN writes) while the device
//! encrypts, so worker I/O and device crypto overlap. Completions come back in
//! submission order and are finished in that order, so sequence numbers and packet
//! order are those of a synchronous engine.

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nfx_accel::{
    open_local, Buf, Completion, Direction, Engine, EngineKind, Op, SessionId, Status,
};

use crate::esp::{wire_len, EspError, Inbound, Outbound, Prepared, ESN_AAD, HEAD, ICV};
use crate::gro::{Gro, Piece, MAX_SEGS};
use crate::lanes::{self, LaneCmd, LaneLink, LaneOp};
use crate::offload::{read_vnet, Plan, SegError, VnetHdr};
use crate::stats::{Counters, DropCause};
use crate::steer::{flow_key, FlowQueues};
use crate::sys::{poll_readable, Tun, Underlay, TUN_F_TSO4};
use crate::udp_gso::{scattered, split, GRO_BUF, MAX_SEGS as MAX_GRO_SEGS};

/// The engine to switch to.
pub enum Target {
    /// An in-process engine (`soft` or `cpu`).
    Local(EngineKind),
    /// An attached lookaside queue pair.
    Lookaside(Box<dyn Engine>),
    /// Back to the configured software engine, dropping (freeing) the queue pair.
    Release,
}

/// Result of a switch.
#[derive(Debug, Clone, Copy)]
pub struct Switched {
    /// The engine now in use.
    pub engine: EngineKind,
    /// Time from the last batch on the old engine to being ready on the new one.
    pub switch_us: u64,
}

/// A change of the SAs the data path uses, made by the IKE thread.
pub enum SaChange {
    /// Start accepting ESP for this SA.
    InstallInbound(Inbound),
    /// Send with this SA from now on (the previous outbound SA is dropped).
    InstallOutbound(Outbound),
    /// Stop accepting ESP with this SPI.
    RemoveInbound(u32),
    /// Stop sending with this SA (packets are dropped as `no_sa` until another one is
    /// installed).
    RemoveOutbound(u32),
}

/// SA changes to apply in order between two batches; `done` is answered once they
/// are in place (the IKE thread sends its messages only then, so the peer never uses
/// an SA before it is installed here).
pub struct SaCmd {
    /// The changes.
    pub changes: Vec<SaChange>,
    /// Answered when they are applied.
    pub done: Sender<()>,
}

/// The worker's side of the IKE thread: where received IKE messages go and where SA
/// changes come from.
pub struct IkeLink {
    /// IKE messages (non-ESP marker removed) for the IKE thread.
    pub to_ike: SyncSender<Vec<u8>>,
    /// SA changes from the IKE thread.
    pub cmds: Receiver<SaCmd>,
}

/// A switch request with its reply channel.
pub struct SwitchCmd {
    /// Where to go.
    pub target: Target,
    /// Receives the outcome.
    pub reply: Sender<Result<Switched, String>>,
}

/// One engine with this endpoint's two sessions on it, and the completions polled from
/// it that no batch has taken yet.
struct Crypto {
    engine: Box<dyn Engine>,
    kind: EngineKind,
    /// Session of the outbound SA.
    enc: Option<SessionId>,
    /// Sessions of the inbound SAs, in the worker's order.
    dec: Vec<SessionId>,
    /// Completions in submission order, polled early (ring full) or beyond the batch
    /// being finished; the next batches take them from the front.
    ready: Vec<Completion>,
}

impl Crypto {
    fn new(
        engine: Box<dyn Engine>,
        kind: EngineKind,
        out: Option<&Outbound>,
        inb: &[Inbound],
    ) -> Result<Crypto, String> {
        let mut c = Crypto {
            engine,
            kind,
            enc: None,
            dec: Vec::new(),
            ready: Vec::new(),
        };
        if let Some(o) = out {
            c.enc = Some(c.session(o.keys.spec(Direction::Encrypt))?);
        }
        for i in inb {
            let s = c.session(i.keys.spec(Direction::Decrypt))?;
            c.dec.push(s);
        }
        Ok(c)
    }

    fn session(&mut self, spec: nfx_accel::SessionSpec) -> Result<SessionId, String> {
        let dir = spec.dir;
        self.engine
            .create_session(spec)
            .map_err(|e| format!("create {dir:?} session on {}: {e}", self.kind))
    }

    /// Destroys every session (their key copies are zeroized now, not later).
    fn destroy_sessions(&mut self) {
        for s in self.enc.take().into_iter().chain(self.dec.drain(..)) {
            let _ = self.engine.destroy_session(s);
        }
    }

    /// Submits the whole vector as one batch without waiting for it and returns how
    /// many completions it will yield (one per op, in order, behind every earlier
    /// batch's). While the queue is full, finished completions are moved to `ready` to
    /// make room. Ops the engine refuses complete with `DeviceGone` once everything
    /// submitted before them is back, so the order still holds.
    fn submit(&mut self, mut ops: Vec<Op>) -> usize {
        let n = ops.len();
        while !ops.is_empty() {
            match self.engine.submit(&mut ops) {
                Ok(0) => {
                    if self.engine.poll(&mut self.ready, usize::MAX) == 0 {
                        self.engine.wait_ready(1, WAIT_STEP);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    log::warn!("engine {}: submit failed: {e}", self.kind);
                    break;
                }
            }
        }
        if !ops.is_empty() {
            self.wait_for(usize::MAX);
            self.ready.extend(ops.into_iter().map(|op| Completion {
                op,
                status: Status::DeviceGone,
                device_ns: None,
            }));
        }
        n
    }

    /// Moves whatever the engine has finished to `ready`, without waiting.
    fn collect(&mut self) {
        self.engine.poll(&mut self.ready, usize::MAX);
    }

    /// Moves the oldest `n` completions to `out`, waiting for them if needed.
    fn take(&mut self, mut n: usize, out: &mut Vec<Completion>) {
        if self.ready.is_empty() {
            // Nothing was polled early: the engine's next completions are the oldest, so
            // they go to `out` directly (one move of every op less).
            n -= self.engine.poll(out, n);
        }
        self.wait_for(n);
        let n = n.min(self.ready.len());
        out.extend(self.ready.drain(..n));
    }

    /// Waits until `ready` holds `n` completions or nothing is in flight (a lookaside
    /// device works on its own core): spins briefly, then sleeps until the device wakes
    /// it (bounded by `WAIT_STEP`, so a dead device is still noticed by `poll`), so that
    /// the waiting worker neither takes CPU from the device and the kernel on a small
    /// machine nor wakes up just to find the batch unfinished.
    fn wait_for(&mut self, n: usize) {
        let t0 = Instant::now();
        while self.ready.len() < n && self.engine.in_flight() > 0 {
            if self.engine.poll(&mut self.ready, usize::MAX) > 0 {
                continue;
            }
            if t0.elapsed() < SPIN_FOR {
                std::hint::spin_loop();
            } else {
                let want = n - self.ready.len();
                self.engine.wait_ready(want, WAIT_STEP);
            }
        }
    }
}

/// A batch handed to the engine and not finished yet (the worker keeps them oldest
/// first; completions arrive in the same order).
enum Flight {
    /// Outbound ESP packets: this many ops, each op's `user` is its inner length.
    Out(usize),
    /// Inbound ESP packets: one record per op (the op's `user` indexes it): the
    /// inbound SA's index and the prepared operation.
    In(Vec<(usize, Prepared)>),
}

/// How long the worker busy-polls a lookaside batch before it sleeps (a small batch or
/// one packet completes within this: latency stays low).
const SPIN_FOR: Duration = Duration::from_micros(20);
/// Most batches a pipelined worker keeps in flight before it waits for the oldest
/// (two outbound batches and the inbound one fit a 256-entry device ring).
const MAX_FLIGHTS: usize = 2;
/// Largest IP packet a TUN read returns.
const MAX_IP: usize = 65_535;
/// Most segments of one super-packet a TUN read scatters into engine buffers (a longer
/// one is cut by copying).
const MAX_TSO_SEGS: usize = 64;
/// How often a paused lane looks at the stop flag while it waits for the lead.
const PAUSED_WAIT: Duration = Duration::from_millis(20);
/// Longest sleep on the engine's completion wake-up before polling again.
const WAIT_STEP: Duration = Duration::from_millis(1);

/// The worker's state.
pub struct Worker {
    crypto: Crypto,
    base: EngineKind,
    /// The SA we send with (none until IKE installs one).
    out: Option<Outbound>,
    /// The SAs we accept (more than one while a rekey's old SA drains).
    inb: Vec<Inbound>,
    ike: Option<IkeLink>,
    /// The outbound SA ran out of sequence numbers and the operator was told.
    told_exhausted: bool,
    free: Vec<Buf>,
    cap: usize,
    batch: usize,
    mtu: usize,
    /// The TUN queues this worker may read (a lane: its own; the lead: all of them,
    /// read while it runs alone); the lead writes received packets to the first.
    tuns: Vec<Arc<Tun>>,
    udp: Underlay,
    counters: Arc<Counters>,
    /// This worker is the lead (receives, serves IKE and the EM, owns the counters'
    /// engine state); false for a sending lane.
    lead: bool,
    /// 0 for the lead, `i` for sending lane `i` (its slot in `Counters::lane_tx`).
    index: usize,
    /// The flow → TUN queue table (with more than one queue).
    steer: Option<Arc<FlowQueues>>,
    /// The lead's links to the sending lanes (empty: it runs alone).
    lanes: Vec<LaneLink>,
    /// A sending lane's command channel from the lead.
    ctl: Option<Receiver<LaneCmd>>,
    /// A sending lane told to leave its TUN queue to the lead.
    paused: bool,
    done: Vec<Completion>,
    flights: VecDeque<Flight>,
    past_failovers: u64,
    udp_gso: bool,
    udp_gro: bool,
    coalesce: bool,
    gro: Gro,
    tun_buf: Vec<u8>,
    rx_raw: Vec<Vec<u8>>,
    /// Per inbound packet of the batch being delivered: its inner packet's range.
    inner: Vec<Option<Range<usize>>>,
    /// Datagram size of the last coalesced underlay message (0: none yet): the size of
    /// the buffers the next receive scatters into.
    rx_seg: usize,
    /// Whether the underlay has delivered a coalesced message yet (until then one slot
    /// per message is enough).
    rx_coalesced: bool,
    /// Datagrams per coalesced message, a running maximum that decays by ⅛ per message:
    /// the slots the next receive offers per message are twice that (at least 4). A
    /// bulk flow's messages vary in size (sends cut at batch boundaries), so the last
    /// message alone would leave the next larger one to the copying slow path; a flow of
    /// small coalesced messages (ACKs) still does not take 64 buffers per message.
    rx_count: usize,
    /// Per message of a receive, the engine buffers it is scattered into; the ones a
    /// message did not fill stay for the next receive.
    rx_slots: Vec<Vec<Buf>>,
    /// Header length and segment size of the last super-packet read from the TUN: the
    /// shape the next read is scattered for.
    tx_shape: Option<(usize, usize)>,
    /// Engine buffers the next TUN read scatters segment payloads into.
    tx_slots: Vec<Buf>,
    /// Where a scattered TUN read puts what does not fit the slots.
    tx_spill: Vec<u8>,
    /// Scratch for a received message that has to be gathered before it is split.
    rx_flat: Vec<u8>,
}

/// What a worker is built from.
pub struct WorkerParts {
    /// The first engine and its kind.
    pub engine: (Box<dyn Engine>, EngineKind),
    /// Configured software engine (target of `Release`).
    pub base: EngineKind,
    /// Outbound SA (static keys), or none until IKE installs one.
    pub out: Option<Outbound>,
    /// Inbound SAs (static keys), or none until IKE installs them.
    pub inb: Vec<Inbound>,
    /// The IKE thread, when SAs are negotiated.
    pub ike: Option<IkeLink>,
    /// Packets per batch.
    pub batch: usize,
    /// Inner MTU.
    pub mtu: usize,
    /// The TUN queues (see [`Worker`]'s `tuns`).
    pub tuns: Vec<Arc<Tun>>,
    /// The underlay socket.
    pub udp: Underlay,
    /// Shared counters.
    pub counters: Arc<Counters>,
    /// Use the kernel offloads the TUN and the socket accept (`offload` in the config).
    pub offload: bool,
    /// How this worker is controlled: the lead (with its links to the lanes) or a lane
    /// (with its command channel, paused or not at start).
    pub control: Control,
    /// The flow → TUN queue table all workers share (with more than one queue).
    pub steer: Option<Arc<FlowQueues>>,
}

/// The lead worker or a sending lane (see `crate::lanes`).
pub enum Control {
    /// The lead, with links to its lanes (none: it runs alone).
    Lead(Vec<LaneLink>),
    /// A sending lane; `paused` while a lookaside queue pair is attached at start.
    Lane {
        /// Its number, from 1.
        index: usize,
        /// Commands from the lead.
        cmds: Receiver<LaneCmd>,
        /// Starts paused.
        paused: bool,
    },
}

impl Worker {
    /// Builds the worker and creates its sessions on the first engine.
    pub fn new(p: WorkerParts) -> Result<Worker, String> {
        let crypto = Crypto::new(p.engine.0, p.engine.1, p.out.as_ref(), &p.inb)?;
        let (index, lanes, ctl, paused) = match p.control {
            Control::Lead(l) => (0, l, None, false),
            Control::Lane {
                index,
                cmds,
                paused,
            } => (index, Vec::new(), Some(cmds), paused),
        };
        let lead = index == 0;
        let offloads = p.tuns.first().map_or(0, |t| t.offloads);
        let udp_gso = p.offload && p.udp.probe_gso();
        let udp_gro = p.offload && lead && p.udp.enable_gro();
        if lead {
            if let Some(o) = &p.out {
                p.counters.out_spi.store(o.spi(), Relaxed);
            }
            p.counters.set_engine(crypto.kind);
        }
        if lead && p.offload && !(offloads != 0 && udp_gso && udp_gro) {
            log::warn!(
                "kernel refused some offloads (tun {:#x}, udp gso {udp_gso}, udp gro {udp_gro}); \
                 using the per-packet path for those",
                offloads
            );
            p.counters.offload_fallbacks.fetch_add(1, Relaxed);
        }
        // Coalesced frames are GSO packets: only for a TUN that took TSO.
        let coalesce = offloads & TUN_F_TSO4 != 0;
        if lead {
            p.counters.tun_offloads.store(offloads, Relaxed);
            p.counters.udp_gso.store(udp_gso, Relaxed);
            p.counters.udp_gro.store(udp_gro, Relaxed);
        }
        Ok(Worker {
            crypto,
            base: p.base,
            out: p.out,
            inb: p.inb,
            ike: p.ike,
            told_exhausted: false,
            free: Vec::new(),
            cap: (p.mtu + HEAD + ICV + 8 + ESN_AAD).max(2048),
            batch: p.batch,
            mtu: p.mtu,
            tuns: p.tuns,
            udp: p.udp,
            counters: p.counters,
            lead,
            index,
            steer: p.steer,
            lanes,
            ctl,
            paused,
            done: Vec::new(),
            flights: VecDeque::new(),
            past_failovers: 0,
            udp_gso,
            udp_gro,
            coalesce,
            gro: Gro::default(),
            tun_buf: vec![0; VnetHdr::LEN + 65535],
            rx_raw: if udp_gro {
                vec![vec![0; GRO_BUF]; 4]
            } else {
                Vec::new()
            },
            inner: Vec::new(),
            rx_seg: 0,
            rx_coalesced: false,
            tx_shape: None,
            tx_slots: Vec::new(),
            tx_spill: vec![0; VnetHdr::LEN + MAX_IP],
            rx_count: 0,
            rx_slots: Vec::new(),
            rx_flat: Vec::new(),
        })
    }

    /// Runs until `stop` is set or `deadline` passes, serving switch commands between
    /// batches. On a lookaside queue pair up to `MAX_FLIGHTS` batches stay in flight
    /// while the worker reads more: batches whose completions are in are finished
    /// without waiting, and the worker waits for the oldest only when it has nothing
    /// to read or the limit is reached.
    pub fn run(
        &mut self,
        cmds: &Receiver<SwitchCmd>,
        stop: &AtomicBool,
        deadline: Option<Instant>,
    ) {
        loop {
            if !self.lead && !self.serve_lead_cmds(stop, deadline) {
                self.finish_all();
                return;
            }
            while let Ok(c) = cmds.try_recv() {
                self.finish_all();
                let r = self.switch_all(c.target);
                if r.is_ok() {
                    self.counters.engine_switches.fetch_add(1, Relaxed);
                }
                // The requester may have given up waiting; nothing else to do then.
                let _ = c.reply.send(r);
            }
            while let Some(c) = self.ike.as_ref().and_then(|l| l.cmds.try_recv().ok()) {
                self.finish_all();
                self.apply_all(c.changes);
                let _ = c.done.send(());
            }
            if stop.load(Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                self.finish_all();
                return;
            }
            let pipelined = self.crypto.kind == EngineKind::Lookaside;
            if pipelined {
                self.finish_done();
                if self.flights.len() >= MAX_FLIGHTS {
                    self.finish_front();
                }
            }
            // The TUN queues this worker reads now, then (the lead) the socket.
            let queues = if self.lead && !self.lanes.is_empty() && !pipelined {
                0
            } else {
                self.tuns.len()
            };
            let mut fds: Vec<_> = self.tuns[..queues].iter().map(|t| t.raw()).collect();
            if self.lead {
                fds.push(self.udp.raw());
            }
            let wait_ms = if self.flights.is_empty() { 5 } else { 0 };
            let ready = match poll_readable(&fds, wait_ms) {
                Ok(r) => r,
                Err(e) => {
                    log::error!("poll: {e}");
                    self.finish_all();
                    return;
                }
            };
            let before = self.flights.len();
            for q in (0..queues).filter(|&q| ready[q]) {
                self.outbound_batch(q);
            }
            if self.lead && ready[queues] {
                self.inbound_batch();
            }
            // Only a device working beside the worker gains from batches left in flight.
            if !pipelined {
                self.finish_all();
            } else if self.flights.len() == before {
                self.finish_front();
            }
            let now = self.crypto.engine.stats().failovers;
            if self.lead {
                self.counters
                    .failovers
                    .store(self.past_failovers + now, Relaxed);
                if now > 0 && self.crypto.kind == EngineKind::Lookaside {
                    // The device died: the client runs everything on the fallback engine.
                    self.counters.set_engine(self.base);
                }
            }
        }
    }

    /// A sending lane's side of `crate::lanes`: serves the lead's commands between two
    /// batches; while paused, waits for them (its TUN queue is the lead's then). False
    /// when the lane should end (stop, deadline, or the lead is gone).
    fn serve_lead_cmds(&mut self, stop: &AtomicBool, deadline: Option<Instant>) -> bool {
        let Some(ctl) = self.ctl.take() else {
            return true;
        };
        let go_on = loop {
            let cmd = if self.paused {
                if stop.load(Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                    break false;
                }
                match ctl.recv_timeout(PAUSED_WAIT) {
                    Ok(c) => c,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break false,
                }
            } else {
                match ctl.try_recv() {
                    Ok(c) => c,
                    Err(TryRecvError::Empty) => break true,
                    Err(TryRecvError::Disconnected) => break false,
                }
            };
            self.finish_all();
            let r = self.lane_op(cmd.op);
            let _ = cmd.ack.send(r);
        };
        self.ctl = Some(ctl);
        go_on
    }

    /// Carries out one command of the lead on this lane (no batch is in flight).
    fn lane_op(&mut self, op: LaneOp) -> Result<(), String> {
        match op {
            LaneOp::Sa(changes) => changes.into_iter().for_each(|ch| self.apply(ch)),
            LaneOp::Engine(k) => {
                if self.crypto.kind != k {
                    self.switch(Target::Local(k))?;
                }
                self.paused = false;
            }
            LaneOp::Pause => self.paused = true,
        }
        Ok(())
    }

    /// Switches every worker: the lead first, then the lanes (they pause while the lead
    /// holds a lookaside queue pair, and follow it to a software engine).
    fn switch_all(&mut self, target: Target) -> Result<Switched, String> {
        if self.lanes.is_empty() {
            return self.switch(target);
        }
        if let Target::Lookaside(e) = target {
            lanes::tell_all(&self.lanes, || LaneOp::Pause).inspect_err(|_| self.resume_lanes())?;
            return self
                .switch(Target::Lookaside(e))
                .inspect_err(|_| self.resume_lanes());
        }
        let r = self.switch(target)?;
        lanes::tell_all(&self.lanes, || LaneOp::Engine(r.engine))?;
        Ok(r)
    }

    /// Tells the lanes to go on with the lead's software engine (after a failed pause
    /// or attach); a lane that fails is logged, it stays paused.
    fn resume_lanes(&self) {
        let k = self.crypto.kind;
        if k == EngineKind::Lookaside {
            return;
        }
        if let Err(e) = lanes::tell_all(&self.lanes, || LaneOp::Engine(k)) {
            log::error!("resuming the sending lanes: {e}");
        }
    }

    /// Applies IKE's SA changes here and forwards the outbound ones to every lane (each
    /// gets its own handle on the SA's sequence space), waiting until all are in place.
    fn apply_all(&mut self, changes: Vec<SaChange>) {
        let mut per_lane: Vec<Vec<SaChange>> = self.lanes.iter().map(|_| Vec::new()).collect();
        let installs = changes
            .iter()
            .any(|c| matches!(c, SaChange::InstallOutbound(_)));
        for ch in changes {
            for l in &mut per_lane {
                match &ch {
                    SaChange::InstallOutbound(o) => l.push(SaChange::InstallOutbound(o.lane())),
                    SaChange::RemoveOutbound(spi) => l.push(SaChange::RemoveOutbound(*spi)),
                    _ => {}
                }
            }
            self.apply(ch);
        }
        if per_lane.iter().any(|l| !l.is_empty()) {
            let ops = per_lane.into_iter().map(LaneOp::Sa).collect();
            if let Err(e) = lanes::tell(&self.lanes, ops) {
                log::error!("outbound SA change on the sending lanes: {e}");
            }
            // Every lane sends with the new SA now: its usage starts here.
            if let Some(o) = self.out.as_ref().filter(|_| installs) {
                self.counters.out_seq.store(o.sent(), Relaxed);
                self.counters.out_sa_bytes.store(0, Relaxed);
            }
        }
    }

    fn take_buf(&mut self) -> Buf {
        let mut b = match self.free.pop() {
            Some(b) => b,
            None => self
                .crypto
                .engine
                .alloc_buf(self.cap)
                .unwrap_or_else(|_| Buf::heap(self.cap)),
        };
        let cap = b.capacity();
        b.set_len(cap).expect("capacity is a valid length");
        b
    }

    /// Finishes, oldest first, the batches whose completions have all arrived.
    fn finish_done(&mut self) {
        self.crypto.collect();
        while let Some(f) = self.flights.front() {
            let n = match f {
                Flight::Out(n) => *n,
                Flight::In(preps) => preps.len(),
            };
            if self.crypto.ready.len() < n {
                return;
            }
            self.finish_front();
        }
    }

    /// Finishes every batch in flight, oldest first.
    fn finish_all(&mut self) {
        while !self.flights.is_empty() {
            self.finish_front();
        }
    }

    /// Takes the oldest batch's completions (waiting for them) and sends or delivers
    /// its packets.
    fn finish_front(&mut self) {
        let Some(f) = self.flights.pop_front() else {
            return;
        };
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        match f {
            Flight::Out(n) => {
                self.crypto.take(n, &mut done);
                self.send_out(&mut done);
            }
            Flight::In(preps) => {
                self.crypto.take(preps.len(), &mut done);
                self.deliver_in(&mut done, &preps);
            }
        }
        self.done = done;
    }

    /// Reads a batch from TUN queue `q` and submits it for encryption.
    fn outbound_batch(&mut self, q: usize) {
        let mut ops = Vec::with_capacity(self.batch);
        if self.tuns[q].vnet {
            self.read_offload(q, &mut ops);
        } else {
            self.read_plain(q, &mut ops);
        }
        if let Some(out) = self.out.as_mut() {
            out.end_batch();
            // For IKE's lifetime check: at least the highest number any lane used.
            self.counters.out_seq.fetch_max(out.sent(), Relaxed);
        }
        if ops.is_empty() {
            return;
        }
        let n = self.crypto.submit(ops);
        self.flights.push_back(Flight::Out(n));
    }

    /// Sends the packets of one finished outbound batch.
    fn send_out(&mut self, done: &mut Vec<Completion>) {
        let mut wires: Vec<&[u8]> = Vec::with_capacity(done.len());
        let mut inner: Vec<u64> = Vec::with_capacity(done.len());
        for c in done.iter() {
            if c.status == Status::Ok && Some(c.op.session) == self.crypto.enc {
                wires.push(&c.op.buf.as_slice()[..wire_len(c.op.user as usize)]);
                inner.push(c.op.user);
            } else {
                self.counters.count(DropCause::TxError);
            }
        }
        let (mut sent, mut err) = if self.udp_gso {
            self.udp.send_gso(&wires)
        } else {
            self.udp.send_batch(&wires)
        };
        if let Some(e) = err.as_ref().filter(|_| self.udp_gso) {
            if matches!(
                e.raw_os_error(),
                Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP)
            ) {
                log::warn!("underlay refused UDP GSO ({e}); sending datagram by datagram");
                self.udp_gso = false;
                self.counters.offload_fallbacks.fetch_add(1, Relaxed);
                self.counters.udp_gso.store(false, Relaxed);
                let (more, e2) = self.udp.send_batch(&wires[sent..]);
                sent += more;
                err = e2;
            }
        }
        if let Some(e) = err {
            log::warn!("underlay send: {e}");
            for _ in sent..wires.len() {
                self.counters.count(DropCause::TxError);
            }
        }
        self.counters.tx_packets.fetch_add(sent as u64, Relaxed);
        self.counters.lane_tx[self.index].fetch_add(sent as u64, Relaxed);
        let bytes: u64 = inner[..sent].iter().sum();
        self.counters.tx_bytes.fetch_add(bytes, Relaxed);
        self.counters.out_sa_bytes.fetch_add(bytes, Relaxed);
        self.free.extend(done.drain(..).map(|c| c.op.buf));
    }

    /// Lays out inner packet `n` bytes long at `buf[HEAD..]` as ESP and queues it.
    fn queue(&mut self, mut buf: Buf, n: usize, ops: &mut Vec<Op>) {
        let (Some(out), Some(session)) = (self.out.as_mut(), self.crypto.enc) else {
            self.counters.count(DropCause::NoSa);
            self.free.push(buf);
            return;
        };
        match out.prepare(&mut buf, n) {
            Ok(p) => ops.push(Op {
                session,
                iv: p.iv,
                layout: p.layout,
                buf,
                user: n as u64,
            }),
            Err(e) => {
                if e == EspError::SeqExhausted && !self.told_exhausted {
                    self.told_exhausted = true;
                    log::error!(
                        "outbound SA {:#x}: no sequence number left ({}); refusing to send \
                         rather than repeat a nonce: it must be rekeyed (IKE) or given a new key",
                        out.spi(),
                        if out.esn() {
                            "the persisted reservation could not be extended"
                        } else {
                            "the 32-bit sequence space is used up"
                        }
                    );
                }
                self.counters.count(e.into());
                self.free.push(buf);
            }
        }
    }

    /// Per-packet TUN reads (no vnet header): one read per inner packet.
    fn read_plain(&mut self, q: usize, ops: &mut Vec<Op>) {
        let limit = self.mtu + 1;
        for _ in 0..self.batch {
            let mut buf = self.take_buf();
            let end = (HEAD + limit).min(buf.capacity());
            let n = match self.tuns[q].recv(&mut buf.as_mut_slice()[HEAD..end]) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    self.free.push(buf);
                    break;
                }
                Err(e) => {
                    log::warn!("tun read: {e}");
                    self.free.push(buf);
                    break;
                }
            };
            if n > self.mtu {
                self.counters.count(DropCause::TooBig);
                self.free.push(buf);
                continue;
            }
            self.learn(q, &buf.as_slice()[HEAD..HEAD + n]);
            self.queue(buf, n, ops);
        }
    }

    /// Offload TUN reads: each read is one packet or a GSO super-packet with its
    /// virtio_net_hdr, cut into ESP payload buffers. While super-packets keep one shape
    /// (header length, segment size; a steady flow), the read is scattered: the vnet
    /// header and the packet's headers go to the scratch buffer, each segment's payload
    /// straight into its own engine buffer behind room for the headers, anything beyond
    /// into a spill buffer; then only the headers are written per segment. A packet of
    /// another shape is gathered back into the scratch buffer and cut by copying.
    fn read_offload(&mut self, q: usize, ops: &mut Vec<Op>) {
        let mut raw = std::mem::take(&mut self.tun_buf);
        let mut spill = std::mem::take(&mut self.tx_spill);
        let mut slots = std::mem::take(&mut self.tx_slots);
        while ops.len() < self.batch {
            let (hl, seg) = self
                .tx_shape
                .filter(|&(hl, seg)| HEAD + hl + seg <= self.cap)
                .unwrap_or((0, 0));
            let per = if seg == 0 {
                0
            } else {
                (MAX_IP - hl).div_ceil(seg).min(MAX_TSO_SEGS)
            };
            while slots.len() < per {
                slots.push(self.take_buf());
            }
            let head = VnetHdr::LEN + hl;
            let read = if per == 0 {
                self.tuns[q].recv(&mut raw)
            } else {
                let (scratch, _) = raw.split_at_mut(head);
                let mut iov: Vec<IoSliceMut<'_>> = std::iter::once(IoSliceMut::new(scratch))
                    .chain(
                        slots[..per]
                            .iter_mut()
                            .map(|b| IoSliceMut::new(&mut b.as_mut_slice()[HEAD + hl..][..seg])),
                    )
                    .chain(std::iter::once(IoSliceMut::new(&mut spill)))
                    .collect();
                self.tuns[q].recv_vectored(&mut iov)
            };
            let n = match read {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    log::warn!("tun read: {e}");
                    break;
                }
            };
            let Some(h) = read_vnet(&raw[..n.min(VnetHdr::LEN)]) else {
                self.counters.count(DropCause::BadVnet);
                continue;
            };
            let valid = if per > 0 { n.min(head) } else { n };
            self.learn(q, &raw[VnetHdr::LEN.min(valid)..valid]);
            if per > 0 && n > head {
                let hdrs = &raw[VnetHdr::LEN..head];
                if let Ok(plan) = Plan::from_headers(&h, hdrs, n - VnetHdr::LEN, self.mtu) {
                    if plan.shape() == Some((hl, seg)) && plan.count <= per {
                        for (i, mut buf) in slots.drain(..plan.count).enumerate() {
                            let len = plan.write_headers(hdrs, i, &mut buf.as_mut_slice()[HEAD..]);
                            self.queue(buf, len, ops);
                        }
                        self.counters.tun_scattered.fetch_add(1, Relaxed);
                        continue;
                    }
                }
                gather(&mut raw, head, n, &slots[..per], HEAD + hl, seg, &spill);
            }
            let pkt = &raw[VnetHdr::LEN..n];
            let plan = match Plan::new(&h, pkt, self.mtu) {
                Ok(p) => p,
                Err(e) => {
                    self.counters.count(match e {
                        SegError::BadVnet => DropCause::BadVnet,
                        SegError::TooBig => DropCause::TooBig,
                    });
                    continue;
                }
            };
            if let Some(shape) = plan.shape() {
                self.tx_shape = Some(shape);
            }
            for i in 0..plan.count {
                let mut buf = self.take_buf();
                let len = plan.write(pkt, i, &mut buf.as_mut_slice()[HEAD..]);
                self.queue(buf, len, ops);
            }
        }
        self.tun_buf = raw;
        self.tx_spill = spill;
        self.tx_slots = slots;
    }

    /// Records that the flow of packet `ip` leaves on TUN queue `q`.
    fn learn(&self, q: usize, ip: &[u8]) {
        if let (Some(s), Some(k)) = (&self.steer, flow_key(ip)) {
            s.learn(k, q);
        }
    }

    /// Receives up to a batch of ESP datagrams into engine buffers.
    fn receive(&mut self) -> Vec<Buf> {
        if self.udp_gro {
            return self.receive_gro();
        }
        let mut bufs: Vec<Buf> = (0..self.batch).map(|_| self.take_buf()).collect();
        let mut got = Vec::with_capacity(self.batch);
        let r = {
            let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            self.udp.recv_batch(&mut slices, &mut got)
        };
        if let Err(e) = r {
            log::warn!("underlay receive: {e}");
        }
        let rest = bufs.split_off(got.len());
        self.free.extend(rest);
        for (b, &(len, _)) in bufs.iter_mut().zip(&got) {
            b.set_len(len).expect("received length fits the buffer");
        }
        bufs
    }

    /// GRO receive. A steady flow's coalesced messages are scattered by the kernel
    /// straight into engine buffers, one datagram per buffer, sized as the last
    /// coalesced message's datagrams were; a message that does not fit that shape
    /// (another size, a first message) spills into the overflow buffer behind the slots
    /// and is gathered, split and copied instead.
    fn receive_gro(&mut self) -> Vec<Buf> {
        let size = if self.rx_seg <= self.cap {
            self.rx_seg
        } else {
            0
        };
        let per = match (size, self.rx_coalesced) {
            (0, _) => 0,
            (_, false) => 1,
            (_, true) => GRO_BUF
                .div_ceil(size)
                .min(MAX_GRO_SEGS)
                .min((2 * self.rx_count).max(4)),
        };
        let mut raw = std::mem::take(&mut self.rx_raw);
        let mut slots = std::mem::take(&mut self.rx_slots);
        slots.resize_with(raw.len(), Vec::new);
        for s in &mut slots {
            while s.len() < per {
                s.push(self.take_buf());
            }
            self.free.extend(s.drain(per..));
        }
        let mut got = Vec::new();
        let r = {
            let mut iovs: Vec<Vec<IoSliceMut<'_>>> = slots
                .iter_mut()
                .zip(raw.iter_mut())
                .map(|(bufs, spill)| {
                    bufs.iter_mut()
                        .map(|b| IoSliceMut::new(&mut b.as_mut_slice()[..size]))
                        .chain(std::iter::once(IoSliceMut::new(spill)))
                        .collect()
                })
                .collect();
            let mut msgs: Vec<&mut [IoSliceMut<'_>]> =
                iovs.iter_mut().map(|v| v.as_mut_slice()).collect();
            self.udp.recv_vectored(&mut msgs, &mut got)
        };
        if let Err(e) = r {
            log::warn!("underlay receive: {e}");
        }
        let mut bufs = Vec::with_capacity(got.len() * per.max(8));
        for (k, &(len, seg)) in got.iter().enumerate() {
            if let Some(n) = scattered(len, seg, size, per) {
                self.counters.scattered.fetch_add(1, Relaxed);
                for (i, mut b) in slots[k].drain(..n).enumerate() {
                    b.set_len((len - i * size).min(size))
                        .expect("a slot holds its datagram");
                    bufs.push(b);
                }
            } else {
                self.counters.gathered.fetch_add(1, Relaxed);
                self.gather_split(&slots[k], &raw[k], len, seg, size, &mut bufs);
            }
            if seg > 0 {
                self.rx_seg = seg;
                self.rx_count = len.div_ceil(seg).max(self.rx_count - self.rx_count / 8);
                self.rx_coalesced = true;
            } else if !self.rx_coalesced && len > self.rx_seg {
                self.rx_seg = len;
            }
        }
        self.rx_slots = slots;
        self.rx_raw = raw;
        bufs
    }

    /// The slow path of [`Worker::receive_gro`]: joins the message of `len` bytes
    /// (its first bytes in `slots` of `size` bytes each, the rest in `spill`), splits it
    /// into datagrams of `seg` bytes and copies each into a buffer of its own.
    fn gather_split(
        &mut self,
        slots: &[Buf],
        spill: &[u8],
        len: usize,
        seg: usize,
        size: usize,
        bufs: &mut Vec<Buf>,
    ) {
        let mut flat = std::mem::take(&mut self.rx_flat);
        flat.clear();
        let mut left = len;
        for b in slots {
            let n = left.min(size);
            flat.extend_from_slice(&b.as_slice()[..n]);
            left -= n;
        }
        flat.extend_from_slice(&spill[..left.min(spill.len())]);
        for r in split(flat.len(), seg) {
            let mut b = self.take_buf();
            if r.len() > b.capacity() {
                self.counters.count(DropCause::BadEncap);
                self.free.push(b);
                continue;
            }
            b.as_mut_slice()[..r.len()].copy_from_slice(&flat[r.clone()]);
            b.set_len(r.len()).expect("checked against the capacity");
            bufs.push(b);
        }
        self.rx_flat = flat;
    }

    fn inbound_batch(&mut self) {
        let bufs = self.receive();
        let mut ops = Vec::with_capacity(bufs.len());
        let mut preps: Vec<(usize, Prepared)> = Vec::with_capacity(bufs.len());
        for mut buf in bufs {
            let s = buf.as_slice();
            if s.len() == 1 && s[0] == 0xff {
                // RFC 3948 NAT-keepalive: not a packet.
                self.free.push(buf);
                continue;
            }
            if s.len() >= 4 && s[..4] == [0, 0, 0, 0] {
                // Non-ESP marker: an IKE message on port 4500 (RFC 3948 §2.2).
                self.pass_to_ike(&s[4..]);
                self.free.push(buf);
                continue;
            }
            let spi = s
                .get(..4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            let Some(k) = self.inb.iter().position(|i| Some(i.spi()) == spi) else {
                self.counters.count(DropCause::BadEncap);
                self.free.push(buf);
                continue;
            };
            match self.inb[k].prepare(&mut buf) {
                Ok(p) => {
                    ops.push(Op {
                        session: self.crypto.dec[k],
                        iv: p.iv,
                        layout: p.layout,
                        buf,
                        user: preps.len() as u64,
                    });
                    preps.push((k, p));
                }
                Err(e) => {
                    self.counters.count(e.into());
                    self.free.push(buf);
                }
            }
        }
        if ops.is_empty() {
            return;
        }
        let n = self.crypto.submit(ops);
        debug_assert_eq!(n, preps.len());
        self.flights.push_back(Flight::In(preps));
    }

    /// Checks and writes to the TUN the packets of one finished inbound batch.
    fn deliver_in(&mut self, done: &mut Vec<Completion>, preps: &[(usize, Prepared)]) {
        // First every packet is checked (replay window, padding, inner header): the
        // range of the inner packet in its buffer, or nothing if it was dropped.
        let mut inner = std::mem::take(&mut self.inner);
        inner.clear();
        for c in done.iter() {
            let prep = preps
                .get(c.op.user as usize)
                .filter(|(k, _)| self.crypto.dec.get(*k) == Some(&c.op.session));
            let r = match (c.status, prep) {
                (Status::Ok, Some((k, prep))) => {
                    self.inb[*k].finish(prep, &c.op.buf).map_err(Into::into)
                }
                (Status::AuthFailed, Some(_)) => Err(DropCause::AuthFailed),
                _ => Err(DropCause::TxError),
            };
            inner.push(r.map_err(|d| self.counters.count(d)).ok());
        }
        // Then they go to the TUN, TCP runs coalesced into one vectored write each; the
        // batch's buffers stay alive until the coalescer is flushed.
        let packet = |id: usize| inner[id].clone().map(|r| &done[id].op.buf.as_slice()[r]);
        let (tuns, counters, steer) = (&self.tuns, &self.counters, &self.steer);
        // The queue the packet's flow leaves on (see `crate::steer`), else the first.
        let tun_for = |ip: &[u8]| {
            let q = steer
                .as_ref()
                .zip(flow_key(ip))
                .and_then(|(s, k)| s.queue(k));
            &tuns[q.filter(|&q| q < tuns.len()).unwrap_or(0)]
        };
        let vnet = tuns[0].vnet;
        // Writes one packet (`ip`: its IP header onwards, for the queue) from `parts`.
        let write = |ip: &[u8], parts: &[IoSlice<'_>], segs: u64, bytes: u64| match tun_for(ip)
            .send_vectored(parts)
        {
            Ok(()) => {
                counters.rx_packets.fetch_add(segs, Relaxed);
                counters.rx_bytes.fetch_add(bytes, Relaxed);
            }
            Err(_) => {
                for _ in 0..segs {
                    counters.count(DropCause::TxError);
                }
            }
        };
        let mut emit = |head: &[u8], pieces: &[Piece], segs: u64, bytes: u64| {
            let mut iov = [IoSlice::new(&[]); 1 + MAX_SEGS];
            iov[0] = IoSlice::new(head);
            for (slot, p) in iov[1..].iter_mut().zip(pieces) {
                let pkt = packet(p.id).expect("the coalescer holds only delivered packets");
                *slot = IoSlice::new(&pkt[p.start..p.end]);
            }
            write(&head[VnetHdr::LEN..], &iov[..1 + pieces.len()], segs, bytes);
        };
        let plain_vnet = [0u8; VnetHdr::LEN];
        for id in 0..done.len() {
            let Some(pkt) = packet(id) else {
                continue;
            };
            let n = pkt.len() as u64;
            if !vnet {
                write(pkt, &[IoSlice::new(pkt)], 1, n);
            } else if !self.coalesce || !self.gro.push(id, pkt, &mut emit) {
                write(pkt, &[IoSlice::new(&plain_vnet), IoSlice::new(pkt)], 1, n);
            }
        }
        self.gro.flush(&mut emit);
        self.counters.coalesced.store(self.gro.coalesced, Relaxed);
        self.inner = inner;
        self.free.extend(done.drain(..).map(|c| c.op.buf));
    }

    /// Hands an IKE message to the IKE thread (dropped, and counted, if there is
    /// none or its queue is full: IKE retransmits).
    fn pass_to_ike(&mut self, msg: &[u8]) {
        let sent = match &self.ike {
            Some(l) => match l.to_ike.try_send(msg.to_vec()) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if !sent {
            self.counters.count(DropCause::Ike);
        }
    }

    /// Applies one SA change from the IKE thread (no batch is in flight): the engine
    /// sessions follow the SAs; a removed SA's session is destroyed, its keys zeroized.
    fn apply(&mut self, ch: SaChange) {
        let c = &mut self.crypto;
        match ch {
            SaChange::InstallInbound(i) => match c.session(i.keys.spec(Direction::Decrypt)) {
                Ok(s) => {
                    c.dec.push(s);
                    self.inb.push(i);
                }
                Err(e) => log::error!("inbound SA {:#x}: {e}", i.spi()),
            },
            SaChange::InstallOutbound(o) => match c.session(o.keys.spec(Direction::Encrypt)) {
                Ok(s) => {
                    if let Some(old) = c.enc.replace(s) {
                        let _ = c.engine.destroy_session(old);
                    }
                    if self.lead {
                        self.counters.out_spi.store(o.spi(), Relaxed);
                        self.counters.out_seq.store(0, Relaxed);
                        self.counters.out_sa_bytes.store(0, Relaxed);
                    }
                    self.out = Some(o);
                    self.told_exhausted = false;
                }
                Err(e) => log::error!("outbound SA {:#x}: {e}", o.spi()),
            },
            SaChange::RemoveInbound(spi) => {
                if let Some(k) = self.inb.iter().position(|i| i.spi() == spi) {
                    self.inb.remove(k);
                    let s = c.dec.remove(k);
                    let _ = c.engine.destroy_session(s);
                }
            }
            SaChange::RemoveOutbound(spi) => {
                if self.out.as_ref().is_some_and(|o| o.spi() == spi) {
                    self.out = None;
                    if let Some(s) = c.enc.take() {
                        let _ = c.engine.destroy_session(s);
                    }
                    if self.lead {
                        self.counters.out_spi.store(0, Relaxed);
                    }
                }
            }
        }
    }

    /// Moves both sessions to another engine between two batches. `run` finishes every
    /// batch in flight before it serves a command, so the old engine has nothing in
    /// flight here: no packet is lost or reordered by the switch.
    fn switch(&mut self, target: Target) -> Result<Switched, String> {
        let (engine, kind) = match target {
            Target::Local(k) => (open_local(k).map_err(|e| e.to_string())?, k),
            Target::Lookaside(e) => (e, EngineKind::Lookaside),
            Target::Release => {
                if self.crypto.kind != EngineKind::Lookaside {
                    return Err("no accelerator attached".into());
                }
                (open_local(self.base).map_err(|e| e.to_string())?, self.base)
            }
        };
        let t0 = Instant::now();
        debug_assert!(self.flights.is_empty() && self.crypto.ready.is_empty());
        debug_assert_eq!(self.crypto.engine.in_flight(), 0);
        let new = Crypto::new(engine, kind, self.out.as_ref(), &self.inb)?;
        let mut old = std::mem::replace(&mut self.crypto, new);
        old.destroy_sessions();
        // Buffers come from the old engine's pool: the new engine hands out its own.
        self.free.clear();
        self.rx_slots.clear();
        self.tx_slots.clear();
        self.past_failovers += old.engine.stats().failovers;
        drop(old);
        let switch_us = t0.elapsed().as_micros() as u64;
        if self.lead {
            self.counters.set_engine(kind);
        }
        Ok(Switched {
            engine: kind,
            switch_us,
        })
    }
}

/// Joins a scattered read of `n` bytes back into `raw`: its first `head` bytes are
/// there already, the next ones lie in `slots` (`seg` bytes each from offset `at`), the
/// rest in `spill`.
fn gather(
    raw: &mut [u8],
    head: usize,
    n: usize,
    slots: &[Buf],
    at: usize,
    seg: usize,
    spill: &[u8],
) {
    let mut pos = head;
    for b in slots {
        let k = (n - pos).min(seg);
        raw[pos..pos + k].copy_from_slice(&b.as_slice()[at..at + k]);
        pos += k;
    }
    let k = n - pos;
    raw[pos..n].copy_from_slice(&spill[..k]);
}
