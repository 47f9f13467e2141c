//! nfx-metrics: the one home of Prometheus metrics in nfx. Every component builds its
//! families with [`Families`] (prometheus-client underneath), names them
//! `nfx_<component>_<what>_<unit>` (counters get `_total` when encoded), puts the labels
//! that say whose series it is first (`instance`, `host`, `worker`), and encodes them as
//! OpenMetrics text with [`Families::encode`]. [`text`] parses, relabels and merges such
//! text (an agent re-exporting its workers, the controller federating its agents);
//! [`http`] (feature `http`) serves `/metrics` for processes with no HTTP server of their
//! own.

#[cfg(feature = "http")]
pub mod http;
pub mod text;

pub use prometheus_client;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry};
use std::sync::atomic::AtomicU64;

/// The content type of the OpenMetrics text that [`Families::encode`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The labels of one series, in the order they are written.
pub type Labels = Vec<(&'static str, String)>;
/// A family of integer counters.
pub type Count = Family<Labels, Counter>;
/// A family of float counters (seconds, joules).
pub type FloatCount = Family<Labels, Counter<f64, AtomicU64>>;
/// A family of integer gauges (counts of things that come and go).
pub type IntGauge = Family<Labels, Gauge>;
/// A family of float gauges.
pub type FloatGauge = Family<Labels, Gauge<f64, AtomicU64>>;
/// A family of histograms with fixed buckets.
pub type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// Builds [`Labels`] from borrowed pairs.
pub fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// The metric families of one scrape, registered under their names.
#[derive(Default)]
pub struct Families {
    reg: Registry,
    names: Vec<String>,
}

impl Families {
    /// A new integer counter family `name` (encoded as `name_total`).
    pub fn count(&mut self, name: &str, help: &str) -> Count {
        self.new_family(name, help)
    }

    /// A new float counter family `name` (encoded as `name_total`).
    pub fn float_count(&mut self, name: &str, help: &str) -> FloatCount {
        self.new_family(name, help)
    }

    /// A new float gauge family `name`.
    pub fn gauge(&mut self, name: &str, help: &str) -> FloatGauge {
        self.new_family(name, help)
    }

    /// A new integer gauge family `name`.
    pub fn int_gauge(&mut self, name: &str, help: &str) -> IntGauge {
        self.new_family(name, help)
    }

    fn new_family<M: Metric + Default + Clone>(&mut self, name: &str, help: &str) -> M {
        let f = M::default();
        self.register(name, help, f.clone());
        f
    }

    /// Registers `family` under `name` (also one that lives longer than a scrape, such
    /// as a server's request counters).
    pub fn register<M: Metric>(&mut self, name: &str, help: &str, family: M) {
        let suffixes: &[&str] = match family.metric_type() {
            MetricType::Counter => &["_total"],
            MetricType::Histogram => &["_bucket", "_sum", "_count"],
            MetricType::Info => &["_info"],
            _ => &[""],
        };
        self.names
            .extend(suffixes.iter().map(|s| format!("{name}{s}")));
        self.reg.register(name, help, family);
    }

    /// Every sample name the families can carry, series or not (a counter `x` gives
    /// `x_total`; a histogram `x` gives `x_bucket`, `x_sum` and `x_count`): what a
    /// dashboard's queries may name.
    pub fn sample_names(&self) -> &[String] {
        &self.names
    }

    /// The families as OpenMetrics text, ending in `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.reg);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_encode_and_name_their_samples() {
        let mut f = Families::default();
        f.count("nfx_x_packets", "Packets")
            .get_or_create(&labels(&[("instance", "a")]))
            .inc_by(3);
        f.gauge("nfx_x_ratio", "Ratio")
            .get_or_create(&labels(&[("instance", "a")]))
            .set(0.5);
        let h: Histograms = Family::new_with_constructor(|| Histogram::new([0.1, 1.0]));
        f.register("nfx_x_seconds", "Latency", h.clone());
        h.get_or_create(&labels(&[("route", "/")])).observe(0.2);
        let t = f.encode();
        assert!(t.contains(r#"nfx_x_packets_total{instance="a"} 3"#), "{t}");
        assert!(t.contains(r#"nfx_x_ratio{instance="a"} 0.5"#), "{t}");
        assert!(
            t.contains(r#"nfx_x_seconds_bucket{le="1.0",route="/"} 1"#)
                || t.contains(r#"nfx_x_seconds_bucket{route="/",le="1.0"} 1"#),
            "{t}"
        );
        assert!(t.trim_end().ends_with("# EOF"));
        let names = f.sample_names();
        for n in [
            "nfx_x_packets_total",
            "nfx_x_ratio",
            "nfx_x_seconds_bucket",
            "nfx_x_seconds_sum",
            "nfx_x_seconds_count",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
        }
    }

    #[test]
    fn empty_families_still_name_their_samples() {
        let mut f = Families::default();
        f.count("nfx_y_drops", "Drops");
        assert_eq!(f.sample_names(), ["nfx_y_drops_total"]);
        assert!(!f.encode().contains("nfx_y_drops"));
    }
}
