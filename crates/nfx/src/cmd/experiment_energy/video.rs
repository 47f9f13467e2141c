//! The video side of the experiment: one MPEG-TS clip made once with ffmpeg's test
//! sources (H.264 video and an AAC tone), replayed in real time by one `ffmpeg -re -c
//! copy` per stream from src towards the transcoding box on cloud, and the transcoders
//! there (one per stream, [`Transcoder`]) sending to dst.

use anyhow::{bail, Context};
use nfx_testbed::netns;
use nfx_testbed::process::ChildGuard;
use nfx_vnf::transcode::process::Transcoder;
use nfx_vnf::transcode::{Codec, TranscodeConfig};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// First UDP port of the transcoders' inputs (stream i uses `IN_PORT + i`).
pub const IN_PORT: u16 = 5600;
/// First UDP port at dst of the transcoded streams.
pub const OUT_PORT: u16 = 6600;
/// Frame rate of the clip.
pub const FPS: u32 = 25;

/// The clip's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clip {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// Video bitrate, kbit/s.
    pub kbps: u32,
    /// Transcoded bitrate, kbit/s.
    pub out_kbps: u32,
}

/// Encodes the clip (10 s, looped by the sources) into `dir/clip.ts`.
pub fn encode_clip(dir: &Path, clip: Clip) -> anyhow::Result<PathBuf> {
    let out = dir.join("clip.ts");
    encode_testsrc(
        &out,
        &TestClip {
            width: clip.width,
            height: clip.height,
            fps: FPS,
            kbps: clip.kbps,
            secs: 10,
            audio: true,
        },
    )?;
    Ok(out)
}

/// A clip of ffmpeg's `testsrc2` pattern: H.264 (x264 ultrafast, zero-latency tuning,
/// one key frame a second, constrained to `kbps`) in MPEG-TS, with a 440 Hz AAC tone
/// when `audio`.
#[derive(Debug, Clone, Copy)]
pub struct TestClip {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// Frames per second.
    pub fps: u32,
    /// Video bitrate, kbit/s.
    pub kbps: u32,
    /// Length, seconds.
    pub secs: u32,
    /// With an audio track.
    pub audio: bool,
}

/// The start of an ffmpeg command encoding a lavfi test source (the source follows).
pub const LAVFI_HEAD: [&str; 9] = [
    "ffmpeg",
    "-hide_banner",
    "-loglevel",
    "error",
    "-nostdin",
    "-y",
    "-f",
    "lavfi",
    "-i",
];

/// Encodes `c` into `out` (one home for the experiments' test video).
pub fn encode_testsrc(out: &Path, c: &TestClip) -> anyhow::Result<()> {
    let size = format!("testsrc2=size={}x{}:rate={}", c.width, c.height, c.fps);
    let (rate, buf) = (format!("{}k", c.kbps), format!("{}k", c.kbps * 2));
    let (t, g) = (c.secs.to_string(), c.fps.to_string());
    let o = out.to_string_lossy().to_string();
    let mut args = LAVFI_HEAD.to_vec();
    args.push(&size);
    if c.audio {
        args.extend(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"]);
    }
    args.extend([
        "-t",
        &t,
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-tune",
        "zerolatency",
        "-b:v",
        &rate,
        "-maxrate",
        &rate,
        "-bufsize",
        &buf,
        "-g",
        &g,
        "-pix_fmt",
        "yuv420p",
    ]);
    if c.audio {
        args.extend(["-c:a", "aac", "-b:a", "64k"]);
    }
    args.extend(["-f", "mpegts", &o]);
    nfx_testbed::process::run(&args, Duration::from_secs(300))
        .context("encoding the test clip (is ffmpeg installed? scripts/deps.sh)")?;
    if std::fs::metadata(out).map(|m| m.len()).unwrap_or(0) < 10_000 {
        bail!("ffmpeg wrote no usable clip to {}", out.display());
    }
    Ok(())
}

/// The running stream sources (index = stream number).
pub struct Sources {
    ns: String,
    clip: PathBuf,
    target: Ipv4Addr,
    running: Vec<ChildGuard>,
}

impl Sources {
    /// Sources in `ns` that will send `clip` to `target` (ports from [`IN_PORT`]).
    pub fn new(ns: &str, clip: &Path, target: Ipv4Addr) -> Self {
        Self {
            ns: ns.to_string(),
            clip: clip.to_path_buf(),
            target,
            running: Vec::new(),
        }
    }

    /// Starts or stops sources until `n` run (the newest stop first).
    pub fn set(&mut self, n: usize) -> anyhow::Result<()> {
        while self.running.len() > n {
            let mut c = self.running.pop().expect("len > n");
            let _ = c.interrupt(Duration::from_secs(2));
        }
        while self.running.len() < n {
            let port = IN_PORT + self.running.len() as u16;
            let url = format!("udp://{}:{port}?pkt_size=1316", self.target);
            let clip = self.clip.to_string_lossy().to_string();
            let mut cmd = netns::command(
                &self.ns,
                &[
                    "ffmpeg",
                    "-hide_banner",
                    "-loglevel",
                    "error",
                    "-nostdin",
                    "-re",
                    "-stream_loop",
                    "-1",
                    "-i",
                    &clip,
                    "-c",
                    "copy",
                    "-f",
                    "mpegts",
                    &url,
                ],
            );
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            self.running.push(ChildGuard::spawn(cmd)?);
        }
        Ok(())
    }

    /// How many run.
    pub fn len(&self) -> usize {
        self.running.len()
    }
}

/// Starts `n` transcoders in `ns` (listening on [`IN_PORT`]…, sending to `dst` on
/// [`OUT_PORT`]…), with their error output in `dir`.
pub fn start_transcoders(
    ns: &str,
    dst: Ipv4Addr,
    n: u32,
    clip: Clip,
    dir: &Path,
) -> anyhow::Result<Vec<Transcoder>> {
    (0..n as u16)
        .map(|i| {
            let cfg = TranscodeConfig {
                listen_port: IN_PORT + i,
                output: SocketAddrV4::new(dst, OUT_PORT + i),
                bitrate_kbps: clip.out_kbps,
                codec: Codec::H264,
                threads: 1,
                netns: Some(ns.to_string()),
            };
            Transcoder::start(&cfg, Some(&dir.join(format!("transcode-{i}.log"))))
                .with_context(|| format!("transcoder {i}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codec names ffprobe finds in `path`, sorted, each once (MPEG-TS lists the
    /// program's streams and the streams themselves).
    fn codecs(path: &Path) -> Vec<String> {
        let p = path.to_string_lossy().to_string();
        let out = nfx_testbed::process::run(
            &[
                "ffprobe",
                "-v",
                "error",
                "-show_entries",
                "stream=codec_name",
                "-of",
                "csv=p=0",
                &p,
            ],
            Duration::from_secs(30),
        )
        .unwrap();
        let mut v: Vec<String> = out
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    #[test]
    fn test_clips_have_the_asked_streams() {
        let dir = nfx_testbed::tempfile::tempdir().unwrap();
        for audio in [true, false] {
            let out = dir.path().join(format!("c{audio}.ts"));
            let c = TestClip {
                width: 320,
                height: 180,
                fps: 30,
                kbps: 800,
                secs: 1,
                audio,
            };
            encode_testsrc(&out, &c).unwrap();
            let want: &[&str] = if audio { &["aac", "h264"] } else { &["h264"] };
            assert_eq!(codecs(&out), want);
        }
    }
}
