//! The worker thread's loop: receive a vector on one port, run it through the graph,
//! transmit it on the other port; alternate ports; wait by poll mode; serve control
//! commands between two vectors; run housekeeping (expiry, event flush, CPU sample)
//! about every 100 ms. Per packet it makes no allocation and no syscall beyond the
//! batched receive and send.

use crate::fastpath::FastPathWorker;
use crate::graph::{Graph, GraphPlan};
use crate::latency::LatencyWindow;
use crate::stash::Stash;
use crate::stats::{drops_map, NodeStats, PortStats, Stats, WorkerStats};
use nfx_io::cpu::{cpu_pct, thread_cpu_time};
use nfx_io::{Notifier, PollMode, Port, Waiter, ADAPTIVE_SPIN};
use nfx_packet::{Direction, PacketBuf, PacketVector};
use nfx_vnf::Node;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::time::Duration;

/// How often nodes expire state, events are flushed and CPU is sampled.
pub const TICK: Duration = Duration::from_millis(100);
/// Window over which `cpu_pct` is measured.
pub const CPU_WINDOW: Duration = Duration::from_secs(1);

/// A request to the worker, answered between two vectors.
pub enum Command {
    /// Reply with a fresh stats document.
    Stats(SyncSender<Stats>),
    /// Install the plan's instances and services ([`Graph::replace`]); reply with the
    /// nodes no longer run (dropped by the caller, off the packet path), or why the
    /// plan was refused.
    Reconfigure(GraphPlan, SyncSender<Result<Swapped, String>>),
    /// Run `f` on the VNF called `node` (state export/import) and reply with its result.
    WithNode(String, NodeJob),
    /// Stop running frames until `Release`: they wait, in arrival order, in the worker's
    /// stash ([`crate::stash`]) and past its bound in the sockets.
    Hold(SyncSender<()>),
    /// Run frames again, starting with what was kept or queued while held.
    Release(SyncSender<()>),
    /// Process everything already queued in the ports' sockets, then hold.
    Drain(SyncSender<Drained>),
    /// Point both ports' fanout groups at member `k`.
    Steer(u32, SyncSender<Result<(), String>>),
    /// Change the poll mode from the next loop turn on.
    SetPoll(PollMode, SyncSender<()>),
    /// Spread flows over the fanout groups' members (the instance's workers): inside by
    /// a symmetric flow hash, outside by destination port residue (`true`, a source NAT
    /// picks reply ports) or by the same symmetric hash (`false`).
    SpreadFlows(bool, SyncSender<Result<(), String>>),
    /// Leave the loop; the final stats are the thread's result.
    Shutdown,
}

/// What a reconfiguration hands back: the old nodes, how many flows were carried from
/// old to new nodes of the same id, and what the worker reports right after the swap
/// (so that a deploy needs no second round trip for its state).
pub type Swapped = (Vec<Box<dyn Node>>, usize, SwapReport);

/// A worker's report right after a swap: only what a deploy or a configuration change
/// states about its instance. The whole stats document would be taken, written and
/// read on every deploy, about half of one on a running worker.
pub struct SwapReport {
    /// The instance name.
    pub name: String,
    /// This worker thread's CPU, as in its stats.
    pub cpu_pct: f64,
    /// The counters of the instances the plan built, in instance order.
    pub built: Vec<NodeStats>,
}

/// What a drain did: frames processed, and whether the sockets were found empty (false
/// when [`DRAIN_LIMIT`] passed first, i.e. traffic still arrives: not steered away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Frames received (and run through the graph) during the drain.
    pub packets: u64,
    /// The sockets were empty at the end.
    pub complete: bool,
}

/// Longest a drain keeps reading before it reports an incomplete drain.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// A job run on the worker thread against one node.
pub type NodeJob = Box<dyn FnOnce(Option<&mut (dyn Node + 'static)>) + Send>;

/// Wakes the worker for commands: a flag checked every loop turn (cheap in busy mode)
/// and an eventfd that interrupts a blocking poll.
pub struct Mailbox {
    pending: AtomicBool,
    notifier: Notifier,
}

impl Mailbox {
    /// Creates the flag and the eventfd.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            pending: AtomicBool::new(false),
            notifier: Notifier::new()?,
        })
    }

    /// Tells the worker a command is queued (call after sending it).
    pub fn ring(&self) {
        self.pending.store(true, Ordering::Release);
        self.notifier.notify();
    }
}

