//! The IKE thread of an endpoint: runs the [`nfx_ike::Endpoint`] on the underlay
//! socket it shares with ESP (UDP 4500, non-ESP marker, RFC 3948), turns its SA
//! actions into data-path changes and reports its state to the EM.
//!
//! Ordering is what makes rekeying lossless: the SA changes an IKE step produces are
//! applied by the worker, and acknowledged, before that step's messages are sent, so
//! the peer can never use an SA this end has not installed yet.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nfx_accel::{Alg, SecretBytes};
use nfx_ike::proposal::EspAlg;
use nfx_ike::{Action, EspSa};
use serde_json::{json, Value};

use crate::esp::{Inbound, Outbound, SaKeys};
use crate::selectors::Selectors;
use crate::stats::Counters;
use crate::worker::{SaChange, SaCmd};

/// Longest the IKE thread sleeps (it also polls the data path's usage counters).
const POLL: Duration = Duration::from_millis(50);
/// Longest it waits for the worker to apply SA changes.
const APPLY_WAIT: Duration = Duration::from_secs(2);

/// IKE state shown by the EM.
#[derive(Default)]
pub struct IkeShared {
    status: Mutex<Option<nfx_ike::Status>>,
}

impl IkeShared {
    /// The last status snapshot as JSON (null before the thread ran).
    pub fn json(&self) -> Value {
        let g = self.status.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = g.as_ref() else {
            return Value::Null;
        };
        let st = &s.stats;
        json!({
            "state": s.state,
            "ike_spi": s.ike_spi.map(|v| format!("{v:016x}")),
            "child": s.child.map(|(i, o, alg, esn)| json!({
                "in_spi": format!("{i:08x}"), "out_spi": format!("{o:08x}"), "alg": alg, "esn": esn,
            })),
            "setup_ms": st.setup_us.map(|u| u as f64 / 1000.0),
            "ike_established": st.ike_established,
            "child_rekeys": st.child_rekeys,
            "ike_rekeys": st.ike_rekeys,
            "retransmits": st.retransmits,
            "dpd_sent": st.dpd_sent,
            "peer_dead": st.peer_dead,
            "auth_failures": st.auth_failures,
            "dropped": st.dropped,
            "cookies_sent": st.cookies_sent,
            "last_error": s.last_error,
        })
    }

    /// The negotiated ESP transform, if a CHILD_SA is up.
    pub fn alg(&self) -> Option<&'static str> {
        let g = self.status.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().and_then(|s| s.child.map(|c| c.2))
    }
}

fn accel_alg(a: EspAlg) -> Alg {
    match a {
        EspAlg::AesGcm128 => Alg::Aes128Gcm,
        EspAlg::AesGcm256 => Alg::Aes256Gcm,
        EspAlg::ChaCha20Poly1305 => Alg::Chacha20Poly1305,
        EspAlg::AesCtr128HmacSha256 => Alg::Aes128CtrHmacSha256,
    }
}

/// The data path's keys of a negotiated SA.
fn sa_keys(s: &EspSa) -> Result<SaKeys, String> {
    let km = SecretBytes::from_slice(s.keys.encr.expose());
    let auth = SecretBytes::from_slice(s.keys.integ.expose());
    let auth = (!auth.is_empty()).then_some(&auth);
    SaKeys::new(accel_alg(s.alg), s.spi, &km, auth)
}

/// The traffic the negotiated SA may carry.
fn selectors(s: &EspSa) -> Selectors {
    Selectors::negotiated(s.local_ts.clone(), s.remote_ts.clone())
}

/// What the IKE thread works with.
pub struct IkeParts {
    /// A handle on the underlay socket (shared with the worker).
    pub sock: UdpSocket,
    /// IKE messages the worker received.
    pub from_worker: Receiver<Vec<u8>>,
    /// SA changes to the worker.
    pub to_worker: Sender<SaCmd>,
    /// The worker's counters (usage of the outbound SA, inbound activity).
    pub counters: Arc<Counters>,
    /// Status for the EM.
    pub shared: Arc<IkeShared>,
    /// Anti-replay window of inbound SAs.
    pub replay_window: u64,
}

/// Runs until `stop`; then deletes the SAs at the peer (best effort).
pub fn run(cfg: nfx_ike::Config, p: IkeParts, stop: &AtomicBool) {
    let peer = cfg.remote;
    let mut ep = nfx_ike::Endpoint::new(cfg, Instant::now());
    let mut last_rx = p.counters.rx_packets.load(Relaxed);
    loop {
        let now = Instant::now();
        let wait = ep
            .next_timer()
            .map_or(POLL, |t| t.saturating_duration_since(now))
            .min(POLL);
        match p.from_worker.recv_timeout(wait) {
            Ok(m) => ep.handle(Instant::now(), &m),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        while let Ok(m) = p.from_worker.try_recv() {
            ep.handle(Instant::now(), &m);
        }
        if stop.load(Relaxed) {
            break;
        }
        let now = Instant::now();
        let c = &p.counters;
        let spi = c.out_spi.load(Relaxed);
        if spi != 0 {
            ep.report_usage(spi, c.out_seq.load(Relaxed), c.out_sa_bytes.load(Relaxed));
        }
        let rx = c.rx_packets.load(Relaxed);
        if rx != last_rx {
            last_rx = rx;
            ep.heard(now);
        }
        ep.tick(now);
        flush(&mut ep, &p, peer);
        *p.shared.status.lock().unwrap_or_else(|e| e.into_inner()) = Some(ep.status());
    }
    ep.shutdown(Instant::now());
    flush(&mut ep, &p, peer);
}

/// Applies the endpoint's SA actions (waiting for the worker), then sends its
/// messages.
fn flush(ep: &mut nfx_ike::Endpoint, p: &IkeParts, peer: SocketAddr) {
    let actions = ep.take_actions();
    if !actions.is_empty() {
        let mut changes = Vec::with_capacity(actions.len());
        for a in actions {
            let ch = match a {
                Action::InstallInbound(s) => sa_keys(&s).map(|k| {
                    SaChange::InstallInbound(
                        Inbound::new(k, s.esn, p.replay_window).with_selectors(selectors(&s)),
                    )
                }),
                Action::InstallOutbound(s) => sa_keys(&s).map(|k| {
                    SaChange::InstallOutbound(Outbound::new(k, s.esn).with_selectors(selectors(&s)))
                }),
                Action::RemoveInbound(spi) => Ok(SaChange::RemoveInbound(spi)),
                Action::RemoveOutbound(spi) => Ok(SaChange::RemoveOutbound(spi)),
            };
            match ch {
                Ok(ch) => changes.push(ch),
                Err(e) => log::error!("negotiated SA unusable: {e}"),
            }
        }
        let (done, wait) = mpsc::channel();
        if p.to_worker.send(SaCmd { changes, done }).is_ok()
            && wait.recv_timeout(APPLY_WAIT).is_err()
        {
            log::warn!("the packet worker did not apply SA changes within {APPLY_WAIT:?}");
        }
    }
    for d in ep.take_datagrams() {
        let mut m = Vec::with_capacity(d.len() + 4);
        m.extend_from_slice(&[0, 0, 0, 0]);
        m.extend_from_slice(&d);
        if let Err(e) = p.sock.send_to(&m, peer) {
            log::debug!("IKE send: {e}");
        }
    }
}
