//! Two nfx IKE endpoints talking in-process over a simulated network (messages can be
//! dropped, held or reordered; time is simulated): establishment with PSK and
//! certificates for every algorithm, cookies, INVALID_KE_PAYLOAD, retransmission,
//! rekeying of CHILD_SAs (time, packets, collisions) and of the IKE SA, dead-peer
//! detection, Delete and restarts. After every delivered message the data planes are
//! checked: whatever SA one side sends on is installed, with the same keys, as an
//! inbound SA on the other side (make-before-break: no packet can be lost to a
//! rekey).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nfx_ike::auth::{CertCreds, Credentials};
use nfx_ike::config::parse_identity;
use nfx_ike::consts::proto;
use nfx_ike::crypto::Secret;
use nfx_ike::proposal::{esp_proposal, parse_proposal, EspAlg};
use nfx_ike::ts::TrafficSelector;
use nfx_ike::{Action, Config, Endpoint, EspSa, HalfOpen, Lifetimes, Retransmit};

const A_ADDR: &str = "10.1.0.1:4500";
const B_ADDR: &str = "10.1.0.2:4500";

struct Opts {
    ike: Vec<&'static str>,
    esp: Vec<EspAlg>,
    esn: bool,
    pfs: bool,
    lifetimes: Lifetimes,
    dpd: Option<Duration>,
    half_open: HalfOpen,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            ike: vec!["aes128gcm16-prfsha256-x25519"],
            esp: vec![EspAlg::AesGcm128],
            esn: false,
            pfs: true,
            lifetimes: Lifetimes::default(),
            dpd: None,
            half_open: HalfOpen::default(),
        }
    }
}

fn config(initiator: bool, creds: Credentials, o: &Opts) -> Config {
    let (me, peer, lid, rid) = if initiator {
        (A_ADDR, B_ADDR, "a.nfx", "b.nfx")
    } else {
        (B_ADDR, A_ADDR, "b.nfx", "a.nfx")
    };
    Config {
        initiator,
        local_id: parse_identity(lid).unwrap(),
        remote_id: parse_identity(rid).unwrap(),
        creds,
        ike_proposals: o
            .ike
            .iter()
            .map(|s| parse_proposal(s, proto::IKE).unwrap())
            .collect(),
        esp_proposals: o.esp.iter().map(|a| esp_proposal(*a, o.esn)).collect(),
        pfs: o.pfs,
        local_ts: vec![TrafficSelector::cidr("0.0.0.0/0").unwrap()],
        remote_ts: vec![TrafficSelector::cidr("0.0.0.0/0").unwrap()],
        lifetimes: o.lifetimes.clone(),
        dpd: o.dpd,
        retransmit: Retransmit {
            timeout: Duration::from_millis(200),
            backoff: 1.5,
            tries: 4,
        },
        half_open: o.half_open.clone(),
        grace: Duration::from_secs(2),
        restart_after: Duration::from_secs(1),
        local: me.parse::<SocketAddr>().unwrap(),
        remote: peer.parse::<SocketAddr>().unwrap(),
    }
}

fn psk(s: &str) -> Credentials {
    Credentials::Psk(Secret::new(s.as_bytes().to_vec()))
}

/// The data plane of one side, as the tunnel would hold it.
#[derive(Default)]
struct Plane {
    inbound: HashMap<u32, EspSa>,
    outbound: Option<EspSa>,
    installs: u32,
}

impl Plane {
    fn apply(&mut self, acts: Vec<Action>) {
        for a in acts {
            match a {
                Action::InstallInbound(s) => {
                    self.installs += 1;
                    assert!(
                        self.inbound.insert(s.spi, s).is_none(),
                        "SPI installed twice"
                    );
                }
                Action::InstallOutbound(s) => self.outbound = Some(s),
                Action::RemoveInbound(spi) => {
                    self.inbound.remove(&spi);
                }
                Action::RemoveOutbound(spi) => {
                    if self.outbound.as_ref().is_some_and(|o| o.spi == spi) {
                        self.outbound = None;
                    }
                }
            }
        }
    }
}

struct Side {
    ep: Endpoint,
    plane: Plane,
}

/// Decides whether a message is delivered (direction A→B, bytes).
type Filter = Box<dyn FnMut(bool, &[u8]) -> bool>;

