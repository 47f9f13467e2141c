//! IKE_SA_INIT and IKE_AUTH (RFC 7296 §1.2, §2.6, §2.15, §2.23) in both roles:
//! proposals, Diffie-Hellman, cookies, NAT detection, authentication and the first
//! CHILD_SA.

use std::net::SocketAddr;
use std::time::Instant;

use rustls_pki_types::UnixTime;

use crate::auth::{self, cert_payloads, signed_octets, Credentials};
use crate::consts::{cert as certenc, exchange, flags, hash, notify as nt, proto};
use crate::crypto::{random, random_spi, random_u64, sha1, sha256, Dh};
use crate::endpoint::Endpoint;
use crate::keys::{child_keys, skeyseed, IkeKeys};
use crate::proposal::{check_answer, esp_suite, ike_suite, select, with_spi, DhGroup, Proposal};
use crate::sa::{IkeSa, InitData, Pending, Phase, Task};
use crate::ts;
use crate::wire::{decode_plain, encode_plain, Header, Notify, Payload};

fn addr_bytes(a: SocketAddr) -> Vec<u8> {
    let mut v = match a.ip() {
        std::net::IpAddr::V4(x) => x.octets().to_vec(),
        std::net::IpAddr::V6(x) => x.octets().to_vec(),
    };
    v.extend_from_slice(&a.port().to_be_bytes());
    v
}

/// The first notify of type `ty`.
pub(crate) fn find_notify(ps: &[Payload], ty: u16) -> Option<&Notify> {
    ps.iter().find_map(|p| match p {
        Payload::Notify(n) if n.ty == ty => Some(n),
        _ => None,
    })
}

/// The first error notify, if any.
pub(crate) fn error_notify(ps: &[Payload]) -> Option<u16> {
    ps.iter().find_map(|p| match p {
        Payload::Notify(n) if n.is_error() => Some(n.ty),
        _ => None,
    })
}

pub(crate) fn find_sa(ps: &[Payload]) -> Option<&[Proposal]> {
    ps.iter().find_map(|p| match p {
        Payload::Sa(v) => Some(v.as_slice()),
        _ => None,
    })
}

pub(crate) fn find_ke(ps: &[Payload]) -> Option<(u16, &[u8])> {
    ps.iter().find_map(|p| match p {
        Payload::Ke { group, data } => Some((*group, data.as_slice())),
        _ => None,
    })
}

pub(crate) fn find_nonce(ps: &[Payload]) -> Option<&[u8]> {
    ps.iter().find_map(|p| match p {
        Payload::Nonce(n) => Some(n.as_slice()),
        _ => None,
    })
}

pub(crate) fn find_ts(ps: &[Payload]) -> Option<(&[ts::TrafficSelector], &[ts::TrafficSelector])> {
    let i = ps.iter().find_map(|p| match p {
        Payload::TsI(v) => Some(v.as_slice()),
        _ => None,
    })?;
    let r = ps.iter().find_map(|p| match p {
        Payload::TsR(v) => Some(v.as_slice()),
        _ => None,
    })?;
    Some((i, r))
}

/// DER SEQUENCE around `content` (a trust anchor's SubjectPublicKeyInfo fields).
fn der_sequence(content: &[u8]) -> Vec<u8> {
    let n = content.len();
    let mut v = vec![0x30];
    if n < 0x80 {
        v.push(n as u8);
    } else if n < 0x100 {
        v.extend_from_slice(&[0x81, n as u8]);
    } else {
        v.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]);
    }
    v.extend_from_slice(content);
    v
}

/// A CERTREQ naming our CAs: SHA-1 of each CA's SubjectPublicKeyInfo (§3.7).
fn certreq(creds: &Credentials) -> Option<Payload> {
    let Credentials::Cert(c) = creds else {
        return None;
    };
    let mut data = Vec::new();
    for ca in c.cas() {
        if let Ok(a) = webpki::anchor_from_trusted_cert(ca) {
            data.extend(sha1(&[&der_sequence(a.subject_public_key_info.as_ref())]));
        }
    }
    Some(Payload::CertReq {
        encoding: certenc::X509_SIGNATURE,
        data,
    })
}

