//! The IKE endpoint of one tunnel: dispatches received messages to their IKE SA (or
//! answers a new IKE_SA_INIT), runs the timers (retransmission, rekeying, dead-peer
//! detection, half-open expiry, grace periods) and collects what the tunnel must do:
//! datagrams to send and data-plane [`Action`]s. It does no I/O and reads no clock:
//! the caller passes `now`.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::consts::exchange;
use crate::crypto::{random, Secret};
use crate::sa::{Action, Child, IkeSa, Phase, Queued};
use crate::wire::{Header, ParseError};

/// Counters of one endpoint.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// IKE SAs authenticated.
    pub ike_established: u64,
    /// CHILD_SAs rekeyed (either side started it).
    pub child_rekeys: u64,
    /// IKE SAs rekeyed.
    pub ike_rekeys: u64,
    /// Our requests sent again.
    pub retransmits: u64,
    /// Liveness checks sent.
    pub dpd_sent: u64,
    /// Times the peer stopped answering.
    pub peer_dead: u64,
    /// Failed authentications (either direction).
    pub auth_failures: u64,
    /// Messages dropped: malformed, failed integrity, unknown SPI, wrong message ID.
    pub dropped: u64,
    /// Stateless COOKIE answers sent.
    pub cookies_sent: u64,
    /// IKE_SA_INIT requests dropped because `half_open.max` SAs were half open.
    pub half_open_refused: u64,
    /// Time to set up the last IKE SA and its CHILD_SA (µs): initiator, from our first
    /// IKE_SA_INIT to the IKE_AUTH answer processed (a full exchange with the peer);
    /// responder, from the IKE_SA_INIT request to our IKE_AUTH answer.
    pub setup_us: Option<u64>,
}

