//! One IKE SA: its keys, message-ID windows (window size 1, RFC 7296 §2.3), the
//! request in flight with its retransmission schedule, the cached last response, the
//! queue of exchanges waiting for the window and its CHILD_SAs.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::consts::flags;
use crate::crypto::{Dh, Secret};
use crate::keys::IkeKeys;
use crate::proposal::{EspSuite, IkeSuite, Proposal};
use crate::sk::{self, SkKeys};
use crate::ts::TrafficSelector;
use crate::wire::{Header, Payload};

/// Data-plane changes the tunnel must make, in order.
#[derive(Debug, Clone)]
pub enum Action {
    /// Start accepting ESP with this SPI and keys.
    InstallInbound(EspSa),
    /// Send with this SA from now on (replaces the current outbound SA).
    InstallOutbound(EspSa),
    /// Stop accepting ESP with this SPI (keys dropped).
    RemoveInbound(u32),
    /// Stop sending with this SA (there is no replacement: packets are dropped).
    RemoveOutbound(u32),
}

/// One direction of a CHILD_SA as the data plane needs it.
#[derive(Debug, Clone)]
pub struct EspSa {
    /// SPI on the wire.
    pub spi: u32,
    /// Transform.
    pub alg: crate::proposal::EspAlg,
    /// 64-bit sequence numbers.
    pub esn: bool,
    /// Cipher key ‖ salt, and the HMAC key of CTR transforms.
    pub keys: crate::keys::DirKeys,
    /// Our side's selectors of the CHILD_SA: inner packets of this SA must come from
    /// (outbound) or go to (inbound) what they cover.
    pub local_ts: Vec<TrafficSelector>,
    /// The peer's side's selectors of the CHILD_SA.
    pub remote_ts: Vec<TrafficSelector>,
}

/// A CHILD_SA of an IKE SA.
#[derive(Debug)]
pub struct Child {
    /// Our inbound SPI.
    pub in_spi: u32,
    /// The peer's inbound SPI (our outbound).
    pub out_spi: u32,
    /// Algorithms.
    pub suite: EspSuite,
    /// Our side's selectors.
    pub local_ts: Vec<TrafficSelector>,
    /// The peer's side's selectors.
    pub remote_ts: Vec<TrafficSelector>,
    /// When it was created.
    pub created: Instant,
    /// When we rekey it.
    pub rekey_at: Instant,
    /// Our outbound traffic uses it.
    pub out_live: bool,
    /// Keys of our outbound direction, kept until the outbound is switched to it.
    pub out_keys: Option<EspSa>,
    /// A CHILD_SA the peer created to replace this one (its inbound SPI).
    pub successor: Option<u32>,
    /// Our own rekey of it is in flight.
    pub rekeying: bool,
    /// The lowest nonce of the peer's rekey exchange, when the peer rekeyed it while
    /// ours was in flight (RFC 7296 §2.8.1 collision).
    pub peer_rekey_min: Option<Vec<u8>>,
    /// We asked the peer to delete it.
    pub closing: bool,
    /// Outbound packets and bytes reported by the data plane.
    pub usage: (u64, u64),
}

/// What a request of ours is for, with what its response needs.
#[derive(Debug)]
pub enum Task {
    /// IKE_SA_INIT (initiator).
    Init,
    /// IKE_AUTH with the first CHILD_SA.
    Auth {
        /// The CHILD_SA's inbound SPI.
        in_spi: u32,
        /// ESP proposals offered.
        offered: Vec<Proposal>,
    },
    /// CREATE_CHILD_SA replacing the child with inbound SPI `old`.
    RekeyChild {
        /// Old child's inbound SPI.
        old: u32,
        /// New inbound SPI.
        in_spi: u32,
        /// Our nonce.
        ni: Vec<u8>,
        /// Our PFS key pair.
        dh: Option<Dh>,
        /// Proposals offered.
        offered: Vec<Proposal>,
    },
    /// CREATE_CHILD_SA replacing this IKE SA.
    RekeyIke {
        /// The new SA's initiator SPI (ours).
        spi: u64,
        /// Our nonce.
        ni: Vec<u8>,
        /// Our key pair.
        dh: Dh,
        /// Proposals offered.
        offered: Vec<Proposal>,
    },
    /// INFORMATIONAL deleting children (our inbound SPIs).
    DeleteChildren(Vec<u32>),
    /// INFORMATIONAL deleting this IKE SA.
    DeleteIke,
    /// An empty INFORMATIONAL (dead-peer detection).
    Dpd,
}

