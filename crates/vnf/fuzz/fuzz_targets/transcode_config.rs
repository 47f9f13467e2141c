//! Fuzz target: any text given as a transcoder config (`nfx transcode --config`) is a
//! validated spec with a full ffmpeg command line, or an error — never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_vnf::transcode::ProcessSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ProcessSpec::Transcode(c)) = ProcessSpec::from_yaml(text) {
        let args = c.ffmpeg_args();
        assert!(args.iter().any(|a| a == "-i"));
        assert!(c.validate().is_ok());
    }
});