impl Endpoint {
    /// NAT detection notifies for a message from us to the peer. The source hash is
    /// random, as strongSwan's `encap = yes` does: the peer always sees us "behind a
    /// NAT" and uses UDP encapsulation, the only ESP framing nfx sends and receives.
    fn nat_notifies(&self, spi_i: u64, spi_r: u64) -> [Payload; 2] {
        let dst = sha1(&[
            &spi_i.to_be_bytes(),
            &spi_r.to_be_bytes(),
            &addr_bytes(self.cfg.remote),
        ]);
        [
            Payload::Notify(Notify::new(nt::NAT_DETECTION_SOURCE_IP, &random(20))),
            Payload::Notify(Notify::new(nt::NAT_DETECTION_DESTINATION_IP, &dst)),
        ]
    }

    fn sig_hash_notify(&self) -> Option<Payload> {
        matches!(self.cfg.creds, Credentials::Cert(_)).then(|| {
            Payload::Notify(Notify::new(
                nt::SIGNATURE_HASH_ALGORITHMS,
                &hash::SHA2_256.to_be_bytes(),
            ))
        })
    }

    /// Starts a new IKE SA as initiator.
    pub(crate) fn initiate(&mut self, now: Instant) {
        let group = self
            .cfg
            .ike_proposals
            .iter()
            .flat_map(|p| &p.transforms)
            .find_map(|t| {
                (t.ty == crate::consts::transform::DH)
                    .then(|| DhGroup::from_id(t.id))
                    .flatten()
            })
            .unwrap_or(DhGroup::Curve25519);
        let mut sa = IkeSa::new(random_u64(), 0, true, Phase::InitSent, now);
        sa.dh = Some(Dh::new(group));
        sa.init = Some(InitData {
            req: Vec::new(),
            resp: Vec::new(),
            ni: random(32),
            nr: Vec::new(),
            peer_sha256: false,
        });
        self.sas.push(sa);
        let i = self.sas.len() - 1;
        self.send_init(i, now);
    }

    /// (Re)sends IKE_SA_INIT of SA `i` with its current cookie and key pair.
    fn send_init(&mut self, i: usize, now: Instant) {
        let sa = &self.sas[i];
        let dh = sa.dh.as_ref().expect("initiator key pair");
        let init = sa.init.as_ref().expect("initiator nonce");
        let mut ps = Vec::new();
        if let Some(c) = &sa.cookie {
            ps.push(Payload::Notify(Notify::new(nt::COOKIE, c)));
        }
        ps.push(Payload::Sa(with_spi(&self.cfg.ike_proposals, &[])));
        ps.push(Payload::Ke {
            group: dh.group.id(),
            data: dh.public().to_vec(),
        });
        ps.push(Payload::Nonce(init.ni.clone()));
        ps.extend(self.nat_notifies(sa.spi_i, 0));
        ps.extend(self.sig_hash_notify());
        let h = Header {
            spi_i: sa.spi_i,
            spi_r: 0,
            next: 0,
            exchange: exchange::IKE_SA_INIT,
            flags: flags::INITIATOR,
            msg_id: 0,
            length: 0,
        };
        let msg = encode_plain(h, &ps);
        let sa = &mut self.sas[i];
        sa.init.as_mut().expect("init data").req = msg.clone();
        sa.my_next = 1;
        sa.pending = Some(Pending {
            id: 0,
            msg: msg.clone(),
            next_at: now + self.cfg.retransmit.timeout,
            tries: 1,
            task: Task::Init,
        });
        self.out.push(msg);
    }

    /// The initiator's view of the IKE_SA_INIT response.
    pub(crate) fn on_init_response(&mut self, i: usize, now: Instant, h: &Header, msg: &[u8]) {
        let ps = match decode_plain(msg) {
            Ok((_, ps)) => ps,
            Err(e) => return self.drop_msg(e),
        };
        if let Some(c) = find_notify(&ps, nt::COOKIE) {
            if (1..=64).contains(&c.data.len()) && self.sas[i].cookie.is_none() {
                self.sas[i].cookie = Some(c.data.clone());
                self.sas[i].pending = None;
                return self.send_init(i, now);
            }
            return self.drop_msg(crate::wire::ParseError::Invalid("COOKIE"));
        }
        if let Some(n) = find_notify(&ps, nt::INVALID_KE_PAYLOAD) {
            let want = (n.data.len() == 2)
                .then(|| DhGroup::from_id(u16::from_be_bytes([n.data[0], n.data[1]])))
                .flatten();
            let cur = self.sas[i].dh.as_ref().map(|d| d.group);
            match want {
                Some(g) if Some(g) != cur && self.offers_group(g) => {
                    self.sas[i].dh = Some(Dh::new(g));
                    self.sas[i].pending = None;
                    return self.send_init(i, now);
                }
                _ => return self.fail(i, now, "peer wants a Diffie-Hellman group we do not offer"),
            }
        }
        if let Some(e) = error_notify(&ps) {
            return self.fail(i, now, &format!("peer refused IKE_SA_INIT (notify {e})"));
        }
        match self.complete_init(i, h, msg, &ps) {
            Ok(()) => {
                self.sas[i].pending = None;
                self.sas[i].phase = Phase::AuthSent;
                self.send_auth(i, now);
            }
            Err(why) => self.fail(i, now, &why),
        }
    }

