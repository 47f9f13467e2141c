//! Starting and running one tunnel endpoint: EM listener (root namespace), then the
//! packet worker thread in the configured namespace.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nfx_accel::{open_local, ClientOptions, Engine, EngineKind, LookasideEngine};
use serde_json::Value;

use crate::config::{Config, Keying};
use crate::em::{self, EmAccess, EmState};
use crate::esp::{Inbound, Outbound};
use crate::ike::{IkeParts, IkeShared};
use crate::seqstate::SeqState;
use crate::stats::Counters;
use crate::steer::FlowQueues;
use crate::sys::{enter_netns, gettid, set_timer_slack_ns, Tun, Underlay};
use crate::worker::{Control, IkeLink, SaCmd, Worker, WorkerParts};

/// IKE messages queued between the worker and the IKE thread.
const IKE_QUEUE: usize = 256;

/// What the packet workers are built from.
struct Parts {
    first: (Box<dyn Engine>, EngineKind),
    engine: EngineKind,
    out: Option<Outbound>,
    inb: Vec<Inbound>,
    ike: Option<IkeLink>,
    batch: usize,
    mtu: usize,
    offload: bool,
    counters: Arc<Counters>,
}

impl Parts {
    /// The lead worker and `senders` sending lanes (lane `i` reads TUN queue `i`; the
    /// lead all of them while it runs alone). Each lane has its own engine (paused while
    /// the first engine is a lookaside queue pair, which the lead holds) and its own
    /// handle on the outbound SA.
    fn build(
        self,
        tuns: Vec<Arc<Tun>>,
        udp: Underlay,
        senders: usize,
    ) -> anyhow::Result<(Worker, Vec<Worker>)> {
        let mut links = Vec::new();
        let mut lanes = Vec::new();
        let paused = self.first.1 == EngineKind::Lookaside;
        let steer = (tuns.len() > 1).then(|| Arc::new(FlowQueues::default()));
        self.counters.lanes.store(senders, Relaxed);
        for (i, tun) in tuns.iter().take(senders).enumerate() {
            let (link, cmds) = crate::lanes::channel();
            links.push(link);
            lanes.push(
                Worker::new(WorkerParts {
                    engine: (open_local(self.engine)?, self.engine),
                    base: self.engine,
                    out: self.out.as_ref().map(Outbound::lane),
                    inb: Vec::new(),
                    ike: None,
                    batch: self.batch,
                    mtu: self.mtu,
                    tuns: vec![Arc::clone(tun)],
                    udp: udp.try_clone()?,
                    counters: Arc::clone(&self.counters),
                    offload: self.offload,
                    control: Control::Lane {
                        index: i + 1,
                        cmds,
                        paused,
                    },
                    steer: steer.clone(),
                })
                .map_err(anyhow::Error::msg)?,
            );
        }
        let lead = Worker::new(WorkerParts {
            engine: self.first,
            base: self.engine,
            out: self.out,
            inb: self.inb,
            ike: self.ike,
            batch: self.batch,
            mtu: self.mtu,
            tuns,
            udp,
            counters: self.counters,
            offload: self.offload,
            control: Control::Lead(links),
            steer,
        })
        .map_err(anyhow::Error::msg)?;
        Ok((lead, lanes))
    }
}

/// What [`keyed`] returns: the SAs (outbound, inbound), the IKE configuration, the
/// algorithm's name.
type Keyed = (
    (Option<Outbound>, Vec<Inbound>),
    Option<nfx_ike::Config>,
    String,
);

/// The SAs a keying starts with (static keys: both, the outbound one continuing where
/// its state file says, refusing to start if it cannot, so that no sequence number is
/// used twice across restarts; IKE: none yet), the IKE configuration, and the
/// algorithm's name for the EM.
fn keyed(keying: Keying, name: &str, replay_window: u64) -> anyhow::Result<Keyed> {
    Ok(match keying {
        Keying::Static(k) => {
            let (state, start) = SeqState::open(&k.seq_state, k.seq_block)?;
            log::warn!(
                "tunnel {name}: static keys (insecure_static_keys); outbound sequence continues at {start}"
            );
            let alg = k.alg.as_str().to_string();
            let out = Outbound::persisted(k.outbound, k.esn, state, start);
            let inb = Inbound::new(k.inbound, k.esn, replay_window);
            ((Some(out), vec![inb]), None, alg)
        }
        Keying::Ike(c) => ((None, Vec::new()), Some(*c), "ike".to_string()),
    })
}

