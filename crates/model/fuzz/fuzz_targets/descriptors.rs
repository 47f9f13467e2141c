//! Fuzz target: infrastructure and service descriptors come from operators' files;
//! any text must give a descriptor or an error naming the file, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_model::{Infrastructure, ServiceSet};

/// The shipped example infrastructure, so that service text is also checked against
/// real hosts and devices.
const INFRA: &str = include_str!("../../../../configs/examples/infrastructure.yaml");

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = Infrastructure::from_yaml("fuzz.yaml", text) {
        assert!(e.to_string().contains("fuzz.yaml"), "error without the file: {e}");
    }
    let infra = Infrastructure::from_yaml("infrastructure.yaml", INFRA).expect("example parses");
    if let Err(e) = ServiceSet::from_yaml("svc.yaml", text, &infra) {
        assert!(e.to_string().contains("svc.yaml"), "error without the file: {e}");
    }
});
