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
    match build(&spec(yaml), "n", Path::new(".")) {
        Err(e) => e,
        Ok(_) => panic!("expected an error for {yaml}"),
    }
}

#[test]
fn chain_shapes_build() {
    let fw = spec("firewall: { default: deny, rules: [ {action: allow, proto: tcp, dst: 10.0.0.0/8, dport: 5201}, {action: allow, proto: udp, sport: any, dport: 1000-2000}, {action: deny, proto: icmp} ], max_flows: 1000 }");
    let node = build(&fw, "fw0", Path::new(".")).unwrap();
    assert_eq!(node.name(), "fw0");
    assert_eq!(node.stats()["rules"], 3);
    let nat = spec("nat: { snat: { public_ip: 10.200.2.100, port_range: [1024, 65535] }, dnat: [ {proto: tcp, public_port: 8080, to_ip: 10.200.1.1, to_port: 80} ] }");
    assert_eq!(build(&nat, "nat0", Path::new(".")).unwrap().name(), "nat0");
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
    assert!(e.msg.contains("10.0.0/8"), "{e}");
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

#[test]
fn rules_file_relative_to_config_dir() {
    let dir = std::env::temp_dir().join(format!("nfx-vnf-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rules = String::new();
    for i in 0..150 {
        rules.push_str(&format!(
            "- {{action: deny, proto: udp, dport: {}}}\n",
            10000 + i
        ));
    }
    rules.push_str("- {action: allow, proto: tcp, src: 10.0.0.0/8, dport: 5201}\n");
    std::fs::write(dir.join("acl.yaml"), &rules).unwrap();
    std::fs::write(
        dir.join("bad.yaml"),
        "- {action: allow, proto: tcp, dst: nowhere}\n",
    )
    .unwrap();
    let s = spec(
        "firewall: { rules: [ {action: deny, proto: tcp, dport: 22} ], rules_file: acl.yaml }",
    );
    let node = build(&s, "fw", &dir);
    let bad = build(&spec("firewall: { rules_file: bad.yaml }"), "fw", &dir).err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(node.unwrap().stats()["rules"], 152);
    let bad = bad.expect("bad rules file is an error");
    assert!(
        bad.field.starts_with("firewall.rules_file(")
            && bad.field.ends_with("bad.yaml).rules[0].dst"),
        "{bad}"
    );
}
