//! Starting and stopping a dataplane instance, and the [`Controller`] through which
//! other threads (the control socket, `nfx run`, tests) talk to its worker.

use crate::builtin::{L2Rewrite, OutputNode};
use crate::config::{ConfigError, KernelStack, Role, RunConfig};
use crate::fastpath::FastPathWorker;
use crate::graph::{Graph, GraphPlan};
use crate::services::{ServiceSet, Topology};
use crate::stats::{merge_nodes, NodeStats, Stats};
use crate::worker::{Command, Drained, Mailbox, Worker};
use anyhow::{anyhow, bail, Context};
use base64::Engine;
use nfx_io::isolate::{IsolationRequest, KernelIsolation};
use nfx_io::sys::parse_mac;
use nfx_io::{AfPacketOptions, AfPacketPort, Port};
use nfx_proto::request::ReconfigureForm;
use nfx_proto::{
    answer_line, Ack, Drained as ProtoDrained, Exported, Held, Imported, PollSet, Reconfigure,
    Reconfigured as ProtoReconfigured, Request, Steered,
};
use nfx_vnf::Node;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Builds the VNF node of one instance from its id (the node's name) and its spec
/// (`{"firewall": {...}}`). On error it names the field inside the spec
/// (`nat.snat.public_ip`); the entry or instance and the file are filled in by the
/// caller.
pub type NodeBuilder =
    Arc<dyn Fn(&str, &serde_json::Value) -> Result<Box<dyn Node>, ConfigError> + Send + Sync>;

/// Opens the two ports on the worker thread (after it entered the namespace). With a
/// fast path its socket filter comes along, to be attached to each AF_PACKET socket
/// before it binds ([`AfPacketOptions::socket_filter`]).
pub type PortOpener = Box<dyn FnOnce(Option<RawFd>) -> anyhow::Result<[Box<dyn Port>; 2]> + Send>;

/// How long a caller waits for the worker to answer a command.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Slots of each 2 KiB-slot PACKET_MMAP receive ring (`io: ring-copy`): 32 MiB per
/// port, the memory of the 32 MiB socket buffer `recvmmsg` uses, so both ride out the
/// same stalls (about 40 ms of 64-byte frames at 0.4 Mpps).
const RX_RING_SLOTS: usize = 16384;

/// Slots of each GSO-slot receive ring (`io: ring`, `rings`): 525 of 68 KiB (35 MiB per
/// port, 35 blocks of 15), about the memory of the 2 KiB-slot ring: 14 ms of 64 KiB GSO
/// frames at 20 Gbit/s, but only 1.3 ms of 64-byte frames at 0.4 Mpps.
const RX_RING_GSO_SLOTS: usize = 512;

/// Slots of each PACKET_MMAP transmit ring (`io: rings`), 68 KiB each (35 MiB): two
/// vectors, plus room for frames whose skbs still wait in the receiving namespace's
/// backlog (a slot comes back when its skb is orphaned there). A frame that finds no
/// free slot is a counted `tx_error` drop.
const TX_RING_SLOTS: usize = 512;

/// The command channel of one worker thread.
struct WorkerLink {
    tx: Sender<Command>,
    mailbox: Arc<Mailbox>,
}

/// What the workers run: the topology and, per instance, whether its node needs
/// replies steered by destination port (a source NAT on several workers).
struct Applied {
    topology: Topology,
    by_port: Vec<bool>,
}

struct Inner {
    workers: Vec<WorkerLink>,
    builder: NodeBuilder,
    /// What runs now (the lock also serializes reconfigurations).
    applied: Mutex<Applied>,
    /// Control-socket connections refused by the peer-credential check.
    control_rejected: AtomicU64,
    /// The worker of [`Dataplane::start_inline`], run on the caller's thread.
    #[cfg(any(test, feature = "fuzzing"))]
    inline: Option<Mutex<Inline>>,
}

/// A worker run on its caller's thread, then its final stats once told to stop.
#[cfg(any(test, feature = "fuzzing"))]
enum Inline {
    Running(Box<Worker>),
    Stopped(Box<Stats>),
}

/// What a reconfiguration did: the instance ids, the service ids, the flows carried
/// over to rebuilt instances, and, right after the swap, the workers' CPU and the
/// counters of the instances it built.
pub struct Reconfigured {
    /// Instance ids (node names); for the `chain:` form in chain order.
    pub names: Vec<String>,
    /// Service ids in classification order (empty for the `chain:` form).
    pub services: Vec<String>,
    /// Flows carried from old nodes to new nodes of the same id.
    pub carried: usize,
    /// The instance name.
    pub name: String,
    /// The worker threads' CPU, summed, in % of a core.
    pub cpu_pct: f64,
    /// Counters of the instances built (new ids or changed specs), every worker's
    /// merged, in instance order.
    pub built: Vec<NodeStats>,
}

/// A cloneable handle that sends commands to a running worker and waits for answers.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Inner>,
}

