//! Starting and stopping a dataplane instance, and the [`Controller`] through which
//! other threads (the control socket, `nfx run`, tests) talk to its worker.

use crate::builtin::{L2Rewrite, OutputNode};
use crate::config::{ConfigError, Role, RunConfig};
use crate::graph::Graph;
use crate::stats::Stats;
use crate::worker::{Command, Drained, Mailbox, Worker};
use anyhow::{anyhow, bail, Context};
use base64::Engine;
use nfx_io::sys::parse_mac;
use nfx_io::{AfPacketOptions, AfPacketPort, Port};
use nfx_vnf::Node;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Builds VNF nodes from chain specs (`{"firewall": {...}}` each), skipping the first
/// `skip` specs (nodes kept from the running chain) but naming the others as the whole
/// list would. On error it names the entry and the field (`chain[1].nat.snat.public_ip`);
/// the file is filled in by the caller.
pub type ChainBuilder = Arc<
    dyn Fn(&[serde_json::Value], usize) -> Result<Vec<Box<dyn Node>>, ConfigError> + Send + Sync,
>;

/// Opens the two ports on the worker thread (after it entered the namespace).
pub type PortOpener = Box<dyn FnOnce() -> anyhow::Result<[Box<dyn Port>; 2]> + Send>;

/// How long a caller waits for the worker to answer a command.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

struct Inner {
    tx: Sender<Command>,
    mailbox: Arc<Mailbox>,
    builder: ChainBuilder,
    /// The specs of the running chain (also serializes reconfigurations).
    applied: Mutex<Vec<serde_json::Value>>,
}

/// A cloneable handle that sends commands to a running worker and waits for answers.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Inner>,
}

impl Controller {
    fn send(&self, cmd: Command) -> anyhow::Result<()> {
        self.inner
            .tx
            .send(cmd)
            .map_err(|_| anyhow!("the worker has stopped"))?;
        self.inner.mailbox.ring();
        Ok(())
    }

