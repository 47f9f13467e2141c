//! Fuzz target: the send-side segmentation takes any vnet header and packet read from
//! the TUN. A plan is refused or cut into segments that each fit the MTU, lie inside
//! the packet, and are written without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_tunnel::offload::{read_vnet, Plan};

fuzz_target!(|data: &[u8]| {
    // Byte 0: the MTU (576 + 4 × byte); then the vnet header, then the packet.
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let mtu = 576 + 4 * usize::from(m);
    let Some(h) = read_vnet(rest) else { return };
    let pkt = &rest[VNET..];
    let Ok(plan) = Plan::new(&h, pkt, mtu) else {
        return;
    };
    let mut dst = vec![0u8; mtu];
    let mut payload = 0;
    for i in 0..plan.count {
        let n = plan.seg_len(i);
        assert!(n <= mtu, "segment {i} of {n} bytes over the MTU {mtu}");
        assert_eq!(plan.write(pkt, i, &mut dst), n);
        payload += n - plan.shape().map_or(0, |(hdr, _)| hdr);
    }
    let hdr = plan.shape().map_or(0, |(hdr, _)| hdr);
    assert_eq!(payload + hdr, pkt.len(), "segments do not cover the packet");
});

/// Length of the vnet header in front of every packet read from the TUN.
const VNET: usize = nfx_tunnel::offload::VnetHdr::LEN;
