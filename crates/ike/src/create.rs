//! CREATE_CHILD_SA (RFC 7296 §1.3, §2.8) and INFORMATIONAL (§1.4, §2.4): rekeying
//! CHILD_SAs make-before-break and the IKE SA, deleting SAs, liveness checks, and
//! the exchange collisions of §2.8.1 and §2.25.

use std::time::{Duration, Instant};

use crate::consts::{exchange, notify as nt, proto};
use crate::crypto::{random, random_spi, random_u64, Dh, Secret};
use crate::endpoint::Endpoint;
use crate::init::{error_notify, find_ke, find_nonce, find_notify, find_sa};
use crate::keys::{skeyseed_rekey, DirKeys, IkeKeys};
use crate::proposal::{
    check_answer, esp_suite, ike_suite, select, with_pfs, with_spi, EspSuite, Proposal,
};
use crate::sa::{Action, Child, EspSa, IkeSa, Phase, Queued, Task};
use crate::ts::TrafficSelector;
use crate::wire::{Delete, Header, Notify, Payload};

/// How long a failed rekey waits before it is tried again.
const REKEY_RETRY: Duration = Duration::from_secs(2);
/// How long a replaced IKE SA waits for the peer's Delete.
const REKEYED_IKE_LINGER: Duration = Duration::from_secs(30);

