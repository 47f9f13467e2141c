//! Run configs for `nfx run` on the testbed's edge (the YAML format agreed with
//! crates/dataplane), built from the testbed's addresses and MACs.

use crate::{acl, Host, Testbed};
use anyhow::Context;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Which VNFs the chain holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chain {
    /// No VNF: parse → output (nfx forward-only).
    Empty,
    /// firewall → NAT → elephant → DPI with the standard ACL.
    Full {
        /// DPI pattern file (absolute, or relative to the config file).
        patterns: PathBuf,
        /// Bytes after which a flow is an elephant.
        elephant_bytes: u64,
    },
    /// The standard ACL's firewall and the source NAT only: the same work as the
    /// `kernel-nftables` baseline.
    FirewallNat,
    /// The standard ACL's firewall alone (HYPER Fig. 4a's single VNF).
    Firewall,
    /// Firewall → NAT → elephant (HYPER Fig. 4b's three-VNF chain).
    FirewallNatElephant {
        /// Bytes after which a flow is an elephant.
        elephant_bytes: u64,
    },
    /// The software part of a hybrid chain whose table-tier part runs first on edge's
    /// `to-src`: elephant (when given) → DPI; the inside port is marked `table_tier`.
    HybridTail {
        /// DPI pattern file.
        patterns: PathBuf,
        /// Bytes after which a flow is an elephant; `None`: no elephant node.
        elephant_bytes: Option<u64>,
    },
    /// The source NAT alone (the energy paper's NAT box).
    Nat,
}

/// Everything that varies between runs.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Instance name.
    pub name: String,
    /// Control socket path.
    pub control_socket: PathBuf,
    /// Event file (JSON lines), if any.
    pub events: Option<PathBuf>,
    /// Vector size (1 = scalar).
    pub vector: usize,
    /// busy | interrupt | adaptive.
    pub poll: String,
    /// The VNFs.
    pub chain: Chain,
}

/// The chain's node list (`chain:` in the run config).
pub fn chain_nodes(tb: &Testbed, chain: &Chain) -> Vec<Value> {
    let firewall = || {
        json!({"firewall": {
            "default": "deny",
            "rules": acl::to_nfx(&acl::standard(tb.spec().addr(1, 0))),
        }})
    };
    let nat = || json!({"nat": {"snat": {"public_ip": tb.nat_ip().to_string()}}});
    let elephant =
        |bytes: u64| json!({"elephant": {"min_bytes": bytes, "min_rate_bps": 1_000_000}});
    let dpi = |p: &Path| json!({"dpi": {"patterns": resolved(p).to_string_lossy()}});
    match chain {
        Chain::Empty => Vec::new(),
        Chain::FirewallNat => vec![firewall(), nat()],
        Chain::Firewall => vec![firewall()],
        Chain::FirewallNatElephant { elephant_bytes } => {
            vec![firewall(), nat(), elephant(*elephant_bytes)]
        }
        Chain::HybridTail {
            patterns,
            elephant_bytes,
        } => elephant_bytes
            .map(elephant)
            .into_iter()
            .chain([dpi(patterns)])
            .collect(),
        Chain::Nat => vec![nat()],
        Chain::Full {
            patterns,
            elephant_bytes,
        } => vec![firewall(), nat(), elephant(*elephant_bytes), dpi(patterns)],
    }
}