/// Exchanges waiting for the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queued {
    /// Rekey the child with this inbound SPI.
    RekeyChild(u32),
    /// Rekey the IKE SA.
    RekeyIke,
    /// Delete children (our inbound SPIs).
    DeleteChildren(Vec<u32>),
    /// Delete the IKE SA.
    DeleteIke,
    /// Liveness check.
    Dpd,
}

/// Our request in flight.
#[derive(Debug)]
pub struct Pending {
    /// Its message ID.
    pub id: u32,
    /// The datagram (resent as is).
    pub msg: Vec<u8>,
    /// When it is resent next.
    pub next_at: Instant,
    /// Sends so far.
    pub tries: u32,
    /// What it is for.
    pub task: Task,
}

/// Where the IKE SA is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Initiator: IKE_SA_INIT sent.
    InitSent,
    /// Initiator: IKE_AUTH sent.
    AuthSent,
    /// Responder: IKE_SA_INIT answered, waiting for IKE_AUTH.
    HalfOpen,
    /// Authenticated.
    Established,
    /// Replaced by a rekeyed IKE SA; waits for (or sends) its Delete.
    Rekeyed,
    /// Closed.
    Dead,
}

/// The IKE_SA_INIT state AUTH needs.
#[derive(Debug)]
pub struct InitData {
    /// The IKE_SA_INIT request as sent (RealMessage1).
    pub req: Vec<u8>,
    /// The IKE_SA_INIT response (RealMessage2).
    pub resp: Vec<u8>,
    /// Ni.
    pub ni: Vec<u8>,
    /// Nr.
    pub nr: Vec<u8>,
    /// The peer announced RFC 7427 with SHA2-256.
    pub peer_sha256: bool,
}

/// One IKE SA.
#[derive(Debug)]
pub struct IkeSa {
    /// Initiator SPI.
    pub spi_i: u64,
    /// Responder SPI.
    pub spi_r: u64,
    /// We are this SA's initiator (sets the Initiator flag).
    pub we_initiated: bool,
    /// Where it is.
    pub phase: Phase,
    /// Algorithms (known after IKE_SA_INIT).
    pub suite: Option<IkeSuite>,
    /// Keys (after IKE_SA_INIT).
    pub keys: Option<IkeKeys>,
    sk_out: Option<SkKeys>,
    sk_in: Option<SkKeys>,
    iv_counter: u64,
    /// Message ID of our next request.
    pub my_next: u32,
    /// Message ID of the peer's next request.
    pub peer_next: u32,
    /// Our last response (resent when the peer retransmits its request).
    pub last_response: Option<(u32, Vec<u8>)>,
    /// Our request in flight.
    pub pending: Option<Pending>,
    /// Exchanges waiting.
    pub queue: VecDeque<Queued>,
    /// CHILD_SAs.
    pub children: Vec<Child>,
    /// IKE_SA_INIT data until IKE_AUTH completes.
    pub init: Option<InitData>,
    /// Initiator's DH key pair while IKE_SA_INIT is in flight.
    pub dh: Option<Dh>,
    /// Cookie to send with IKE_SA_INIT.
    pub cookie: Option<Vec<u8>>,
    /// When the SA was started.
    pub started: Instant,
    /// When the SA became established.
    pub established: Option<Instant>,
    /// When to rekey it.
    pub rekey_at: Option<Instant>,
    /// When something authenticated was last heard from the peer.
    pub last_heard: Instant,
    /// Deadline of a half-open or rekeyed SA.
    pub expires: Option<Instant>,
    /// Start over (initiator) once our Delete of this SA is answered: it failed to
    /// give us a CHILD_SA.
    pub restart_on_close: bool,
}

impl IkeSa {
    /// A new SA in `phase`.
    pub fn new(spi_i: u64, spi_r: u64, we_initiated: bool, phase: Phase, now: Instant) -> IkeSa {
        IkeSa {
            spi_i,
            spi_r,
            we_initiated,
            phase,
            suite: None,
            keys: None,
            sk_out: None,
            sk_in: None,
            iv_counter: 0,
            my_next: 0,
            peer_next: 0,
            last_response: None,
            pending: None,
            queue: VecDeque::new(),
            children: Vec::new(),
            init: None,
            dh: None,
            cookie: None,
            started: now,
            established: None,
            rekey_at: None,
            last_heard: now,
            expires: None,
            restart_on_close: false,
        }
    }

    /// Our SPI of this SA.
    pub fn local_spi(&self) -> u64 {
        if self.we_initiated {
            self.spi_i
        } else {
            self.spi_r
        }
    }

