//! Tenant B's ESP tunnel in `nfx demo`: its two endpoints on the hosts' lookaside devices
//! (modelled hardware: `nfx accel serve` on a reserved core), keyed by IKEv2, and the
//! controller's SSM (`nfx up --ssm`) moving them between a queue pair of their device and
//! their CPU engine by their CPU load — read back from the controller's instances and its
//! journal of `grant`/`revoke` operations, and checked.

use super::controlled_bed::ControlledBed;
use super::demo::{check, Summary};
use super::demo_view::{self, InstanceView, TunnelState};
use nfx_control::ops::{OpKind, Operation};
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

/// The SSM the demo's controller runs (`nfx up --ssm ...`): a decision round every
/// 250 ms; two rounds in a row above 5 % CPU make an endpoint on its CPU engine want a
/// queue pair, two below 1 % make a holder give its queue pair back; an endpoint is left
/// alone for 1 s after a change. An idle endpoint (≈ 0 %) gives its queue pair back
/// within about a second of its deploy; one carrying tenant B's iperf3 on its CPU engine
/// (tens of %) is granted one within about a second of the load.
pub const SSM_ARGS: &[&str] = &[
    "--ssm",
    "--ssm-period-ms",
    "250",
    "--ssm-upper",
    "5",
    "--ssm-lower",
    "1",
    "--ssm-samples",
    "2",
    "--ssm-cooldown-ms",
    "1000",
];

/// How the output names what moved the endpoints.
pub const DRIVER: &str = "the controller's SSM policy (nfx up --ssm: period 250 ms, upper 5 % \
                          CPU, lower 1 %, 2 samples, cooldown 1 s), driven by the endpoints' \
                          measured CPU load";

/// How long the demo waits for the tunnel's IKE and the SSM's revoke of its idle
/// endpoints before the traffic starts.
const SETTLE: Duration = Duration::from_secs(10);

/// One tunnel endpoint in the summary.
#[derive(Debug, Clone, Serialize)]
pub struct TunnelEnd {
    /// Instance id (`<service>-esp-<host>`).
    pub instance: String,
    /// Its host.
    pub host: String,
    /// Its lookaside device.
    pub device: String,
    /// Tier of the device (`accelerator`).
    pub tier: String,
    /// Its live state: engine, queue pair, IKE, ESP counters.
    #[serde(flatten)]
    pub state: TunnelState,
}

/// A grant or revoke of a queue pair, as the controller journaled it.
#[derive(Debug, Clone, Serialize)]
pub struct Reassignment {
    /// Operation id.
    pub op: String,
    /// `grant` (CPU engine → a queue pair of the device) or `revoke` (the reverse).
    pub kind: String,
    /// The endpoint moved.
    pub instance: String,
    /// Final state of the operation (`COMPLETED`: switched live).
    pub state: String,
    /// The SSM's reason, with what the endpoint reported after the switch.
    pub reason: String,
    /// When it was decided, ms since the epoch.
    pub at_ms: i64,
    /// Whether it happened while tenant B's iperf3 ran.
    pub under_traffic: bool,
}

impl Reassignment {
    fn of(o: &Operation, window: Option<(i64, i64)>) -> Self {
        Reassignment {
            op: o.id.clone(),
            kind: kind_name(o.kind).into(),
            instance: o.target.clone(),
            state: o.state.as_str().into(),
            reason: o
                .reason
                .clone()
                .or_else(|| o.error.clone())
                .unwrap_or_default(),
            at_ms: o.created_ms,
            under_traffic: window.is_some_and(|(a, b)| (a..=b).contains(&o.created_ms)),
        }
    }

    fn line(&self) -> String {
        format!(
            "SSM {} {} {} ({}): {}",
            self.op, self.kind, self.instance, self.state, self.reason
        )
    }
}

fn kind_name(k: OpKind) -> &'static str {
    if k == OpKind::Grant {
        "grant"
    } else {
        "revoke"
    }
}

/// Milliseconds since the epoch: the clock of the controller's operation records.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The tunnel endpoints of `service` in `list`, with their live state.
pub fn ends(list: &[InstanceView], service: &str) -> Vec<TunnelEnd> {
    list.iter()
        .filter(|i| i.service() == service)
        .filter_map(|i| {
            Some(TunnelEnd {
                instance: i.spec.id.clone(),
                host: i.host.clone(),
                device: i.spec.device.clone(),
                tier: i.tier.clone(),
                state: i.tunnel()?.clone(),
            })
        })
        .collect()
}

/// Inner bytes the endpoints of `service` sent into the tunnel as ESP (both directions).
pub fn sent_bytes(list: &[InstanceView], service: &str) -> u64 {
    ends(list, service).iter().map(|e| e.state.tx_bytes).sum()
}

/// The SSM's grants and revokes the controller journaled, oldest first, each marked
/// whether it fell in `window` (ms since the epoch).
pub fn reassignments(
    bed: &ControlledBed,
    window: Option<(i64, i64)>,
) -> anyhow::Result<Vec<Reassignment>> {
    let mut ops = bed.api.operations()?;
    ops.retain(|o| matches!(o.kind, OpKind::Grant | OpKind::Revoke));
    ops.sort_by_key(|o| o.created_ms);
    Ok(ops.iter().map(|o| Reassignment::of(o, window)).collect())
}

/// Prints each reassignment once, as it appears in the controller's journal.
#[derive(Default)]
pub struct Journal {
    shown: BTreeSet<String>,
}

