//! Building the VNF chain of a run config with `nfx_vnf::spec`: each entry
//! (`{"firewall": {...}}`) becomes a node named by its kind, or `<kind>-<n>` for the
//! n-th (n ≥ 2) node of the same kind. Errors name the entry and the field inside it.

use crate::config::ConfigError;
use crate::runtime::ChainBuilder;
use nfx_vnf::{FileScope, Node, NodeSpec};
use std::collections::HashMap;
use std::sync::Arc;

/// Builds every node of `specs`; files the specs name are read within `files` (a
/// config directory, which relative names start from, and allow-listed directories).
pub fn build_chain(
    specs: &[serde_json::Value],
    files: impl Into<FileScope>,
) -> Result<Vec<Box<dyn Node>>, ConfigError> {
    build_chain_from(specs, 0, files)
}

/// Like [`build_chain`], but builds only `specs[skip..]` (the first `skip` nodes are
/// kept from the running chain); names are those the whole list would give.
pub fn build_chain_from(
    specs: &[serde_json::Value],
    skip: usize,
    files: impl Into<FileScope>,
) -> Result<Vec<Box<dyn Node>>, ConfigError> {
    let files = files.into();
    let mut seen: HashMap<&'static str, usize> = HashMap::new();
    let mut nodes = Vec::with_capacity(specs.len());
    for (i, v) in specs.iter().enumerate() {
        let at = |field: &str| {
            if field.is_empty() {
                format!("chain[{i}]")
            } else {
                format!("chain[{i}].{field}")
            }
        };
        let spec: NodeSpec = serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            ConfigError {
                file: String::new(),
                field: at(if path == "." { "" } else { &path }),
                problem: e.into_inner().to_string(),
            }
        })?;
        let kind = spec.kind();
        let n = seen.entry(kind).or_insert(0);
        *n += 1;
        let name = if *n == 1 {
            kind.to_string()
        } else {
            format!("{kind}-{n}")
        };
        if i < skip {
            continue;
        }
        let node = nfx_vnf::build(&spec, &name, &files).map_err(|e| ConfigError {
            file: String::new(),
            field: at(&e.field),
            problem: e.msg,
        })?;
        nodes.push(node);
    }
    Ok(nodes)
}

/// The builder `nfx run` uses: [`build_chain`] reading files within `files` (see
/// [`crate::RunConfig::file_scope`]).
pub fn vnf_builder(files: impl Into<FileScope>) -> ChainBuilder {
    let files = files.into();
    Arc::new(move |specs: &[serde_json::Value], skip: usize| {
        build_chain_from(specs, skip, files.clone())
    })
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
}
