//! Placement of a service's ESP tunnel (the descriptor's `tunnel:` block): one endpoint
//! instance of function `esp` on each of its two hosts, each holding one queue pair of
//! an accelerator-tier device of that host (the tier's capacity unit), chosen by HYPER's
//! best fit among the host's devices that run `esp` with the tunnel's transform. When
//! every such device's queue pairs are held, the endpoint is placed on the device without
//! one (capacity 0): its crypto runs on the CPU engine until the controller's SSM
//! ([`crate::tunnel_ssm`]) grants it a queue pair. The
//! path must cross the tunnel's link in the tunnel's direction. Each endpoint's IKE
//! pre-shared key is derived here from the controller's secret and handed to the
//! endpoint's VNFM apart from its spec ([`endpoint_psk`]).

use super::placer::{best_fit, Placer};
use super::PlanError;
use crate::enforcer::TunnelEnds;
use crate::vnfm::InstanceSpec;
use nfx_model::{Infrastructure, Tier, TunnelSpec};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// Queue pairs one tunnel endpoint holds on its device when it has one.
pub const ENDPOINT_QUEUE_PAIRS: f64 = 1.0;

/// Whether the endpoint instance `spec` holds a queue pair of its device (its capacity):
/// the agent starts it on the device's queue pair, otherwise on the CPU engine.
pub fn holds_queue_pair(spec: &InstanceSpec) -> bool {
    spec.capacity >= ENDPOINT_QUEUE_PAIRS
}

/// Bytes of a tunnel's IKE pre-shared key.
pub const PSK_BYTES: usize = 32;

/// An `esp` endpoint instance's configuration (its spec's `config`): no key material,
/// only what the agent needs to start the endpoint and reach its peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// The service whose tunnel this is.
    pub tunnel: String,
    /// IKE role: `initiator` (the `from` end) or `responder` (the `to` end).
    pub role: String,
    /// The host of the other endpoint.
    pub peer_host: String,
    /// ESP transform.
    pub alg: String,
    /// The tunnel's slot, unique among the deployment's tunnels and the same at both
    /// ends: each endpoint derives its UDP port and TUN addresses from it, so two
    /// tunnels never share either on a host. Records written before slots existed have
    /// none; their endpoints derive one from the tunnel's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u16>,
}

/// How many tunnel slots there are: one UDP port and one /30 of 169.254.128.0–
/// 169.254.254.255 each (the host agent's worker stages use 169.254.1–127.x, and RFC 3927
/// reserves 169.254.255.x).
pub const TUNNEL_SLOTS: u16 = 127 * 64;

impl EndpointConfig {
    /// The slot the endpoint uses: the one the controller assigned, or for older records
    /// one derived from the tunnel's name (the same at both ends).
    pub fn slot_or_derived(&self) -> u16 {
        self.slot
            .unwrap_or_else(|| (fnv1a(self.tunnel.as_bytes()) % u32::from(TUNNEL_SLOTS)) as u16)
    }

    /// The tunnel's `(from, to)` hosts seen from the endpoint on `host`.
    pub fn ends<'a>(&'a self, host: &'a str) -> (&'a str, &'a str) {
        if self.role == "initiator" {
            (host, &self.peer_host)
        } else {
            (&self.peer_host, host)
        }
    }
}

/// FNV-1a, 32 bits: a stable spread of names over slots (not a secret).
pub fn fnv1a(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ u32::from(x)).wrapping_mul(0x0100_0193)
    })
}

/// The slot of the tunnel `tunnel`: the one its other end already holds (in the recorded
/// instances or this plan's), else the first free one from its name's hash on.
fn slot_for(placer: &Placer<'_>, tunnel: &str) -> Result<u16, PlanError> {
    let ends = placer
        .taken
        .values()
        .map(|r| &r.spec)
        .chain(placer.placed.iter().map(|(r, _)| &r.spec))
        .filter(|s| s.function == "esp")
        .filter_map(|s| serde_json::from_value::<EndpointConfig>(s.config.clone()).ok());
    let mut used = std::collections::BTreeSet::new();
    for c in ends {
        if c.tunnel == tunnel {
            return Ok(c.slot_or_derived());
        }
        used.insert(c.slot_or_derived());
    }
    let start = fnv1a(tunnel.as_bytes()) % u32::from(TUNNEL_SLOTS);
    (0..u32::from(TUNNEL_SLOTS))
        .map(|k| ((start + k) % u32::from(TUNNEL_SLOTS)) as u16)
        .find(|s| !used.contains(s))
        .ok_or_else(|| {
            PlanError::Conflict(format!(
                "tunnel {tunnel}: all {TUNNEL_SLOTS} tunnel slots (UDP ports) are in use"
            ))
        })
}