/// A snapshot for status reports.
#[derive(Debug, Clone)]
pub struct Status {
    /// `connecting`, `established` or `down`.
    pub state: &'static str,
    /// Our SPI of the established IKE SA.
    pub ike_spi: Option<u64>,
    /// The current CHILD_SA (inbound SPI, outbound SPI, transform name, ESN).
    pub child: Option<(u32, u32, &'static str, bool)>,
    /// Counters.
    pub stats: Stats,
    /// The last failure, for the operator.
    pub last_error: Option<String>,
}

/// One tunnel's IKE endpoint.
pub struct Endpoint {
    pub(crate) cfg: Config,
    pub(crate) sas: Vec<IkeSa>,
    pub(crate) cookie_secret: Secret,
    pub(crate) out: Vec<Vec<u8>>,
    pub(crate) actions: Vec<Action>,
    pub(crate) removals: Vec<(Instant, u32)>,
    pub(crate) restart_at: Option<Instant>,
    pub(crate) stats: Stats,
    pub(crate) last_error: Option<String>,
}

impl Endpoint {
    /// A new endpoint; an initiator starts its IKE SA at the first `tick`.
    pub fn new(cfg: Config, now: Instant) -> Endpoint {
        let restart_at = cfg.initiator.then_some(now);
        Endpoint {
            cfg,
            sas: Vec::new(),
            cookie_secret: Secret::new(random(32)),
            out: Vec::new(),
            actions: Vec::new(),
            removals: Vec::new(),
            restart_at,
            stats: Stats::default(),
            last_error: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Datagrams to send to the peer (IKE messages, without the non-ESP marker).
    pub fn take_datagrams(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.out)
    }

    /// Data-plane changes to make, in order.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// Records that the peer was heard on the data plane (suppresses liveness checks).
    pub fn heard(&mut self, now: Instant) {
        for sa in &mut self.sas {
            if sa.phase == Phase::Established {
                sa.last_heard = now;
            }
        }
    }

    /// Records the data plane's count of packets and bytes sent on outbound SA
    /// `out_spi`; a CHILD_SA past its packet or byte limit is rekeyed.
    pub fn report_usage(&mut self, out_spi: u32, packets: u64, bytes: u64) {
        let lt = self.cfg.lifetimes.clone();
        for sa in &mut self.sas {
            if sa.phase != Phase::Established {
                continue;
            }
            let mut due = None;
            if let Some(c) = sa.child_by_out(out_spi) {
                c.usage = (packets, bytes);
                let limit = if c.suite.esn {
                    lt.child_packets
                } else {
                    lt.child_packets.min(crate::config::DEFAULT_CHILD_PACKETS)
                };
                let over = packets >= limit || (lt.child_bytes > 0 && bytes >= lt.child_bytes);
                if over && c.successor.is_none() && !c.closing {
                    due = Some(c.in_spi);
                }
            }
            if let Some(spi) = due {
                let q = Queued::RekeyChild(spi);
                if !sa.has_task(&q) {
                    sa.queue.push_back(q);
                }
            }
        }
    }

    /// Handles one received IKE message (the non-ESP marker already removed).
    pub fn handle(&mut self, now: Instant, msg: &[u8]) {
        let h = match Header::decode(msg) {
            Ok(h) => h,
            Err(e) => return self.drop_msg(e),
        };
        if h.exchange == exchange::IKE_SA_INIT && !h.is_response() && h.spi_r == 0 {
            self.respond_init(now, &h, msg);
        } else if let Some(i) = self.find_sa(&h) {
            if h.exchange == exchange::IKE_SA_INIT {
                if h.is_response() && self.sas[i].phase == Phase::InitSent {
                    self.on_init_response(i, now, &h, msg);
                } else if !h.is_response() {
                    self.resend_response(i, &h);
                }
            } else {
                self.on_protected(i, now, &h, msg);
            }
        } else {
            self.stats.dropped += 1;
        }
        self.pump(now);
    }

    pub(crate) fn drop_msg(&mut self, e: ParseError) {
        log::debug!("IKE message dropped: {e}");
        self.stats.dropped += 1;
    }

    /// The SA a message belongs to: by our SPI (and the peer's once known).
    fn find_sa(&self, h: &Header) -> Option<usize> {
        self.sas.iter().position(|sa| {
            if sa.phase == Phase::Dead {
                return false;
            }
            if sa.we_initiated {
                sa.spi_i == h.spi_i
                    && (sa.spi_r == h.spi_r || (sa.phase == Phase::InitSent && h.is_response()))
            } else {
                sa.spi_r == h.spi_r && sa.spi_i == h.spi_i
            }
        })
    }

    /// A retransmitted request whose response we have: send it again.
    pub(crate) fn resend_response(&mut self, i: usize, h: &Header) {
        match &self.sas[i].last_response {
            Some((id, m)) if *id == h.msg_id => self.out.push(m.clone()),
            _ => self.stats.dropped += 1,
        }
    }

    /// A message of an SA with keys: verify, then dispatch as a request or response.
    fn on_protected(&mut self, i: usize, now: Instant, h: &Header, msg: &[u8]) {
        let sa = &self.sas[i];
        if h.is_response() {
            if sa.pending.as_ref().map(|p| p.id) != Some(h.msg_id) {
                self.stats.dropped += 1;
                return;
            }
        } else if h.msg_id + 1 == sa.peer_next {
            return self.resend_response(i, h);
        } else if h.msg_id != sa.peer_next {
            self.stats.dropped += 1;
            return;
        }
        let payloads = match sa.open(msg) {
            Ok((_, p)) => p,
            Err(e) => {
                log::debug!("IKE message of SA {:#x} dropped: {e}", sa.local_spi());
                self.stats.dropped += 1;
                return;
            }
        };
        self.sas[i].last_heard = now;
        if h.is_response() {
            let p = self.sas[i].pending.take().expect("checked above");
            self.on_response(i, now, h, p.task, payloads);
        } else {
            self.on_request(i, now, h, payloads);
        }
    }

    fn on_response(
        &mut self,
        i: usize,
        now: Instant,
        h: &Header,
        task: crate::sa::Task,
        payloads: Vec<crate::wire::Payload>,
    ) {
        use crate::sa::Task;
        match task {
            Task::Auth { in_spi, offered } => {
                self.on_auth_response(i, now, in_spi, &offered, payloads)
            }
            Task::RekeyChild { .. } | Task::RekeyIke { .. } => {
                self.on_create_response(i, now, task, payloads)
            }
            Task::DeleteChildren(spis) => self.on_delete_children_done(i, now, &spis),
            Task::DeleteIke => {
                let restart = self.sas[i].restart_on_close;
                self.kill_sa(i, now, "deleted by us", restart)
            }
            Task::Dpd => {}
            Task::Init => debug_assert!(false, "IKE_SA_INIT answers are plaintext: {h:?}"),
        }
    }

    fn on_request(
        &mut self,
        i: usize,
        now: Instant,
        h: &Header,
        payloads: Vec<crate::wire::Payload>,
    ) {
        match (h.exchange, self.sas[i].phase) {
            (exchange::IKE_AUTH, Phase::HalfOpen) => self.on_auth_request(i, now, h, payloads),
            (exchange::CREATE_CHILD_SA, Phase::Established) => {
                self.on_create_request(i, now, h, payloads)
            }
            (exchange::INFORMATIONAL, Phase::Established | Phase::Rekeyed) => {
                self.on_informational(i, now, h, payloads)
            }
            _ => {
                log::debug!(
                    "IKE request {} in phase {:?} ignored",
                    h.exchange,
                    self.sas[i].phase
                );
                self.stats.dropped += 1;
            }
        }
    }

    /// Runs the timers.
    pub fn tick(&mut self, now: Instant) {
        if self.restart_at.is_some_and(|t| now >= t) {
            self.restart_at = None;
            if !self.sas.iter().any(|s| {
                matches!(
                    s.phase,
                    Phase::Established | Phase::InitSent | Phase::AuthSent
                )
            }) {
                self.initiate(now);
            }
        }
        let due: Vec<u32> = self
            .removals
            .iter()
            .filter(|(t, _)| now >= *t)
            .map(|(_, s)| *s)
            .collect();
        self.removals.retain(|(t, _)| now < *t);
        self.actions
            .extend(due.into_iter().map(Action::RemoveInbound));
        for i in 0..self.sas.len() {
            self.tick_sa(i, now);
        }
        self.sas.retain(|s| s.phase != Phase::Dead);
        self.pump(now);
    }

    fn tick_sa(&mut self, i: usize, now: Instant) {
        let cfg_rt = self.cfg.retransmit.clone();
        let sa = &mut self.sas[i];
        if sa.expires.is_some_and(|t| now >= t) {
            let why = if sa.phase == Phase::HalfOpen {
                "half-open SA expired"
            } else {
                "replaced SA expired"
            };
            return self.kill_sa(i, now, why, false);
        }
        if let Some(p) = &mut sa.pending {
            if now >= p.next_at {
                if p.tries >= cfg_rt.tries {
                    self.stats.peer_dead += 1;
                    return self.kill_sa(
                        i,
                        now,
                        "peer did not answer (retransmissions exhausted)",
                        true,
                    );
                }
                let wait = cfg_rt.timeout.mul_f64(cfg_rt.backoff.powi(p.tries as i32));
                p.tries += 1;
                p.next_at = now + wait;
                self.out.push(p.msg.clone());
                self.stats.retransmits += 1;
            }
        }
        if sa.phase != Phase::Established {
            return;
        }
        if sa.we_initiated
            && sa.rekey_at.is_some_and(|t| now >= t)
            && !sa.has_task(&Queued::RekeyIke)
        {
            sa.queue.push_back(Queued::RekeyIke);
        }
        let due: Vec<u32> = sa
            .children
            .iter()
            .filter(|c| now >= c.rekey_at && c.successor.is_none() && !c.closing)
            .map(|c| c.in_spi)
            .collect();
        for spi in due {
            let q = Queued::RekeyChild(spi);
            if !sa.has_task(&q) {
                sa.queue.push_back(q);
            }
        }
        if let Some(d) = self.cfg.dpd {
            if sa.pending.is_none() && sa.queue.is_empty() && now.duration_since(sa.last_heard) >= d
            {
                sa.queue.push_back(Queued::Dpd);
            }
        }
    }

    /// Starts queued exchanges on every SA whose window is free.
    pub(crate) fn pump(&mut self, now: Instant) {
        for i in 0..self.sas.len() {
            while matches!(self.sas[i].phase, Phase::Established | Phase::Rekeyed)
                && self.sas[i].pending.is_none()
            {
                let Some(q) = self.sas[i].queue.pop_front() else {
                    break;
                };
                self.start(i, now, q);
            }
        }
    }

    /// Tears SA `i` down: its children leave the data plane now; an initiator starts
    /// again after `restart_after` when `restart` (or the SA was its only one).
    pub(crate) fn kill_sa(&mut self, i: usize, now: Instant, why: &str, restart: bool) {
        let sa = &mut self.sas[i];
        if sa.phase == Phase::Dead {
            return;
        }
        let was = sa.phase;
        sa.phase = Phase::Dead;
        let children: Vec<Child> = std::mem::take(&mut sa.children);
        if matches!(was, Phase::Established | Phase::AuthSent | Phase::InitSent) || restart {
            log::info!("IKE SA {:#x}: {why}", sa.local_spi());
        }
        for c in children {
            self.drop_child(c);
        }
        if was != Phase::HalfOpen && was != Phase::Rekeyed {
            self.last_error = Some(why.to_string());
        }
        let alive = self.sas.iter().any(|s| {
            matches!(
                s.phase,
                Phase::Established | Phase::InitSent | Phase::AuthSent
            )
        });
        if self.cfg.initiator && !alive && restart && self.restart_at.is_none() {
            self.restart_at = Some(now + self.cfg.restart_after);
        }
    }

    /// Removes a child from the data plane at once (both directions).
    pub(crate) fn drop_child(&mut self, c: Child) {
        if c.out_live {
            self.actions.push(Action::RemoveOutbound(c.out_spi));
        }
        self.actions.push(Action::RemoveInbound(c.in_spi));
        self.removals.retain(|(_, s)| *s != c.in_spi);
    }

    /// Removes inbound SPI `spi` after the grace period.
    pub(crate) fn remove_later(&mut self, now: Instant, spi: u32) {
        self.removals.push((now + self.cfg.grace, spi));
    }

    /// When `tick` has something to do next.
    pub fn next_timer(&self) -> Option<Instant> {
        let mut t: Vec<Instant> = self.removals.iter().map(|(t, _)| *t).collect();
        t.extend(self.restart_at);
        for sa in &self.sas {
            t.extend(sa.pending.as_ref().map(|p| p.next_at));
            t.extend(sa.expires);
            if sa.phase == Phase::Established {
                t.extend(sa.rekey_at.filter(|_| sa.we_initiated));
                t.extend(sa.children.iter().map(|c| c.rekey_at));
                if let Some(d) = self.cfg.dpd {
                    t.push(sa.last_heard + d);
                }
            }
        }
        t.into_iter().min()
    }

    /// A status snapshot.
    pub fn status(&self) -> Status {
        let est = self.sas.iter().find(|s| s.phase == Phase::Established);
        let state = match est {
            Some(_) => "established",
            None if self
                .sas
                .iter()
                .any(|s| matches!(s.phase, Phase::InitSent | Phase::AuthSent))
                || (self.cfg.initiator && self.restart_at.is_some()) =>
            {
                "connecting"
            }
            None => "down",
        };
        let child = est
            .and_then(|s| s.children.iter().find(|c| c.out_live))
            .map(|c| (c.in_spi, c.out_spi, c.suite.alg.name(), c.suite.esn));
        Status {
            state,
            ike_spi: est.map(IkeSa::local_spi),
            child,
            stats: self.stats.clone(),
            last_error: self.last_error.clone(),
        }
    }

    /// Closes every SA (DELETE to the peer, best effort) and empties the data plane.
    pub fn shutdown(&mut self, now: Instant) {
        for i in 0..self.sas.len() {
            if self.sas[i].phase == Phase::Established && self.sas[i].pending.is_none() {
                self.start(i, now, Queued::DeleteIke);
            }
            self.kill_sa(i, now, "shut down", false);
        }
        self.restart_at = None;
        let spis: Vec<u32> = self.removals.drain(..).map(|(_, s)| s).collect();
        self.actions
            .extend(spis.into_iter().map(Action::RemoveInbound));
    }

    /// Rekey deadline of a new CHILD_SA: the configured interval, randomly shortened;
    /// the responder of the IKE SA waits 10 % longer so that the initiator usually
    /// rekeys first (fewer collisions).
    pub(crate) fn child_rekey_at(&self, now: Instant, we_initiated_ike: bool) -> Instant {
        let base = crate::sa::jittered(self.cfg.lifetimes.child, self.cfg.lifetimes.jitter);
        let base = if we_initiated_ike {
            base
        } else {
            base.mul_f64(1.1)
        };
        now + base.max(Duration::from_millis(100))
    }
}