impl Journal {
    /// Prints the reassignments not printed yet.
    pub fn print_new(&mut self, bed: &ControlledBed) {
        match reassignments(bed, None) {
            Ok(list) => {
                for r in list {
                    if self.shown.insert(r.op.clone()) {
                        crate::say!("  {}", r.line());
                    }
                }
            }
            Err(e) => crate::say!("  operations unavailable: {e:#}"),
        }
    }
}

/// Waits, up to [`SETTLE`], until every endpoint of `service`'s tunnel has IKE
/// established and the SSM has taken the idle endpoints' queue pairs back (engine `cpu`,
/// so that the load to come moves them back); prints the endpoints and the SSM's
/// decisions. Not settling in time is not an error: the checks after the traffic say
/// what did not happen.
pub fn settle(bed: &ControlledBed, service: &str, journal: &mut Journal) -> anyhow::Result<()> {
    let t = Instant::now();
    let settled = |e: &[TunnelEnd]| {
        !e.is_empty()
            && e.iter()
                .all(|e| e.state.ike == "established" && e.state.engine == "cpu")
    };
    let mut list = demo_view::instances(&bed.api)?;
    while !settled(&ends(&list, service)) && t.elapsed() < SETTLE {
        std::thread::sleep(Duration::from_millis(100));
        list = demo_view::instances(&bed.api)?;
    }
    let e = ends(&list, service);
    crate::say!(
        "{service}'s tunnel: {} endpoint(s) on lookaside devices (modelled hardware: `nfx accel \
         serve` on a reserved core), keys by IKEv2; {} after {:.1} s:",
        e.len(),
        if settled(&e) {
            "idle, the SSM gave their queue pairs back"
        } else {
            "not settled (IKE up and the idle endpoints on their CPU engine)"
        },
        t.elapsed().as_secs_f64()
    );
    for i in list.iter().filter(|i| i.service() == service) {
        if let Some(engine) = i.engine_label() {
            let ike = i.tunnel().map(|t| t.ike.as_str()).unwrap_or("-");
            crate::say!(
                "   {:<16} {:<3} {:<8} {:<11} engine {engine:<14} ike {ike}",
                i.spec.id,
                i.host,
                i.spec.device,
                i.tier
            );
        }
    }
    journal.print_new(bed);
    Ok(())
}

/// What the traffic phase saw of the tunnel.
pub struct TunnelObserved {
    /// The endpoints at the end of the traffic.
    pub ends: Vec<TunnelEnd>,
    /// The SSM's decisions, marked whether they fell while iperf3 ran.
    pub moves: Vec<Reassignment>,
    /// `(ms since the epoch, inner bytes sent as ESP)` at each poll of the traffic phase.
    pub samples: Vec<(i64, u64)>,
}

/// Checks tenant B's tunnel after the traffic: it carried the iperf3 stream as ESP (both
/// endpoints sent and delivered, the egress end delivered at least the `iperf_bytes` that
/// iperf3 received, no authentication failure), the SSM moved at least one endpoint while
/// iperf3 ran, and ESP kept flowing after the first such move. `iperf_bytes` is none when
/// iperf3 failed.
pub fn check_tunnel(sum: &mut Summary, o: TunnelObserved, iperf_bytes: Option<u64>) {
    let (tx_p, tx_b) = o.ends.iter().fold((0, 0), |(p, b), e| {
        (p + e.state.tx_packets, b + e.state.tx_bytes)
    });
    let rx = o.ends.iter().all(|e| e.state.rx_packets > 0);
    let delivered = o.ends.iter().map(|e| e.state.rx_bytes).max().unwrap_or(0);
    let received = iperf_bytes.unwrap_or(0);
    let auth: u64 = o
        .ends
        .iter()
        .map(|e| e.state.drops.get("auth_failed").copied().unwrap_or(0))
        .sum();
    let on: Vec<String> = o
        .ends
        .iter()
        .map(|e| format!("{} on {} ({})", e.instance, e.device, e.tier))
        .collect();
    sum.b_tunnel_packets = tx_p;
    sum.b_tunnel_bytes = tx_b;
    check(
        sum,
        o.ends.len() == 2 && rx && tx_b > 0 && auth == 0 && delivered >= received,
        format!(
            "tenant B's tunnel: its endpoints ({}) sent {} ESP datagrams carrying {tx_b} \
             inner bytes; its egress end delivered {delivered} bytes (iperf3 received \
             {received}); {auth} authentication failures",
            on.join(", "),
            tx_p
        ),
    );
    let under: Vec<&Reassignment> = o.moves.iter().filter(|r| r.under_traffic).collect();
    let first = under
        .iter()
        .find(|r| r.state == "COMPLETED")
        .map(|r| r.at_ms);
    let after = first.and_then(|t| {
        let base = o.samples.iter().find(|(at, _)| *at >= t)?.1;
        Some(o.samples.last()?.1.saturating_sub(base))
    });
    sum.b_tunnel_bytes_after_switch = after.unwrap_or(0);
    let listed: Vec<String> = under
        .iter()
        .map(|r| format!("{} {} {}", r.op, r.kind, r.instance))
        .collect();
    check(
        sum,
        first.is_some() && iperf_bytes.is_some() && after.unwrap_or(0) > 0,
        format!(
            "accelerator reassignment under traffic, by {DRIVER}: {} while iperf3 ran ({}); \
             iperf3 ran to its end without a reset, and the tunnel carried {} bytes after the \
             first switch",
            under.len(),
            listed.join(", "),
            after.unwrap_or(0)
        ),
    );
    sum.reassignments = o.moves;
    sum.reassigned_by = DRIVER.into();
    sum.b_tunnel = o.ends;
}
