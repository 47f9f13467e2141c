//! Fuzz target: DPI pattern files of any text parse into patterns or fail with an
//! error naming the line; small pattern files then build an engine (picked by the input's length) or
//! fail with an error; never a panic, and no error shows the canary a line carries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_vnf::dpi::{patterns, Dpi, DpiConfig, EngineKind};
use nfx_vnf_fuzz::CANARY;
use std::path::Path;

/// Largest pattern file whose engine is built (builds cost far more than parsing).
const BUILD_MAX_BYTES: usize = 160;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("p.txt");
    let specs = match patterns::parse(text, path) {
        Ok(s) => s,
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with("p.txt"), "{shown}");
            assert!(!shown.contains(CANARY), "an error shows the file: {shown}");
            return;
        }
    };
    if text.len() > BUILD_MAX_BYTES {
        return;
    }
    // One engine per input, picked by the input's length.
    let kinds = [EngineKind::Hybrid, EngineKind::Regex, EngineKind::AhoCorasick];
    let cfg = DpiConfig {
        engine: kinds[text.len() % kinds.len()],
        stream_flows: 4,
        event_table: 4,
        depth_flows: 4,
        ..DpiConfig::with_patterns(path)
    };
    if let Err(e) = Dpi::from_specs("dpi", &cfg, &specs, path) {
        let shown = e.to_string();
        assert!(!shown.contains(CANARY), "an error shows the file: {shown}");
    }
});
