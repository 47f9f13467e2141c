//! deploy/grafana/nfx.json loads in Grafana: the fields Grafana needs are there (schema
//! version, uid, a Prometheus datasource variable every panel and query uses, panels with
//! grid positions and `targets[].expr`), and every metric a query names is one nfx
//! exports — the names come from the components' registries, not from a list here.

use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::Path;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Dashboard {
    uid: String,
    title: String,
    schema_version: u32,
    templating: Templating,
    panels: Vec<Panel>,
}

#[derive(Deserialize)]
struct Templating {
    list: Vec<Variable>,
}

#[derive(Deserialize)]
struct Variable {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    definition: Option<String>,
    #[serde(default)]
    datasource: Option<Datasource>,
}

#[derive(Deserialize, PartialEq, Debug)]
struct Datasource {
    #[serde(rename = "type")]
    kind: String,
    uid: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Panel {
    id: u32,
    #[serde(rename = "type")]
    kind: String,
    title: String,
    grid_pos: GridPos,
    #[serde(default)]
    datasource: Option<Datasource>,
    #[serde(default)]
    targets: Vec<Target>,
}

#[derive(Deserialize)]
struct GridPos {
    h: u32,
    w: u32,
    x: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Target {
    ref_id: String,
    expr: String,
    datasource: Datasource,
}

/// Every sample name an nfx component exports.
fn exported() -> BTreeSet<String> {
    [
        nfx_dataplane::metrics::sample_names(),
        nfx_energy::metrics::sample_names(),
        nfx_accel::lookaside::metrics::sample_names(),
        nfx_tunnel::metrics::sample_names(),
        nfx_control::api::metrics::ApiMetrics::sample_names(),
        nfx_control::hostagent::metrics::sample_names(),
        nfx_ssm::metrics::sample_names(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The `nfx_*` identifiers of a PromQL expression.
fn metric_names(expr: &str) -> Vec<&str> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("nfx_"))
        .collect()
}

#[test]
fn the_dashboard_loads_and_queries_only_exported_metrics() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/nfx.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let d: Dashboard = serde_json::from_str(&text).unwrap();
    assert!(!d.uid.is_empty() && !d.title.is_empty());
    assert!(d.schema_version >= 36, "schemaVersion {}", d.schema_version);
    let ds_var = d
        .templating
        .list
        .iter()
        .find(|v| v.kind == "datasource")
        .expect("a datasource variable");
    let ds = Datasource {
        kind: "prometheus".into(),
        uid: format!("${{{}}}", ds_var.name),
    };
    let names = exported();
    let check = |where_: &str, expr: &str| {
        let used = metric_names(expr);
        assert!(!used.is_empty(), "{where_}: {expr:?} names no nfx metric");
        for n in used {
            assert!(names.contains(n), "{where_}: {n} is not exported by nfx");
        }
    };
    for v in d.templating.list.iter().filter(|v| v.kind == "query") {
        assert_eq!(v.datasource.as_ref(), Some(&ds), "variable {}", v.name);
        check(&v.name, v.definition.as_deref().unwrap_or(""));
    }
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    for p in &d.panels {
        assert!(ids.insert(p.id), "panel id {} twice", p.id);
        assert!(p.grid_pos.w > 0 && p.grid_pos.x + p.grid_pos.w <= 24 && p.grid_pos.h > 0);
        if p.kind == "row" {
            continue;
        }
        assert_eq!(p.datasource.as_ref(), Some(&ds), "panel {}", p.title);
        assert!(!p.targets.is_empty(), "panel {} has no query", p.title);
        for t in &p.targets {
            assert!(!t.ref_id.is_empty());
            assert_eq!(t.datasource, ds, "panel {}", p.title);
            check(&p.title, &t.expr);
            queries += 1;
        }
    }
    // Every component has a panel.
    for prefix in [
        "nfx_agent_",
        "nfx_api_",
        "nfx_service_",
        "nfx_node_",
        "nfx_tunnel_",
        "nfx_accel_",
        "nfx_energy_",
    ] {
        assert!(text.contains(prefix), "no panel queries {prefix}*");
    }
    assert!(queries > 20, "{queries} queries");
}

#[test]
fn a_query_naming_an_unknown_metric_is_caught() {
    let names = exported();
    assert!(metric_names("rate(nfx_node_packets_total[1m])")
        .iter()
        .all(|n| names.contains(*n)));
    assert!(!metric_names("rate(nfx_node_packet_total[1m])")
        .iter()
        .all(|n| names.contains(*n)));
}
