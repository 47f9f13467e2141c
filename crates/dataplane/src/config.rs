//! The worker's side of its run configuration (`nfx run --config`). The file format —
//! every type and the checks of each field — lives in nfx-proto
//! ([`nfx_proto::run_config`], re-exported here), shared with the VNFMs that write it;
//! here the worker adds what only it can check: what it runs ([`topology`]: the chain's
//! and the services' structure, selectors, ids). Every error names the file, the field
//! and the problem.

use crate::services::Topology;
use nfx_proto::ReconfigureForm;
use std::path::Path;

pub use nfx_proto::run_config::{
    default_socket, ClassifierConfig, ConfigError, FanoutConfig, FastPathConfig, IoMode,
    KernelStack, PortConfig, Ports, Role, RunConfig, MAX_CLASSIFIER_FLOWS,
    MAX_CLASSIFIER_TIMEOUT_S, MAX_FAST_PATH_CAPACITY, MAX_RING_SLOTS, MAX_WORKERS, MIN_RING_SLOTS,
};

/// Reads a configuration file and checks all of it: [`RunConfig::load`] and
/// [`topology`].
pub fn load(path: &Path) -> Result<RunConfig, ConfigError> {
    let cfg = RunConfig::load(path)?;
    validate(&cfg, &cfg.source)?;
    Ok(cfg)
}

/// Parses configuration text and checks all of it (as [`load`]); `file` is used in
/// error messages.
pub fn parse(text: &str, file: &str) -> Result<RunConfig, ConfigError> {
    let cfg = RunConfig::parse(text, file)?;
    validate(&cfg, file)?;
    Ok(cfg)
}

/// [`RunConfig::validate`] and what the worker runs ([`topology`]), errors naming `file`.
pub fn validate(cfg: &RunConfig, file: &str) -> Result<(), ConfigError> {
    cfg.validate(file)?;
    topology(cfg).map(|_| ()).map_err(|e| ConfigError {
        file: file.to_string(),
        ..e
    })
}

/// What the worker runs, checked (the file is left empty in errors).
pub fn topology(cfg: &RunConfig) -> Result<Topology, ConfigError> {
    match cfg.form()? {
        ReconfigureForm::Chain(chain) => Topology::from_chain(&chain),
        ReconfigureForm::Services(set) => Topology::from_services(&set),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain-form config (the file format's own tests are nfx-proto's).
    const GOOD: &str = "name: edge
ports: { inside: { iface: a, peer_mac: '02:00:00:00:00:01' }, outside: { iface: b, peer_mac: '02:00:00:00:00:02' } }
chain:
  - firewall: { default: allow }
  - nat: {}
";

    fn err_of(text: &str) -> ConfigError {
        parse(text, "bad.yaml").unwrap_err()
    }

    #[test]
    fn a_chain_entry_of_two_kinds_names_its_index() {
        let e = err_of(&GOOD.replace("  - nat: {}", "  - nat: {}\n    dpi: {}"));
        assert_eq!(e.field, "chain[1]", "{e}");
        assert_eq!(e.file, "bad.yaml", "{e}");
        // The file format alone is fine: the worker's check finds it.
        RunConfig::parse(
            &GOOD.replace("  - nat: {}", "  - nat: {}\n    dpi: {}"),
            "f",
        )
        .unwrap();
    }

    const SERVICES: &str = r#"
name: edge
ports:
  inside:  { iface: to-src,   peer_mac: "02:00:00:00:00:01" }
  outside: { iface: to-cloud, peer_mac: "02:00:00:00:00:02" }
classifier: { flows: 1024, timeout_s: 60 }
services:
  - id: web-acme
    selector: { src: 10.200.1.0/24, dst: 10.200.3.0/24, proto: tcp, sport: 1024-65535, dport: 80 }
    chain: [inst-fw-1, inst-nat-1]
  - id: dns-beta
    selector: { src: "2001:db8:1::/48", proto: 17, dport: 53 }
    chain: [inst-nat-1]
instances:
  inst-fw-1: { function: firewall, config: { default: allow } }
  inst-nat-1: { function: nat, config: { snat: { public_ip: 10.200.2.100 } } }
"#;

    #[test]
    fn the_services_form_parses() {
        let c = parse(SERVICES, "s.yaml").unwrap();
        assert!(c.has_services());
        assert_eq!(
            c.classifier,
            ClassifierConfig {
                flows: 1024,
                timeout_s: 60
            }
        );
        let t = topology(&c).unwrap();
        assert_eq!(t.instance_ids(), ["inst-fw-1", "inst-nat-1"]);
        assert_eq!(t.service_ids(), ["web-acme", "dns-beta"]);
        assert_eq!(t.services[0].chain, [0, 1]);
        assert!(!t.services[1].selector.src.unwrap().is_v4());
        let d = parse(GOOD, "f").unwrap();
        assert_eq!(d.classifier, ClassifierConfig::default());
        assert!(topology(&d).unwrap().implicit);
        // Instances alone: a closed worker.
        let closed = GOOD.replace(
            "chain:\n  - firewall: { default: allow }\n  - nat: {}\n",
            "instances: {}\n",
        );
        let t = topology(&parse(&closed, "f").unwrap()).unwrap();
        assert!(!t.implicit && t.services.is_empty());
    }

    #[test]
    fn bad_services_name_file_and_field() {
        let cases = [
            (format!("{SERVICES}chain: [{{nat: {{}}}}]\n"), "chain"),
            (
                SERVICES.replace("chain: [inst-nat-1]", "chain: [inst-nat-2]"),
                "services[1].chain[0]",
            ),
            (SERVICES.replace("dns-beta", "web-acme"), "services[1].id"),
            (
                SERVICES.replace("dport: 80", "dport: 80-70"),
                "services[0].selector.dport",
            ),
            (
                SERVICES.replace("dport: 80", "port: 80"),
                "services[0].selector",
            ),
            (
                SERVICES.replace("flows: 1024", "flows: 0"),
                "classifier.flows",
            ),
            (
                SERVICES.replace("timeout_s: 60", "timeout_s: 0"),
                "classifier.timeout_s",
            ),
            (SERVICES.replace("inst-fw-1:", "parse:"), "instances.parse"),
        ];
        for (text, field) in cases {
            let e = err_of(&text);
            assert_eq!(e.file, "bad.yaml", "{e}");
            assert!(e.field.starts_with(field), "{field}: {e}");
        }
    }
}