    fn offers_group(&self, g: DhGroup) -> bool {
        self.cfg
            .ike_proposals
            .iter()
            .flat_map(|p| &p.transforms)
            .any(|t| t.ty == crate::consts::transform::DH && t.id == g.id())
    }

    /// Checks the IKE_SA_INIT answer and derives the IKE SA keys.
    fn complete_init(
        &mut self,
        i: usize,
        h: &Header,
        msg: &[u8],
        ps: &[Payload],
    ) -> Result<(), String> {
        let offered = with_spi(&self.cfg.ike_proposals, &[]);
        let answer = find_sa(ps).ok_or("IKE_SA_INIT answer without SA")?;
        let chosen =
            check_answer(&offered, answer).ok_or("peer chose a proposal we did not offer")?;
        let suite = ike_suite(&chosen).ok_or("peer chose an unusable proposal")?;
        let (group, ke) = find_ke(ps).ok_or("IKE_SA_INIT answer without KE")?;
        let nr = find_nonce(ps).ok_or("IKE_SA_INIT answer without nonce")?;
        let sa = &mut self.sas[i];
        let dh = sa.dh.take().ok_or("no key pair")?;
        if group != suite.dh.id() || dh.group != suite.dh || h.spi_r == 0 {
            return Err("IKE_SA_INIT answer with an inconsistent KE or SPI".into());
        }
        let gir = dh.shared(ke).map_err(|e| e.to_string())?;
        let init = sa.init.as_mut().ok_or("no init data")?;
        init.resp = msg.to_vec();
        init.nr = nr.to_vec();
        init.peer_sha256 = peer_sha256(ps);
        let seed = skeyseed(&init.ni, nr, &gir);
        let keys = IkeKeys::derive(suite.encr, &seed, &init.ni, nr, sa.spi_i, h.spi_r);
        sa.spi_r = h.spi_r;
        sa.set_keys(suite, keys);
        Ok(())
    }

    /// Our AUTH payload over `octets`.
    fn our_auth(&self, octets: &[u8], peer_sha256: bool) -> Payload {
        let (method, data) = match &self.cfg.creds {
            Credentials::Psk(k) => (
                crate::consts::auth::PSK,
                auth::psk_mac(k, octets).expose().to_vec(),
            ),
            Credentials::Cert(c) => c.sign(octets, peer_sha256),
        };
        Payload::Auth { method, data }
    }

    /// Checks the peer's AUTH payload.
    fn check_auth(&self, ps: &[Payload], octets: &[u8]) -> Result<(), auth::AuthError> {
        let (method, data) = ps
            .iter()
            .find_map(|p| match p {
                Payload::Auth { method, data } => Some((*method, data.as_slice())),
                _ => None,
            })
            .ok_or(auth::AuthError::BadAuth)?;
        match &self.cfg.creds {
            Credentials::Psk(k) => auth::verify_psk(k, method, data, octets),
            Credentials::Cert(c) => {
                let certs: Vec<Vec<u8>> = ps
                    .iter()
                    .filter_map(|p| match p {
                        Payload::Cert { encoding, data }
                            if *encoding == certenc::X509_SIGNATURE =>
                        {
                            Some(data.clone())
                        }
                        _ => None,
                    })
                    .collect();
                c.verify(
                    &certs,
                    &self.cfg.remote_id,
                    method,
                    data,
                    octets,
                    UnixTime::now(),
                )
            }
        }
    }

