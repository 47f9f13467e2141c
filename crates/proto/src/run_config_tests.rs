//! Tests of the run configuration's file format (what the worker runs is checked, and
//! tested, in nfx-dataplane).

use crate::run_config::*;
use nfx_io::PollMode;
use std::path::{Path, PathBuf};

const GOOD: &str = r#"
name: edge
netns: nfx-edge
ports:
  inside:  { iface: to-src,   peer_mac: "02:00:00:00:00:01" }
  outside: { iface: to-cloud, peer_mac: "02:00:00:00:00:02" }
vector: 64
poll: busy
events: /tmp/run/events.jsonl
chain:
  - firewall: { default: allow }
  - nat: {}
"#;

#[test]
fn agreed_example_parses() {
    let c = RunConfig::parse(GOOD, "edge.yaml").unwrap();
    assert_eq!(c.name, "edge");
    assert_eq!(c.netns.as_deref(), Some("nfx-edge"));
    assert_eq!(c.vector, 64);
    assert_eq!(c.poll, PollMode::Busy);
    assert_eq!(c.chain.len(), 2);
    assert_eq!(c.chain[0]["firewall"]["default"], "allow");
    assert_eq!(c.socket_path(), PathBuf::from("/run/nfx/edge.sock"));
    assert!(!c.scalar());
}

#[test]
fn allowed_dirs_are_absolute_and_widen_the_file_scope() {
    let c = RunConfig::parse(
        &format!("{GOOD}allowed_dirs: [/etc/nfx/acl, /usr/share/nfx]\n"),
        "/etc/nfx/edge.yaml",
    )
    .unwrap();
    let scope = c.file_scope();
    assert_eq!(scope.base(), Path::new("/etc/nfx"));
    assert_eq!(
        scope,
        nfx_io::FileScope::new("/etc/nfx")
            .with_allowed([PathBuf::from("/etc/nfx/acl"), "/usr/share/nfx".into()])
    );
    for bad in ["[acl]", "['/etc/nfx/../../root']"] {
        let e = RunConfig::parse(&format!("{GOOD}allowed_dirs: {bad}\n"), "f").unwrap_err();
        assert_eq!(e.field, "allowed_dirs[0]", "{e}");
    }
    assert_eq!(
        RunConfig::parse(GOOD, "edge.yaml").unwrap().file_scope(),
        nfx_io::FileScope::new("")
    );
}

#[test]
fn defaults_apply() {
    let c = RunConfig::parse(
        "name: a\nports: {inside: {iface: x, peer_mac: '02:00:00:00:00:01'}, outside: {iface: y, peer_mac: '02:00:00:00:00:02'}}\n",
        "f",
    )
    .unwrap();
    assert_eq!(c.vector, 256);
    assert_eq!(c.poll, PollMode::Adaptive);
    assert_eq!(c.io, IoMode::Ring);
    assert_eq!(c.kernel_stack, KernelStack::Isolate);
    assert_eq!(c.workers, 1);
    assert!(c.chain.is_empty());
}

#[test]
fn io_and_workers_parse() {
    let c = RunConfig::parse(&format!("{GOOD}io: mmsg\nworkers: 4\n"), "f").unwrap();
    assert_eq!((c.io, c.workers), (IoMode::Mmsg, 4));
    let c = RunConfig::parse(&format!("{GOOD}io: rings\n"), "f").unwrap();
    assert_eq!(c.io, IoMode::Rings);
    assert!(c.io.rx_in_place());
    assert!(!IoMode::RingCopy.rx_in_place() && IoMode::RingCopy.rx_ring());
    assert!(c.io.rx_ring() && c.io.tx_ring());
    for m in IoMode::ALL {
        assert_eq!(m.as_str().parse::<IoMode>(), Ok(m));
    }
    assert!("xdp".parse::<IoMode>().unwrap_err().contains("xdp"));
}

#[test]
fn kernel_stack_parses() {
    let c = RunConfig::parse(&format!("{GOOD}ring_slots: 64\n"), "f").unwrap();
    assert_eq!(c.ring_slots, Some(64));
    let c = RunConfig::parse(&format!("{GOOD}kernel_stack: keep\n"), "f").unwrap();
    assert_eq!(c.kernel_stack, KernelStack::Keep);
    let c = RunConfig::parse(&format!("{GOOD}kernel_stack: isolate\n"), "f").unwrap();
    assert_eq!(c.kernel_stack, KernelStack::Isolate);
    let c = RunConfig::parse(&format!("{GOOD}kernel_stack: external\n"), "f").unwrap();
    assert_eq!(c.kernel_stack, KernelStack::External);
}