    /// Installs the IKE SA keys (after IKE_SA_INIT or a rekey).
    pub fn set_keys(&mut self, suite: IkeSuite, keys: IkeKeys) {
        let (ei, ai, er, ar) = (
            keys.sk_ei.clone(),
            keys.sk_ai.clone(),
            keys.sk_er.clone(),
            keys.sk_ar.clone(),
        );
        let i = SkKeys::new(suite.encr, ei, ai);
        let r = SkKeys::new(suite.encr, er, ar);
        if self.we_initiated {
            self.sk_out = Some(i);
            self.sk_in = Some(r);
        } else {
            self.sk_out = Some(r);
            self.sk_in = Some(i);
        }
        self.suite = Some(suite);
        self.keys = Some(keys);
    }

    /// SK_d.
    pub fn sk_d(&self) -> Secret {
        self.keys
            .as_ref()
            .map(|k| k.sk_d.clone())
            .unwrap_or_default()
    }

    fn header(&self, exchange: u8, response: bool, msg_id: u32) -> Header {
        let mut f = 0;
        if self.we_initiated {
            f |= flags::INITIATOR;
        }
        if response {
            f |= flags::RESPONSE;
        }
        Header {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            next: 0,
            exchange,
            flags: f,
            msg_id,
            length: 0,
        }
    }

    /// Seals `payloads` as a message of this SA.
    pub fn seal(
        &mut self,
        exchange: u8,
        response: bool,
        msg_id: u32,
        payloads: &[Payload],
    ) -> Vec<u8> {
        let h = self.header(exchange, response, msg_id);
        let keys = self
            .sk_out
            .as_ref()
            .expect("keys before protected messages");
        sk::seal(keys, &mut self.iv_counter, h, payloads)
    }

    /// Verifies and decrypts a message of this SA.
    pub fn open(&self, msg: &[u8]) -> Result<(Header, Vec<Payload>), sk::SkError> {
        match &self.sk_in {
            Some(k) => sk::open(k, msg),
            None => Err(sk::SkError::NotEncrypted),
        }
    }

    /// Sends a new request now (the window must be free): returns the datagram.
    pub fn request(
        &mut self,
        cfg: &Config,
        now: Instant,
        exchange: u8,
        payloads: &[Payload],
        task: Task,
    ) -> Vec<u8> {
        debug_assert!(self.pending.is_none());
        let id = self.my_next;
        let msg = self.seal(exchange, false, id, payloads);
        self.my_next += 1;
        self.pending = Some(Pending {
            id,
            msg: msg.clone(),
            next_at: now + cfg.retransmit.timeout,
            tries: 1,
            task,
        });
        msg
    }

    /// Builds the response to the peer's request `msg_id`, caches it and returns it.
    pub fn respond(&mut self, exchange: u8, msg_id: u32, payloads: &[Payload]) -> Vec<u8> {
        let msg = self.seal(exchange, true, msg_id, payloads);
        self.last_response = Some((msg_id, msg.clone()));
        self.peer_next = msg_id + 1;
        msg
    }

    /// The child with inbound SPI `spi`.
    pub fn child(&mut self, in_spi: u32) -> Option<&mut Child> {
        self.children.iter_mut().find(|c| c.in_spi == in_spi)
    }

    /// The child whose outbound SPI is `spi` (what the peer names in REKEY_SA/Delete).
    pub fn child_by_out(&mut self, out_spi: u32) -> Option<&mut Child> {
        self.children.iter_mut().find(|c| c.out_spi == out_spi)
    }

    /// Whether `q` is queued or in flight already.
    pub fn has_task(&self, q: &Queued) -> bool {
        if self.queue.contains(q) {
            return true;
        }
        match (&self.pending, q) {
            (Some(p), Queued::RekeyChild(s)) => {
                matches!(p.task, Task::RekeyChild { old, .. } if old == *s)
            }
            (Some(p), Queued::RekeyIke) => matches!(p.task, Task::RekeyIke { .. }),
            (Some(p), Queued::Dpd) => matches!(p.task, Task::Dpd),
            (Some(p), Queued::DeleteIke) => matches!(p.task, Task::DeleteIke),
            _ => false,
        }
    }
}

/// Randomly shortened interval: `d · (1 − jitter · u)`, u uniform in [0, 1).
pub fn jittered(d: Duration, jitter: f64) -> Duration {
    let b = crate::crypto::random(4);
    let u = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as f64 / (u32::MAX as f64 + 1.0);
    d.mul_f64(1.0 - jitter.clamp(0.0, 0.9) * u)
}