impl Controller {
    fn send_to(&self, worker: usize, cmd: Command) -> anyhow::Result<()> {
        let w = &self.inner.workers[worker];
        w.tx.send(cmd)
            .map_err(|_| anyhow!("worker {worker} has stopped"))?;
        w.mailbox.ring();
        #[cfg(any(test, feature = "fuzzing"))]
        self.serve_inline();
        Ok(())
    }

    /// Lets the worker of [`Dataplane::start_inline`] serve what was just sent.
    #[cfg(any(test, feature = "fuzzing"))]
    fn serve_inline(&self) {
        let Some(slot) = &self.inner.inline else {
            return;
        };
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        let Inline::Running(w) = &mut *slot else {
            return;
        };
        if w.serve_pending() {
            let Inline::Running(w) = std::mem::replace(&mut *slot, Inline::Stopped(Box::default()))
            else {
                return;
            };
            *slot = Inline::Stopped(Box::new(w.finish()));
        }
    }

    /// Sends to the only worker; commands that act on one worker's ports or flow
    /// state (handoff, migration) are refused for an instance with several.
    fn send(&self, cmd: Command) -> anyhow::Result<()> {
        let n = self.inner.workers.len();
        if n != 1 {
            bail!("this command needs an instance with one worker (this one runs {n})");
        }
        self.send_to(0, cmd)
    }

