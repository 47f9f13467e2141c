//! A tunnel endpoint's [`Counters`] as Prometheus text, for whichever HTTP endpoint serves
//! the tunnel's `/metrics` (its element manager): bytes and packets each way, drops by
//! cause, the engine in use, live engine switches and lookaside failovers. Every series
//! carries `tunnel` (the endpoint's name).

use crate::stats::{Counters, DropCause};
use nfx_accel::EngineKind;
use nfx_metrics::{labels, Families};
use std::sync::atomic::Ordering::Relaxed;

/// Renders tunnel `name`'s counters.
pub fn render(name: &str, c: &Counters) -> String {
    families(name, Some(c)).encode()
}

/// Every sample name [`render`] can export, from its registry.
pub fn sample_names() -> Vec<String> {
    families("", None).sample_names().to_vec()
}

fn families(name: &str, c: Option<&Counters>) -> Families {
    let mut f = Families::default();
    let t = labels(&[("tunnel", name)]);
    let flows = [
        (
            "nfx_tunnel_tx_packets",
            "Packets encapsulated and sent on the underlay",
        ),
        ("nfx_tunnel_tx_bytes", "Inner bytes of the packets sent"),
        (
            "nfx_tunnel_rx_packets",
            "Packets decapsulated and written to the TUN",
        ),
        ("nfx_tunnel_rx_bytes", "Inner bytes of the packets received"),
        (
            "nfx_tunnel_engine_switches",
            "Live engine switches (the SSM moving the tunnel on or off the accelerator)",
        ),
        (
            "nfx_tunnel_failovers",
            "Lookaside device failures survived by switching to the fallback engine",
        ),
    ]
    .map(|(n, h)| f.count(n, h));
    let drops = f.count("nfx_tunnel_drops", "Packets dropped, by cause");
    let engine = f.int_gauge(
        "nfx_tunnel_engine",
        "1 for the crypto engine the tunnel uses now, 0 for the others",
    );
    let Some(c) = c else { return f };
    let values = [
        &c.tx_packets,
        &c.tx_bytes,
        &c.rx_packets,
        &c.rx_bytes,
        &c.engine_switches,
        &c.failovers,
    ];
    for (fam, v) in flows.iter().zip(values) {
        fam.get_or_create(&t).inc_by(v.load(Relaxed));
    }
    for d in DropCause::ALL {
        drops
            .get_or_create(&labels(&[("tunnel", name), ("cause", d.as_str())]))
            .inc_by(c.drops(d));
    }
    let now = c.engine();
    for k in EngineKind::ALL {
        engine
            .get_or_create(&labels(&[("tunnel", name), ("engine", k.as_str())]))
            .set(i64::from(k == now));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_drops_and_engine_are_rendered() {
        let c = Counters::default();
        c.tx_packets.store(10, Relaxed);
        c.rx_bytes.store(1500, Relaxed);
        c.engine_switches.store(2, Relaxed);
        c.count(DropCause::Replay);
        c.count(DropCause::Replay);
        c.set_engine(EngineKind::Lookaside);
        let t = render("t1", &c);
        for line in [
            r#"nfx_tunnel_tx_packets_total{tunnel="t1"} 10"#,
            r#"nfx_tunnel_rx_bytes_total{tunnel="t1"} 1500"#,
            r#"nfx_tunnel_engine_switches_total{tunnel="t1"} 2"#,
            r#"nfx_tunnel_drops_total{tunnel="t1",cause="replay"} 2"#,
            r#"nfx_tunnel_drops_total{tunnel="t1",cause="auth_failed"} 0"#,
            r#"nfx_tunnel_engine{tunnel="t1",engine="lookaside"} 1"#,
            r#"nfx_tunnel_engine{tunnel="t1",engine="soft"} 0"#,
        ] {
            assert!(t.contains(line), "missing {line}:\n{t}");
        }
        let names = sample_names();
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let n = l.split(['{', ' ']).next().unwrap();
            assert!(names.iter().any(|x| x == n), "{n} not in {names:?}");
        }
    }
}