    /// Sends IKE_AUTH with the first CHILD_SA (initiator).
    fn send_auth(&mut self, i: usize, now: Instant) {
        let in_spi = random_spi();
        let offered = with_spi(&self.cfg.esp_proposals, &in_spi.to_be_bytes());
        let sa = &self.sas[i];
        let init = sa.init.as_ref().expect("init data");
        let keys = sa.keys.as_ref().expect("keys");
        let octets = signed_octets(&init.req, &init.nr, &keys.sk_pi, &self.cfg.local_id);
        let mut ps = vec![Payload::IdI(self.cfg.local_id.clone())];
        if let Credentials::Cert(c) = &self.cfg.creds {
            ps.extend(cert_payloads(c));
        }
        ps.extend(certreq(&self.cfg.creds));
        ps.push(Payload::IdR(self.cfg.remote_id.clone()));
        ps.push(self.our_auth(&octets, init.peer_sha256));
        ps.push(Payload::Notify(Notify::new(nt::INITIAL_CONTACT, &[])));
        ps.push(Payload::Sa(offered.clone()));
        ps.push(Payload::TsI(self.cfg.local_ts.clone()));
        ps.push(Payload::TsR(self.cfg.remote_ts.clone()));
        let cfg = &self.cfg;
        let msg = self.sas[i].request(
            cfg,
            now,
            exchange::IKE_AUTH,
            &ps,
            Task::Auth { in_spi, offered },
        );
        self.out.push(msg);
    }

    /// A stateless IKE_SA_INIT answer carrying only `n` (cookie or error).
    fn answer_init_with(&mut self, h: &Header, n: Notify) {
        let rh = Header {
            spi_i: h.spi_i,
            spi_r: 0,
            next: 0,
            exchange: exchange::IKE_SA_INIT,
            flags: flags::RESPONSE,
            msg_id: 0,
            length: 0,
        };
        self.out.push(encode_plain(rh, &[Payload::Notify(n)]));
    }

    fn cookie_for(&self, ni: &[u8], spi_i: u64) -> Vec<u8> {
        let mut c = vec![0u8];
        c.extend(sha256(&[
            ni,
            &addr_bytes(self.cfg.remote),
            &spi_i.to_be_bytes(),
            self.cookie_secret.expose(),
        ]));
        c
    }

    /// A new IKE_SA_INIT request (responder): bounded half-open state, cookies, proposal
    /// and group choice, then the answer and a half-open SA.
    pub(crate) fn respond_init(&mut self, now: Instant, h: &Header, msg: &[u8]) {
        let ps = match decode_plain(msg) {
            Ok((_, ps)) => ps,
            Err(e) => return self.drop_msg(e),
        };
        if let Some(j) = self
            .sas
            .iter()
            .position(|s| !s.we_initiated && s.spi_i == h.spi_i && s.phase == Phase::HalfOpen)
        {
            return self.resend_response(j, h);
        }
        let half_open = self
            .sas
            .iter()
            .filter(|s| s.phase == Phase::HalfOpen)
            .count();
        if half_open >= self.cfg.half_open.max {
            self.stats.half_open_refused += 1;
            return;
        }
        let (Some(theirs), Some((group, ke)), Some(ni)) =
            (find_sa(&ps), find_ke(&ps), find_nonce(&ps))
        else {
            return self.drop_msg(crate::wire::ParseError::Invalid("IKE_SA_INIT payloads"));
        };
        if half_open >= self.cfg.half_open.cookie_after {
            let want = self.cookie_for(ni, h.spi_i);
            let got = match ps.first() {
                Some(Payload::Notify(n)) if n.ty == nt::COOKIE => Some(&n.data),
                _ => None,
            };
            let ok = got.is_some_and(|g| {
                aws_lc_rs::constant_time::verify_slices_are_equal(g, &want).is_ok()
            });
            if !ok {
                self.stats.cookies_sent += 1;
                return self.answer_init_with(h, Notify::new(nt::COOKIE, &want));
            }
        }
        let ours = with_spi(&self.cfg.ike_proposals, &[]);
        let Some(chosen) = select(&ours, theirs, proto::IKE) else {
            self.last_error = Some("no acceptable IKE proposal from the peer".into());
            return self.answer_init_with(h, Notify::new(nt::NO_PROPOSAL_CHOSEN, &[]));
        };
        let suite = ike_suite(&chosen).expect("select checks the suite");
        if group != suite.dh.id() {
            return self.answer_init_with(
                h,
                Notify::new(nt::INVALID_KE_PAYLOAD, &suite.dh.id().to_be_bytes()),
            );
        }
        let dh = Dh::new(suite.dh);
        let Ok(gir) = dh.shared(ke) else {
            return self.drop_msg(crate::wire::ParseError::Invalid("KE"));
        };
        let spi_r = random_u64();
        let nr = random(32);
        let mut out = vec![
            Payload::Sa(vec![Proposal {
                spi: Vec::new(),
                ..chosen
            }]),
            Payload::Ke {
                group,
                data: dh.public().to_vec(),
            },
            Payload::Nonce(nr.clone()),
        ];
        out.extend(self.nat_notifies(h.spi_i, spi_r));
        out.extend(certreq(&self.cfg.creds));
        out.extend(self.sig_hash_notify());
        let rh = Header {
            spi_i: h.spi_i,
            spi_r,
            next: 0,
            exchange: exchange::IKE_SA_INIT,
            flags: flags::RESPONSE,
            msg_id: 0,
            length: 0,
        };
        let resp = encode_plain(rh, &out);
        let mut sa = IkeSa::new(h.spi_i, spi_r, false, Phase::HalfOpen, now);
        let seed = skeyseed(ni, &nr, &gir);
        sa.set_keys(
            suite,
            IkeKeys::derive(suite.encr, &seed, ni, &nr, h.spi_i, spi_r),
        );
        sa.init = Some(InitData {
            req: msg.to_vec(),
            resp: resp.clone(),
            ni: ni.to_vec(),
            nr,
            peer_sha256: peer_sha256(&ps),
        });
        sa.last_response = Some((0, resp.clone()));
        sa.peer_next = 1;
        sa.expires = Some(now + self.cfg.half_open.timeout);
        self.sas.push(sa);
        self.out.push(resp);
    }

