//! The experiment's video: one clip per codec, made once per run with ffmpeg's
//! `testsrc2`, and the ffmpeg decode check of what `dst` reassembled.
//!
//! H.264 travels in MPEG-TS (the encoding the energy experiment shares). MJPEG travels
//! as a raw MJPEG byte stream (`-f mjpeg`: concatenated JPEG frames): ffmpeg's mjpeg
//! demuxer finds the frames by their markers in a plain byte stream, with no index or
//! header to wait for, while MPEG-TS has no standard mapping for MJPEG and AVI/Matroska
//! put an index at the end.

use super::super::experiment_energy::video::{encode_testsrc, TestClip, LAVFI_HEAD};
use anyhow::bail;
use std::path::Path;
use std::time::Duration;

/// A video codec of the paper's camera streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Codec {
    /// H.264 (libx264, ultrafast, zerolatency) in MPEG-TS.
    H264,
    /// Motion JPEG as a raw MJPEG byte stream.
    Mjpeg,
}

impl Codec {
    /// Its name in `summary.json` and the report.
    pub fn name(self) -> &'static str {
        match self {
            Codec::H264 => "h264",
            Codec::Mjpeg => "mjpeg",
        }
    }

    /// ffmpeg's input format for the received stream.
    fn format(self) -> &'static str {
        match self {
            Codec::H264 => "mpegts",
            Codec::Mjpeg => "mjpeg",
        }
    }
}

/// The MJPEG quantiser scale: 31 is the coarsest of the encoder's standard range and
/// still gives ~21 Mbit/s at 4K 30 fps for `testsrc2` (higher `-qmax` values change
/// almost nothing): the ~15 Mbit/s of a camera stream is out of MJPEG's reach at 4K.
pub const MJPEG_QSCALE: u32 = 31;

/// A clip ready to stream.
pub struct Clip {
    /// Its codec.
    pub codec: Codec,
    /// The whole file.
    pub bytes: Vec<u8>,
    /// Its bitrate over the run's seconds.
    pub bits_per_s: f64,
}

/// Frame size: 4K (the paper's), or 640×360 with `--quick`.
fn size(quick: bool) -> (u32, u32) {
    if quick {
        (640, 360)
    } else {
        (3840, 2160)
    }
}

/// The ffmpeg arguments encoding `secs` of `testsrc2` as MJPEG into `out`.
fn mjpeg_args(out: &str, (w, h): (u32, u32), secs: u32) -> Vec<String> {
    let q = MJPEG_QSCALE.to_string();
    let src = format!("testsrc2=size={w}x{h}:rate=30");
    let t = secs.to_string();
    let tail = [
        src.as_str(),
        "-t",
        &t,
        "-c:v",
        "mjpeg",
        "-q:v",
        &q,
        "-pix_fmt",
        "yuvj420p",
        "-f",
        "mjpeg",
        out,
    ];
    LAVFI_HEAD
        .iter()
        .chain(&tail)
        .map(|s| s.to_string())
        .collect()
}

/// Makes the clip of `codec` in `dir`: 4K at 30 fps (H.264 at ~15 Mbit/s, MJPEG at
/// `MJPEG_QSCALE`), or 640×360 (H.264 at 1 Mbit/s) with `quick`.
pub fn make(dir: &Path, codec: Codec, quick: bool, secs: u32) -> anyhow::Result<Clip> {
    let (width, height) = size(quick);
    let out = dir.join(format!("clip.{}", codec.name()));
    match codec {
        Codec::H264 => {
            let spec = TestClip {
                width,
                height,
                fps: 30,
                kbps: if quick { 1_000 } else { 15_000 },
                secs,
                audio: false,
            };
            encode_testsrc(&out, &spec)?;
        }
        Codec::Mjpeg => {
            let args = mjpeg_args(&out.to_string_lossy(), (width, height), secs);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            nfx_testbed::process::run(&args, Duration::from_secs(300))
                .map_err(|e| anyhow::anyhow!("encoding the MJPEG clip: {e:#}"))?;
        }
    }
    let bytes = std::fs::read(&out)?;
    if bytes.len() < 10_000 {
        bail!("ffmpeg wrote no usable clip to {}", out.display());
    }
    Ok(Clip {
        codec,
        bits_per_s: bytes.len() as f64 * 8.0 / f64::from(secs),
        bytes,
    })
}

/// Whether ffmpeg decodes `stream` of `codec` without printing an error.
pub fn decodes(dir: &Path, codec: Codec, stream: &[u8]) -> anyhow::Result<bool> {
    let p = dir.join(format!("received.{}", codec.name()));
    std::fs::write(&p, stream)?;
    let ps = p.to_string_lossy().to_string();
    let out = nfx_testbed::process::run_output(
        &[
            "ffmpeg",
            "-hide_banner",
            "-v",
            "error",
            "-nostdin",
            "-f",
            codec.format(),
            "-i",
            &ps,
            "-f",
            "null",
            "-",
        ],
        Duration::from_secs(120),
    )?;
    Ok(out.status.success() && out.stderr.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mjpeg_is_encoded_raw_at_the_fixed_quantiser() {
        let a = mjpeg_args("/tmp/x.mjpeg", (3840, 2160), 2);
        let at = |k: &str| a.iter().position(|x| x == k).map(|i| a[i + 1].as_str());
        assert_eq!(at("-i"), Some("testsrc2=size=3840x2160:rate=30"));
        assert_eq!(at("-c:v"), Some("mjpeg"));
        assert_eq!(at("-q:v"), Some("31"));
        assert_eq!(at("-t"), Some("2"));
        assert_eq!(a[a.len() - 3..], ["-f", "mjpeg", "/tmp/x.mjpeg"]);
        assert_eq!(
            (Codec::H264.format(), Codec::Mjpeg.format()),
            ("mpegts", "mjpeg")
        );
    }
}