/// Starts the element manager's threads: its HTTP server on `listener` and the sampler
/// of the endpoint's CPU and rates; they end when `stop` is set.
fn start_em(
    listener: std::net::TcpListener,
    access: EmAccess,
    st: &Arc<EmState>,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let app = em::router(Arc::clone(st), access);
    let s = Arc::clone(stop);
    let server = std::thread::spawn(move || {
        if let Err(e) = em::serve(listener, app, s) {
            log::error!("EM: {e:#}");
        }
    });
    let (s, st2) = (Arc::clone(stop), Arc::clone(st));
    vec![server, std::thread::spawn(move || em::sampler(st2, s))]
}

/// Starts the sending lanes, one thread each, until `stop` is set or `deadline`.
fn spawn_lanes(
    lanes: Vec<Worker>,
    stop: &Arc<AtomicBool>,
    counters: &Arc<Counters>,
    deadline: Option<Instant>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut joins = Vec::new();
    for (i, mut lane) in lanes.into_iter().enumerate() {
        let (ls, lc) = (Arc::clone(stop), Arc::clone(counters));
        let spawned = std::thread::Builder::new()
            .name(format!("tunnel-tx{}", i + 1))
            .spawn(move || {
                let _ = set_timer_slack_ns(1000);
                lc.lane_tids
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(gettid());
                // Lanes get no EM commands: the lead forwards what concerns them.
                let (_none, cmds) = mpsc::channel();
                lane.run(&cmds, &ls, deadline);
            });
        match spawned {
            Ok(h) => joins.push(h),
            Err(e) => log::error!("sending lane {}: {e}", i + 1),
        }
    }
    joins
}

/// The channels between the packet worker and the IKE thread: the worker's end, and
/// the IKE thread's (IKE messages from the worker, SA changes to it).
fn ike_channels() -> (IkeLink, (mpsc::Receiver<Vec<u8>>, mpsc::Sender<SaCmd>)) {
    let (to_ike, from_worker) = mpsc::sync_channel(IKE_QUEUE);
    let (to_worker, cmds) = mpsc::channel();
    (IkeLink { to_ike, cmds }, (from_worker, to_worker))
}

/// The engine the endpoint starts on: a queue pair of the configured lookaside device
/// (its number recorded in `counters`), else the configured local engine.
fn first_engine(
    cfg: &Config,
    device_opts: &ClientOptions,
    counters: &Counters,
) -> anyhow::Result<(Box<dyn Engine>, EngineKind)> {
    Ok(match &cfg.lookaside {
        Some(dev) => {
            let e = LookasideEngine::connect_with(dev, device_opts)
                .map_err(|e| anyhow::anyhow!("lookaside device {}: {e}", dev.display()))?;
            counters.set_queue_pair(e.queue_pair());
            (Box::new(e), EngineKind::Lookaside)
        }
        None => (open_local(cfg.engine)?, cfg.engine),
    })
}

/// Starts the endpoint's IKE thread (`ike-NAME`), which runs until `stop` is set.
fn start_ike(
    cfg: nfx_ike::Config,
    parts: IkeParts,
    name: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let s = Arc::clone(stop);
    Ok(std::thread::Builder::new()
        .name(format!("ike-{name}"))
        .spawn(move || crate::ike::run(cfg, parts, &s))?)
}