    /// IKE_AUTH request (responder).
    pub(crate) fn on_auth_request(&mut self, i: usize, now: Instant, h: &Header, ps: Vec<Payload>) {
        let idi = ps.iter().find_map(|p| match p {
            Payload::IdI(id) => Some(id.clone()),
            _ => None,
        });
        let idr_ok = ps
            .iter()
            .all(|p| !matches!(p, Payload::IdR(id) if *id != self.cfg.local_id));
        let Some(idi) = idi.filter(|id| *id == self.cfg.remote_id && idr_ok) else {
            return self.refuse_auth(i, now, h, "peer's identity is not the configured remote_id");
        };
        let sa = &self.sas[i];
        let init = sa.init.as_ref().expect("half-open SA has init data");
        let keys = sa.keys.as_ref().expect("keys");
        let octets = signed_octets(&init.req, &init.nr, &keys.sk_pi, &idi);
        if let Err(e) = self.check_auth(&ps, &octets) {
            return self.refuse_auth(i, now, h, &format!("peer {idi}: {e}"));
        }
        let octets_r = signed_octets(&init.resp, &init.ni, &keys.sk_pr, &self.cfg.local_id);
        let mut out = vec![Payload::IdR(self.cfg.local_id.clone())];
        if let Credentials::Cert(c) = &self.cfg.creds {
            out.extend(cert_payloads(c));
        }
        out.push(self.our_auth(&octets_r, init.peer_sha256));
        let (ni, nr) = (init.ni.clone(), init.nr.clone());
        self.replace_other_sas(i, now);
        match self.accept_child(i, now, &ps, None, &ni, &nr, None) {
            Ok(mut child_ps) => out.append(&mut child_ps),
            Err(n) => out.push(Payload::Notify(Notify::new(n, &[]))),
        }
        let msg = self.sas[i].respond(exchange::IKE_AUTH, h.msg_id, &out);
        self.out.push(msg);
        self.stats.setup_us = Some(now.duration_since(self.sas[i].started).as_micros() as u64);
        self.established(i, now);
    }

    fn refuse_auth(&mut self, i: usize, now: Instant, h: &Header, why: &str) {
        log::warn!("IKE_AUTH refused: {why}");
        self.stats.auth_failures += 1;
        let n = Payload::Notify(Notify::new(nt::AUTHENTICATION_FAILED, &[]));
        let msg = self.sas[i].respond(exchange::IKE_AUTH, h.msg_id, &[n]);
        self.out.push(msg);
        self.last_error = Some(format!("authentication failed: {why}"));
        self.kill_sa(i, now, "authentication failed", false);
    }