/// Two endpoints, a clock and the messages in flight (A→B is `true`).
struct Net {
    a: Side,
    b: Side,
    now: Instant,
    wire: VecDeque<(bool, Vec<u8>)>,
    /// Return false to drop a message (direction, bytes).
    filter: Filter,
    delivered: usize,
    /// Check make-before-break after every message (off while a peer is "dead").
    strict: bool,
}

impl Net {
    fn new(a: Config, b: Config) -> Net {
        let now = Instant::now();
        Net {
            a: Side {
                ep: Endpoint::new(a, now),
                plane: Plane::default(),
            },
            b: Side {
                ep: Endpoint::new(b, now),
                plane: Plane::default(),
            },
            now,
            wire: VecDeque::new(),
            filter: Box::new(|_, _| true),
            delivered: 0,
            strict: true,
        }
    }

    fn collect(&mut self) {
        for m in self.a.ep.take_datagrams() {
            self.wire.push_back((true, m));
        }
        for m in self.b.ep.take_datagrams() {
            self.wire.push_back((false, m));
        }
        self.a.plane.apply(self.a.ep.take_actions());
        self.b.plane.apply(self.b.ep.take_actions());
    }

    /// Make-before-break: each side's outbound SA is an inbound SA of the other side,
    /// with the same keys (once the other side has any inbound SA at all).
    fn check_planes(&self) {
        if !self.strict {
            return;
        }
        for (x, y) in [
            (&self.a.plane, &self.b.plane),
            (&self.b.plane, &self.a.plane),
        ] {
            if let Some(o) = &x.outbound {
                if y.installs == 0 {
                    continue;
                }
                let i = y.inbound.get(&o.spi).unwrap_or_else(|| {
                    panic!("outbound SPI {:#x} not installed at the peer", o.spi)
                });
                assert_eq!(i.keys.encr, o.keys.encr);
                assert_eq!(i.keys.integ, o.keys.integ);
                assert_eq!((i.alg, i.esn), (o.alg, o.esn));
            }
        }
    }

    /// Delivers every message in flight (and those they cause), in order.
    fn settle(&mut self) {
        self.collect();
        while let Some((to_b, m)) = self.wire.pop_front() {
            if (self.filter)(to_b, &m) {
                let side = if to_b { &mut self.b } else { &mut self.a };
                side.ep.handle(self.now, &m);
                self.delivered += 1;
            }
            self.collect();
            self.check_planes();
        }
    }

    /// Advances the clock by `d` in steps of `step`, ticking both sides and settling.
    fn run(&mut self, d: Duration, step: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now += step;
            self.a.ep.tick(self.now);
            self.b.ep.tick(self.now);
            self.settle();
        }
    }

    fn up(&mut self) {
        self.run(Duration::from_millis(100), Duration::from_millis(10));
        assert_eq!(
            self.a.ep.status().state,
            "established",
            "{:?}",
            self.a.ep.status()
        );
        assert_eq!(
            self.b.ep.status().state,
            "established",
            "{:?}",
            self.b.ep.status()
        );
        assert!(self.a.plane.outbound.is_some() && self.b.plane.outbound.is_some());
    }
}

fn pair(o: &Opts) -> Net {
    Net::new(
        config(true, psk("shared"), o),
        config(false, psk("shared"), o),
    )
}

#[test]
fn psk_every_algorithm_combination() {
    let ikes = [
        "aes128gcm16-prfsha256-x25519",
        "aes256gcm16-prfsha256-ecp256",
        "aes128-sha256-ecp256",
        "aes256-sha256-x25519",
    ];
    let esps = [
        EspAlg::AesGcm128,
        EspAlg::AesGcm256,
        EspAlg::ChaCha20Poly1305,
        EspAlg::AesCtr128HmacSha256,
    ];
    for ike in ikes {
        for esp in esps {
            let o = Opts {
                ike: vec![ike],
                esp: vec![esp],
                ..Opts::default()
            };
            let mut n = pair(&o);
            n.up();
            let st = n.a.ep.status();
            assert_eq!(st.child.unwrap().2, esp.name(), "{ike}");
            assert!(st.stats.setup_us.is_some());
            assert_eq!(n.a.plane.outbound.as_ref().unwrap().alg, esp);
        }
    }
}

#[test]
fn wrong_psk_is_refused_both_ways() {
    let o = Opts::default();
    let mut n = Net::new(config(true, psk("one"), &o), config(false, psk("two"), &o));
    n.run(Duration::from_millis(100), Duration::from_millis(10));
    assert_ne!(n.a.ep.status().state, "established");
    assert_eq!(n.b.ep.status().stats.auth_failures, 1);
    assert!(n.a.ep.status().last_error.unwrap().contains("refused"));
    assert!(n.a.plane.inbound.is_empty() && n.b.plane.inbound.is_empty());
}

