//! The lookaside device's control protocol: any bytes a local client sends on the
//! device socket. A message decodes or is refused; one that decodes encodes back to
//! itself; the device answers it (creating sessions in a 4-entry table, so a full table
//! is reached) with a reply, never a panic (docs/fuzzing.md).

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nfx_accel::lookaside::testing::{control_message, Detached, RingHarness};

fn harness() -> &'static Detached {
    static H: OnceLock<Detached> = OnceLock::new();
    H.get_or_init(|| RingHarness::control().expect("detached queue pair"))
}

fuzz_target!(|data: &[u8]| {
    control_message(harness(), data);
});
