//! The lookaside device's processing of a ring a hostile client filled: arbitrary ring
//! entries, slot bytes, tail moves (also outside the ring or backwards) and revocations.
//! The device completes entries only in order and within the ring, each with a valid
//! status, and stops serving the queue pair exactly when it must (docs/fuzzing.md).

#![no_main]

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use nfx_accel::lookaside::testing::RingHarness;

static H: Mutex<Option<RingHarness>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut h = H.lock().unwrap_or_else(|e| e.into_inner());
    h.get_or_insert_with(|| RingHarness::new().expect("detached queue pair"))
        .run(data);
});
