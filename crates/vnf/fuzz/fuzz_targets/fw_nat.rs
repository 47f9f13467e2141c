//! Fuzz target: the firewall's and the NAT's state machines (TCP states and windows,
//! RST and ICMP checks, mid-stream pickup, per-source limits, port pool, port
//! forwards) under any frames in either direction at any pace: no panic, tables and
//! counts within their bounds, and the state exported afterwards
//! imports whole into fresh nodes of the same configuration.
//!
//! Input: byte 0 picks the configuration (bit 0 `loose`, bit 1 `reverse_new: acl`,
//! bit 2 per-source limits), then frames as in `drive`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_vnf_fuzz::{check_bounds, check_reimport, drive, fw_nat};

fuzz_target!(|data: &[u8]| {
    let [variant, frames @ ..] = data else {
        return;
    };
    let mut nodes = vec![fw_nat(*variant, 0), fw_nat(*variant, 1)];
    drive(&mut nodes, frames, 4);
    for (i, n) in nodes.iter().enumerate() {
        check_bounds(n.as_ref());
        check_reimport(n.as_ref(), fw_nat(*variant, i).as_mut());
    }
});