    fn ask_to<T>(
        &self,
        worker: usize,
        make: impl FnOnce(mpsc::SyncSender<T>) -> Command,
    ) -> anyhow::Result<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send_to(worker, make(tx))?;
        rx.recv_timeout(REPLY_TIMEOUT)
            .map_err(|_| anyhow!("worker {worker} did not answer within {REPLY_TIMEOUT:?}"))
    }

    fn ask<T>(&self, make: impl FnOnce(mpsc::SyncSender<T>) -> Command) -> anyhow::Result<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(make(tx))?;
        rx.recv_timeout(REPLY_TIMEOUT)
            .map_err(|_| anyhow!("the worker did not answer within {REPLY_TIMEOUT:?}"))
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.inner.workers.len()
    }

    /// Fresh counters, taken by each worker between two vectors; with several workers
    /// one document that lists them all ([`Stats::merge`]).
    pub fn stats(&self) -> anyhow::Result<Stats> {
        let parts = (0..self.workers())
            .map(|w| self.ask_to(w, Command::Stats))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut all = Stats::merge(parts);
        all.control_rejected = self.inner.control_rejected.load(Ordering::Relaxed);
        Ok(all)
    }

    /// Counts a control-socket connection refused by the peer-credential check.
    pub fn count_control_rejected(&self) {
        self.inner.control_rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Replaces what the workers run by the chain `specs` (the `chain:` form: one
    /// implicit service that takes every frame); see [`Controller::apply`].
    pub fn reconfigure(&self, specs: &[serde_json::Value]) -> anyhow::Result<Reconfigured> {
        let topo = Topology::from_chain(specs).map_err(reconfigure_error)?;
        self.apply(topo)
    }

    /// Replaces what the workers run by the services and instances of `set` (closed by
    /// default: frames no service takes are dropped); see [`Controller::apply`].
    pub fn reconfigure_services(&self, set: &ServiceSet) -> anyhow::Result<Reconfigured> {
        let topo = Topology::from_services(set).map_err(reconfigure_error)?;
        self.apply(topo)
    }

    /// Builds what changed and swaps the whole set in between two vectors, atomically
    /// per worker: no packet is lost or reordered (they wait in the port's socket
    /// queue). Instances whose id and spec are unchanged are not rebuilt (same objects,
    /// state and counters: deploying one more instance builds one node); a rebuilt
    /// instance receives the flow state and counters of the running one of its id;
    /// services keep their counters, and the classifier the flows, of the services that
    /// remain. An invalid set changes nothing. With several workers every worker gets
    /// its own new nodes (sharded, see [`nfx_vnf::Node::shard`]) and the flow steering
    /// follows the new instances.
    fn apply(&self, topo: Topology) -> anyhow::Result<Reconfigured> {
        let mut applied = self.inner.applied.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.workers();
        let (plans, by_port) = graph_plans(&self.inner.builder, &topo, Some(&applied), n)
            .map_err(reconfigure_error)?;
        let (mut carried, mut name, mut cpu_pct) = (0, String::new(), 0.0);
        let mut built = Vec::new();
        for (w, plan) in plans.into_iter().enumerate() {
            let (old, c, report) = self
                .ask_to(w, |tx| Command::Reconfigure(plan, tx))?
                .map_err(|e| anyhow!("reconfigure: worker {w}: {e}"))?;
            drop(old);
            carried += c;
            name = report.name;
            cpu_pct += report.cpu_pct;
            merge_nodes(&mut built, report.built);
        }
        if n > 1 {
            let by_port = by_port.iter().any(|d| *d);
            self.ask_to(0, |tx| Command::SpreadFlows(by_port, tx))?
                .map_err(|e| anyhow!("reconfigure: {e}"))?;
        }
        let (names, services) = (topo.instance_ids(), topo.service_ids());
        *applied = Applied {
            topology: topo,
            by_port,
        };
        Ok(Reconfigured {
            names,
            services,
            carried,
            name,
            cpu_pct,
            built,
        })
    }

    /// Runs `job` on the worker thread against the VNF called `node`.
    fn with_node<T: Send + 'static>(
        &self,
        node: &str,
        job: impl FnOnce(&mut (dyn Node + 'static)) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        let name = node.to_string();
        let missing = format!("no node `{node}` in the chain");
        self.send(Command::WithNode(
            name,
            Box::new(move |n| {
                let _ = tx.send(match n {
                    Some(n) => job(n),
                    None => Err(anyhow!(missing)),
                });
            }),
        ))?;
        rx.recv_timeout(REPLY_TIMEOUT)
            .map_err(|_| anyhow!("the worker did not answer within {REPLY_TIMEOUT:?}"))?
    }

    /// The flow state of VNF `node`, serialized by the node (for migration).
    pub fn export_state(&self, node: &str) -> anyhow::Result<Vec<u8>> {
        self.with_node(node, |n| {
            let mut out = Vec::new();
            n.export_state(&mut out);
            Ok(out)
        })
    }

    /// Loads flow state exported by another instance into VNF `node`; returns how many
    /// flows were added (all or nothing).
    pub fn import_state(&self, node: &str, data: Vec<u8>) -> anyhow::Result<usize> {
        self.with_node(node, move |n| {
            n.import_state(&data)
                .map_err(|e| anyhow!("{}: {e}", n.name()))
        })
    }

    /// Stops reading the ports: frames wait in the sockets (bounded by their buffers;
    /// overflow shows as `socket_drops`) until [`Controller::release`].
    pub fn hold(&self) -> anyhow::Result<()> {
        self.ask(Command::Hold)
    }

    /// Resumes reading, oldest queued frame first.
    pub fn release(&self) -> anyhow::Result<()> {
        self.ask(Command::Release)
    }

    /// Processes and forwards everything already queued in the sockets, then holds.
    /// Call after traffic was steered away, so that nothing new arrives.
    pub fn drain(&self) -> anyhow::Result<Drained> {
        self.ask(Command::Drain)
    }

    /// Points the fanout groups of both ports at member `member` (join order, from 0).
    pub fn steer(&self, member: u32) -> anyhow::Result<()> {
        self.ask(|tx| Command::Steer(member, tx))?
            .map_err(|e| anyhow!("steer: {e}"))
    }

    /// Sets the poll mode of worker `worker` (every worker when `None`) from its next
    /// loop turn on; a worker blocked in poll(2) is woken to apply it.
    pub fn set_poll(&self, mode: nfx_io::PollMode, worker: Option<usize>) -> anyhow::Result<()> {
        let n = self.workers();
        let targets = match worker {
            Some(w) if w >= n => bail!("no worker {w} (this instance runs {n})"),
            Some(w) => w..w + 1,
            None => 0..n,
        };
        for w in targets {
            self.ask_to(w, |tx| Command::SetPoll(mode, tx))?;
        }
        Ok(())
    }

    /// Asks every worker to stop after its current vector.
    pub fn shutdown(&self) -> anyhow::Result<()> {
        let mut result = Ok(());
        for w in 0..self.workers() {
            if let Err(e) = self.send_to(w, Command::Shutdown) {
                result = Err(e);
            }
        }
        result
    }

    /// Answers one control-socket request line with one response line (no newline):
    /// the request's answer, or `{"error": ...}` saying why not.
    pub fn handle_line(&self, line: &str) -> String {
        match Request::parse(line) {
            Ok(req) => self.answer(req),
            Err(e) => answer_line::<Ack>(Err(e)),
        }
    }

    /// Carries out one request and writes its answer line.
    fn answer(&self, req: Request) -> String {
        let why = |e: anyhow::Error| format!("{e:#}");
        match req {
            Request::Stats {} => answer_line(self.stats().map_err(why)),
            Request::Reconfigure(r) => answer_line(self.reconfigure_request(r).map_err(why)),
            Request::ExportState(e) => match self.export_state(&e.node) {
                Ok(data) => Exported {
                    bytes: data.len() as u64,
                    data_b64: base64::engine::general_purpose::STANDARD.encode(&data),
                    node: e.node,
                }
                .to_line(),
                Err(e) => answer_line::<Ack>(Err(why(e))),
            },
            Request::ImportState(i) => {
                let flows = base64::engine::general_purpose::STANDARD
                    .decode(&i.data_b64)
                    .context("`data_b64` is not base64")
                    .and_then(|data| self.import_state(&i.node, data));
                answer_line(
                    flows
                        .map(|f| Imported {
                            ok: true,
                            flows: f as u64,
                        })
                        .map_err(why),
                )
            }
            Request::Hold {} => answer_line(self.hold().map(|()| held(true)).map_err(why)),
            Request::Release {} => answer_line(self.release().map(|()| held(false)).map_err(why)),
            Request::Drain {} => answer_line(self.drain_request().map_err(why)),
            Request::Steer(s) => answer_line(
                self.steer(s.member)
                    .map(|()| Steered {
                        ok: true,
                        member: s.member,
                    })
                    .map_err(why),
            ),
            Request::Poll(p) => answer_line(
                self.set_poll(p.mode, p.worker)
                    .map(|()| PollSet {
                        ok: true,
                        poll: p.mode.as_str().into(),
                    })
                    .map_err(why),
            ),
            Request::Shutdown {} => {
                answer_line(self.shutdown().map(|()| Ack { ok: true }).map_err(why))
            }
        }
    }

    /// `reconfigure` in either form.
    fn reconfigure_request(&self, r: Reconfigure) -> anyhow::Result<ProtoReconfigured> {
        let (r, services_form) = match r.topology().map_err(|e| anyhow!(e))? {
            ReconfigureForm::Chain(chain) => (self.reconfigure(&chain)?, false),
            ReconfigureForm::Services(set) => (self.reconfigure_services(&set)?, true),
        };
        Ok(ProtoReconfigured {
            ok: true,
            nodes: r.names,
            services: services_form.then_some(r.services),
            flows_carried: r.carried as u64,
            name: r.name,
            cpu_pct: r.cpu_pct,
            built: r.built,
        })
    }

    /// `drain`, refused when frames keep arriving.
    fn drain_request(&self) -> anyhow::Result<ProtoDrained> {
        let d = self.drain()?;
        if !d.complete {
            bail!(
                "drain: frames still arriving after {:?} ({} processed); steer traffic away first",
                crate::worker::DRAIN_LIMIT,
                d.packets
            );
        }
        Ok(ProtoDrained {
            ok: true,
            held: true,
            packets: d.packets,
        })
    }
}

/// The answer to `hold` (`true`) or `release`.
fn held(held: bool) -> Held {
    Held { ok: true, held }
}

/// A running dataplane instance: its worker threads and the controller that talks to them.
pub struct Dataplane {
    controller: Controller,
    workers: Vec<JoinHandle<Stats>>,
}

/// The error of a refused reconfiguration, naming the field.
fn reconfigure_error(e: ConfigError) -> anyhow::Error {
    anyhow!("reconfigure: field `{}`: {}", e.field, e.problem)
}

/// The graph plan of `topo` for each of `n` workers, and per instance whether replies
/// must be steered by destination port. Instances running in `running` with the same
/// id and spec are kept; the others are built, each worker its own node, and told
/// they run as worker `w` of `n` (only with more than one).
fn graph_plans(
    builder: &NodeBuilder,
    topo: &Topology,
    running: Option<&Applied>,
    n: usize,
) -> Result<(Vec<GraphPlan>, Vec<bool>), ConfigError> {
    let mut by_port = vec![false; topo.instances.len()];
    let mut kept = vec![false; topo.instances.len()];
    for (k, def) in topo.instances.iter().enumerate() {
        let same = running.and_then(|r| {
            let old = &r.topology.instances;
            let i = old
                .iter()
                .position(|o| o.id == def.id && o.spec == def.spec)?;
            r.by_port.get(i).copied()
        });
        if let Some(flag) = same {
            kept[k] = true;
            by_port[k] = flag;
        }
    }
    let selectors = (!topo.implicit).then(|| topo.services.iter().map(|s| s.selector).collect());
    let services: Vec<(String, Vec<usize>)> = topo
        .services
        .iter()
        .map(|s| (s.id.clone(), s.chain.clone()))
        .collect();
    let mut plans = Vec::with_capacity(n);
    for w in 0..n {
        let mut instances = Vec::with_capacity(topo.instances.len());
        for (k, def) in topo.instances.iter().enumerate() {
            if kept[k] {
                instances.push((def.id.clone(), None));
                continue;
            }
            let field = |e: ConfigError| ConfigError {
                field: def.field(&e.field),
                ..e
            };
            let mut node = builder(&def.id, &def.spec).map_err(field)?;
            if node.name() != def.id {
                return Err(field(ConfigError {
                    file: String::new(),
                    field: String::new(),
                    problem: format!("the builder named instance `{}` `{}`", def.id, node.name()),
                }));
            }
            if n > 1 {
                let flag = node.shard(w, n).map_err(|problem| ConfigError {
                    file: String::new(),
                    field: "workers".into(),
                    problem: format!("instance `{}`: {problem}", def.id),
                })?;
                if w == 0 {
                    by_port[k] = flag;
                }
            }
            instances.push((def.id.clone(), Some(node)));
        }
        plans.push(GraphPlan {
            instances,
            services: services.clone(),
            selectors: selectors.clone(),
        });
    }
    Ok((plans, by_port))
}

/// Event writer of one worker when several share the events file: whole lines are
/// appended under a lock at each flush (or when 64 KiB are buffered), so the lines of
/// different workers never interleave.
struct SharedLines {
    file: Arc<Mutex<std::fs::File>>,
    buf: Vec<u8>,
}

impl SharedLines {
    fn write_lines(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        let Some(end) = self.buf.iter().rposition(|b| *b == b'\n') else {
            return Ok(());
        };
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(&self.buf[..=end])?;
        self.buf.drain(..=end);
        Ok(())
    }
}

impl std::io::Write for SharedLines {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 64 << 10 {
            self.write_lines()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.write_lines()
    }
}

/// A worker's two ports and, with `fast_path:`, its fast path (both made on its thread).
type OpenedPorts = ([Box<dyn Port>; 2], Option<FastPathWorker>);

/// Everything one worker thread is started with.
struct WorkerStart {
    index: usize,
    plan: GraphPlan,
    events: Option<Box<dyn std::io::Write + Send>>,
    open: PortOpener,
    held: bool,
}

/// What a worker is assembled from besides its ports and its plan, taken from the run
/// configuration.
struct Assembly {
    name: String,
    poll: nfx_io::PollMode,
    vector: usize,
    peers: [[u8; 6]; 2],
    classifier: crate::config::ClassifierConfig,
    latency: bool,
}

impl Assembly {
    fn of(cfg: &RunConfig) -> anyhow::Result<Self> {
        let peer = |side: &str, mac: &str| {
            parse_mac(mac).map_err(|e| anyhow!("ports.{side}.peer_mac: {e}"))
        };
        Ok(Self {
            name: cfg.name.clone(),
            poll: cfg.poll,
            vector: cfg.vector,
            peers: [
                peer("inside", &cfg.ports.inside.peer_mac)?,
                peer("outside", &cfg.ports.outside.peer_mac)?,
            ],
            classifier: cfg.classifier,
            latency: cfg.latency,
        })
    }

    /// Worker `index`, running `plan` between `ports` (opened on the thread that runs it).
    fn worker(
        self,
        index: usize,
        plan: GraphPlan,
        events: Option<Box<dyn std::io::Write + Send>>,
        ports: [Box<dyn Port>; 2],
        rx: mpsc::Receiver<Command>,
        mailbox: Arc<Mailbox>,
    ) -> anyhow::Result<Worker> {
        let output = OutputNode {
            forward: L2Rewrite {
                dst: self.peers[1],
                src: ports[1].mac(),
            },
            reverse: L2Rewrite {
                dst: self.peers[0],
                src: ports[0].mac(),
            },
        };
        let mut graph = Graph::new(Vec::new(), output, events).with_classifier(self.classifier);
        graph
            .replace(plan)
            .map_err(|e| anyhow!("worker {index}: {e}"))?;
        Ok(
            Worker::new(self.name, self.poll, self.vector, ports, graph, rx, mailbox)
                .with_id(index)
                .with_latency(self.latency),
        )
    }
}

impl Dataplane {
    /// Starts one worker that runs on the caller's thread (tests, feature `fuzzing`): each
    /// command is served by the worker's own handler as soon as the [`Controller`]
    /// sends it, with no thread to start, wake or join. The ports are opened here;
    /// frames are run only by `drain` (no loop polls the ports between commands), and
    /// the 100 ms housekeeping never runs. No namespace, fast path or events file.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn start_inline(
        cfg: &RunConfig,
        builder: NodeBuilder,
        open: PortOpener,
    ) -> anyhow::Result<Self> {
        if cfg.workers != 1
            || cfg.netns.is_some()
            || cfg.fast_path.is_some()
            || cfg.events.is_some()
        {
            bail!("an inline worker runs alone, without a namespace, fast path or events file");
        }
        let with_file = |e: ConfigError| ConfigError {
            file: cfg.source.clone(),
            ..e
        };
        let topology = crate::config::topology(cfg).map_err(with_file)?;
        let (mut plans, by_port) = graph_plans(&builder, &topology, None, 1).map_err(with_file)?;
        let plan = plans
            .pop()
            .ok_or_else(|| anyhow!("no plan for the worker"))?;
        let assembly = Assembly::of(cfg)?;
        let mailbox = Arc::new(Mailbox::new().context("creating the worker's eventfd")?);
        let (tx, rx) = mpsc::channel();
        let ports = open(None)?;
        let standby = cfg.fanout.is_some_and(|f| f.role == Role::Standby);
        let worker = assembly
            .worker(0, plan, None, ports, rx, mailbox.clone())?
            .start_held(standby)
            .start_inline();
        Ok(Self {
            controller: Controller {
                inner: Arc::new(Inner {
                    workers: vec![WorkerLink { tx, mailbox }],
                    builder,
                    applied: Mutex::new(Applied { topology, by_port }),
                    control_rejected: AtomicU64::new(0),
                    inline: Some(Mutex::new(Inline::Running(Box::new(worker)))),
                }),
            },
            workers: Vec::new(),
        })
    }

    /// Starts `workers` worker threads with AF_PACKET ports on the configured
    /// interfaces, inside the configured namespace. Returns once every port is open (or
    /// with the reason one could not be). With several workers, each opens its own
    /// sockets on both interfaces, joined to one fanout group per interface, and flows
    /// are spread over them ([`nfx_io::fanout::flow_program`]).
    pub fn start(cfg: &RunConfig, builder: NodeBuilder) -> anyhow::Result<Self> {
        let batch = cfg.vector;
        let in_place = cfg.io.rx_in_place();
        let (rx_slot, slots) = if in_place {
            (nfx_io::ring::GSO_SLOT, RX_RING_GSO_SLOTS)
        } else {
            (nfx_io::ring::SLOT, RX_RING_SLOTS)
        };
        let rx_ring = cfg.io.rx_ring().then_some(cfg.ring_slots.unwrap_or(slots));
        let tx_ring = cfg.io.tx_ring().then_some(TX_RING_SLOTS);
        let isolate_kernel = cfg.kernel_stack == KernelStack::Isolate;
        let fast_path = cfg.fast_path.is_some();
        let names = [
            cfg.ports.inside.iface.clone(),
            cfg.ports.outside.iface.clone(),
        ];
        let table_side = [cfg.ports.inside.table_tier, cfg.ports.outside.table_tier];
        let opts = move |group: Option<u16>, side: usize| AfPacketOptions {
            batch,
            fanout: group,
            rx_ring,
            rx_slot,
            rx_in_place: in_place,
            tx_ring,
            isolate_kernel,
            fast_path: fast_path || table_side[side],
            qdisc_bypass: !table_side[side],
            ..AfPacketOptions::default()
        };
        if cfg.workers == 1 {
            let groups = cfg.fanout.map(|f| [f.group, f.group + 1]);
            let open: PortOpener = Box::new(move |socket_filter| {
                let side = |i: usize| AfPacketOptions {
                    socket_filter,
                    ..opts(groups.map(|g| g[i]), i)
                };
                // In parallel, the bulk of a worker's start-up: each port allocates its
                // rings on a thread of its own while this one isolates both interfaces
                // in one `nft` run. The scoped threads share this thread's network
                // namespace (a new thread inherits its creator's).
                let open_one = |i: usize| {
                    let o = AfPacketOptions {
                        isolate_kernel: false,
                        ..side(i)
                    };
                    AfPacketPort::open(&names[i], o).map_err(anyhow::Error::from)
                };
                let (inside, outside, isolation) = std::thread::scope(|s| {
                    let threads = [s.spawn(|| open_one(0)), s.spawn(|| open_one(1))];
                    let isolation = isolate_kernel.then(|| {
                        let want = |i: usize| -> anyhow::Result<IsolationRequest<'_>> {
                            Ok(IsolationRequest {
                                iface: &names[i],
                                ifindex: nfx_io::sys::ifindex(&names[i])?,
                                ipv4_at_prerouting: side(i).fast_path,
                                exclusive: side(i).fanout.is_none(),
                            })
                        };
                        anyhow::Ok(KernelIsolation::install_all(&[want(0)?, want(1)?])?)
                    });
                    let [i, o] = threads.map(|t| {
                        t.join()
                            .map_err(|_| anyhow!("opening a port panicked"))
                            .and_then(|r| r)
                    });
                    (i, o, isolation)
                });
                let (mut inside, mut outside) = (inside?, outside?);
                if let Some(isolation) = isolation {
                    // The error names the interface and why.
                    let mut isolation = isolation?.into_iter();
                    for port in [&mut inside, &mut outside] {
                        if let Some(i) = isolation.next() {
                            port.set_isolation(i);
                        }
                    }
                }
                Ok([Box::new(inside) as Box<dyn Port>, Box::new(outside)])
            });
            return Self::start_with_ports(cfg, builder, open);
        }
        // Worker 0 creates the two groups; the others join them, in order, so that
        // fanout member k is worker k.
        let groups: Arc<Mutex<Option<[u16; 2]>>> = Arc::new(Mutex::new(None));
        let opens = (0..cfg.workers)
            .map(|w| {
                let (names, groups) = (names.clone(), groups.clone());
                // No fast path with several workers (the config refuses it).
                Box::new(move |_| {
                    let mut ports = Vec::with_capacity(2);
                    for side in 0..2 {
                        let port = if w == 0 {
                            let port = AfPacketPort::open(&names[side], opts(None, side))?;
                            let id = nfx_io::fanout::join_new(port.fd())
                                .with_context(|| format!("port {}", names[side]))?;
                            let mut g = groups.lock().unwrap_or_else(|e| e.into_inner());
                            let mut ids = g.unwrap_or([0, 0]);
                            ids[side] = id;
                            *g = Some(ids);
                            port
                        } else {
                            let ids = groups
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .ok_or_else(|| anyhow!("worker 0 made no fanout groups"))?;
                            AfPacketPort::open(&names[side], opts(Some(ids[side]), side))?
                        };
                        ports.push(Box::new(port) as Box<dyn Port>);
                    }
                    let [a, b]: [Box<dyn Port>; 2] = ports
                        .try_into()
                        .map_err(|_| anyhow!("two ports expected"))?;
                    Ok([a, b])
                }) as PortOpener
            })
            .collect();
        Self::start_workers(cfg, builder, opens)
    }

    /// Starts one worker whose ports are made by `open` (tests use in-memory ports).
    pub fn start_with_ports(
        cfg: &RunConfig,
        builder: NodeBuilder,
        open: PortOpener,
    ) -> anyhow::Result<Self> {
        if cfg.workers != 1 {
            bail!(
                "ports made by the caller serve one worker, not {}",
                cfg.workers
            );
        }
        Self::start_workers(cfg, builder, vec![open])
    }

    fn start_workers(
        cfg: &RunConfig,
        builder: NodeBuilder,
        opens: Vec<PortOpener>,
    ) -> anyhow::Result<Self> {
        let n = opens.len();
        let with_file = |e: ConfigError| ConfigError {
            file: cfg.source.clone(),
            ..e
        };
        let topology = crate::config::topology(cfg).map_err(with_file)?;
        let (plans, by_port) = graph_plans(&builder, &topology, None, n).map_err(with_file)?;
        let mut writers: Vec<Option<Box<dyn std::io::Write + Send>>> = Vec::with_capacity(n);
        match &cfg.events {
            Some(path) => {
                let f = std::fs::File::create(path)
                    .with_context(|| format!("creating events file {}", path.display()))?;
                if n == 1 {
                    writers.push(Some(Box::new(std::io::BufWriter::new(f))));
                } else {
                    let file = Arc::new(Mutex::new(f));
                    for _ in 0..n {
                        writers.push(Some(Box::new(SharedLines {
                            file: file.clone(),
                            buf: Vec::new(),
                        })));
                    }
                }
            }
            None => writers.resize_with(n, || None),
        }
        let standby = cfg.fanout.is_some_and(|f| f.role == Role::Standby);
        let mut links = Vec::with_capacity(n);
        let mut handles: Vec<JoinHandle<Stats>> = Vec::with_capacity(n);
        let started = plans
            .into_iter()
            .zip(writers)
            .zip(opens)
            .enumerate()
            .try_for_each(|(index, ((plan, events), open))| {
                let (link, handle) = Self::spawn_worker(
                    cfg,
                    WorkerStart {
                        index,
                        plan,
                        events,
                        open,
                        held: standby,
                    },
                )?;
                links.push(link);
                handles.push(handle);
                anyhow::Ok(())
            });
        let dp = Self {
            controller: Controller {
                inner: Arc::new(Inner {
                    workers: links,
                    builder,
                    applied: Mutex::new(Applied {
                        topology,
                        by_port: by_port.clone(),
                    }),
                    control_rejected: AtomicU64::new(0),
                    #[cfg(any(test, feature = "fuzzing"))]
                    inline: None,
                }),
            },
            workers: handles,
        };
        // On error, dropping `dp` stops the workers already running.
        started?;
        if n > 1 {
            let by_port = by_port.iter().any(|d| *d);
            dp.controller
                .ask_to(0, |tx| Command::SpreadFlows(by_port, tx))?
                .map_err(|e| anyhow!("spreading flows over {n} workers: {e}"))?;
        }
        Ok(dp)
    }

    /// Spawns one worker thread and waits until its ports are open.
    fn spawn_worker(
        cfg: &RunConfig,
        start: WorkerStart,
    ) -> anyhow::Result<(WorkerLink, JoinHandle<Stats>)> {
        let assembly = Assembly::of(cfg)?;
        let mailbox = Arc::new(Mailbox::new().context("creating the worker's eventfd")?);
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<anyhow::Result<()>>(1);
        let netns = cfg.netns.clone();
        let fast_path = cfg.fast_path;
        let ifaces = [
            cfg.ports.inside.iface.clone(),
            cfg.ports.outside.iface.clone(),
        ];
        let WorkerStart {
            index,
            plan,
            events,
            open,
            held,
        } = start;
        let mb = mailbox.clone();
        let worker = std::thread::Builder::new()
            .name(format!("nfx-worker-{}-{index}", cfg.name))
            .spawn(move || {
                let setup = || -> anyhow::Result<OpenedPorts> {
                    if let Some(ns) = &netns {
                        nfx_io::netns::enter_netns(ns)?;
                    }
                    // The fast path counts what reaches the sockets from their first
                    // frame: loaded before they open, attached after.
                    let mut fast = match fast_path {
                        Some(f) => Some(FastPathWorker::load(
                            f.capacity,
                            [ifaces[0].as_str(), ifaces[1].as_str()],
                        )?),
                        None => None,
                    };
                    let filter = fast.as_ref().map(|f| f.socket_filter()).transpose()?;
                    let ports = open(filter)?;
                    if let Some(f) = fast.as_mut() {
                        f.attach()?;
                    }
                    Ok((ports, fast))
                };
                let (ports, fast) = match setup() {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Stats::default();
                    }
                };
                let mut worker = match assembly.worker(index, plan, events, ports, rx, mb) {
                    Ok(w) => w.start_held(held),
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Stats::default();
                    }
                };
                if let Some(f) = fast {
                    worker = worker.with_fast_path(f);
                }
                let _ = ready_tx.send(Ok(()));
                worker.run()
            })
            .context("spawning a worker thread")?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = worker.join();
                return Err(e);
            }
            Err(_) => bail!("worker {index} died while starting"),
        }
        Ok((WorkerLink { tx, mailbox }, worker))
    }

    /// The handle for commands.
    pub fn controller(&self) -> Controller {
        self.controller.clone()
    }

    /// True once every worker thread has ended (e.g. after a `shutdown` command).
    pub fn finished(&self) -> bool {
        #[cfg(any(test, feature = "fuzzing"))]
        if let Some(slot) = &self.controller.inner.inline {
            let slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            return matches!(*slot, Inline::Stopped(_));
        }
        self.workers.iter().all(|w| w.is_finished())
    }

    /// Stops the workers (if still running) and returns their final stats, merged.
    pub fn stop(mut self) -> anyhow::Result<Stats> {
        let _ = self.controller.shutdown();
        #[cfg(any(test, feature = "fuzzing"))]
        if let Some(slot) = &self.controller.inner.inline {
            let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            return match std::mem::replace(&mut *slot, Inline::Stopped(Box::default())) {
                Inline::Stopped(last) => Ok(*last),
                Inline::Running(_) => bail!("the inline worker did not stop"),
            };
        }
        if self.workers.is_empty() {
            bail!("already stopped");
        }
        let parts = std::mem::take(&mut self.workers)
            .into_iter()
            .map(|w| w.join().map_err(|_| anyhow!("a worker thread panicked")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Stats::merge(parts))
    }
}

impl Drop for Dataplane {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            let _ = self.controller.shutdown();
            for w in self.workers.drain(..) {
                let _ = w.join();
            }
        }
    }
}
