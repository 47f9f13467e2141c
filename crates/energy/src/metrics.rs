//! Prometheus names for the meter's figures, rendered in the text exposition format
//! (OpenMetrics text, which Prometheus scrapes): `nfx_energy_joules_total{host,vnf,source}`
//! (counter) and `nfx_power_watts{host,vnf,source}` (gauge). The host's own figures carry
//! `vnf="_host"`; workers are not exported (their VNF is). A `/metrics` route serves the
//! string this returns.

use crate::meter::{GroupKind, Reading};
use nfx_metrics::{labels, Families};

/// The `vnf` label of a host's own figures.
pub const HOST_LABEL: &str = "_host";

/// Renders the latest reading of each host as Prometheus text.
pub fn render(readings: &[Reading]) -> String {
    families(readings).encode()
}

/// Every sample name [`render`] can export, from its registry.
pub fn sample_names() -> Vec<String> {
    families(&[]).sample_names().to_vec()
}

fn families(readings: &[Reading]) -> Families {
    let mut f = Families::default();
    let joules = f.float_count(
        "nfx_energy_joules",
        "Energy used since the meter started, joules (source: rapl = measured, model = power model driven by CPU time)",
    );
    let watts = f.gauge(
        "nfx_power_watts",
        "Average power over the last meter interval, watts (source: rapl = measured, model = power model driven by CPU time)",
    );
    for r in readings {
        let rows = std::iter::once((HOST_LABEL, &r.energy)).chain(
            r.groups
                .iter()
                .filter(|g| g.kind == GroupKind::Vnf)
                .map(|g| (g.name.as_str(), &g.energy)),
        );
        for (vnf, fig) in rows {
            let l = labels(&[
                ("host", &r.host),
                ("vnf", vnf),
                ("source", fig.source.as_str()),
            ]);
            joules.get_or_create(&l).inc_by(fig.joules.max(0.0));
            watts.get_or_create(&l).set(fig.watts);
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meter::{Figure, GroupReading};
    use crate::Source;

    fn fig(watts: f64, joules: f64) -> Figure {
        Figure {
            watts,
            joules,
            source: Source::Model,
        }
    }

    #[test]
    fn host_and_vnfs_are_exported_with_their_source() {
        let g = |name: &str, kind| GroupReading {
            name: name.into(),
            kind,
            cpu_cores: 0.5,
            dynamic_w: 7.5,
            idle_w: 3.0,
            energy: fig(10.5, 21.0),
        };
        let r = Reading {
            host: "edge".into(),
            t_s: 2.0,
            interval_s: 1.0,
            busy_cores: 0.5,
            mhz: None,
            energy: fig(13.5, 27.0),
            idle_w: 6.0,
            groups: vec![
                g("nat-1", GroupKind::Vnf),
                g("nat-1/worker-0", GroupKind::Worker),
            ],
        };
        let text = render(&[r]);
        assert!(text.contains("# TYPE nfx_energy_joules counter"), "{text}");
        assert!(
            text.contains(
                r#"nfx_energy_joules_total{host="edge",vnf="nat-1",source="model"} 21.0"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"nfx_power_watts{host="edge",vnf="_host",source="model"} 13.5"#),
            "{text}"
        );
        assert!(!text.contains("worker-0"), "{text}");
        assert!(text.trim_end().ends_with("# EOF"));
    }
}