    fn ask<T>(&self, make: impl FnOnce(mpsc::SyncSender<T>) -> Command) -> anyhow::Result<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(make(tx))?;
        rx.recv_timeout(REPLY_TIMEOUT)
            .map_err(|_| anyhow!("the worker did not answer within {REPLY_TIMEOUT:?}"))
    }

    /// Fresh counters, taken by the worker between two vectors.
    pub fn stats(&self) -> anyhow::Result<Stats> {
        self.ask(Command::Stats)
    }

    /// Builds a new chain from `specs` and swaps it in between two vectors: no packet is
    /// lost or reordered (they wait in the port's socket queue); nodes keeping their name
    /// keep their flow state. The longest prefix of specs equal to the running chain's is
    /// not rebuilt: those nodes stay as they are (deploying at the end of a chain builds
    /// one node). Returns the new names and the number of flows carried over.
    pub fn reconfigure(&self, specs: &[serde_json::Value]) -> anyhow::Result<(Vec<String>, usize)> {
        let mut applied = self.inner.applied.lock().unwrap_or_else(|e| e.into_inner());
        let keep = applied
            .iter()
            .zip(specs)
            .take_while(|(a, b)| a == b)
            .count();
        let nodes = (self.inner.builder)(specs, keep)
            .map_err(|e| anyhow!("reconfigure: field `{}`: {}", e.field, e.problem))?;
        let (old, names, carried) = self.ask(|tx| Command::Reconfigure(keep, nodes, tx))?;
        *applied = specs.to_vec();
        drop(applied);
        drop(old);
        Ok((names, carried))
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

    /// Asks the worker to stop after the current vector.
    pub fn shutdown(&self) -> anyhow::Result<()> {
        self.send(Command::Shutdown)
    }

    /// Answers one control-socket request line with one response line (no newline).
    pub fn handle_line(&self, line: &str) -> String {
        if let Some(resp) = self.fast_export(line) {
            return resp;
        }
        let resp = match self.handle_json(line) {
            Ok(v) => v,
            Err(e) => serde_json::json!({ "error": format!("{e:#}") }),
        };
        resp.to_string()
    }

    /// `export_state` answered without building a JSON value around the (possibly tens
    /// of megabytes of) base64 text, which needs no escaping; `None` for other requests.
    fn fast_export(&self, line: &str) -> Option<String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Export {
            cmd: String,
            node: String,
        }
        let req: Export = serde_json::from_str(line).ok()?;
        if req.cmd != "export_state" {
            return None;
        }
        Some(match self.export_state(&req.node) {
            Ok(data) => {
                let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
                format!(
                    r#"{{"node":{},"bytes":{},"data_b64":"{b64}"}}"#,
                    serde_json::Value::from(req.node),
                    data.len()
                )
            }
            Err(e) => serde_json::json!({ "error": format!("{e:#}") }).to_string(),
        })
    }

    fn handle_json(&self, line: &str) -> anyhow::Result<serde_json::Value> {
        let req: serde_json::Value = serde_json::from_str(line).context("request is not JSON")?;
        let cmd = req
            .get("cmd")
            .and_then(|c| c.as_str())
            .ok_or_else(|| anyhow!("request has no string field `cmd`"))?;
        let field = |name: &str| {
            req.get(name)
                .and_then(|v| v.as_str())
                .ok_or_else(|| anyhow!("`{cmd}` needs a string field `{name}`"))
        };
        match cmd {
            "stats" => Ok(serde_json::to_value(self.stats()?)?),
            "reconfigure" => {
                let chain = req
                    .get("chain")
                    .and_then(|c| c.as_array())
                    .ok_or_else(|| anyhow!("`reconfigure` needs an array field `chain`"))?;
                let (names, carried) = self.reconfigure(chain)?;
                Ok(serde_json::json!({ "ok": true, "nodes": names, "flows_carried": carried }))
            }
            "export_state" => {
                let node = field("node")?;
                let data = self.export_state(node)?;
                let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
                Ok(serde_json::json!({ "node": node, "bytes": data.len(), "data_b64": b64 }))
            }
            "import_state" => {
                let node = field("node")?;
                let data = base64::engine::general_purpose::STANDARD
                    .decode(field("data_b64")?)
                    .context("`data_b64` is not base64")?;
                let flows = self.import_state(node, data)?;
                Ok(serde_json::json!({ "ok": true, "flows": flows }))
            }
            "hold" => {
                self.hold()?;
                Ok(serde_json::json!({ "ok": true, "held": true }))
            }
            "release" => {
                self.release()?;
                Ok(serde_json::json!({ "ok": true, "held": false }))
            }
            "drain" => {
                let d = self.drain()?;
                if !d.complete {
                    bail!(
                        "drain: frames still arriving after {:?} ({} processed); steer traffic away first",
                        crate::worker::DRAIN_LIMIT,
                        d.packets
                    );
                }
                Ok(serde_json::json!({ "ok": true, "held": true, "packets": d.packets }))
            }
            "steer" => {
                let member = req
                    .get("member")
                    .and_then(|m| m.as_u64())
                    .and_then(|m| u32::try_from(m).ok())
                    .ok_or_else(|| anyhow!("`steer` needs an unsigned integer field `member`"))?;
                self.steer(member)?;
                Ok(serde_json::json!({ "ok": true, "member": member }))
            }
            "shutdown" => {
                self.shutdown()?;
                Ok(serde_json::json!({ "ok": true }))
            }
            other => bail!(
                "unknown cmd `{other}` (stats, reconfigure, export_state, import_state, hold, release, drain, steer, shutdown)"
            ),
        }
    }
}

/// A running dataplane instance: one worker thread and the controller that talks to it.
pub struct Dataplane {
    controller: Controller,
    worker: Option<JoinHandle<Stats>>,
}