/// HKDF-SHA-256 (RFC 5869) of `ikm` with `salt` and `info`, filling `out` (at most
/// 255 blocks), through the TLS stack's ring provider.
fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[&[u8]], out: &mut [u8]) -> bool {
    let rustls::SupportedCipherSuite::Tls13(suite) =
        rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
    else {
        return false;
    };
    suite
        .hkdf_provider
        .extract_from_secret(Some(salt), ikm)
        .expand_slice(info, out)
        .is_ok()
}

/// The IKE pre-shared key of the tunnel endpoint `spec` (an `esp` instance on `host`):
/// HKDF-SHA-256 of the controller's `secret` over the service and the tunnel's two
/// hosts in direction order, so both endpoints get the same key, every tunnel its own,
/// and a restarted controller the same again without having stored it. `None` for an
/// instance that is no tunnel endpoint.
pub fn endpoint_psk(secret: &[u8], spec: &InstanceSpec, host: &str) -> Option<Zeroizing<Vec<u8>>> {
    if spec.function != "esp" {
        return None;
    }
    let c: EndpointConfig = serde_json::from_value(spec.config.clone()).ok()?;
    let (from, to) = c.ends(host);
    let mut psk = Zeroizing::new(vec![0u8; PSK_BYTES]);
    let info: [&[u8]; 5] = [
        c.tunnel.as_bytes(),
        b"\0",
        from.as_bytes(),
        b"\0",
        to.as_bytes(),
    ];
    hkdf_sha256(b"nfx tunnel ike psk v1", secret, &info, &mut psk).then_some(psk)
}

/// Checks that `route` (the hosts the service crosses, in order) goes from `t.from`
/// straight to `t.to`.
pub(super) fn check_route(t: &TunnelSpec, route: &[String]) -> Result<(), PlanError> {
    let crosses = route.windows(2).any(|w| w[0] == t.from && w[1] == t.to);
    if crosses {
        return Ok(());
    }
    Err(PlanError::Invalid(format!(
        "tunnel: the service's path ({}) does not go from {} straight to {}",
        route.join(" → "),
        t.from,
        t.to
    )))
}

/// Places both endpoints on `placer`'s draft (rows and reasons land in `placer.placed`);
/// `throughput` is the service's, reserved on each device.
pub(super) fn place(
    placer: &mut Placer<'_>,
    infra: &Infrastructure,
    t: &TunnelSpec,
    throughput: f64,
) -> Result<TunnelEnds, PlanError> {
    let from_instance = place_end(placer, infra, t, &t.from, &t.to, "initiator", throughput)?;
    let to_instance = place_end(placer, infra, t, &t.to, &t.from, "responder", throughput)?;
    Ok(TunnelEnds {
        from: t.from.clone(),
        to: t.to.clone(),
        from_instance,
        to_instance,
    })
}

