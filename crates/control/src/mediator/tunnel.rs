//! Placement of a service's ESP tunnel (the descriptor's `tunnel:` block): one endpoint
//! instance of function `esp` on each of its two hosts, each holding one queue pair of
//! an accelerator-tier device of that host (the tier's capacity unit), chosen by HYPER's
//! best fit among the host's devices that run `esp` with the tunnel's transform. The
//! path must cross the tunnel's link in the tunnel's direction.

use super::placer::{best_fit, Placer};
use super::PlanError;
use crate::enforcer::TunnelEnds;
use crate::vnfm::InstanceSpec;
use nfx_model::{Infrastructure, Tier, TunnelSpec};

/// Queue pairs one tunnel endpoint holds on its device.
pub const ENDPOINT_QUEUE_PAIRS: f64 = 1.0;

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
    let Some((dev, d)) = best_fit(cands.iter().copied(), throughput, ENDPOINT_QUEUE_PAIRS) else {
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
    let base = format!("{}-esp-{host}", placer.service);
    let id = std::iter::once(base.clone())
        .chain((2..).map(|n| format!("{base}-{n}")))
        .find(|id| placer.id_is_free(id))
        .unwrap_or(base);
    if !placer
        .draft
        .deploy(dev, "esp", throughput, ENDPOINT_QUEUE_PAIRS)
    {
        return Err(PlanError::Conflict(format!(
            "tunnel end on host {host}: device {dev_id} refused the reservation"
        )));
    }
    let spec = InstanceSpec {
        id: id.clone(),
        function: "esp".into(),
        device: dev_id.clone(),
        config: serde_json::json!({
            "tunnel": placer.service,
            "role": role,
            "peer_host": peer,
            "alg": t.alg,
        }),
        throughput_gbps: throughput,
        capacity: ENDPOINT_QUEUE_PAIRS,
    };
    let reason = format!("tunnel {role} end: best-fit accelerator device {dev_id}, one queue pair");
    placer.record(spec, host, tier, lat, reason);
    Ok(id)
}
