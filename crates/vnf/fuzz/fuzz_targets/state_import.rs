//! Fuzz target: flow-state blobs of any bytes offered to the firewall or the NAT
//! either import or fail with an error that leaves the node's state exactly as it was
//! (imports are all or nothing), and an imported blob offered again adds nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_vnf::Node;
use nfx_vnf_fuzz::{exported, node};

/// Offers `blob` to `n` and checks the all-or-nothing contract.
fn offer(n: &mut dyn Node, blob: &[u8]) {
    let before = exported(n);
    match n.import_state(blob) {
        Err(_) => assert_eq!(exported(n), before, "a failed import changed state"),
        Ok(_) => assert_eq!(n.import_state(blob), Ok(0), "a second import added flows"),
    }
}

fuzz_target!(|data: &[u8]| {
    // Byte 0 bit 0: firewall (0) or NAT (1); byte 1: where the first blob ends. The
    // first blob gives the node some state, the second is offered on top of it.
    let [which, cut, rest @ ..] = data else {
        return;
    };
    let (first, second) = rest.split_at(usize::from(*cut).min(rest.len()));
    let mut n = node(usize::from(which & 1));
    offer(n.as_mut(), first);
    offer(n.as_mut(), second);
});