    /// Established SAs other than `i` belong to an earlier incarnation of the peer (it
    /// started over, e.g. after a restart): they are dropped without a Delete.
    fn replace_other_sas(&mut self, i: usize, now: Instant) {
        for j in 0..self.sas.len() {
            if j != i && matches!(self.sas[j].phase, Phase::Established | Phase::Rekeyed) {
                self.kill_sa(j, now, "replaced by a new IKE SA with the peer", false);
            }
        }
    }

    fn established(&mut self, i: usize, now: Instant) {
        self.stats.ike_established += 1;
        let ike = crate::sa::jittered(self.cfg.lifetimes.ike, self.cfg.lifetimes.jitter);
        let sa = &mut self.sas[i];
        sa.phase = Phase::Established;
        sa.established = Some(now);
        sa.rekey_at = Some(now + ike);
        sa.expires = None;
        sa.init = None;
        log::info!("IKE SA {:#x} established", sa.local_spi());
    }

    /// IKE_AUTH response (initiator).
    pub(crate) fn on_auth_response(
        &mut self,
        i: usize,
        now: Instant,
        in_spi: u32,
        offered: &[Proposal],
        ps: Vec<Payload>,
    ) {
        if find_notify(&ps, nt::AUTHENTICATION_FAILED).is_some() {
            self.stats.auth_failures += 1;
            return self.fail(i, now, "the peer refused our authentication");
        }
        let idr = ps.iter().find_map(|p| match p {
            Payload::IdR(id) => Some(id.clone()),
            _ => None,
        });
        let Some(idr) = idr.filter(|id| *id == self.cfg.remote_id) else {
            self.stats.auth_failures += 1;
            return self.fail(i, now, "peer's identity is not the configured remote_id");
        };
        let sa = &self.sas[i];
        let init = sa.init.as_ref().expect("init data");
        let keys = sa.keys.as_ref().expect("keys");
        let octets = signed_octets(&init.resp, &init.ni, &keys.sk_pr, &idr);
        if let Err(e) = self.check_auth(&ps, &octets) {
            self.stats.auth_failures += 1;
            return self.fail(i, now, &format!("peer {idr}: {e}"));
        }
        let (ni, nr) = (init.ni.clone(), init.nr.clone());
        let started = sa.started;
        self.replace_other_sas(i, now);
        self.established(i, now);
        match self.take_child_answer(i, now, &ps, offered, in_spi, &ni, &nr, None) {
            Ok(()) => self.stats.setup_us = Some(now.duration_since(started).as_micros() as u64),
            Err(why) => {
                self.last_error = Some(format!("no CHILD_SA: {why}"));
                log::warn!("IKE SA without CHILD_SA: {why}; closing it");
                self.sas[i].restart_on_close = true;
                self.sas[i].queue.push_back(crate::sa::Queued::DeleteIke);
            }
        }
    }

    /// Gives up on SA `i` (initiator failure): closed, retried after `restart_after`.
    pub(crate) fn fail(&mut self, i: usize, now: Instant, why: &str) {
        log::warn!("IKE: {why}");
        self.last_error = Some(why.to_string());
        self.kill_sa(i, now, why, true);
    }