fn err_of(text: &str) -> ConfigError {
    RunConfig::parse(text, "bad.yaml").unwrap_err()
}

#[test]
fn unknown_field_names_file_and_path() {
    let e = err_of(&GOOD.replace(
        "peer_mac: \"02:00:00:00:00:02\"",
        "peer_mac: \"02:00:00:00:00:02\", mtu: 9000",
    ));
    assert_eq!(e.file, "bad.yaml");
    assert_eq!(e.field, "ports.outside.mtu");
    assert!(e.problem.contains("mtu"), "{e}");
    assert!(
        e.to_string()
            .starts_with("bad.yaml: field `ports.outside.mtu`"),
        "{e}"
    );
}

#[test]
fn bad_values_name_their_field() {
    let cases = [
        (GOOD.replace("vector: 64", "vector: 0"), "vector"),
        (GOOD.replace("vector: 64", "vector: 300"), "vector"),
        (GOOD.replace("poll: busy", "poll: lazy"), "poll"),
        (
            GOOD.replace("02:00:00:00:00:01", "02:00:00:00:01"),
            "ports.inside.peer_mac",
        ),
        (GOOD.replace("to-cloud", "to-src"), "ports.outside.iface"),
        (GOOD.replace("name: edge", "name: ../etc"), "name"),
        (GOOD.replace("vector: 64", "vector: many"), "vector"),
        (
            format!("{GOOD}fanout: {{ group: 65535 }}\n"),
            "fanout.group",
        ),
        (
            format!("{GOOD}fanout: {{ group: 7, role: lead }}\n"),
            "fanout.role",
        ),
        (format!("{GOOD}workers: 0\n"), "workers"),
        (format!("{GOOD}workers: 17\n"), "workers"),
        (
            format!("{GOOD}workers: 2\nfanout: {{ group: 7 }}\n"),
            "workers",
        ),
        (format!("{GOOD}io: xdp\n"), "io"),
        (format!("{GOOD}kernel_stack: off\n"), "kernel_stack"),
        (
            format!("{GOOD}kernel_stack: external\nfast_path: {{ capacity: 64 }}\n"),
            "fast_path",
        ),
        (format!("{GOOD}ring_slots: 15\n"), "ring_slots"),
        (format!("{GOOD}ring_slots: 16385\n"), "ring_slots"),
    ];
    for (text, field) in cases {
        let e = err_of(&text);
        assert_eq!(e.field, field, "{e}");
        assert!(!e.problem.is_empty());
    }
}

#[test]
fn fanout_parses_with_default_role() {
    let c = RunConfig::parse(&format!("{GOOD}fanout: {{ group: 7 }}\n"), "f").unwrap();
    assert_eq!(
        c.fanout,
        Some(FanoutConfig {
            group: 7,
            role: Role::Active
        })
    );
    let c = RunConfig::parse(
        &format!("{GOOD}fanout: {{ group: 7, role: standby }}\n"),
        "f",
    )
    .unwrap();
    assert_eq!(c.fanout.unwrap().role, Role::Standby);
    assert_eq!(RunConfig::parse(GOOD, "f").unwrap().fanout, None);
}

#[test]
fn missing_file_names_the_file() {
    let e = RunConfig::load(Path::new("/nonexistent/nfx.yaml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/nfx.yaml: cannot read"),
        "{e}"
    );
}

#[test]
fn a_built_config_reads_back_as_written() {
    let ports: Ports = serde_yaml_ng::from_str(
        "{inside: {iface: a, peer_mac: '02:00:00:00:00:01'}, outside: {iface: b, peer_mac: '02:00:00:00:00:02'}}",
    )
    .unwrap();
    let mut c = RunConfig::new("w0", ports)
        .running(crate::Reconfigure::services(crate::ServiceSet::default()));
    c.fanout = Some(FanoutConfig {
        group: 7,
        role: Role::Standby,
    });
    c.allowed_dirs = vec!["/etc/nfx".into()];
    let yaml = serde_yaml_ng::to_string(&c).unwrap();
    let back = RunConfig::parse(&yaml, "w0.yaml").unwrap();
    assert_eq!(
        back,
        RunConfig {
            source: "w0.yaml".into(),
            ..c
        }
    );
    assert!(back.has_services());
    let chain = RunConfig::new("w0", back.ports.clone()).running(crate::Reconfigure::chain(vec![
        serde_json::json!({"nat": {}}),
    ]));
    assert_eq!(
        chain.form().unwrap(),
        crate::ReconfigureForm::Chain(chain.chain.clone())
    );
    let both = RunConfig {
        chain: chain.chain.clone(),
        ..back
    };
    assert_eq!(both.validate("f").unwrap_err().field, "chain");
}
