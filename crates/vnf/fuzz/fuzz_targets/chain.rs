//! Fuzz target: any sequence of frames, in either direction and at any pace, goes
//! through firewall → NAT → DPI → elephant detection without a panic, the tables stay
//! within their bounds, and the firewall's and NAT's flow state exported afterwards
//! imports whole into fresh nodes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_vnf_fuzz::{chain, check_bounds, check_reimport, drive, node};

fuzz_target!(|data: &[u8]| {
    let mut nodes = chain();
    drive(&mut nodes, data, 8);
    for (i, n) in nodes.iter().enumerate().take(2) {
        check_bounds(n.as_ref());
        check_reimport(n.as_ref(), node(i).as_mut());
    }
});
