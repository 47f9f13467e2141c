//! Building nodes from YAML specs, and the errors wrong specs give.

use super::*;

/// Parses a chain entry the way the dataplane does: YAML → JSON value → spec.
fn parse(yaml: &str) -> Result<NodeSpec, String> {
    let v: serde_json::Value = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
    serde_json::from_value(v).map_err(|e| e.to_string())
}

fn spec(yaml: &str) -> NodeSpec {
    parse(yaml).expect("spec parses")
}

fn err(yaml: &str) -> ConfigError {
    match build(&spec(yaml), "n", &FileScope::new(".")) {
        Err(e) => e,
        Ok(_) => panic!("expected an error for {yaml}"),
    }
}

#[test]
fn chain_shapes_build() {
    let fw = spec("firewall: { default: deny, rules: [ {action: allow, proto: tcp, dst: 10.0.0.0/8, dport: 5201}, {action: allow, proto: udp, sport: any, dport: 1000-2000}, {action: deny, proto: icmp} ], max_flows: 1000 }");
    let node = build(&fw, "fw0", &FileScope::new(".")).unwrap();
    assert_eq!(node.name(), "fw0");
    assert_eq!(node.stats()["rules"], 3);
    let nat = spec("nat: { snat: { public_ip: 10.200.2.100, port_range: [1024, 65535] }, dnat: [ {proto: tcp, public_port: 8080, to_ip: 10.200.1.1, to_port: 80} ] }");
    assert_eq!(
        build(&nat, "nat0", &FileScope::new(".")).unwrap().name(),
        "nat0"
    );
    // The dataplane hands chain entries over as JSON values.
    let v: serde_json::Value = serde_json::json!({"firewall": {"default": "allow", "rules": [{"action": "deny", "proto": "tcp", "dport": 22}]}});
    let s: NodeSpec = serde_json::from_value(v).unwrap();
    assert_eq!(s.kind(), "firewall");
}

#[test]
fn unknown_fields_and_kinds_are_rejected() {
    assert!(parse("firewall: { defualt: deny }").is_err());
    assert!(parse("firewall: { rules: [ {action: allow, port: 80} ] }").is_err());
    assert!(parse("router: {}").is_err());
    assert!(parse("nat: { snat: { public_ip: 1.2.3.4, ports: [1, 2] } }").is_err());
}

#[test]
fn errors_name_the_field() {
    let e = err("firewall: { rules: [ {action: allow}, {action: allow, dst: 10.0.0/8} ] }");
    assert_eq!(e.field, "firewall.rules[1].dst");
    assert!(e.msg.contains("not an IPv4 address"), "{e}");
    assert_eq!(
        err("firewall: { rules: [ {action: allow, proto: tcp, dport: 70000} ] }").field,
        "firewall.rules[0].dport"
    );
    assert_eq!(
        err("firewall: { rules: [ {action: allow, proto: tcp, sport: 9-1} ] }").field,
        "firewall.rules[0].sport"
    );
    assert_eq!(
        err("firewall: { rules: [ {action: deny, dport: 22} ] }").field,
        "firewall.rules[0].dport"
    );
    assert_eq!(
        err("firewall: { max_flows: 0 }").field,
        "firewall.max_flows"
    );
    assert_eq!(
        err("firewall: { timeouts: { udp: 0 } }").field,
        "firewall.timeouts.udp"
    );
    assert_eq!(
        err("firewall: { rules_file: /nonexistent/acl.yaml }").field,
        "firewall.rules_file"
    );
    assert_eq!(err("nat: {}").field, "nat.snat");
    assert_eq!(
        err("nat: { snat: { public_ip: 10.0.0.300 } }").field,
        "nat.snat.public_ip"
    );
    assert_eq!(
        err("nat: { snat: { public_ip: 10.0.0.1, port_range: [5000, 4000] } }").field,
        "nat.snat.port_range"
    );
    assert_eq!(
        err("nat: { snat: { public_ip: 10.0.0.1, port_range: [0, 4000] } }").field,
        "nat.snat.port_range[0]"
    );
    assert_eq!(
        err("nat: { dnat: [ {proto: tcp, public_port: 80, to_ip: 10.0.0.1} ] }").field,
        "nat.dnat[0].public_ip"
    );
    assert_eq!(err("nat: { snat: { public_ip: 1.1.1.1 }, dnat: [ {proto: icmp, public_port: 80, to_ip: 10.0.0.1} ] }").field, "nat.dnat[0].proto");
    let dup = "nat: { snat: { public_ip: 1.1.1.1 }, dnat: [ {proto: tcp, public_port: 80, to_ip: 10.0.0.1}, {proto: tcp, public_port: 80, to_ip: 10.0.0.2} ] }";
    assert_eq!(err(dup).field, "nat.dnat[1].public_port");
    assert_eq!(
        err("nat: { snat: { public_ip: 1.1.1.1 }, timeouts: { tcp_close: 0 } }").field,
        "nat.timeouts.tcp_close"
    );
}