#[test]
fn wrong_identity_is_refused() {
    let o = Opts::default();
    let mut b = config(false, psk("shared"), &o);
    b.remote_id = parse_identity("someone.else").unwrap();
    let mut n = Net::new(config(true, psk("shared"), &o), b);
    n.run(Duration::from_millis(100), Duration::from_millis(10));
    assert_ne!(n.b.ep.status().state, "established");
    assert!(n.b.ep.status().last_error.unwrap().contains("remote_id"));
}

fn certs(names: &[&str]) -> Vec<(String, String, String)> {
    let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    names
        .iter()
        .map(|n| {
            let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
            let cert = rcgen::CertificateParams::new(vec![n.to_string()])
                .unwrap()
                .signed_by(&key, &ca)
                .unwrap();
            (cert.pem(), key.serialize_pem(), ca.pem())
        })
        .collect()
}

fn cert_creds(c: &(String, String, String)) -> Credentials {
    Credentials::Cert(CertCreds::from_pem(c.0.as_bytes(), c.1.as_bytes(), c.2.as_bytes()).unwrap())
}

#[test]
fn certificates_establish_and_a_foreign_ca_is_refused() {
    let v = certs(&["a.nfx", "b.nfx"]);
    let o = Opts::default();
    let mut n = Net::new(
        config(true, cert_creds(&v[0]), &o),
        config(false, cert_creds(&v[1]), &o),
    );
    n.up();
    // b.nfx's certificate from another CA: A refuses B.
    let w = certs(&["b.nfx"]);
    let mut n = Net::new(
        config(true, cert_creds(&v[0]), &o),
        config(false, cert_creds(&w[0]), &o),
    );
    n.run(Duration::from_millis(100), Duration::from_millis(10));
    assert_ne!(n.a.ep.status().state, "established");
    assert!(
        n.a.ep.status().stats.auth_failures >= 1,
        "{:?}",
        n.a.ep.status()
    );
}

#[test]
fn invalid_ke_payload_retry_and_cookies() {
    let mut a = Opts {
        ike: vec!["aes128gcm16-prfsha256-ecp256-x25519"],
        ..Opts::default()
    };
    let b = Opts {
        ike: vec!["aes128gcm16-prfsha256-x25519"],
        half_open: HalfOpen {
            cookie_after: 0,
            ..HalfOpen::default()
        },
        ..Opts::default()
    };
    a.half_open = HalfOpen::default();
    let mut n = Net::new(config(true, psk("k"), &a), config(false, psk("k"), &b));
    n.up();
    assert!(n.b.ep.status().stats.cookies_sent >= 1);
}

#[test]
fn lost_messages_are_retransmitted() {
    let mut n = pair(&Opts::default());
    let mut dropped = 0;
    n.filter = Box::new(move |to_b, _| {
        // Drop B's first two answers (IKE_SA_INIT and IKE_AUTH responses).
        if !to_b && dropped < 2 {
            dropped += 1;
            return false;
        }
        true
    });
    n.run(Duration::from_secs(2), Duration::from_millis(10));
    assert_eq!(n.a.ep.status().state, "established");
    assert!(n.a.ep.status().stats.retransmits >= 2);
}

#[test]
fn half_open_sas_are_bounded_under_a_flood() {
    let o = Opts {
        half_open: HalfOpen {
            cookie_after: 4,
            max: 8,
            timeout: Duration::from_secs(5),
        },
        ..Opts::default()
    };
    let mut n = pair(&o);
    // An attacker replays many IKE_SA_INITs with fresh SPIs (A's first message as a
    // template): B keeps at most `cookie_after` half-open SAs and answers the rest
    // with cookies, statelessly.
    let now = n.now;
    n.a.ep.tick(now);
    let first = n.a.ep.take_datagrams().pop().unwrap();
    for k in 0..1000u64 {
        let mut m = first.clone();
        m[..8].copy_from_slice(&(k + 1).to_be_bytes());
        n.b.ep.handle(now, &m);
    }
    let st = n.b.ep.status();
    assert!(st.stats.cookies_sent >= 990, "{st:?}");
    assert_eq!(n.b.ep.take_datagrams().len(), 1000);
    // The real initiator still gets through (it answers the cookie).
    n.wire.push_back((true, first));
    n.run(Duration::from_millis(200), Duration::from_millis(10));
    assert_eq!(n.a.ep.status().state, "established");
}