/// Clock reading for [`nfx_vnf::NodeCtx::now_ns`]: CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    // SAFETY: timespec is plain old data.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: passes a live timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Which port is which: index 0 receives Forward traffic, index 1 Reverse.
pub const PORT_NAMES: [&str; 2] = ["inside", "outside"];

/// Everything one worker thread owns.
pub struct Worker {
    name: String,
    id: usize,
    poll: PollMode,
    vector: usize,
    ports: [Box<dyn Port>; 2],
    graph: Graph,
    vec: PacketVector,
    cmds: Receiver<Command>,
    mailbox: std::sync::Arc<Mailbox>,
    vectors: u64,
    vector_packets: u64,
    started_ns: u64,
    cpu_at_start: Duration,
    window: (u64, Duration),
    window_pct: Option<f64>,
    rx_error_logged: bool,
    held: bool,
    /// Frames taken off each port while held, run first once released.
    stash: [Stash; 2],
    socket_drops: [u64; 2],
    fast: Option<FastPathWorker>,
    tid: u32,
    /// Each packet's time in the worker, when measured ([`Worker::with_latency`]).
    latency: Option<Box<LatencyWindow>>,
}

impl Worker {
    /// Assembles a worker; call [`Worker::run`] on the thread that should own it.
    pub fn new(
        name: String,
        poll: PollMode,
        vector: usize,
        ports: [Box<dyn Port>; 2],
        graph: Graph,
        cmds: Receiver<Command>,
        mailbox: std::sync::Arc<Mailbox>,
    ) -> Self {
        let vector = vector.clamp(1, nfx_packet::MAX_VECTOR);
        Self {
            name,
            id: 0,
            poll,
            vector,
            ports,
            graph,
            vec: PacketVector::new(vector, PacketBuf::GSO_CAPACITY),
            cmds,
            mailbox,
            vectors: 0,
            vector_packets: 0,
            started_ns: 0,
            cpu_at_start: Duration::ZERO,
            window: (0, Duration::ZERO),
            window_pct: None,
            rx_error_logged: false,
            held: false,
            stash: Default::default(),
            socket_drops: [0; 2],
            fast: None,
            tid: 0,
            latency: None,
        }
    }

    /// Measures each packet's time in the worker ([`crate::latency`]) when `on`.
    pub fn with_latency(mut self, on: bool) -> Self {
        self.latency = on.then(|| Box::new(LatencyWindow::new(monotonic_ns())));
        self
    }

    /// Gives the worker a fast path (the table tier) to fill with its settled flows.
    pub fn with_fast_path(mut self, fast: FastPathWorker) -> Self {
        self.fast = Some(fast);
        self
    }

    /// Takes every flow back from the fast path (see [`FastPathWorker::flush`]).
    fn flush_fast_path(&mut self) {
        if let Some(f) = self.fast.as_mut() {
            f.flush(&mut self.graph, monotonic_ns());
        }
    }

    /// Numbers the worker (its `workers[].id` in the stats).
    pub fn with_id(mut self, id: usize) -> Self {
        self.id = id;
        self
    }

    /// Starts the worker holding (a fanout standby): it reads nothing until `Release`.
    pub fn start_held(mut self, held: bool) -> Self {
        self.held = held;
        self
    }

