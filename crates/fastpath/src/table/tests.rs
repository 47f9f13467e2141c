//! The chain loaded into the kernel and run in-process (BPF_PROG_TEST_RUN): the verifier
//! accepts every program, frames get the verdicts and rewrites of the functions,
//! configuration flips without a reload, state moves between chains.

use super::testrun::{Verdict, EGRESS_TEST_IFINDEX};
use super::*;
use etherparse::PacketBuilder;
use nfx_packet::DropReason;
use std::path::Path;

const IN: u32 = 100;
const OUT: u32 = 101;
const MACS: [u8; 12] = [2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 8];

pub(super) fn spec(yaml: &str) -> NodeSpec {
    let v: serde_json::Value = serde_yaml_ng::from_str(yaml).expect("yaml");
    serde_json::from_value(v).expect("spec")
}

fn udp4(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .udp(sport, dport)
        .write(&mut v, b"hello")
        .unwrap();
    v
}

fn alone(chain: &mut TableChain) {
    chain
        .bind_test_port(IN, raw::HOOK_INGRESS, raw::DIR_FWD, Some((OUT, MACS)))
        .unwrap();
    chain
        .bind_test_port(OUT, raw::HOOK_INGRESS, raw::DIR_REV, Some((IN, MACS)))
        .unwrap();
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn firewall_and_nat_translate_and_filter() {
    let fns = vec![
        (
            "fw".to_string(),
            spec("firewall: {default: deny, rules: [{action: allow, proto: udp, dport: 53}], max_flows: 64}"),
        ),
        (
            "nat".to_string(),
            spec("nat: {snat: {public_ip: 192.0.2.1, port_range: [2000, 3000]}, max_flows: 64}"),
        ),
    ];
    let mut c = TableChain::deploy(&fns, Path::new(".")).unwrap();
    c.set_clock(Some(1_000_000_000)).unwrap();
    alone(&mut c);
    let r = c
        .run_frame(
            raw::HOOK_INGRESS,
            IN,
            &udp4([10, 0, 0, 1], 5000, [198, 51, 100, 7], 53),
            0,
        )
        .unwrap();
    assert_eq!(r.verdict, Verdict::Redirect);
    let m = nfx_packet::parse(&r.frame).unwrap();
    assert_eq!(m.key.src, u32::from_be_bytes([192, 0, 2, 1]));
    assert_eq!(
        m.key.sport, 2000,
        "5000 is out of range: the cursor's first port"
    );
    assert_eq!(m.ttl, 63);
    assert_eq!(&r.frame[..12], &MACS);
    let back = c
        .run_frame(
            raw::HOOK_INGRESS,
            OUT,
            &udp4([198, 51, 100, 7], 53, [192, 0, 2, 1], 2000),
            0,
        )
        .unwrap();
    assert_eq!(back.verdict, Verdict::Redirect);
    let m = nfx_packet::parse(&back.frame).unwrap();
    assert_eq!(
        (m.key.dst, m.key.dport),
        (u32::from_be_bytes([10, 0, 0, 1]), 5000)
    );
    let denied = c
        .run_frame(
            raw::HOOK_INGRESS,
            IN,
            &udp4([10, 0, 0, 1], 5000, [198, 51, 100, 7], 54),
            0,
        )
        .unwrap();
    assert_eq!(denied.verdict, Verdict::Drop(DropReason::AclDeny));
    let st = c.stats().unwrap();
    assert_eq!(st.functions[0].flows, 1);
    assert_eq!(st.functions[1].flows, 1);
    assert_eq!(st.nodes[1].drops["acl_deny"], 1);
    let _ = EGRESS_TEST_IFINDEX;
}

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

fn tcp6(src: &str, sport: u16, dst: &str, dport: u16, syn: bool, ack: bool) -> Vec<u8> {
    let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6(v6(src), v6(dst), 64)
        .tcp(sport, dport, 7, 64000);
    if syn {
        b = b.syn();
    }
    if ack {
        b = b.ack(1);
    }
    let mut v = Vec::new();
    b.write(&mut v, b"data").unwrap();
    v
}

fn chain(fns: &[(&str, &str)]) -> TableChain {
    let fns: Vec<(String, NodeSpec)> = fns.iter().map(|(n, s)| (n.to_string(), spec(s))).collect();
    let mut c = TableChain::deploy(&fns, Path::new(".")).unwrap();
    c.set_clock(Some(5_000_000_000)).unwrap();
    alone(&mut c);
    c
}

fn run(c: &mut TableChain, side: u32, f: &[u8]) -> testrun::Run {
    c.run_frame(raw::HOOK_INGRESS, side, f, 0).unwrap()
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn ipv6_firewall_tracks_connections_and_nat66_translates() {
    let mut c = chain(&[
        ("fw", "firewall: {default: deny, max_flows: 16, rules: [{action: allow, src: '2001:db8:1::/48', proto: tcp, dport: 443}]}"),
        ("nat", "nat: {snat: {public_ip: '2001:db8:ffff::1', port_range: [20000, 20010]}, max_flows: 16}"),
    ]);
    let (inside, remote, public) = ("2001:db8:1::5", "2001:db8:2::9", "2001:db8:ffff::1");
    let syn = run(&mut c, IN, &tcp6(inside, 33000, remote, 443, true, false));
    assert_eq!(syn.verdict, Verdict::Redirect);
    let h = etherparse::PacketHeaders::from_ethernet_slice(&syn.frame).unwrap();
    let Some(etherparse::NetHeaders::Ipv6(ip, _)) = h.net else {
        panic!()
    };
    assert_eq!(ip.source, v6(public));
    assert_eq!(ip.hop_limit, 63);
    let Some(etherparse::TransportHeader::Tcp(t)) = h.transport else {
        panic!()
    };
    assert_eq!(t.source_port, 20000);
    // The receiver's view of the checksum: etherparse recomputes it.
    let payload = &syn.frame[syn.frame.len() - 4..];
    assert_eq!(
        t.calc_checksum_ipv6(&ip, payload).unwrap(),
        t.checksum,
        "TCP checksum after NAT66"
    );
    let synack = run(&mut c, OUT, &tcp6(remote, 443, public, 20000, true, true));
    assert_eq!(synack.verdict, Verdict::Redirect);
    let m = etherparse::PacketHeaders::from_ethernet_slice(&synack.frame).unwrap();
    let Some(etherparse::NetHeaders::Ipv6(ip, _)) = m.net else {
        panic!()
    };
    assert_eq!(ip.destination, v6(inside));
    assert_eq!(
        run(&mut c, IN, &tcp6(inside, 33000, remote, 443, false, true)).verdict,
        Verdict::Redirect
    );
    // Unsolicited from outside, and a new flow the ACL does not allow.
    let stray = run(&mut c, OUT, &tcp6(remote, 443, inside, 33001, false, true));
    assert_eq!(stray.verdict, Verdict::Drop(DropReason::InvalidState));
    let denied = run(
        &mut c,
        IN,
        &tcp6("2001:db8:9::5", 33000, remote, 443, true, false),
    );
    assert_eq!(denied.verdict, Verdict::Drop(DropReason::AclDeny));
    let mut blob = Vec::new();
    assert_eq!(c.export_state(0, &mut blob).unwrap(), 1);
    assert_eq!(blob[5], nfx_vnf::table::blob::BlobKind::FirewallWide as u8);
    assert_eq!(c.stats().unwrap().functions[0].flows, 1);
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn ipv6_neighbour_discovery_goes_to_the_kernel_and_extension_headers_are_walked() {
    let mut c = chain(&[("fw", "firewall: {default: allow, max_flows: 16}")]);
    let mut ns = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [0x33, 0x33, 0, 0, 0, 1])
        .ipv6(v6("fe80::1"), v6("ff02::1:ff00:2"), 255)
        .icmpv6(etherparse::Icmpv6Type::Unknown {
            type_u8: 135,
            code_u8: 0,
            bytes5to8: [0; 4],
        })
        .write(&mut ns, &[0; 16])
        .unwrap();
    assert_eq!(run(&mut c, IN, &ns).verdict, Verdict::Kernel);
    let mut arp = udp4([10, 0, 0, 1], 1, [10, 0, 0, 2], 2);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(run(&mut c, IN, &arp).verdict, Verdict::Kernel);
    // A hop-by-hop options header (8 bytes of padding) before TCP.
    let plain = tcp6("2001:db8::1", 1, "2001:db8::2", 2, true, false);
    let mut hbh = plain.clone();
    hbh[14 + 6] = 0;
    hbh.splice(54..54, [6u8, 0, 1, 4, 0, 0, 0, 0]);
    let plen = u16::from_be_bytes([hbh[18], hbh[19]]) + 8;
    hbh[18..20].copy_from_slice(&plen.to_be_bytes());
    assert_eq!(run(&mut c, IN, &hbh).verdict, Verdict::Redirect);
    // A non-first fragment.
    let mut frag = plain.clone();
    frag[14 + 6] = 44;
    frag.splice(54..54, [6u8, 0, 0, 8, 0, 0, 0, 1]);
    let plen = u16::from_be_bytes([frag[18], frag[19]]) + 8;
    frag[18..20].copy_from_slice(&plen.to_be_bytes());
    assert_eq!(
        run(&mut c, IN, &frag).verdict,
        Verdict::Drop(DropReason::Fragment)
    );
    let mut hop0 = plain;
    hop0[14 + 7] = 0;
    assert_eq!(
        run(&mut c, IN, &hop0).verdict,
        Verdict::Drop(DropReason::TtlExpired)
    );
    assert_eq!(c.stats().unwrap().nodes[0].to_kernel, 2);
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_full_table_refuses_new_flows_and_keeps_the_existing_ones() {
    // Installed on tables prepared larger than the function: its configured size holds.
    let fw = vec![(
        "fw".to_string(),
        spec("firewall: {default: allow, max_flows: 2}"),
    )];
    let mut c = TableChain::prepare(Shape {
        rules: 4,
        fw_flows: 64,
        ..Shape::default()
    })
    .unwrap();
    let small = vec![("fw".to_string(), spec("firewall: {max_flows: 65}"))];
    let e = c.install(&small, Path::new(".")).unwrap_err();
    assert!(
        e.to_string().contains("smaller than the chain needs"),
        "{e}"
    );
    c.install(&fw, Path::new(".")).unwrap();
    assert!(
        c.install(&fw, Path::new(".")).is_err(),
        "one chain per prepared device"
    );
    c.set_clock(Some(5_000_000_000)).unwrap();
    alone(&mut c);
    for p in [1, 2] {
        assert_eq!(
            run(&mut c, IN, &udp4([10, 0, 0, 1], p, [10, 9, 9, 9], 53)).verdict,
            Verdict::Redirect
        );
    }
    let third = run(&mut c, IN, &udp4([10, 0, 0, 1], 3, [10, 9, 9, 9], 53));
    assert_eq!(third.verdict, Verdict::Drop(DropReason::TableFull));
    for p in [1, 2] {
        assert_eq!(
            run(&mut c, OUT, &udp4([10, 9, 9, 9], 53, [10, 0, 0, 1], p)).verdict,
            Verdict::Redirect
        );
    }
    let st = c.stats().unwrap();
    assert_eq!(st.nodes[1].drops["table_full"], 1);
    assert_eq!((st.functions[0].flows, st.functions[0].capacity), (2, 2));
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn configure_swaps_rules_without_a_reload_and_keeps_flows() {
    let mut c = chain(&[("fw", "firewall: {default: deny, max_flows: 16, rules: [{action: allow, proto: udp, dport: 53}, {action: allow, proto: udp, dport: 54}]}")]);
    let q = udp4([10, 0, 0, 1], 7, [10, 9, 9, 9], 53);
    assert_eq!(run(&mut c, IN, &q).verdict, Verdict::Redirect);
    c.configure(0, &spec("firewall: {default: deny, max_flows: 16, rules: [{action: allow, proto: udp, dport: 54}]}"), Path::new("."))
        .unwrap();
    assert_eq!(
        run(&mut c, IN, &q).verdict,
        Verdict::Redirect,
        "tracked flow stays"
    );
    let new = udp4([10, 0, 0, 1], 8, [10, 9, 9, 9], 53);
    assert_eq!(
        run(&mut c, IN, &new).verdict,
        Verdict::Drop(DropReason::AclDeny)
    );
    // Twice more: both slots are rewritten in turn.
    for (port, rules, verdict) in [
        (80, "[{action: allow}]", Verdict::Redirect),
        (81, "[]", Verdict::Drop(DropReason::AclDeny)),
    ] {
        c.configure(
            0,
            &spec(&format!(
                "firewall: {{default: deny, max_flows: 16, rules: {rules}}}"
            )),
            Path::new("."),
        )
        .unwrap();
        let f = udp4([10, 0, 0, 2], 9, [10, 9, 9, 9], port);
        assert_eq!(run(&mut c, IN, &f).verdict, verdict, "{rules}");
    }
    let e = c
        .configure(0, &spec("firewall: {max_flows: 17}"), Path::new("."))
        .unwrap_err();
    assert!(e.to_string().contains("fixed at deploy"), "{e}");
    let e = c
        .configure(0, &spec("firewall: {max_flows: 16, rules: [{action: allow}, {action: allow}, {action: allow}]}"), Path::new("."))
        .unwrap_err();
    assert!(e.to_string().contains("redeploy"), "{e}");
    assert!(c
        .configure(
            0,
            &spec("nat: {snat: {public_ip: 1.2.3.4}}"),
            Path::new(".")
        )
        .is_err());
    assert_eq!(
        run(&mut c, IN, &q).verdict,
        Verdict::Redirect,
        "a refused configuration changes nothing"
    );
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn state_moves_between_chains_and_between_tiers() {
    let nat = "nat: {snat: {public_ip: 192.0.2.1, port_range: [2000, 2100]}, max_flows: 64}";
    let mut a = chain(&[("nat", nat)]);
    for p in 0..10u16 {
        assert_eq!(
            run(
                &mut a,
                IN,
                &udp4([10, 0, 0, 1], 5000 + p, [10, 9, 9, 9], 53)
            )
            .verdict,
            Verdict::Redirect
        );
    }
    let mut blob = Vec::new();
    assert_eq!(a.export_state(0, &mut blob).unwrap(), 10);
    let mut b = chain(&[("nat", nat)]);
    assert_eq!(b.import_state(0, &blob).unwrap(), 10);
    assert_eq!(
        b.import_state(0, &blob).unwrap(),
        0,
        "present flows are skipped"
    );
    // The reply to the fifth mapping reaches the same inside endpoint through `b`.
    let out = run(&mut a, IN, &udp4([10, 0, 0, 1], 5004, [10, 9, 9, 9], 53));
    let public = nfx_packet::parse(&out.frame).unwrap().key.sport;
    let back = run(
        &mut b,
        OUT,
        &udp4([10, 9, 9, 9], 53, [192, 0, 2, 1], public),
    );
    assert_eq!(nfx_packet::parse(&back.frame).unwrap().key.dport, 5004);
    // The software NAT reads the same blob, and its export is read here.
    let mut soft = nfx_vnf::build(&spec(nat), "nat", &Path::new(".").into()).unwrap();
    assert_eq!(soft.import_state(&blob).unwrap(), 10);
    let mut sblob = Vec::new();
    soft.export_state(&mut sblob);
    let mut c = chain(&[("nat", nat)]);
    assert_eq!(c.import_state(0, &sblob).unwrap(), 10);
    // Too many for the table: nothing is imported.
    let mut small = chain(&[("nat", "nat: {snat: {public_ip: 192.0.2.1}, max_flows: 4}")]);
    assert_eq!(
        small.import_state(0, &blob),
        Err(nfx_vnf::StateError::TableFull(4))
    );
    assert_eq!(small.stats().unwrap().functions[0].flows, 0);
    // Malformed and foreign blobs leave the table as it was.
    let mut bad = blob.clone();
    bad[12 + 1] = 0x80;
    assert!(matches!(
        b.import_state(0, &bad),
        Err(nfx_vnf::StateError::Malformed(_))
    ));
    let mut fw = Vec::new();
    chain(&[("fw", "firewall: {max_flows: 4}")])
        .export_state(0, &mut fw)
        .unwrap();
    assert!(matches!(
        b.import_state(0, &fw),
        Err(nfx_vnf::StateError::WrongKind { .. })
    ));
    assert!(matches!(
        b.import_state(0, &blob[..20]),
        Err(nfx_vnf::StateError::Malformed(_))
    ));
    assert_eq!(b.stats().unwrap().functions[0].flows, 10);
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn expired_flows_are_swept_and_elephants_report_once() {
    let mut c = chain(&[
        ("fw", "firewall: {default: allow, max_flows: 16, timeouts: {udp: 2}}"),
        ("elephant", "elephant: {min_bytes: 3000, min_rate_bps: 8000, window_ms: 1000, max_flows: 16, idle_timeout_ms: 1500}"),
    ]);
    let big = |p| {
        let mut v = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv6(v6("2001:db8::1"), v6("2001:db8::2"), 64)
            .udp(p, 9)
            .write(&mut v, &[7u8; 1400])
            .unwrap();
        v
    };
    for _ in 0..4 {
        assert_eq!(run(&mut c, IN, &big(1)).verdict, Verdict::Redirect);
    }
    let ev = c.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].flow.src.as_str(), ev[0].detail.bytes),
        ("2001:db8::1", 3 * 1448)
    );
    c.set_clock(Some(5_000_000_000 + 3_000_000_000)).unwrap();
    assert_eq!(
        c.expire().unwrap(),
        2,
        "the firewall flow and the idle elephant flow"
    );
    let st = c.stats().unwrap();
    assert_eq!((st.functions[0].flows, st.functions[1].flows), (0, 0));
    assert_eq!(st.functions[0].expired, 1);
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn migration_refuses_other_functions_and_a_detached_source() {
    let fw = || {
        (
            "fw".to_string(),
            spec("firewall: {default: allow, max_flows: 8}"),
        )
    };
    let nat = || {
        (
            "nat".to_string(),
            spec("nat: {snat: {public_ip: 192.0.2.1}, max_flows: 8}"),
        )
    };
    let mut old = TableChain::deploy(&[fw(), nat()], Path::new(".")).unwrap();
    let mut other = TableChain::deploy(&[nat(), fw()], Path::new(".")).unwrap();
    let e = old.migrate_to(&mut other).unwrap_err().to_string();
    assert!(e.contains("same functions in the same order"), "{e}");
    let mut same = TableChain::deploy(&[fw(), nat()], Path::new(".")).unwrap();
    let e = old.migrate_to(&mut same).unwrap_err().to_string();
    assert!(e.contains("from an attached chain"), "{e}");
    assert!(!old.is_attached() && !same.is_attached());
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_selected_chain_runs_only_its_services_frames_and_counts_only_them() {
    let mut c = chain(&[(
        "fw",
        "firewall: {default: deny, rules: [{action: allow, proto: udp, dport: 53}], max_flows: 64}",
    )]);
    let dns = FrameMatch {
        proto: Some(17),
        dport: Some((53, 54)),
        ..FrameMatch::default()
    };
    let reply = FrameMatch {
        proto: Some(17),
        sport: Some((53, 54)),
        ..FrameMatch::default()
    };
    let sel = Selection {
        forward: dns,
        reverse: reply,
    };
    c.select(Some(&sel)).unwrap();
    assert_eq!(c.selection(), Some(&sel));
    let other = udp4([10, 0, 0, 1], 5000, [198, 51, 100, 7], 80);
    let r = run(&mut c, IN, &other);
    assert_eq!(r.verdict, Verdict::Next, "another service's frame goes on");
    assert_eq!(r.frame, other, "untouched");
    let mut short = udp4([10, 0, 0, 1], 5000, [198, 51, 100, 7], 53);
    short.truncate(38);
    assert_eq!(
        run(&mut c, IN, &short).verdict,
        Verdict::Drop(DropReason::Truncated),
        "a frame that does not parse is no service's: dropped and counted, not handed on"
    );
    let asked = udp4([10, 0, 0, 1], 5000, [198, 51, 100, 7], 53);
    assert_eq!(run(&mut c, IN, &asked).verdict, Verdict::Redirect);
    let denied = udp4([10, 0, 0, 1], 5000, [198, 51, 100, 7], 54);
    assert_eq!(
        run(&mut c, IN, &denied).verdict,
        Verdict::Drop(DropReason::AclDeny)
    );
    let answer = udp4([198, 51, 100, 7], 53, [10, 0, 0, 1], 5000);
    assert_eq!(run(&mut c, OUT, &answer).verdict, Verdict::Redirect);
    let not_a_reply = udp4([198, 51, 100, 7], 80, [10, 0, 0, 1], 5000);
    assert_eq!(run(&mut c, OUT, &not_a_reply).verdict, Verdict::Next);
    let st = c.stats().unwrap();
    assert_eq!(
        st.nodes[0].packets, 4,
        "parse counted its service's frames and the malformed one only"
    );
    assert_eq!(st.nodes[1].drops["acl_deny"], 1);

    c.select(None).unwrap();
    assert_eq!(
        run(&mut c, IN, &other).verdict,
        Verdict::Drop(DropReason::AclDeny),
        "unselected, the chain takes every frame"
    );
}