/// Places the endpoint of `host` (IKE `role`, peer on `peer`); returns its instance id.
fn place_end(
    placer: &mut Placer<'_>,
    infra: &Infrastructure,
    t: &TunnelSpec,
    host: &str,
    peer: &str,
    role: &str,
    throughput: f64,
) -> Result<String, PlanError> {
    let runs_alg = |id: &str| {
        infra
            .device(id)
            .is_some_and(|d| d.algorithms.contains(&t.alg))
    };
    let cands: Vec<_> = placer
        .draft
        .devices_on(host)
        .filter(|(_, d)| {
            d.tier == Tier::Accelerator && d.functions.iter().any(|f| f == "esp") && runs_alg(&d.id)
        })
        .collect();
    if cands.is_empty() {
        return Err(PlanError::Invalid(format!(
            "tunnel end on host {host}: no accelerator-tier device runs esp with {}",
            t.alg
        )));
    }
    let with_qp = best_fit(cands.iter().copied(), throughput, ENDPOINT_QUEUE_PAIRS);
    let qps = if with_qp.is_some() {
        ENDPOINT_QUEUE_PAIRS
    } else {
        0.0
    };
    let Some((dev, d)) = with_qp.or_else(|| best_fit(cands.iter().copied(), throughput, 0.0))
    else {
        let state: Vec<String> = cands
            .iter()
            .map(|(_, d)| {
                format!(
                    "{}: {} of {} queue pairs free, {:.3} of {:.3} Gbit/s free",
                    d.id,
                    d.capacity.free(),
                    d.capacity.total,
                    d.throughput_gbps.free(),
                    d.throughput_gbps.total
                )
            })
            .collect();
        return Err(PlanError::Conflict(format!(
            "tunnel end on host {host}: no free queue pair with {throughput} Gbit/s ({})",
            state.join("; ")
        )));
    };
    let (dev_id, tier, lat) = (d.id.clone(), d.tier, d.latency_us);
    let slot = slot_for(placer, placer.service)?;
    let base = format!("{}-esp-{host}", placer.service);
    let id = std::iter::once(base.clone())
        .chain((2..).map(|n| format!("{base}-{n}")))
        .find(|id| placer.id_is_free(id))
        .unwrap_or(base);
    if !placer.draft.deploy(dev, "esp", throughput, qps) {
        return Err(PlanError::Conflict(format!(
            "tunnel end on host {host}: device {dev_id} refused the reservation"
        )));
    }
    let spec = InstanceSpec {
        id: id.clone(),
        function: "esp".into(),
        device: dev_id.clone(),
        config: serde_json::to_value(EndpointConfig {
            tunnel: placer.service.to_string(),
            role: role.into(),
            peer_host: peer.into(),
            alg: t.alg.clone(),
            slot: Some(slot),
        })
        .unwrap_or_default(),
        throughput_gbps: throughput,
        capacity: qps,
    };
    let reason = if qps > 0.0 {
        format!("tunnel {role} end: best-fit accelerator device {dev_id}, one queue pair")
    } else {
        format!(
            "tunnel {role} end: every queue pair of {dev_id} is held: placed on its CPU \
             engine until the SSM grants it a queue pair"
        )
    };
    placer.record(spec, host, tier, lat, reason);
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        ::hex::decode(s).expect("a test vector in hex")
    }

    #[test]
    fn hkdf_matches_rfc_5869_test_case_1() {
        let mut okm = [0u8; 42];
        assert!(hkdf_sha256(
            &hex("000102030405060708090a0b0c"),
            &[0x0b; 22],
            &[&hex("f0f1f2f3f4"), &hex("f5f6f7f8f9")],
            &mut okm
        ));
        assert_eq!(
            okm.to_vec(),
            hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
        );
    }

    fn end(service: &str, role: &str, peer: &str) -> InstanceSpec {
        InstanceSpec {
            id: format!("{service}-esp"),
            function: "esp".into(),
            device: "acc".into(),
            config: serde_json::to_value(EndpointConfig {
                tunnel: service.into(),
                role: role.into(),
                peer_host: peer.into(),
                alg: "aes-128-gcm".into(),
                slot: None,
            })
            .unwrap(),
            throughput_gbps: 1.0,
            capacity: 1.0,
        }
    }

    #[test]
    fn both_ends_share_a_key_and_every_tunnel_has_its_own() {
        let secret = [7u8; 32];
        let a = endpoint_psk(&secret, &end("vpn", "initiator", "h2"), "h1").unwrap();
        let b = endpoint_psk(&secret, &end("vpn", "responder", "h1"), "h2").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), PSK_BYTES);
        let other_service = endpoint_psk(&secret, &end("vpn2", "initiator", "h2"), "h1").unwrap();
        let reversed = endpoint_psk(&secret, &end("vpn", "initiator", "h1"), "h2").unwrap();
        let other_secret = endpoint_psk(&[8u8; 32], &end("vpn", "initiator", "h2"), "h1").unwrap();
        assert!(a != other_service && a != reversed && a != other_secret);
        let mut fw = end("vpn", "initiator", "h2");
        fw.function = "firewall".into();
        assert!(endpoint_psk(&secret, &fw, "h1").is_none());
    }
}