fn short_lifetimes() -> Lifetimes {
    Lifetimes {
        ike: Duration::from_secs(3600),
        child: Duration::from_secs(10),
        child_packets: 1 << 30,
        child_bytes: 0,
        jitter: 0.0,
    }
}

#[test]
fn child_rekey_by_time_is_make_before_break() {
    for pfs in [true, false] {
        let o = Opts {
            lifetimes: short_lifetimes(),
            pfs,
            esp: vec![EspAlg::AesCtr128HmacSha256],
            ..Opts::default()
        };
        let mut n = pair(&o);
        n.up();
        let first = n.a.plane.outbound.as_ref().unwrap().spi;
        n.run(Duration::from_secs(35), Duration::from_millis(100));
        let st = n.a.ep.status();
        assert!(st.stats.child_rekeys >= 3, "{st:?}");
        assert_ne!(n.a.plane.outbound.as_ref().unwrap().spi, first);
        // Old inbound SAs are gone after the grace period: one pair left.
        n.run(Duration::from_secs(3), Duration::from_millis(100));
        assert!(n.a.plane.inbound.len() <= 2 && n.b.plane.inbound.len() <= 2);
    }
}

#[test]
fn child_rekey_by_packets() {
    let o = Opts {
        lifetimes: Lifetimes {
            child_packets: 1000,
            ..Lifetimes::default()
        },
        ..Opts::default()
    };
    let mut n = pair(&o);
    n.up();
    let spi = n.b.plane.outbound.as_ref().unwrap().spi;
    n.b.ep.report_usage(spi, 999, 0);
    n.run(Duration::from_millis(50), Duration::from_millis(10));
    assert_eq!(n.b.plane.outbound.as_ref().unwrap().spi, spi);
    n.b.ep.report_usage(spi, 1000, 0);
    n.run(Duration::from_millis(50), Duration::from_millis(10));
    assert_ne!(n.b.plane.outbound.as_ref().unwrap().spi, spi);
    assert_eq!(n.b.ep.status().stats.child_rekeys, 1);
}

#[test]
fn without_esn_rekey_comes_before_the_sequence_space_ends() {
    let o = Opts {
        lifetimes: Lifetimes {
            child_packets: u64::MAX,
            ..Lifetimes::default()
        },
        ..Opts::default()
    };
    let mut n = pair(&o);
    n.up();
    assert!(!n.a.plane.outbound.as_ref().unwrap().esn);
    let spi = n.a.plane.outbound.as_ref().unwrap().spi;
    n.a.ep.report_usage(spi, 3 << 30, 0);
    n.run(Duration::from_millis(50), Duration::from_millis(10));
    assert_ne!(n.a.plane.outbound.as_ref().unwrap().spi, spi);
}

#[test]
fn esn_is_negotiated_when_both_offer_it() {
    for (ea, eb, want) in [
        (true, true, true),
        (true, false, false),
        (false, true, false),
    ] {
        let oa = Opts {
            esn: ea,
            ..Opts::default()
        };
        let ob = Opts {
            esn: eb,
            ..Opts::default()
        };
        let mut n = Net::new(config(true, psk("k"), &oa), config(false, psk("k"), &ob));
        n.up();
        assert_eq!(n.a.plane.outbound.as_ref().unwrap().esn, want);
        assert_eq!(n.b.plane.outbound.as_ref().unwrap().esn, want);
    }
}

#[test]
fn simultaneous_child_rekeys_leave_one_pair() {
    let o = Opts {
        lifetimes: short_lifetimes(),
        ..Opts::default()
    };
    let mut n = pair(&o);
    n.up();
    // Hold every message until both sides have sent their rekey request, so each
    // answers the other's before its own completes (RFC 7296 §2.8.1 collision).
    let spi_a = n.a.plane.outbound.as_ref().unwrap().spi;
    let spi_b = n.b.plane.outbound.as_ref().unwrap().spi;
    n.a.ep.report_usage(spi_a, 1 << 30, 0);
    n.b.ep.report_usage(spi_b, 1 << 30, 0);
    n.a.ep.tick(n.now);
    n.b.ep.tick(n.now);
    n.collect();
    assert_eq!(n.wire.len(), 2, "both requests in flight");
    n.settle();
    n.run(Duration::from_secs(3), Duration::from_millis(100));
    for s in [&n.a, &n.b] {
        assert_eq!(s.plane.inbound.len(), 1, "one inbound SA left");
    }
    assert_ne!(n.a.plane.outbound.as_ref().unwrap().spi, spi_b);
    let st = n.a.ep.status();
    assert_eq!(st.state, "established");
}