/// A config directory `conf/` holding `acl.yaml` (152 rules), `bad.yaml`, a symlink
/// `link.yaml` to a file outside, and that outside file `secret.yaml` beside `conf/`.
struct ConfDir(std::path::PathBuf);

const SECRET: &str = "root:$6$NFXSECRETHASH:19000:0:99999:7:::";

impl ConfDir {
    fn new(tag: &str) -> Self {
        let root = std::env::temp_dir().join(format!("nfx-vnf-spec-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let conf = root.join("conf");
        std::fs::create_dir_all(&conf).unwrap();
        let mut rules = String::new();
        for i in 0..150 {
            rules.push_str(&format!(
                "- {{action: deny, proto: udp, dport: {}}}\n",
                10000 + i
            ));
        }
        rules.push_str("- {action: allow, proto: tcp, src: 10.0.0.0/8, dport: 5201}\n");
        std::fs::write(conf.join("acl.yaml"), &rules).unwrap();
        std::fs::write(
            conf.join("bad.yaml"),
            format!("- {{action: allow, proto: tcp, dst: '{SECRET}'}}\n"),
        )
        .unwrap();
        std::fs::write(root.join("secret.yaml"), format!("{SECRET}\n")).unwrap();
        std::os::unix::fs::symlink(root.join("secret.yaml"), conf.join("link.yaml")).unwrap();
        Self(root)
    }

    fn scope(&self) -> FileScope {
        FileScope::new(self.0.join("conf"))
    }
}

impl Drop for ConfDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn build_in(dir: &ConfDir, yaml: &str) -> Result<Box<dyn Node>, ConfigError> {
    build(&spec(yaml), "fw", &dir.scope())
}

#[test]
fn rules_file_relative_to_config_dir() {
    let dir = ConfDir::new("rel");
    let node = build_in(
        &dir,
        "firewall: { rules: [ {action: deny, proto: tcp, dport: 22} ], rules_file: acl.yaml }",
    );
    assert_eq!(node.unwrap().stats()["rules"], 152);
    let bad = build_in(&dir, "firewall: { rules_file: bad.yaml }")
        .err()
        .expect("bad rules file is an error");
    assert_eq!(
        bad.field, "firewall.rules_file(bad.yaml).rules[0].dst",
        "{bad}"
    );
    assert!(!bad.to_string().contains("NFXSECRET"), "{bad}");
}

#[test]
fn rules_files_outside_the_config_dir_are_refused_without_content() {
    let dir = ConfDir::new("out");
    let outside = dir.0.join("secret.yaml");
    for (file, want) in [
        ("../secret.yaml".to_string(), "has a `..` component"),
        ("./../secret.yaml".to_string(), "has a `..` component"),
        (outside.display().to_string(), "lies outside"),
        ("link.yaml".to_string(), "lies outside"),
        ("/etc/shadow".to_string(), "lies outside"),
    ] {
        let e = build_in(&dir, &format!("firewall: {{ rules_file: '{file}' }}"))
            .err()
            .expect("refused");
        assert_eq!(e.field, "firewall.rules_file", "{file}: {e}");
        assert!(e.msg.contains(want), "{file}: {e}");
        assert!(!e.to_string().contains("NFXSECRET"), "{file}: {e}");
    }
    // Allow-listing the outside directory makes the same file readable: it is then
    // parsed, and its parse error still quotes nothing of it.
    let scope = dir.scope().with_allowed([dir.0.clone()]);
    let e = build(
        &spec(&format!(
            "firewall: {{ rules_file: '{}' }}",
            outside.display()
        )),
        "fw",
        &scope,
    )
    .err()
    .expect("not a rules list");
    assert!(e.msg.contains("at line 1: not a YAML list of rules"), "{e}");
    assert!(!e.to_string().contains("NFXSECRET"), "{e}");
}

/// Every node spec written in `v`: chain entries (`{firewall: {...}}`) and instances or
/// descriptor functions (`{function: firewall, config: {...}}`), anywhere in the tree.
fn specs_in(v: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
    match v {
        serde_json::Value::Object(m) => {
            let kind = |k: &str| NodeSpec::KINDS.contains(&k);
            if m.len() == 1 && m.keys().all(|k| kind(k)) {
                out.push(v.clone());
            }
            if let Some(f) = m
                .get("function")
                .and_then(|f| f.as_str())
                .filter(|f| kind(f))
            {
                let config = m.get("config").cloned().unwrap_or_default();
                let config = if config.is_null() {
                    serde_json::json!({})
                } else {
                    config
                };
                out.push(serde_json::json!({ f: config }));
            }
            m.values().for_each(|x| specs_in(x, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| specs_in(x, out)),
        _ => {}
    }
}

/// The documents of a file: all of it as YAML (JSON is YAML too), else each line as
/// JSON (control-socket sessions), and each fenced YAML block of a Markdown page.
fn documents(path: &std::path::Path, text: &str) -> Vec<serde_json::Value> {
    if path.extension().is_some_and(|e| e == "md") {
        return text
            .split("```yaml")
            .skip(1)
            .filter_map(|b| b.split("```").next())
            .filter_map(|b| serde_yaml_ng::from_str(b).ok())
            .collect();
    }
    if let Ok(v) = serde_yaml_ng::from_str(text) {
        return vec![v];
    }
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A spec serialized (as JSON and as YAML) reads back as the same spec, and its JSON
/// keeps the chain-entry shape `{kind: {...}}`.
fn round_trips(spec: &NodeSpec) {
    let json = serde_json::to_string(spec).unwrap();
    let back: NodeSpec = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
    assert_eq!(&back, spec, "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v.get(spec.kind()).is_some_and(|c| c.is_object()), "{json}");
    let yaml = serde_yaml_ng::to_string(spec).unwrap();
    assert_eq!(&parse(&yaml).unwrap(), spec, "{yaml}");
}

#[test]
fn every_spec_in_the_repository_round_trips() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    let mut dirs = vec![
        root.join("configs"),
        root.join("docs"),
        root.join("crates/dataplane/fuzz/seeds"),
        root.join("crates/control/fuzz/seeds"),
    ];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push(p);
            }
        }
    }
    let mut checked = 0;
    // A placement workload names functions by kind, with no VNF configuration.
    files.retain(|f| !f.ends_with("configs/examples/chain-workload.json"));
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let mut found = Vec::new();
        documents(f, &text)
            .iter()
            .for_each(|d| specs_in(d, &mut found));
        for v in found {
            // Pages may show a wrong spec on purpose; every other file's specs are good.
            let spec = match serde_json::from_value::<NodeSpec>(v.clone()) {
                Ok(s) => s,
                Err(_) if f.extension().is_some_and(|e| e == "md") => continue,
                Err(e) => panic!("{}: {v}: {e}", f.display()),
            };
            round_trips(&spec);
            checked += 1;
        }
    }
    // The fuzz seeds of the `configs` target: byte 0 picks YAML or JSON.
    let seeds = root.join("crates/vnf/fuzz/seeds/configs");
    for e in std::fs::read_dir(&seeds).unwrap().flatten() {
        let data = std::fs::read(e.path()).unwrap();
        let v: serde_json::Value = if data[0] & 1 == 0 {
            serde_yaml_ng::from_slice(&data[1..]).unwrap()
        } else {
            serde_json::from_slice(&data[1..]).unwrap()
        };
        round_trips(&serde_json::from_value(v).unwrap());
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} specs found");
}

#[test]
fn every_field_round_trips() {
    // Every optional field set, text and number ports, both enums' other values.
    for yaml in [
        "firewall: { default: allow, rules: [ {action: deny, proto: udp, src: 10.0.0.0/8, dst: 192.168.1.1, sport: '53', dport: 1000-2000}, {action: allow, proto: icmp}, {action: allow, sport: any, dport: 80} ], rules_file: r.yaml, max_flows: 7, loose: true, max_flows_per_source: 3, reverse_new: acl, timeouts: { syn_sent: 1, syn_recv: 2, established: 3, fin_wait: 4, close_wait: 5, last_ack: 6, time_wait: 7, close: 8, unacknowledged: 9, udp: 10, udp_stream: 11, icmp: 12, generic: 13 } }",
        "firewall: {}",
        "nat: { snat: { public_ip: 10.0.0.1, port_range: [2000, 3000] }, dnat: [ {proto: udp, public_ip: 10.0.0.2, public_port: 53, to_ip: 10.1.0.1, to_port: 5353}, {proto: tcp, public_port: 80, to_ip: 10.1.0.2} ], max_flows: 9, timeouts: { tcp: 1, tcp_syn: 2, tcp_close: 3, udp: 4, udp_stream: 5, icmp: 6, generic: 7 }, inside_networks: [10.0.0.0/8, 172.16.0.0/12], max_flows_per_source: 2 }",
        "nat: {}",
        "dpi: { patterns: p.txt, engine: regex, stream_window: 1, stream_flows: 2, event_table: 3, idle_timeout_ms: 4, depth: 5, depth_flows: 6 }",
        "elephant: { min_bytes: 1, min_rate_bps: 2, window_ms: 3, max_flows: 4, idle_timeout_ms: 5 }",
    ] {
        round_trips(&spec(yaml));
    }
}
