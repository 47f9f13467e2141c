//! Starting and running one tunnel endpoint: EM listener (root namespace), then the
//! packet worker thread in the configured namespace.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nfx_accel::{open_local, Engine, EngineKind, LookasideEngine};
use serde_json::Value;

use crate::config::Config;
use crate::em::{self, EmState};
use crate::esp::{Inbound, Outbound};
use crate::stats::Counters;
use crate::sys::{enter_netns, gettid, set_timer_slack_ns, Tun, Underlay};
use crate::worker::{Worker, WorkerParts};

/// Runs the endpoint until `duration` passes or `stop` is set; returns the final counters.
pub fn run(
    cfg: Config,
    duration: Option<Duration>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Value> {
    let counters = Arc::new(Counters::default());
    let (cmd_tx, cmd_rx) = mpsc::channel();
    let listener = cfg.em_listen.map(em::bind).transpose()?;
    let first: (Box<dyn Engine>, EngineKind) = match &cfg.lookaside {
        Some(dev) => (
            Box::new(
                LookasideEngine::connect(dev, cfg.engine)
                    .map_err(|e| anyhow::anyhow!("lookaside device {}: {e}", dev.display()))?,
            ),
            EngineKind::Lookaside,
        ),
        None => (open_local(cfg.engine)?, cfg.engine),
    };
    let st = Arc::new(EmState::new(
        cfg.name.clone(),
        cfg.outbound.alg.as_str().to_string(),
        cfg.engine,
        Arc::clone(&counters),
        cmd_tx,
    ));
    let mut helpers = Vec::new();
    if let Some(l) = listener {
        let (s, st2) = (Arc::clone(&stop), Arc::clone(&st));
        helpers.push(std::thread::spawn(move || em::serve(l, st2, s)));
        let (s, st2) = (Arc::clone(&stop), Arc::clone(&st));
        helpers.push(std::thread::spawn(move || em::sampler(st2, s)));
    }
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let wc = Arc::clone(&counters);
    let wstop = Arc::clone(&stop);
    let worker = std::thread::Builder::new()
        .name(format!("tunnel-{}", cfg.name))
        .spawn(move || {
            let setup = || -> anyhow::Result<Worker> {
                if let Some(ns) = &cfg.netns {
                    enter_netns(ns)?;
                }
                let mtu = cfg.inner_mtu();
                let tun = Tun::open(&cfg.tun, mtu, cfg.offload)?;
                let udp = Underlay::bind(cfg.underlay.local, cfg.underlay.peer)?;
                Worker::new(WorkerParts {
                    engine: first,
                    base: cfg.engine,
                    out: Outbound::new(cfg.outbound, cfg.esn),
                    inb: Inbound::new(cfg.inbound, cfg.esn, cfg.replay_window),
                    batch: cfg.batch,
                    mtu: mtu as usize,
                    tun,
                    udp,
                    counters: Arc::clone(&wc),
                    offload: cfg.offload,
                })
                .map_err(anyhow::Error::msg)
            };
            let mut w = match setup() {
                Ok(w) => w,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{e:#}")));
                    return;
                }
            };
            if let Err(e) = set_timer_slack_ns(1000) {
                log::warn!("timer slack: {e}");
            }
            wc.worker_tid.store(gettid(), Relaxed);
            wc.ready.store(true, Relaxed);
            let _ = ready_tx.send(Ok(()));
            w.run(&cmd_rx, &wstop, duration.map(|d| Instant::now() + d));
        })?;
    let setup = ready_rx
        .recv()
        .unwrap_or_else(|_| Err("worker thread ended during setup".into()));
    if let Err(e) = setup {
        stop.store(true, Relaxed);
        let _ = worker.join();
        anyhow::bail!("tunnel {}: {e}", st.name);
    }
    log::info!("tunnel {} up", st.name);
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
