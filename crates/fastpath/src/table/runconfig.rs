//! The configuration of a standalone table-tier chain (`nfx table run --config FILE`):
//! where it runs, its ports and placement, its functions (the software VNFs' chain
//! entries) and its events file. Every error names the file and the field.

use super::{Placement, PortSpec};
use nfx_vnf::NodeSpec;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A table-tier chain to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableRunConfig {
    /// Instance name (logs, stats).
    pub name: String,
    /// Network namespace (an `ip netns` name or a path) to enter before attaching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// Where the chain runs.
    pub placement: PlacementConfig,
    /// Functions in forward order, as in a run config's `chain:` (`- firewall: {...}`),
    /// each checked as it is read.
    pub chain: Vec<NodeSpec>,
    /// JSON-lines file for events (elephant flows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<PathBuf>,
}

/// [`Placement`] as written in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PlacementConfig {
    /// The table tier forwards between two ports by itself.
    Alone {
        /// Inside port.
        inside: PortConfig,
        /// Outside port.
        outside: PortConfig,
    },
    /// First in a hybrid chain, on the software worker's inside interface.
    BeforeSoftware {
        /// The worker's inside interface.
        iface: String,
    },
    /// Last in a hybrid chain, on the software worker's outside interface.
    AfterSoftware {
        /// The worker's outside interface.
        iface: String,
    },
}

/// A port of a chain that forwards by itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Interface.
    pub iface: String,
    /// MAC address of the next hop behind it.
    pub peer_mac: String,
}

impl TableRunConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self, String> {
        let shown = path.display();
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("{shown}: cannot read: {e}"))?;
        // Through a JSON value: the placement is a map keyed by its kind, which YAML
        // would otherwise want written as a tag.
        let v: serde_json::Value =
            serde_yaml_ng::from_str(&text).map_err(|e| format!("{shown}: {e}"))?;
        let cfg: Self = serde_path_to_error::deserialize(v)
            .map_err(|e| format!("{shown}: field `{}`: {}", e.path(), e.inner()))?;
        cfg.placement().map_err(|e| format!("{shown}: {e}"))?;
        Ok(cfg)
    }

    /// The config as YAML that [`TableRunConfig::load`] reads back (the placement as a
    /// map keyed by its kind).
    pub fn to_yaml(&self) -> String {
        let v = serde_json::to_value(self).expect("plain data");
        serde_yaml_ng::to_string(&v).expect("JSON values are YAML")
    }

    /// The functions with their instance names (the kind: one of each per chain).
    pub fn functions(&self) -> Vec<(String, NodeSpec)> {
        self.chain
            .iter()
            .map(|spec| (spec.kind().to_string(), spec.clone()))
            .collect()
    }

    /// The placement, with MAC addresses parsed.
    pub fn placement(&self) -> Result<Placement, String> {
        let port = |side: &str, p: &PortConfig| {
            nfx_io::sys::parse_mac(&p.peer_mac)
                .map(|peer_mac| PortSpec {
                    iface: p.iface.clone(),
                    peer_mac,
                })
                .map_err(|e| format!("field `placement.alone.{side}.peer_mac`: {e}"))
        };
        Ok(match &self.placement {
            PlacementConfig::Alone { inside, outside } => {
                if inside.iface == outside.iface {
                    return Err(
                        "field `placement.alone.outside.iface`: the same interface as inside"
                            .into(),
                    );
                }
                Placement::Alone {
                    inside: port("inside", inside)?,
                    outside: port("outside", outside)?,
                }
            }
            PlacementConfig::BeforeSoftware { iface } => Placement::BeforeSoftware {
                iface: iface.clone(),
            },
            PlacementConfig::AfterSoftware { iface } => Placement::AfterSoftware {
                iface: iface.clone(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> Result<TableRunConfig, String> {
        let dir = std::env::temp_dir().join(format!("nfx-tablecfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.yaml");
        std::fs::write(&p, y).unwrap();
        TableRunConfig::load(&p)
    }

    #[test]
    fn round_trip_and_errors_name_the_field() {
        let ok = "name: t\nplacement: {alone: {inside: {iface: a, peer_mac: '02:00:00:00:00:01'}, outside: {iface: b, peer_mac: '02:00:00:00:00:02'}}}\nchain: [{firewall: {default: allow}}, {nat: {snat: {public_ip: 192.0.2.1}}}]\n";
        let c = parse(ok).unwrap();
        assert_eq!(c.functions()[1].0, "nat");
        let back = parse(&c.to_yaml()).unwrap();
        assert_eq!(back, c);
        let e = parse(&ok.replace("'02:00:00:00:00:02'", "zz")).unwrap_err();
        assert!(e.contains("placement.alone.outside.peer_mac"), "{e}");
        let e = parse(&ok.replace("default: allow", "defaul: allow")).unwrap_err();
        assert!(
            e.contains("chain[0].firewall") && e.contains("defaul"),
            "{e}"
        );
        let e = parse("name: t\nplacement: {beside: {iface: a}}\nchain: []\n").unwrap_err();
        assert!(e.contains("placement") && e.contains("beside"), "{e}");
        let h = parse("name: t\nplacement: {before_software: {iface: to-src}}\nchain: [{nat: {snat: {public_ip: 1.2.3.4}}}]\n").unwrap();
        assert_eq!(
            h.placement().unwrap(),
            Placement::BeforeSoftware {
                iface: "to-src".into()
            }
        );
    }
}
