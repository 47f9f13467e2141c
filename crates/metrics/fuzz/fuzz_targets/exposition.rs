//! Metrics text from another process (an agent's `/metrics` as the controller federates
//! it): parsing never panics; what parses can be relabelled and rendered, and the
//! rendered text parses back (so no family is declared twice) to the same samples and
//! renders to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_metrics::text::Exposition;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut e) = Exposition::parse(text) else {
        return;
    };
    let n = e.samples();
    e.add_labels(&[("host", "h\"1\\\n"), ("worker", "w")]);
    let out = e.render();
    let back = Exposition::parse(&out).expect("rendered text parses");
    assert_eq!(back.samples(), n);
    assert_eq!(back.render(), out);
});