impl Dataplane {
    /// Starts a worker with AF_PACKET ports on the configured interfaces, inside the
    /// configured namespace. Returns once the ports are open (or with the reason they
    /// could not be).
    pub fn start(cfg: &RunConfig, builder: ChainBuilder) -> anyhow::Result<Self> {
        let batch = cfg.vector;
        let groups = cfg.fanout.map(|f| [f.group, f.group + 1]);
        let names = [
            cfg.ports.inside.iface.clone(),
            cfg.ports.outside.iface.clone(),
        ];
        let open: PortOpener = Box::new(move || {
            let opts = |side: usize| AfPacketOptions {
                batch,
                fanout: groups.map(|g| g[side]),
                ..AfPacketOptions::default()
            };
            let inside = AfPacketPort::open(&names[0], opts(0))?;
            let outside = AfPacketPort::open(&names[1], opts(1))?;
            Ok([Box::new(inside) as Box<dyn Port>, Box::new(outside)])
        });
        Self::start_with_ports(cfg, builder, open)
    }

    /// Starts a worker whose ports are made by `open` (tests use in-memory ports).
    pub fn start_with_ports(
        cfg: &RunConfig,
        builder: ChainBuilder,
        open: PortOpener,
    ) -> anyhow::Result<Self> {
        let nodes = builder(&cfg.chain, 0).map_err(|e| ConfigError {
            file: cfg.source.clone(),
            ..e
        })?;
        let events: Option<Box<dyn std::io::Write + Send>> = match &cfg.events {
            Some(path) => {
                let f = std::fs::File::create(path)
                    .with_context(|| format!("creating events file {}", path.display()))?;
                Some(Box::new(std::io::BufWriter::new(f)))
            }
            None => None,
        };
        let peer = |side: &str, mac: &str| {
            parse_mac(mac).map_err(|e| anyhow!("ports.{side}.peer_mac: {e}"))
        };
        let peers = [
            peer("inside", &cfg.ports.inside.peer_mac)?,
            peer("outside", &cfg.ports.outside.peer_mac)?,
        ];
        let mailbox = Arc::new(Mailbox::new().context("creating the worker's eventfd")?);
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<anyhow::Result<()>>(1);
        let (name, poll, vector, netns) =
            (cfg.name.clone(), cfg.poll, cfg.vector, cfg.netns.clone());
        let standby = cfg.fanout.is_some_and(|f| f.role == Role::Standby);
        let mb = mailbox.clone();
        let worker = std::thread::Builder::new()
            .name(format!("nfx-worker-{name}"))
            .spawn(move || {
                let setup = || -> anyhow::Result<[Box<dyn Port>; 2]> {
                    if let Some(ns) = &netns {
                        nfx_io::netns::enter_netns(ns)?;
                    }
                    open()
                };
                let ports = match setup() {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Stats::default();
                    }
                };
                let output = OutputNode {
                    forward: L2Rewrite {
                        dst: peers[1],
                        src: ports[1].mac(),
                    },
                    reverse: L2Rewrite {
                        dst: peers[0],
                        src: ports[0].mac(),
                    },
                };
                let graph = Graph::new(nodes, output, events);
                let worker =
                    Worker::new(name, poll, vector, ports, graph, rx, mb).start_held(standby);
                let _ = ready_tx.send(Ok(()));
                worker.run()
            })
            .context("spawning the worker thread")?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = worker.join();
                return Err(e);
            }
            Err(_) => bail!("the worker thread died while starting"),
        }
        Ok(Self {
            controller: Controller {
                inner: Arc::new(Inner {
                    tx,
                    mailbox,
                    builder,
                    applied: Mutex::new(cfg.chain.clone()),
                }),
            },
            worker: Some(worker),
        })
    }

    /// The handle for commands.
    pub fn controller(&self) -> Controller {
        self.controller.clone()
    }

    /// True once the worker thread has ended (e.g. after a `shutdown` command).
    pub fn finished(&self) -> bool {
        self.worker.as_ref().is_none_or(|w| w.is_finished())
    }

    /// Stops the worker (if still running) and returns its final stats.
    pub fn stop(mut self) -> anyhow::Result<Stats> {
        let _ = self.controller.shutdown();
        let w = self
            .worker
            .take()
            .ok_or_else(|| anyhow!("already stopped"))?;
        w.join().map_err(|_| anyhow!("the worker thread panicked"))
    }
}

impl Drop for Dataplane {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            let _ = self.controller.shutdown();
            let _ = w.join();
        }
    }
}