#[test]
fn ike_sa_rekey_keeps_children_and_later_child_rekeys_work() {
    let o = Opts {
        lifetimes: Lifetimes {
            ike: Duration::from_secs(5),
            child: Duration::from_secs(8),
            jitter: 0.0,
            ..Lifetimes::default()
        },
        ..Opts::default()
    };
    let mut n = pair(&o);
    n.up();
    let ike1 = n.a.ep.status().ike_spi;
    n.run(Duration::from_secs(6), Duration::from_millis(100));
    let st = n.a.ep.status();
    assert_eq!(st.stats.ike_rekeys, 1, "{st:?}");
    assert_ne!(st.ike_spi, ike1);
    n.run(Duration::from_secs(4), Duration::from_millis(100));
    assert!(n.a.ep.status().stats.child_rekeys >= 1);
    assert_eq!(n.b.ep.status().state, "established");
}

#[test]
fn dead_peer_is_detected_and_the_initiator_restarts() {
    let o = Opts {
        dpd: Some(Duration::from_secs(1)),
        ..Opts::default()
    };
    let mut n = pair(&o);
    n.up();
    // B goes silent (its SAs stay: it cannot tell A gave up on it).
    n.strict = false;
    n.filter = Box::new(|to_b, _| to_b);
    n.run(Duration::from_secs(6), Duration::from_millis(50));
    let st = n.a.ep.status();
    assert!(st.stats.peer_dead >= 1, "{st:?}");
    assert!(st.stats.dpd_sent >= 1);
    assert!(n.a.plane.outbound.is_none() && n.a.plane.inbound.is_empty());
    assert_eq!(st.state, "connecting");
    // B comes back: A's restart establishes a new SA with B.
    n.filter = Box::new(|_, _| true);
    n.run(Duration::from_secs(3), Duration::from_millis(50));
    assert_eq!(n.a.ep.status().state, "established");
}

#[test]
fn traffic_suppresses_dpd() {
    let o = Opts {
        dpd: Some(Duration::from_secs(1)),
        ..Opts::default()
    };
    let mut n = pair(&o);
    n.up();
    for _ in 0..30 {
        let t = n.now;
        n.a.ep.heard(t);
        n.run(Duration::from_millis(100), Duration::from_millis(100));
    }
    assert_eq!(n.a.ep.status().stats.dpd_sent, 0);
}

#[test]
fn shutdown_deletes_the_peer_state() {
    let mut n = pair(&Opts::default());
    n.up();
    let t = n.now;
    n.a.ep.shutdown(t);
    n.settle();
    assert!(n.a.plane.outbound.is_none() && n.a.plane.inbound.is_empty());
    assert!(n.b.plane.outbound.is_none() && n.b.plane.inbound.is_empty());
    assert_eq!(n.b.ep.status().state, "down");
}

#[test]
fn a_restarted_initiator_gets_fresh_keys() {
    let o = Opts::default();
    let mut n = pair(&o);
    n.up();
    let old = n.b.plane.inbound.values().next().unwrap().clone();
    // A restarts: a new process with no state.
    n.a = Side {
        ep: Endpoint::new(config(true, psk("shared"), &o), n.now),
        plane: Plane::default(),
    };
    n.b.plane.installs = 0;
    n.up();
    let new =
        n.b.plane
            .inbound
            .values()
            .find(|s| s.spi != old.spi)
            .unwrap();
    assert_ne!(new.keys.encr, old.keys.encr);
    n.run(Duration::from_secs(3), Duration::from_millis(100));
    assert!(
        !n.b.plane.inbound.contains_key(&old.spi),
        "the old SA is gone"
    );
}

#[test]
fn garbage_and_replayed_messages_change_nothing() {
    let mut n = pair(&Opts::default());
    n.up();
    let before = n.b.ep.status().stats.dropped;
    let t = n.now;
    for len in [0, 1, 27, 28, 29, 100, 2000] {
        n.b.ep.handle(t, &vec![0xab; len]);
    }
    assert!(n.b.ep.status().stats.dropped >= before + 7);
    assert_eq!(n.b.ep.status().state, "established");
    assert!(n.b.ep.take_datagrams().is_empty());
}