    /// Runs until a `Shutdown` command (or the controller goes away); returns final stats.
    pub fn run(mut self) -> Stats {
        let mut waiter = Waiter::new(&[
            self.ports[0].fd(),
            self.ports[1].fd(),
            self.mailbox.notifier.fd(),
        ]);
        let mut held_waiter = Waiter::new(&[self.mailbox.notifier.fd()]);
        self.begin();
        let tick_ns = TICK.as_nanos() as u64;
        let spin_ns = ADAPTIVE_SPIN.as_nanos() as u64;
        let mut next_tick = self.started_ns + tick_ns;
        let mut last_packet = self.started_ns;
        loop {
            if self.mailbox.pending.swap(false, Ordering::Acquire) && self.serve_commands() {
                break;
            }
            let now = monotonic_ns();
            if self.held {
                if now >= next_tick {
                    self.housekeeping(now);
                    next_tick = now + tick_ns;
                }
                if self.keep(0) + self.keep(1) > 0 {
                    continue;
                }
                // Wake for frames only while there is room to keep them.
                let w = if self.stash.iter().all(Stash::has_room) {
                    &mut waiter
                } else {
                    &mut held_waiter
                };
                let timeout = Duration::from_nanos(next_tick.saturating_sub(now));
                if let Err(e) = w.wait(timeout) {
                    log::warn!("{}: poll failed: {e}", self.name);
                }
                self.mailbox.notifier.clear();
                continue;
            }
            let got = self.pass(0, now) + self.pass(1, now);
            if got > 0 {
                last_packet = now;
            }
            if now >= next_tick {
                self.housekeeping(now);
                next_tick = now + tick_ns;
            }
            if got == 0 {
                let block = match self.poll {
                    PollMode::Busy => false,
                    PollMode::Interrupt => true,
                    PollMode::Adaptive => now.saturating_sub(last_packet) >= spin_ns,
                };
                if block {
                    let timeout = Duration::from_nanos(next_tick.saturating_sub(now));
                    if let Err(e) = waiter.wait(timeout) {
                        log::warn!("{}: poll failed: {e}", self.name);
                    }
                    // Every wake-up request is paired with a `pending` flag set before it,
                    // so the eventfd can be reset here; the flag is checked next turn.
                    self.mailbox.notifier.clear();
                } else if self.poll == PollMode::Adaptive {
                    // Spinning between frames: let any runnable thread of this CPU go
                    // first (the traffic's own endpoints and softirq work often share
                    // the worker's CPUs); with none, sched_yield returns at once.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        self.finish()
    }

    /// Starts the clocks of the stats (uptime, CPU) on the thread that runs the worker.
    fn begin(&mut self) {
        self.started_ns = monotonic_ns();
        self.tid = nfx_io::cpu::gettid();
        self.cpu_at_start = thread_cpu_time();
        self.window = (self.started_ns, self.cpu_at_start);
    }

    /// Flushes the events and returns the final stats.
    pub(crate) fn finish(mut self) -> Stats {
        self.graph.flush_events();
        self.sample_socket_drops();
        self.stats()
    }

    /// Starts a worker run on its caller's thread ([`Worker::serve_pending`]).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn start_inline(mut self) -> Self {
        self.begin();
        self
    }

    /// On a worker run on its caller's thread: serves the commands queued since the
    /// last call, as the loop does between two vectors. Returns true when one told the
    /// worker to stop ([`Worker::finish`] then gives its final stats).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn serve_pending(&mut self) -> bool {
        self.mailbox.notifier.clear();
        self.mailbox.pending.swap(false, Ordering::Acquire) && self.serve_commands()
    }

    /// While held: takes one vector off port `side` into its stash, if it has room.
    /// Returns how many frames were taken.
    fn keep(&mut self, side: usize) -> usize {
        if !self.stash[side].has_room() {
            return 0;
        }
        let n = self.receive(side);
        self.stash[side].keep(&self.vec.slots_mut()[..n]);
        self.ports[side].release(&mut self.vec.slots_mut()[..n]);
        n
    }

    /// Receives into the vector's slots from port `side` (errors logged once, as 0).
    fn receive(&mut self, side: usize) -> usize {
        match self.ports[side].recv(self.vec.slots_mut()) {
            Ok(n) => n,
            Err(e) => {
                if !self.rx_error_logged {
                    log::warn!(
                        "{}: receive on {} failed: {e}",
                        self.name,
                        self.ports[side].name()
                    );
                    self.rx_error_logged = true;
                }
                0
            }
        }
    }

    /// Runs one vector from port `side` — its stash first, then the socket — and
    /// transmits the survivors on the other port. Returns how many frames it ran.
    fn pass(&mut self, side: usize, now_ns: u64) -> usize {
        let dir = if side == 0 {
            Direction::Forward
        } else {
            Direction::Reverse
        };
        // Frames from the stash waited there while held: their ring stamps are gone.
        let fresh = self.stash[side].is_empty();
        let n = if fresh {
            self.receive(side)
        } else {
            self.stash[side].refill(self.vec.slots_mut())
        };
        if n == 0 {
            self.try_arm(side);
            return 0;
        }
        self.vec.set_len(n, dir, self.fast.is_some());
        let live = self.graph.run(self.vec.packets_mut(), dir, now_ns);
        if live > 0 {
            let out = &mut self.vec.packets_mut()[..live];
            self.ports[1 - side].send(out);
            self.graph.count_tx_drops(out);
        }
        if let (Some(l), true) = (self.latency.as_mut(), fresh) {
            let stamps = self.ports[side].rx_stamps();
            if !stamps.is_empty() {
                l.record(stamps, nfx_io::stamp_clock_ns());
            }
        }
        if let Some(f) = self.fast.as_mut() {
            f.learn(&mut self.graph, self.vec.packets(), side, live, now_ns);
        }
        // Frames received in place go back to the receive ring only now, after the send.
        self.ports[side].release(self.vec.packets_mut());
        self.vectors += 1;
        self.vector_packets += n as u64;
        n
    }

    /// Processes what is queued in both sockets until a pass finds both empty (bounded
    /// by [`DRAIN_LIMIT`]), then holds.
    fn drain(&mut self) -> Drained {
        let start = monotonic_ns();
        let limit = DRAIN_LIMIT.as_nanos() as u64;
        let mut packets = 0;
        let complete = loop {
            let now = monotonic_ns();
            let got = self.pass(0, now) + self.pass(1, now);
            packets += got as u64;
            if got == 0 {
                break true;
            }
            if now.saturating_sub(start) >= limit {
                break false;
            }
        };
        self.held = true;
        Drained { packets, complete }
    }

    /// Points the fanout groups of both ports at member `k`.
    fn steer(&self, k: u32) -> Result<(), String> {
        for p in &self.ports {
            nfx_io::fanout::steer(p.fd(), k).map_err(|e| format!("port {}: {e}", p.name()))?;
        }
        Ok(())
    }

    /// Installs the flow-spreading fanout programs (see [`Command::SpreadFlows`]).
    fn spread_flows(&self, dest_port: bool) -> Result<(), String> {
        use nfx_io::fanout::{flow_program, set_program, FlowKey};
        let outside = if dest_port {
            FlowKey::DestPort
        } else {
            FlowKey::Symmetric
        };
        for (p, key) in self.ports.iter().zip([FlowKey::Symmetric, outside]) {
            set_program(p.fd(), &flow_program(key))
                .map_err(|e| format!("port {}: fanout program: {e}", p.name()))?;
        }
        Ok(())
    }

    /// Arms the fast path's pending entries of `side` if every frame they counted has
    /// been through userspace (call after a receive on `side` found nothing).
    fn try_arm(&mut self, side: usize) {
        if !self.fast.as_ref().is_some_and(|f| f.has_pending(side)) {
            return;
        }
        self.sample_socket_drops_of(side);
        let taken = self.ports[side].counters().rx_taken + self.socket_drops[side];
        let out_idle = matches!(self.ports[1 - side].unsent_bytes(), Ok(0));
        if let Some(f) = self.fast.as_mut() {
            f.receive_was_empty(side, taken, out_idle);
        }
    }

    /// Adds the frames the kernel dropped because a socket was full (e.g. while held).
    fn sample_socket_drops(&mut self) {
        for side in 0..2 {
            self.sample_socket_drops_of(side);
        }
    }

    /// The same for port `side` alone.
    fn sample_socket_drops_of(&mut self, side: usize) {
        if let Ok(d) = nfx_io::afpacket::socket_drops(self.ports[side].fd()) {
            self.socket_drops[side] += d;
        }
    }

    fn housekeeping(&mut self, now_ns: u64) {
        self.sample_socket_drops();
        if let Some(f) = self.fast.as_mut() {
            f.sync(&mut self.graph, now_ns);
        }
        self.graph.housekeeping(now_ns);
        let wall = now_ns.saturating_sub(self.window.0);
        if wall >= CPU_WINDOW.as_nanos() as u64 {
            let cpu = thread_cpu_time();
            self.window_pct = Some(cpu_pct(
                cpu.saturating_sub(self.window.1),
                Duration::from_nanos(wall),
            ));
            self.window = (now_ns, cpu);
            if let Some(l) = self.latency.as_mut() {
                l.rotate(now_ns);
            }
        }
    }

    /// Serves every queued command; returns true when told to shut down.
    fn serve_commands(&mut self) -> bool {
        loop {
            match self.cmds.try_recv() {
                Ok(Command::Stats(reply)) => {
                    self.sample_socket_drops();
                    let _ = reply.send(self.stats());
                }
                Ok(Command::Hold(reply)) => {
                    self.flush_fast_path();
                    self.held = true;
                    let _ = reply.send(());
                }
                Ok(Command::Release(reply)) => {
                    self.held = false;
                    let _ = reply.send(());
                }
                Ok(Command::Drain(reply)) => {
                    self.flush_fast_path();
                    let _ = reply.send(self.drain());
                }
                Ok(Command::Steer(k, reply)) => {
                    let _ = reply.send(self.steer(k));
                }
                Ok(Command::SetPoll(mode, reply)) => {
                    self.poll = mode;
                    let _ = reply.send(());
                }
                Ok(Command::SpreadFlows(dest_port, reply)) => {
                    let _ = reply.send(self.spread_flows(dest_port));
                }
                Ok(Command::Reconfigure(plan, reply)) => {
                    self.flush_fast_path();
                    let built: Vec<String> = plan
                        .instances
                        .iter()
                        .filter(|(_, node)| node.is_some())
                        .map(|(id, _)| id.clone())
                        .collect();
                    let swapped = self.graph.replace(plan);
                    let _ = reply.send(swapped.map(|(old, carried)| {
                        let report = SwapReport {
                            name: self.name.clone(),
                            cpu_pct: self.cpu_pct(),
                            built: self.graph.instance_stats(&built),
                        };
                        (old, carried, report)
                    }));
                }
                Ok(Command::WithNode(name, job)) => {
                    self.flush_fast_path();
                    job(self.graph.vnf_mut(&name))
                }
                Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => return true,
                Err(TryRecvError::Empty) => return false,
            }
        }
    }

    /// The thread's CPU over the last window, or since start before the first window.
    fn cpu_pct(&self) -> f64 {
        self.window_pct.unwrap_or_else(|| {
            let uptime = Duration::from_nanos(monotonic_ns().saturating_sub(self.started_ns));
            cpu_pct(thread_cpu_time().saturating_sub(self.cpu_at_start), uptime)
        })
    }

    /// A fresh stats document (called on the worker thread).
    pub fn stats(&self) -> Stats {
        let now = monotonic_ns();
        let uptime = Duration::from_nanos(now.saturating_sub(self.started_ns));
        let cpu = thread_cpu_time().saturating_sub(self.cpu_at_start);
        let ports: Vec<PortStats> = self
            .ports
            .iter()
            .zip(PORT_NAMES)
            .zip(self.socket_drops)
            .zip(&self.stash)
            .map(|(((p, name), socket_drops), stash)| {
                let c = p.counters();
                PortStats {
                    name: name.to_string(),
                    iface: p.name().to_string(),
                    rx_packets: c.rx_packets,
                    rx_bytes: c.rx_bytes,
                    tx_packets: c.tx_packets,
                    tx_bytes: c.tx_bytes,
                    tx_retries: c.tx_retries,
                    socket_drops,
                    held_frames: stash.len() as u64,
                    drops: drops_map(&std::array::from_fn(|r| c.drops[r] + stash.drops()[r])),
                }
            })
            .collect();
        let worker = WorkerStats {
            id: self.id,
            cpu_pct: self.cpu_pct(),
            cpu_s: cpu.as_secs_f64(),
            rx_packets: ports.iter().map(|p| p.rx_packets).sum(),
            rx_bytes: ports.iter().map(|p| p.rx_bytes).sum(),
            tx_packets: ports.iter().map(|p| p.tx_packets).sum(),
            tx_bytes: ports.iter().map(|p| p.tx_bytes).sum(),
            vectors: self.vectors,
            mean_vector: if self.vectors == 0 {
                0.0
            } else {
                self.vector_packets as f64 / self.vectors as f64
            },
            tid: self.tid,
            poll: self.poll.as_str().to_string(),
            latency: self.latency.as_ref().and_then(|l| l.stats(now)),
        };
        Stats {
            name: self.name.clone(),
            uptime_s: uptime.as_secs_f64(),
            mode: if self.vector == 1 { "scalar" } else { "vector" }.to_string(),
            poll: self.poll.as_str().to_string(),
            held: self.held,
            workers: vec![worker],
            ports,
            nodes: self.graph.node_stats(),
            services: self.graph.service_stats(),
            events: self.graph.event_counts(),
            fast_path: self.fast.as_ref().map(FastPathWorker::stats),
            control_rejected: 0,
        }
    }
}