/// `p` with symlinks and `..` resolved when it exists (a run config may name files
/// only inside its allowed directories, by paths without `..`).
fn resolved(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The whole run config for a dataplane on edge between `to-src` and `to-cloud`.
pub fn run_config(tb: &Testbed, spec: &RunSpec) -> anyhow::Result<Value> {
    let (src_mac, cloud_mac) = tb.edge_peer_macs()?;
    let mut v = json!({
        "name": spec.name,
        "netns": tb.ns(Host::Edge),
        "control_socket": spec.control_socket.to_string_lossy(),
        "ports": {
            "inside": {"iface": "to-src", "peer_mac": src_mac},
            "outside": {"iface": "to-cloud", "peer_mac": cloud_mac},
        },
        "vector": spec.vector,
        "poll": spec.poll,
        "chain": chain_nodes(tb, &spec.chain),
    });
    if let Some(e) = &spec.events {
        v["events"] = json!(e.to_string_lossy());
    }
    if matches!(spec.chain, Chain::HybridTail { .. }) {
        v["ports"]["inside"]["table_tier"] = json!(true);
    }
    if let Chain::Full { patterns, .. } | Chain::HybridTail { patterns, .. } = &spec.chain {
        // The pattern file lives with the repository, not beside the run config.
        if let Some(dir) = resolved(patterns).parent().filter(|d| d.is_absolute()) {
            v["allowed_dirs"] = json!([dir.to_string_lossy()]);
        }
    }
    Ok(v)
}

/// Writes a config value as YAML.
pub fn write_yaml(path: &Path, v: &Value) -> anyhow::Result<()> {
    let text = serde_yaml_ng::to_string(v)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Finds a repository file such as `configs/dpi/patterns.txt`: relative to the current
/// directory, or to any ancestor of the running binary (target/release/nfx lives two
/// levels under the repository root). Returns an absolute path.
pub fn locate(rel: &Path) -> anyhow::Result<PathBuf> {
    if rel.is_absolute() {
        return Ok(rel.to_path_buf());
    }
    let mut roots = vec![std::env::current_dir()?];
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    roots
        .iter()
        .map(|r| r.join(rel))
        .find(|p| p.exists())
        .with_context(|| {
            format!(
                "{} not found in the current directory or above the nfx binary",
                rel.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Spec;

    #[test]
    fn full_chain_has_four_nodes_in_order() {
        let tb = Testbed::attach(Spec {
            prefix: "x-".into(),
            subnet_base: 9,
        })
        .unwrap();
        let c = chain_nodes(
            &tb,
            &Chain::Full {
                patterns: "/p.txt".into(),
                elephant_bytes: 5,
            },
        );
        let kinds: Vec<_> = c
            .iter()
            .map(|n| n.as_object().unwrap().keys().next().unwrap().clone())
            .collect();
        assert_eq!(kinds, ["firewall", "nat", "elephant", "dpi"]);
        assert_eq!(c[1]["nat"]["snat"]["public_ip"], "10.9.2.100");
        assert_eq!(c[0]["firewall"]["rules"].as_array().unwrap().len(), 100);
        assert!(chain_nodes(&tb, &Chain::Empty).is_empty());
        let fw_nat = chain_nodes(&tb, &Chain::FirewallNat);
        assert_eq!(fw_nat[..], c[..2]);
        assert_eq!(chain_nodes(&tb, &Chain::Firewall)[..], c[..1]);
        let three = chain_nodes(&tb, &Chain::FirewallNatElephant { elephant_bytes: 5 });
        assert_eq!(three[..], c[..3]);
        let tail = chain_nodes(
            &tb,
            &Chain::HybridTail {
                patterns: "/p.txt".into(),
                elephant_bytes: Some(5),
            },
        );
        assert_eq!(tail[..], c[2..]);
        assert_eq!(chain_nodes(&tb, &Chain::Nat)[..], c[1..2]);
    }

    #[test]
    fn locate_finds_files_and_names_missing_ones() {
        let here = locate(Path::new("Cargo.toml")).unwrap();
        assert!(here.is_absolute() && here.exists());
        let err = locate(Path::new("no/such/file.txt"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no/such/file.txt"), "{err}");
    }

    #[test]
    fn yaml_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.yaml");
        let v = json!({"name": "edge", "chain": [{"nat": {"snat": {"public_ip": "1.2.3.4"}}}]});
        write_yaml(&p, &v).unwrap();
        let back: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(back, v);
    }
}