impl Endpoint {
    /// Adds a CHILD_SA to SA `i`: its inbound SA goes to the data plane now, the
    /// outbound too when `out_live` (else it waits, see `activate_successor`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_child(
        &mut self,
        i: usize,
        now: Instant,
        suite: EspSuite,
        inbound: (u32, DirKeys),
        outbound: (u32, DirKeys),
        ts: (&[TrafficSelector], &[TrafficSelector]),
        out_live: bool,
        we_init_ike: bool,
    ) {
        let esp = |spi, keys| EspSa {
            spi,
            alg: suite.alg,
            esn: suite.esn,
            keys,
            local_ts: ts.0.to_vec(),
            remote_ts: ts.1.to_vec(),
        };
        self.actions
            .push(Action::InstallInbound(esp(inbound.0, inbound.1)));
        let out = esp(outbound.0, outbound.1);
        let rekey_at = self.child_rekey_at(now, we_init_ike);
        let sa = &mut self.sas[i];
        if out_live {
            for c in &mut sa.children {
                c.out_live = false;
            }
            self.actions.push(Action::InstallOutbound(out.clone()));
        }
        sa.children.push(Child {
            in_spi: inbound.0,
            out_spi: outbound.0,
            suite,
            local_ts: ts.0.to_vec(),
            remote_ts: ts.1.to_vec(),
            created: now,
            rekey_at,
            out_live,
            out_keys: (!out_live).then_some(out),
            successor: None,
            rekeying: false,
            peer_rekey_min: None,
            closing: false,
            usage: (0, 0),
        });
    }

    /// Switches our outbound traffic to the child that replaced `old` (the peer has
    /// deleted `old`, so it has the new inbound SA installed).
    fn activate_successor(&mut self, i: usize, successor: u32) {
        let sa = &mut self.sas[i];
        let mut act = None;
        for c in &mut sa.children {
            if c.in_spi == successor {
                if let Some(k) = c.out_keys.take() {
                    c.out_live = true;
                    act = Some(k);
                }
            } else {
                c.out_live = false;
            }
        }
        if let Some(k) = act {
            self.actions.push(Action::InstallOutbound(k));
        }
    }

    /// Starts a queued exchange on SA `i` (its window is free).
    pub(crate) fn start(&mut self, i: usize, now: Instant, q: Queued) {
        let (exch, ps, task) = match q {
            Queued::RekeyChild(old) => match self.rekey_child_request(i, old) {
                Some(x) => x,
                None => return,
            },
            Queued::RekeyIke => {
                let suite = self.sas[i].suite.expect("established SA has a suite");
                let spi = random_u64();
                let ni = random(32);
                let dh = Dh::new(suite.dh);
                let offered = with_spi(&self.cfg.ike_proposals, &spi.to_be_bytes());
                let ps = vec![
                    Payload::Sa(offered.clone()),
                    Payload::Nonce(ni.clone()),
                    Payload::Ke {
                        group: suite.dh.id(),
                        data: dh.public().to_vec(),
                    },
                ];
                (
                    exchange::CREATE_CHILD_SA,
                    ps,
                    Task::RekeyIke {
                        spi,
                        ni,
                        dh,
                        offered,
                    },
                )
            }
            Queued::DeleteChildren(spis) => {
                let ps = vec![Payload::Delete(Delete {
                    proto: proto::ESP,
                    spis: spis.clone(),
                })];
                (exchange::INFORMATIONAL, ps, Task::DeleteChildren(spis))
            }
            Queued::DeleteIke => {
                let ps = vec![Payload::Delete(Delete {
                    proto: proto::IKE,
                    spis: Vec::new(),
                })];
                (exchange::INFORMATIONAL, ps, Task::DeleteIke)
            }
            Queued::Dpd => {
                self.stats.dpd_sent += 1;
                (exchange::INFORMATIONAL, Vec::new(), Task::Dpd)
            }
        };
        let cfg = &self.cfg;
        let msg = self.sas[i].request(cfg, now, exch, &ps, task);
        self.out.push(msg);
    }

    /// The CREATE_CHILD_SA request replacing child `old` (None if it is gone or
    /// already being replaced or closed).
    fn rekey_child_request(&mut self, i: usize, old: u32) -> Option<(u8, Vec<Payload>, Task)> {
        let group = self.sas[i].suite.map(|s| s.dh);
        let pfs = self.cfg.pfs;
        let esp = self.cfg.esp_proposals.clone();
        let c = self.sas[i].child(old)?;
        if c.closing || c.successor.is_some() {
            return None;
        }
        c.rekeying = true;
        let in_spi = random_spi();
        let ni = random(32);
        let dh = group.filter(|_| pfs).map(Dh::new);
        let props = match &dh {
            Some(d) => with_pfs(&esp, d.group),
            None => esp,
        };
        let offered = with_spi(&props, &in_spi.to_be_bytes());
        let mut ps = vec![
            Payload::Notify(Notify {
                proto: proto::ESP,
                spi: old.to_be_bytes().to_vec(),
                ty: nt::REKEY_SA,
                data: Vec::new(),
            }),
            Payload::Sa(offered.clone()),
            Payload::Nonce(ni.clone()),
        ];
        if let Some(d) = &dh {
            ps.push(Payload::Ke {
                group: d.group.id(),
                data: d.public().to_vec(),
            });
        }
        ps.push(Payload::TsI(c.local_ts.clone()));
        ps.push(Payload::TsR(c.remote_ts.clone()));
        Some((
            exchange::CREATE_CHILD_SA,
            ps,
            Task::RekeyChild {
                old,
                in_spi,
                ni,
                dh,
                offered,
            },
        ))
    }

    /// A CREATE_CHILD_SA request from the peer.
    pub(crate) fn on_create_request(
        &mut self,
        i: usize,
        now: Instant,
        h: &Header,
        ps: Vec<Payload>,
    ) {
        let is_ike = find_sa(&ps).is_some_and(|p| p.iter().any(|x| x.proto == proto::IKE));
        let answer = if is_ike {
            self.answer_ike_rekey(i, now, &ps)
        } else {
            self.answer_child_rekey(i, now, &ps)
        };
        let out = answer.unwrap_or_else(|n| {
            let data = if n == nt::INVALID_KE_PAYLOAD {
                self.sas[i]
                    .suite
                    .map(|s| s.dh.id().to_be_bytes().to_vec())
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            vec![Payload::Notify(Notify::new(n, &data))]
        });
        let msg = self.sas[i].respond(exchange::CREATE_CHILD_SA, h.msg_id, &out);
        self.out.push(msg);
        if is_ike {
            self.finish_ike_rekey_answer(i, now);
        }
    }

    fn answer_child_rekey(
        &mut self,
        i: usize,
        now: Instant,
        ps: &[Payload],
    ) -> Result<Vec<Payload>, u16> {
        let Some(rekey) = find_notify(ps, nt::REKEY_SA) else {
            return Err(nt::NO_ADDITIONAL_SAS);
        };
        let old_out = match rekey.spi.as_slice() {
            [a, b, c, d] if rekey.proto == proto::ESP => u32::from_be_bytes([*a, *b, *c, *d]),
            _ => return Err(nt::INVALID_SYNTAX),
        };
        let ni = find_nonce(ps).ok_or(nt::INVALID_SYNTAX)?.to_vec();
        let old_in = {
            let c = self.sas[i]
                .child_by_out(old_out)
                .ok_or(nt::CHILD_SA_NOT_FOUND)?;
            if c.closing || c.successor.is_some() {
                return Err(nt::TEMPORARY_FAILURE);
            }
            c.in_spi
        };
        let theirs = find_sa(ps).ok_or(nt::NO_PROPOSAL_CHOSEN)?;
        let chosen =
            select(&self.esp_choices(), theirs, proto::ESP).ok_or(nt::NO_PROPOSAL_CHOSEN)?;
        let suite = esp_suite(&chosen).ok_or(nt::NO_PROPOSAL_CHOSEN)?;
        let nr = random(32);
        let (gir, ke) = match suite.dh {
            Some(g) => {
                let (group, data) = find_ke(ps).ok_or(nt::INVALID_KE_PAYLOAD)?;
                if group != g.id() {
                    return Err(nt::INVALID_KE_PAYLOAD);
                }
                let dh = Dh::new(g);
                let gir = dh.shared(data).map_err(|_| nt::INVALID_SYNTAX)?;
                let ke = Payload::Ke {
                    group,
                    data: dh.public().to_vec(),
                };
                (Some(gir), Some(ke))
            }
            None => (None, None),
        };
        let mut out = self.accept_child(i, now, ps, gir.as_ref(), &ni, &nr, Some(old_in))?;
        let new_in = self.sas[i].children.last().expect("just added").in_spi;
        let old = self.sas[i].child(old_in).expect("checked above");
        old.successor = Some(new_in);
        if old.rekeying {
            old.peer_rekey_min = Some(ni.clone().min(nr.clone()));
        }
        self.stats.child_rekeys += 1;
        out.insert(1, Payload::Nonce(nr));
        if let Some(k) = ke {
            out.insert(2, k);
        }
        Ok(out)
    }

    fn answer_ike_rekey(
        &mut self,
        i: usize,
        now: Instant,
        ps: &[Payload],
    ) -> Result<Vec<Payload>, u16> {
        let sa = &self.sas[i];
        let busy = sa.pending.as_ref().is_some_and(|p| {
            matches!(p.task, Task::RekeyChild { .. } | Task::DeleteChildren(_))
                || (sa.we_initiated && matches!(p.task, Task::RekeyIke { .. }))
        });
        if busy {
            return Err(nt::TEMPORARY_FAILURE);
        }
        let theirs = find_sa(ps).ok_or(nt::NO_PROPOSAL_CHOSEN)?;
        let chosen = select(&with_spi(&self.cfg.ike_proposals, &[]), theirs, proto::IKE)
            .filter(|c| c.spi.len() == 8)
            .ok_or(nt::NO_PROPOSAL_CHOSEN)?;
        let suite = ike_suite(&chosen).ok_or(nt::NO_PROPOSAL_CHOSEN)?;
        let (group, ke) = find_ke(ps).ok_or(nt::INVALID_KE_PAYLOAD)?;
        if group != suite.dh.id() {
            return Err(nt::INVALID_KE_PAYLOAD);
        }
        let ni = find_nonce(ps).ok_or(nt::INVALID_SYNTAX)?;
        let dh = Dh::new(suite.dh);
        let gir = dh.shared(ke).map_err(|_| nt::INVALID_SYNTAX)?;
        let nr = random(32);
        let spi_i = u64::from_be_bytes(chosen.spi[..8].try_into().expect("8 bytes"));
        let spi_r = random_u64();
        self.rekeyed_ike(i, now, false, (spi_i, spi_r), suite, &gir, ni, &nr);
        Ok(vec![
            Payload::Sa(vec![Proposal {
                spi: spi_r.to_be_bytes().to_vec(),
                ..chosen
            }]),
            Payload::Nonce(nr),
            Payload::Ke {
                group,
                data: dh.public().to_vec(),
            },
        ])
    }

    /// After answering an IKE rekey: the old SA waits for the peer's Delete.
    fn finish_ike_rekey_answer(&mut self, i: usize, now: Instant) {
        if self.sas[i].phase == Phase::Rekeyed {
            self.sas[i].expires = Some(now + REKEYED_IKE_LINGER);
        }
    }

    /// Creates the IKE SA that replaces SA `i` and moves its children over.
    #[allow(clippy::too_many_arguments)]
    fn rekeyed_ike(
        &mut self,
        i: usize,
        now: Instant,
        we_initiated: bool,
        spis: (u64, u64),
        suite: crate::proposal::IkeSuite,
        gir: &Secret,
        ni: &[u8],
        nr: &[u8],
    ) {
        let old = &mut self.sas[i];
        let seed = skeyseed_rekey(&old.sk_d(), gir, ni, nr);
        let keys = IkeKeys::derive(suite.encr, &seed, ni, nr, spis.0, spis.1);
        let mut sa = IkeSa::new(spis.0, spis.1, we_initiated, Phase::Established, now);
        sa.set_keys(suite, keys);
        sa.children = std::mem::take(&mut old.children);
        sa.established = Some(now);
        sa.rekey_at =
            Some(now + crate::sa::jittered(self.cfg.lifetimes.ike, self.cfg.lifetimes.jitter));
        sa.last_heard = now;
        old.phase = Phase::Rekeyed;
        old.queue.retain(|q| *q == Queued::DeleteIke);
        self.stats.ike_rekeys += 1;
        log::info!(
            "IKE SA {:#x} rekeyed to {:#x}",
            old.local_spi(),
            sa.local_spi()
        );
        self.sas.push(sa);
    }

    /// The answer to one of our CREATE_CHILD_SA requests.
    pub(crate) fn on_create_response(
        &mut self,
        i: usize,
        now: Instant,
        task: Task,
        ps: Vec<Payload>,
    ) {
        match task {
            Task::RekeyChild {
                old,
                in_spi,
                ni,
                dh,
                offered,
            } => self.child_rekeyed(i, now, old, in_spi, &ni, dh, &offered, &ps),
            Task::RekeyIke {
                spi,
                ni,
                dh,
                offered,
            } => {
                if let Some(e) = error_notify(&ps) {
                    log::info!("IKE rekey refused (notify {e}); retrying later");
                    self.sas[i].rekey_at = Some(now + REKEY_RETRY);
                    return;
                }
                let r = (|| {
                    let chosen = check_answer(&offered, find_sa(&ps)?)?;
                    let suite = ike_suite(&chosen)?;
                    let (group, ke) = find_ke(&ps)?;
                    let nr = find_nonce(&ps)?;
                    if chosen.spi.len() != 8 || group != dh.group.id() || suite.dh != dh.group {
                        return None;
                    }
                    let gir = dh.shared(ke).ok()?;
                    let spi_r = u64::from_be_bytes(chosen.spi[..8].try_into().ok()?);
                    Some((suite, gir, nr.to_vec(), spi_r))
                })();
                match r {
                    Some((suite, gir, nr, spi_r)) => {
                        self.rekeyed_ike(i, now, true, (spi, spi_r), suite, &gir, &ni, &nr);
                        self.sas[i].queue.push_front(Queued::DeleteIke);
                    }
                    None => {
                        log::warn!("IKE rekey: unusable answer; retrying later");
                        self.sas[i].rekey_at = Some(now + REKEY_RETRY);
                    }
                }
            }
            _ => unreachable!("only rekey tasks are CREATE_CHILD_SA requests"),
        }
    }

    /// The answer to our rekey of child `old`. A collision with the peer's rekey of
    /// the same child (both answered before either completed) is settled as RFC 7296
    /// §2.8.1 says: the exchange holding the lowest of the four nonces made the
    /// redundant SA, which its initiator deletes; the other initiator deletes `old`.
    #[allow(clippy::too_many_arguments)]
    fn child_rekeyed(
        &mut self,
        i: usize,
        now: Instant,
        old: u32,
        in_spi: u32,
        ni: &[u8],
        dh: Option<Dh>,
        offered: &[Proposal],
        ps: &[Payload],
    ) {
        let Some(c) = self.sas[i].child(old) else {
            return;
        };
        c.rekeying = false;
        let peer_min = c.peer_rekey_min.take();
        if let Some(e) = error_notify(ps) {
            log::info!("CHILD_SA rekey refused (notify {e}); retrying later");
            if e == nt::CHILD_SA_NOT_FOUND {
                return self.delete_child_locally(i, now, old);
            }
            c.rekey_at = now + REKEY_RETRY;
            return;
        }
        let Some(nr) = find_nonce(ps).map(<[u8]>::to_vec) else {
            c.rekey_at = now + REKEY_RETRY;
            return;
        };
        let gir = match (&dh, find_ke(ps)) {
            (Some(d), Some((g, ke))) if g == d.group.id() => d.shared(ke).ok(),
            _ => None,
        };
        if dh.is_some() && gir.is_none() {
            c.rekey_at = now + REKEY_RETRY;
            return;
        }
        let ours_min = ni.to_vec().min(nr.clone());
        if peer_min.is_some_and(|p| ours_min < p) {
            log::info!("CHILD_SA rekey collision: ours is redundant, deleting it");
            self.sas[i]
                .queue
                .push_front(Queued::DeleteChildren(vec![in_spi]));
            return;
        }
        match self.take_child_answer(i, now, ps, offered, in_spi, ni, &nr, gir.as_ref()) {
            Ok(()) => {
                self.stats.child_rekeys += 1;
                if let Some(c) = self.sas[i].child(old) {
                    c.closing = true;
                    c.out_live = false;
                }
                self.sas[i]
                    .queue
                    .push_front(Queued::DeleteChildren(vec![old]));
            }
            Err(why) => {
                log::warn!("CHILD_SA rekey failed: {why}; retrying later");
                if let Some(c) = self.sas[i].child(old) {
                    c.rekey_at = now + REKEY_RETRY;
                }
            }
        }
    }

    /// Drops child `in_spi` from SA `i` without telling the peer (it no longer has it);
    /// an SA left without children is closed.
    fn delete_child_locally(&mut self, i: usize, now: Instant, in_spi: u32) {
        let sa = &mut self.sas[i];
        if let Some(k) = sa.children.iter().position(|c| c.in_spi == in_spi) {
            let c = sa.children.remove(k);
            self.drop_child(c);
        }
        self.close_if_childless(i, now);
    }

    fn close_if_childless(&mut self, i: usize, _now: Instant) {
        let sa = &mut self.sas[i];
        if sa.phase == Phase::Established
            && sa.children.is_empty()
            && !sa.has_task(&Queued::DeleteIke)
        {
            log::info!(
                "IKE SA {:#x} has no CHILD_SA left; closing it",
                sa.local_spi()
            );
            sa.queue.push_back(Queued::DeleteIke);
        }
    }

    /// Our Delete of children was answered: their inbound SAs go after the grace
    /// period (packets the peer sent before it processed the Delete still arrive).
    pub(crate) fn on_delete_children_done(&mut self, i: usize, now: Instant, spis: &[u32]) {
        for &spi in spis {
            let sa = &mut self.sas[i];
            if let Some(k) = sa.children.iter().position(|c| c.in_spi == spi) {
                let c = sa.children.remove(k);
                if c.out_live {
                    self.actions.push(Action::RemoveOutbound(c.out_spi));
                }
            }
            self.remove_later(now, spi);
        }
        self.close_if_childless(i, now);
    }

    /// An INFORMATIONAL request: Deletes, or an empty liveness check.
    pub(crate) fn on_informational(
        &mut self,
        i: usize,
        now: Instant,
        h: &Header,
        ps: Vec<Payload>,
    ) {
        let mut answer = Vec::new();
        let mut delete_ike = false;
        for p in &ps {
            let Payload::Delete(d) = p else { continue };
            match d.proto {
                proto::IKE => delete_ike = true,
                proto::ESP => {
                    let mine = self.peer_deleted_children(i, now, &d.spis);
                    if !mine.is_empty() {
                        answer.push(Payload::Delete(Delete {
                            proto: proto::ESP,
                            spis: mine,
                        }));
                    }
                }
                _ => {}
            }
        }
        let msg = self.sas[i].respond(exchange::INFORMATIONAL, h.msg_id, &answer);
        self.out.push(msg);
        if delete_ike {
            let restart = self.sas[i].phase != Phase::Rekeyed;
            self.kill_sa(i, now, "deleted by the peer", restart);
        } else {
            self.close_if_childless(i, now);
        }
    }

    /// The peer deleted the children it receives with `out_spis`: our outbound moves to
    /// their successors (or stops), their inbound SAs go after the grace period.
    /// Returns our inbound SPIs of those children.
    fn peer_deleted_children(&mut self, i: usize, now: Instant, out_spis: &[u32]) -> Vec<u32> {
        let mut mine = Vec::new();
        for &spi in out_spis {
            let sa = &mut self.sas[i];
            let Some(k) = sa.children.iter().position(|c| c.out_spi == spi) else {
                continue;
            };
            let c = sa.children.remove(k);
            mine.push(c.in_spi);
            match c.successor {
                Some(s) if c.out_live => self.activate_successor(i, s),
                None if c.out_live => self.actions.push(Action::RemoveOutbound(c.out_spi)),
                _ => {}
            }
            self.remove_later(now, c.in_spi);
        }
        mine
    }
}