/// Runs the endpoint until `duration` passes or `stop` is set; returns the final counters.
pub fn run(
    cfg: Config,
    duration: Option<Duration>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Value> {
    let counters = Arc::new(Counters::default());
    let mtu = cfg.inner_mtu();
    let (cmd_tx, cmd_rx) = mpsc::channel();
    let listener = cfg.em_listen.map(em::bind).transpose()?;
    let device_opts = ClientOptions {
        device_dir: cfg.lookaside_dir.clone(),
        ..ClientOptions::new(cfg.engine)
    };
    let first = first_engine(&cfg, &device_opts, &counters)?;
    let Config {
        name,
        em_token,
        netns,
        engine,
        replay_window,
        batch,
        threads,
        offload,
        tun: tun_cfg,
        underlay,
        keying,
        ..
    } = cfg;
    let (sas, ike_cfg, alg) = keyed(keying, &name, replay_window)?;
    let ike_shared = ike_cfg.as_ref().map(|_| Arc::new(IkeShared::default()));
    let (ike_link, ike_ends) = ike_cfg.as_ref().map(|_| ike_channels()).unzip();
    let mut st = EmState::new(name.clone(), alg, engine, Arc::clone(&counters), cmd_tx);
    st.ike = ike_shared.clone();
    let st = Arc::new(st);
    let helpers = match (listener, em_token) {
        (Some(l), Some(token)) => {
            let access = EmAccess {
                token,
                device_dir: device_opts.device_dir,
            };
            start_em(l, access, &st, &stop)
        }
        _ => Vec::new(),
    };
    let (ready_tx, ready_rx) = mpsc::channel::<Result<std::net::UdpSocket, String>>();
    let wc = Arc::clone(&counters);
    let wstop = Arc::clone(&stop);
    let worker = std::thread::Builder::new()
        .name(format!("tunnel-{name}"))
        .spawn(move || {
            let deadline = duration.map(|d| Instant::now() + d);
            let parts = Parts {
                first,
                engine,
                out: sas.0,
                inb: sas.1,
                ike: ike_link,
                batch,
                mtu: mtu as usize,
                offload,
                counters: Arc::clone(&wc),
            };
            let setup = || -> anyhow::Result<(Worker, Vec<Worker>, std::net::UdpSocket)> {
                if let Some(ns) = &netns {
                    enter_netns(ns)?;
                }
                // One thread serves both directions; with more, the lead receives and
                // each other thread reads (and encrypts) one TUN queue.
                let senders = threads.saturating_sub(1);
                let tuns: Vec<Arc<Tun>> = Tun::open(&tun_cfg, mtu, offload, senders.max(1))?
                    .into_iter()
                    .map(Arc::new)
                    .collect();
                let udp = Underlay::bind(underlay.local, underlay.peer)?;
                let sock = udp.sock.try_clone()?;
                let (w, lanes) = parts.build(tuns, udp, senders)?;
                Ok((w, lanes, sock))
            };
            let (mut w, lanes, sock) = match setup() {
                Ok(w) => w,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{e:#}")));
                    return;
                }
            };
            let lane_stop = Arc::new(AtomicBool::new(false));
            let joins = spawn_lanes(lanes, &lane_stop, &wc, deadline);
            if let Err(e) = set_timer_slack_ns(1000) {
                log::warn!("timer slack: {e}");
            }
            wc.worker_tid.store(gettid(), Relaxed);
            wc.ready.store(true, Relaxed);
            let _ = ready_tx.send(Ok(sock));
            w.run(&cmd_rx, &wstop, deadline);
            lane_stop.store(true, Relaxed);
            for h in joins {
                let _ = h.join();
            }
        })?;
    let setup = ready_rx
        .recv()
        .unwrap_or_else(|_| Err("worker thread ended during setup".into()));
    let sock = match setup {
        Ok(s) => s,
        Err(e) => {
            stop.store(true, Relaxed);
            let _ = worker.join();
            anyhow::bail!("tunnel {}: {e}", st.name);
        }
    };
    // The IKE thread stops before the worker: its last step deletes the SAs at the
    // peer, which needs the socket, and removes them from the data path.
    let ike_stop = Arc::new(AtomicBool::new(false));
    let ike = match (ike_cfg, ike_ends, ike_shared) {
        (Some(cfg), Some((from_worker, to_worker)), Some(shared)) => {
            let parts = IkeParts {
                sock,
                from_worker,
                to_worker,
                counters: Arc::clone(&counters),
                shared,
                replay_window,
            };
            Some(start_ike(cfg, parts, &st.name, &ike_stop)?)
        }
        _ => None,
    };
    log::info!("tunnel {} up", st.name);
    if let Some(h) = ike {
        // Wait for the worker's end (duration or stop), then close IKE first.
        while !worker.is_finished() && !stop.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        ike_stop.store(true, Relaxed);
        let _ = h.join();
    }
    let joined = worker.join();
    stop.store(true, Relaxed);
    for h in helpers {
        h.thread().unpark();
        let _ = h.join();
    }
    if joined.is_err() {
        anyhow::bail!("tunnel {}: packet worker panicked", st.name);
    }
    Ok(counters.json())
}
