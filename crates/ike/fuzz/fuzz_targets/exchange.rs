//! Fuzz target: an IKE endpoint takes any datagram from the underlay. Two real nfx
//! endpoints (initiator and responder, PSK) talk, and the input is a script of steps:
//! deliver the next message as sent, deliver it with one byte flipped (so the parsers
//! meet near-valid IKE_SA_INIT and IKE_AUTH messages: proposals, KE, nonces, notifies,
//! cookies, SK payloads), drop it, inject raw bytes into either side, or let time pass.
//! Nothing may panic, and neither side may install an outbound SA the other side has
//! no matching inbound SA for (keys and SPI), whatever was delivered.
#![no_main]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use nfx_ike::auth::Credentials;
use nfx_ike::config::parse_identity;
use nfx_ike::consts::proto;
use nfx_ike::crypto::Secret;
use nfx_ike::proposal::{esp_proposal, parse_proposal, EspAlg};
use nfx_ike::ts::TrafficSelector;
use nfx_ike::{Action, Config, Endpoint, HalfOpen, Lifetimes, Retransmit};

fn config(initiator: bool) -> Config {
    let (me, peer, lid, rid) = if initiator {
        ("10.1.0.1:4500", "10.1.0.2:4500", "a.nfx", "b.nfx")
    } else {
        ("10.1.0.2:4500", "10.1.0.1:4500", "b.nfx", "a.nfx")
    };
    Config {
        initiator,
        local_id: parse_identity(lid).expect("id"),
        remote_id: parse_identity(rid).expect("id"),
        creds: Credentials::Psk(Secret::new(b"nfx-fuzz-pre-shared-key".to_vec())),
        ike_proposals: vec![
            parse_proposal("aes128gcm16-prfsha256-x25519", proto::IKE).expect("proposal"),
            parse_proposal("aes128-sha256-ecp256", proto::IKE).expect("proposal"),
        ],
        esp_proposals: vec![
            esp_proposal(EspAlg::AesGcm128, true),
            esp_proposal(EspAlg::AesCtr128HmacSha256, false),
        ],
        pfs: true,
        local_ts: vec![TrafficSelector::cidr("0.0.0.0/0").expect("ts")],
        remote_ts: vec![TrafficSelector::cidr("0.0.0.0/0").expect("ts")],
        lifetimes: Lifetimes {
            child: Duration::from_secs(2),
            ..Lifetimes::default()
        },
        dpd: Some(Duration::from_secs(3)),
        retransmit: Retransmit {
            timeout: Duration::from_millis(200),
            backoff: 1.5,
            tries: 3,
        },
        half_open: HalfOpen::default(),
        grace: Duration::from_secs(1),
        restart_after: Duration::from_secs(1),
        local: me.parse::<SocketAddr>().expect("addr"),
        remote: peer.parse::<SocketAddr>().expect("addr"),
    }
}

/// One side's data plane: inbound SAs by SPI, the outbound SA (SPI, keys).
#[derive(Default)]
struct Plane {
    inbound: HashMap<u32, Vec<u8>>,
    outbound: Option<(u32, Vec<u8>)>,
}

impl Plane {
    fn apply(&mut self, acts: Vec<Action>) {
        for a in acts {
            match a {
                Action::InstallInbound(s) => {
                    self.inbound.insert(s.spi, s.keys.encr.expose().to_vec());
                }
                Action::InstallOutbound(s) => {
                    self.outbound = Some((s.spi, s.keys.encr.expose().to_vec()));
                }
                Action::RemoveInbound(spi) => {
                    self.inbound.remove(&spi);
                }
                Action::RemoveOutbound(spi) => {
                    if self.outbound.as_ref().is_some_and(|o| o.0 == spi) {
                        self.outbound = None;
                    }
                }
            }
        }
    }
}

/// What a side sends on, the other side must be able to decrypt with the same key.
fn check(from: &Plane, to: &Plane) {
    if let Some((spi, key)) = &from.outbound {
        if let Some(k) = to.inbound.get(spi) {
            assert_eq!(k, key, "SPI {spi:#x}: the two sides hold different keys");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let mut now = t0;
    let mut ends = [Endpoint::new(config(true), now), Endpoint::new(config(false), now)];
    let mut planes = [Plane::default(), Plane::default()];
    // Messages in flight towards side 0 and side 1.
    let mut wire: [VecDeque<Vec<u8>>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut i = 0;
    let mut steps = 0;
    while i < data.len() && steps < 64 {
        steps += 1;
        let op = data[i];
        i += 1;
        let to = (op >> 7) as usize;
        match op & 0x7f {
            0..=47 => {
                if let Some(m) = wire[to].pop_front() {
                    ends[to].handle(now, &m);
                }
            }
            48..=79 => {
                let arg = data.get(i..i + 3).unwrap_or(&[0, 0, 1]);
                i += 3;
                if let Some(mut m) = wire[to].pop_front() {
                    if !m.is_empty() {
                        let pos = u16::from_le_bytes([arg[0], arg[1]]) as usize % m.len();
                        m[pos] ^= arg[2].max(1);
                    }
                    ends[to].handle(now, &m);
                }
            }
            80..=95 => {
                wire[to].pop_front();
            }
            96..=111 => {
                let n = data.get(i).copied().unwrap_or(0) as usize;
                let raw = data.get(i + 1..(i + 1 + n).min(data.len())).unwrap_or(&[]);
                i += 1 + n;
                ends[to].handle(now, raw);
            }
            _ => {
                now += Duration::from_millis(50 * (op & 0x0f) as u64 + 10);
                for e in &mut ends {
                    e.tick(now);
                }
            }
        }
        for s in 0..2 {
            planes[s].apply(ends[s].take_actions());
            for d in ends[s].take_datagrams() {
                if wire[1 - s].len() < 16 {
                    wire[1 - s].push_back(d);
                }
            }
        }
        check(&planes[0], &planes[1]);
        check(&planes[1], &planes[0]);
        let _ = (ends[0].status(), ends[1].status());
    }
});
