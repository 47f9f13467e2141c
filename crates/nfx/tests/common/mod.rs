//! Helpers shared by the namespace end-to-end tests.

use std::time::{Duration, Instant};

/// Polls `f` every 50 ms until it is true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first stream of media file `path` as ffprobe reads it: `{"codec_name", "width"}`
/// (null fields when ffprobe finds no stream).
// Only the transcoding tests read video.
#[allow(dead_code)]
pub fn first_stream(path: &std::path::Path) -> serde_json::Value {
    let probe = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "stream=codec_name,width"])
        .args(["-of", "json"])
        .arg(path)
        .output()
        .unwrap();
    let streams: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
    streams["streams"][0].clone()
}

/// The bytes an ffmpeg run wrote, from its last `-progress` block (`total_size=`) in
/// `stdout`; 0 when it printed none.
// Only the transcoding tests run ffmpeg.
#[allow(dead_code)]
pub fn ffmpeg_total_size(stdout: &[u8]) -> u64 {
    String::from_utf8_lossy(stdout)
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("total_size=")?.parse().ok())
        .unwrap_or(0)
}

/// One paced UDP flow of 512-byte datagrams from namespace `ns` to `dst:port` at `pps` a
/// second for `secs`, one datagram a call: the steady stream the energy tests offer a
/// worker (its CPU, and so its modelled power, follows the rate).
// Only the energy tests send a paced stream.
#[allow(dead_code)]
pub fn paced(
    ns: &str,
    dst: std::net::Ipv4Addr,
    port: u16,
    pps: u64,
    secs: u64,
) -> nfx_testbed::udpgen::GenSpec {
    nfx_testbed::udpgen::GenSpec {
        ns: ns.to_string(),
        dst,
        port,
        payload: 512,
        pattern: Vec::new(),
        flows: 1,
        duration: Duration::from_secs(secs),
        batch: 1,
        pps: Some(pps),
    }
}
