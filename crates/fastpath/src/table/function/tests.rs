//! Plan-time checks: what the table tier refuses and why, entries per function, and the
//! translation of the software configuration (IPv4 by the software's own validation,
//! IPv6 by the table tier's).

use super::*;
use crate::table::tests::spec;
use std::path::Path;

fn check_yaml(yaml: &str, capacity: u64) -> Result<Need, Refusal> {
    check(&spec(yaml), capacity, Path::new("."))
}

#[test]
fn dpi_is_refused_with_the_reason() {
    let e = check_yaml("dpi: {patterns: /etc/nfx/p.txt}", 1 << 20).unwrap_err();
    assert!(
        matches!(
            e,
            Refusal::Unsupported {
                function: "dpi",
                ..
            }
        ),
        "{e}"
    );
    let m = e.to_string();
    assert!(
        m.contains("`dpi` cannot run on the table tier") && m.contains("software tier"),
        "{m}"
    );
}

#[test]
fn entries_are_rules_plus_flows_and_larger_tables_are_refused() {
    let fw = "firewall: {max_flows: 64, rules: [{action: allow, proto: tcp, dport: 80}, {action: deny}]}";
    assert_eq!(check_yaml(fw, 66).unwrap(), Need { entries: 66 });
    let e = check_yaml(fw, 65).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`firewall` needs 66 table entries (2 rules + 64 flows); the device has 65"
    );
    let nat = "nat: {snat: {public_ip: 192.0.2.1}, max_flows: 10, dnat: [{proto: udp, public_port: 53, to_ip: 10.0.0.1}]}";
    assert_eq!(check_yaml(nat, 100).unwrap(), Need { entries: 21 });
    assert!(matches!(
        check_yaml(nat, 20),
        Err(Refusal::TooLarge { need: 21, .. })
    ));
    assert_eq!(
        check_yaml("elephant: {max_flows: 16}", 16).unwrap(),
        Need { entries: 16 }
    );
}

#[test]
fn software_validation_names_the_field() {
    let e = check_yaml(
        "firewall: {rules: [{action: allow}, {action: allow, dst: '10.0.0/8'}]}",
        1 << 30,
    )
    .unwrap_err();
    assert!(e.to_string().contains("rules[1].dst"), "{e}");
    let e = check_yaml("firewall: {timeouts: {syn_sent: 0}}", 1 << 30).unwrap_err();
    assert!(e.to_string().contains("timeouts.syn_sent"), "{e}");
    let e = check_yaml("firewall: {max_flows: 0}", 1 << 30).unwrap_err();
    assert!(e.to_string().contains("max_flows"), "{e}");
    let e = check_yaml(
        "nat: {snat: {public_ip: 1.2.3.4, port_range: [5000, 4000]}}",
        1 << 30,
    )
    .unwrap_err();
    assert!(e.to_string().contains("snat.port_range"), "{e}");
    let e = check_yaml(
        "nat: {snat: {public_ip: 1.2.3.4}, dnat: [{proto: tcp, public_port: 80, to_ip: 10.0.0.1}, {proto: tcp, public_port: 80, to_ip: 10.0.0.2}]}",
        1 << 30,
    )
    .unwrap_err();
    assert!(e.to_string().contains("dnat[1].public_port"), "{e}");
    let e = check_yaml("elephant: {min_bytes: 0, min_rate_bps: 0}", 1 << 30).unwrap_err();
    assert!(e.to_string().contains("min_bytes"), "{e}");
}

#[test]
fn ipv6_rules_and_addresses_are_the_table_tiers() {
    let f = Function::plan(
        &spec("firewall: {rules: [{action: allow, src: '2001:db8::/32', proto: tcp, dport: 443}, {action: deny, src: 10.0.0.0/8}, {action: allow}]}"),
        Path::new("."),
    )
    .unwrap();
    let Function::Firewall(p) = f else { panic!() };
    assert_eq!(p.rules[0].family, 6);
    assert_eq!(p.rules[0].src[0].to_ne_bytes(), [0x20, 0x01, 0x0d, 0xb8]);
    assert_eq!(p.rules[0].src_mask, [u32::MAX, 0, 0, 0]);
    assert_eq!(
        (p.rules[0].dport_lo, p.rules[0].dport_hi, p.rules[0].proto),
        (443, 443, 6)
    );
    assert_eq!(p.rules[1].family, 4);
    assert_eq!(p.rules[1].src_mask[0].to_ne_bytes(), [255, 0, 0, 0]);
    assert_eq!(p.rules[2].family, 0, "no address: both families");
    let e = check_yaml(
        "firewall: {rules: [{action: allow, src: '2001:db8::1', dst: 10.0.0.1}]}",
        1 << 30,
    )
    .unwrap_err();
    assert!(e.to_string().contains("rules[0].dst"), "{e}");
    let e = check_yaml(
        "firewall: {rules: [{action: allow, src: '2001:db8::/129'}]}",
        1 << 30,
    )
    .unwrap_err();
    assert!(e.to_string().contains("rules[0].src"), "{e}");
    let n = Function::plan(
        &spec("nat: {snat: {public_ip: '2001:db8::1'}}"),
        Path::new("."),
    )
    .unwrap();
    let Function::Nat(n) = n else { panic!() };
    assert_eq!(n.snat.map(|s| (s.1, s.2, s.3)), Some((6, 1024, 65535)));
    let e = check_yaml(
        "nat: {snat: {public_ip: '2001:db8::1'}, dnat: [{proto: tcp, public_ip: 192.0.2.1, public_port: 80, to_ip: 10.0.0.1}]}",
        1 << 30,
    )
    .unwrap_err();
    assert!(e.to_string().contains("one address family"), "{e}");
}

#[test]
fn elephant_rate_threshold_is_window_bytes() {
    let f = Function::plan(
        &spec("elephant: {min_bytes: 1, min_rate_bps: 80000, window_ms: 200}"),
        Path::new("."),
    )
    .unwrap();
    let Function::Elephant(p) = f else { panic!() };
    // 80 kbit/s over 200 ms = 2000 bytes; one byte less does not reach it.
    assert_eq!(p.min_window_bytes, 2000);
    let f = Function::plan(
        &spec("elephant: {min_rate_bps: 1, window_ms: 1}"),
        Path::new("."),
    )
    .unwrap();
    let Function::Elephant(p) = f else { panic!() };
    assert_eq!(p.min_window_bytes, 1, "rounded up");
}