    /// The responder side of a CHILD_SA (IKE_AUTH or CREATE_CHILD_SA): chooses the
    /// proposal and narrows the selectors; installs the inbound SA at once and the
    /// outbound one too unless `rekeying` (then the outbound waits until the peer has
    /// deleted the old SA, so the peer can decrypt everything we send). Returns the
    /// answer payloads or the error notify.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept_child(
        &mut self,
        i: usize,
        now: Instant,
        ps: &[Payload],
        gir: Option<&crate::crypto::Secret>,
        ni: &[u8],
        nr: &[u8],
        rekeying: Option<u32>,
    ) -> Result<Vec<Payload>, u16> {
        let theirs = find_sa(ps).ok_or(nt::NO_PROPOSAL_CHOSEN)?;
        let ours = self.esp_choices();
        let chosen = select(&ours, theirs, proto::ESP).ok_or(nt::NO_PROPOSAL_CHOSEN)?;
        let suite = esp_suite(&chosen).ok_or(nt::NO_PROPOSAL_CHOSEN)?;
        if suite.dh.is_some() != gir.is_some() {
            return Err(nt::INVALID_KE_PAYLOAD);
        }
        let (tsi, tsr) = find_ts(ps).ok_or(nt::TS_UNACCEPTABLE)?;
        let remote_ts = ts::narrow(tsi, &self.cfg.remote_ts);
        let local_ts = ts::narrow(tsr, &self.cfg.local_ts);
        if remote_ts.is_empty() || local_ts.is_empty() {
            return Err(nt::TS_UNACCEPTABLE);
        }
        let out_spi =
            u32::from_be_bytes(chosen.spi[..4].try_into().expect("select checks 4 bytes"));
        let in_spi = random_spi();
        let sk_d = self.sas[i].sk_d();
        let (i2r, r2i) = child_keys(&sk_d, gir, ni, nr, suite.alg);
        let we_init_ike = self.sas[i].we_initiated;
        self.add_child(
            i,
            now,
            suite,
            (in_spi, i2r),
            (out_spi, r2i),
            (&local_ts, &remote_ts),
            rekeying.is_none(),
            we_init_ike,
        );
        Ok(vec![
            Payload::Sa(vec![Proposal {
                spi: in_spi.to_be_bytes().to_vec(),
                ..chosen
            }]),
            Payload::TsI(remote_ts),
            Payload::TsR(local_ts),
        ])
    }

    /// Our ESP proposals as a responder: as configured, each also acceptable with any
    /// of our IKE groups for PFS.
    pub(crate) fn esp_choices(&self) -> Vec<Proposal> {
        let mut v = self.cfg.esp_proposals.clone();
        for g in [DhGroup::Curve25519, DhGroup::Ecp256] {
            if self.offers_group(g) {
                v = crate::proposal::with_pfs(&v, g);
            }
        }
        v
    }

    /// The initiator side of a CHILD_SA answer: checks proposal and selectors, installs
    /// inbound then outbound.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn take_child_answer(
        &mut self,
        i: usize,
        now: Instant,
        ps: &[Payload],
        offered: &[Proposal],
        in_spi: u32,
        ni: &[u8],
        nr: &[u8],
        gir: Option<&crate::crypto::Secret>,
    ) -> Result<(), String> {
        if let Some(e) = error_notify(ps) {
            return Err(format!("peer refused the CHILD_SA (notify {e})"));
        }
        let answer = find_sa(ps).ok_or("no SA in the answer")?;
        let chosen =
            check_answer(offered, answer).ok_or("peer chose a proposal we did not offer")?;
        let suite = esp_suite(&chosen).ok_or("unusable ESP proposal")?;
        if chosen.spi.len() != 4 || suite.dh.is_some() != gir.is_some() {
            return Err("bad SPI or PFS group in the answer".into());
        }
        let (tsi, tsr) = find_ts(ps).ok_or("no traffic selectors in the answer")?;
        let (local_ts, remote_ts) = self.sas[i]
            .children
            .first()
            .map(|c| (c.local_ts.clone(), c.remote_ts.clone()))
            .unwrap_or_else(|| (self.cfg.local_ts.clone(), self.cfg.remote_ts.clone()));
        if !ts::answer_within(tsi, &local_ts) || !ts::answer_within(tsr, &remote_ts) {
            return Err("traffic selectors outside what we proposed".into());
        }
        let out_spi = u32::from_be_bytes(chosen.spi[..4].try_into().expect("4 bytes"));
        let sk_d = self.sas[i].sk_d();
        let (i2r, r2i) = child_keys(&sk_d, gir, ni, nr, suite.alg);
        let we_init_ike = self.sas[i].we_initiated;
        self.add_child(
            i,
            now,
            suite,
            (in_spi, r2i),
            (out_spi, i2r),
            (tsi, tsr),
            true,
            we_init_ike,
        );
        Ok(())
    }
}

/// Whether the peer's SIGNATURE_HASH_ALGORITHMS lists SHA2-256.
fn peer_sha256(ps: &[Payload]) -> bool {
    find_notify(ps, nt::SIGNATURE_HASH_ALGORITHMS)
        .is_some_and(|n| n.data.chunks(2).any(|c| c == hash::SHA2_256.to_be_bytes()))
}
