//! The chain loaded into the kernel and run in-process (BPF_PROG_TEST_RUN): the verifier
//! accepts every program, frames get the verdicts and rewrites of the functions,
//! configuration flips without a reload, state moves between chains.

use super::testrun::{Verdict, EGRESS_TEST_IFINDEX};
use super::*;
use etherparse::PacketBuilder;
use nfx_packet::DropReason;

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
