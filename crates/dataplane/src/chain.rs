//! Building VNF nodes with `nfx_vnf::spec`: each spec (`{"firewall": {...}}`) becomes a
//! node with the name it is given (its instance id). A `chain:` list names its nodes by
//! kind, or `<kind>-<n>` for the n-th (n ≥ 2) node of the same kind
//! ([`crate::services::Topology::from_chain`]). Errors name the field inside the spec;
//! the caller puts the entry or instance in front.

use crate::config::ConfigError;
use crate::runtime::NodeBuilder;
use crate::services::Topology;
use nfx_vnf::{FileScope, Node, NodeSpec};
use std::sync::Arc;

/// Builds the node of `spec` named `name`; files the spec names are read within `files`
/// (a config directory, which relative names start from, and allow-listed directories).
/// Error fields are relative to the spec (`firewall.max_flows`).
pub fn build_node(
    name: &str,
    spec: &serde_json::Value,
    files: &FileScope,
) -> Result<Box<dyn Node>, ConfigError> {
    let at = |field: String| ConfigError {
        file: String::new(),
        field,
        problem: String::new(),
    };
    let parsed: NodeSpec = serde_path_to_error::deserialize(spec).map_err(|e| {
        let path = e.path().to_string();
        ConfigError {
            problem: e.into_inner().to_string(),
            ..at(if path == "." { String::new() } else { path })
        }
    })?;
    nfx_vnf::build(&parsed, name, files).map_err(|e| ConfigError {
        problem: e.msg,
        ..at(e.field)
    })
}

/// Builds every node of a `chain:` list, named as the chain form names them; errors
/// name the entry (`chain[1].nat.snat.public_ip`).
pub fn build_chain(
    specs: &[serde_json::Value],
    files: impl Into<FileScope>,
) -> Result<Vec<Box<dyn Node>>, ConfigError> {
    let files = files.into();
    let topo = Topology::from_chain(specs)?;
    topo.instances
        .iter()
        .map(|i| {
            build_node(&i.id, &i.spec, &files).map_err(|e| ConfigError {
                field: i.field(&e.field),
                ..e
            })
        })
        .collect()
}

/// The builder `nfx run` uses: [`build_node`] reading files within `files` (see
/// [`crate::RunConfig::file_scope`]).
pub fn vnf_builder(files: impl Into<FileScope>) -> NodeBuilder {
    let files = files.into();
    Arc::new(move |name: &str, spec: &serde_json::Value| build_node(name, spec, &files))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn names(specs: serde_json::Value) -> Vec<String> {
        let specs = specs.as_array().unwrap().clone();
        build_chain(&specs, Path::new("."))
            .unwrap()
            .iter()
            .map(|n| n.name().to_string())
            .collect()
    }

    #[test]
    fn nodes_are_named_by_kind_and_repeats_numbered() {
        let fw = json!({"firewall": {"default": "allow"}});
        let el = json!({"elephant": {}});
        assert_eq!(names(json!([fw, el])), ["firewall", "elephant"]);
        assert_eq!(
            names(json!([fw, el, fw, fw])),
            ["firewall", "elephant", "firewall-2", "firewall-3"]
        );
        assert!(names(json!([])).is_empty());
    }

    #[test]
    fn errors_name_entry_and_field() {
        let e = build_chain(
            &[
                json!({"elephant": {}}),
                json!({"firewall": {"max_flows": 0}}),
            ],
            Path::new("."),
        )
        .err()
        .unwrap();
        assert_eq!(e.field, "chain[1].firewall.max_flows");
        let e = build_chain(&[json!({"router": {}})], Path::new("."))
            .err()
            .unwrap();
        assert!(e.field.starts_with("chain[0]"), "{e}");
        assert!(e.problem.contains("router"), "{e}");
        let e = build_chain(&[json!({"firewall": {"defualt": "deny"}})], Path::new("."))
            .err()
            .unwrap();
        assert!(e.field.starts_with("chain[0].firewall"), "{e}");
        assert!(e.problem.contains("defualt"), "{e}");
    }

    #[test]
    fn a_node_takes_the_name_it_is_given() {
        let n = build_node("fw-acme", &json!({"firewall": {}}), &Path::new(".").into()).unwrap();
        assert_eq!(n.name(), "fw-acme");
        let e = build_node(
            "x",
            &json!({"nat": {"snat": {"public_ip": "nope"}}}),
            &Path::new(".").into(),
        )
        .err()
        .unwrap();
        assert!(e.field.starts_with("nat.snat"), "{e}");
    }
}
