//! The transcoding VNF, the energy paper's compute-heavy middlebox: an MPEG-TS video
//! stream received on a UDP port is transcoded to a lower bitrate by an `ffmpeg` child
//! process and sent to the next hop as MPEG-TS over UDP. Unlike the packet VNFs it is
//! not a graph node but a process of its own ([`process::Transcoder`]), deployed from a
//! typed config as `{"transcode": {...}}` ([`ProcessSpec`]).
//!
//! ```yaml
//! transcode: { listen_port: 5000, output: 10.200.3.2:6000, bitrate_kbps: 300, codec: h264 }
//! ```

pub mod process;

use crate::spec::ConfigError;
use serde::{Deserialize, Serialize};
use std::net::SocketAddrV4;

/// The function name a service's chain gives the transcoder (the host agent deploys it
/// as a process, not as a worker's node).
pub const FUNCTION: &str = "transcode";

/// Video codecs the transcoder encodes to (ffmpeg encoders shipped by Debian's ffmpeg).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// H.264 with libx264 (`ultrafast`, `zerolatency`).
    #[default]
    H264,
    /// MPEG-2 video (ffmpeg's native encoder).
    Mpeg2,
    /// MPEG-4 part 2 (ffmpeg's native encoder).
    Mpeg4,
}

impl Codec {
    /// The ffmpeg encoder and its extra options.
    fn encoder(self) -> &'static [&'static str] {
        match self {
            Codec::H264 => &["libx264", "-preset", "ultrafast", "-tune", "zerolatency"],
            Codec::Mpeg2 => &["mpeg2video"],
            Codec::Mpeg4 => &["mpeg4"],
        }
    }
}

/// Configuration of one transcoder instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscodeConfig {
    /// UDP port the input stream arrives on (bound on every address).
    pub listen_port: u16,
    /// Where the transcoded stream goes (IPv4 address and UDP port).
    pub output: SocketAddrV4,
    /// Target video bitrate, kbit/s.
    pub bitrate_kbps: u32,
    /// Output codec.
    #[serde(default)]
    pub codec: Codec,
    /// Encoder threads (ffmpeg `-threads`).
    #[serde(default = "one")]
    pub threads: u32,
    /// Network namespace the process runs in (`ip netns` name).
    #[serde(default)]
    pub netns: Option<String>,
}

/// Whether `name` (at most `max` bytes) is safe as one path component: letters, digits,
/// `-`, `_` and `.`, and neither `.` nor `..` (a namespace under `/run/netns`, an
/// instance's directory).
pub fn plain_name(name: &str, max: usize) -> bool {
    !name.is_empty()
        && name.len() <= max
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name != "."
        && name != ".."
}

fn one() -> u32 {
    1
}

/// VNFs that run as processes of their own rather than as dataplane graph nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum ProcessSpec {
    /// The transcoder.
    Transcode(TranscodeConfig),
}

impl ProcessSpec {
    /// Parses `{transcode: {...}}` YAML (or JSON) text into a validated spec; errors
    /// name the field.
    pub fn from_yaml(text: &str) -> Result<Self, String> {
        let v: serde_json::Value = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        Self::from_value(v)
    }

    /// [`ProcessSpec::from_yaml`] on an already parsed document.
    fn from_value(v: serde_json::Value) -> Result<Self, String> {
        let spec: ProcessSpec = serde_json::from_value(v).map_err(|e| e.to_string())?;
        let ProcessSpec::Transcode(c) = &spec;
        c.validate().map_err(|e| format!("transcode.{e}"))?;
        Ok(spec)
    }
}

impl TranscodeConfig {
    /// The `config` of a service's `transcode` function (the body of `nfx transcode
    /// --config`'s `transcode:` block), checked with the same errors; `netns` is refused,
    /// since the host agent that deploys it runs it in its host's namespace.
    pub fn from_function_config(config: &serde_json::Value) -> Result<Self, String> {
        let ProcessSpec::Transcode(c) =
            ProcessSpec::from_value(serde_json::json!({ "transcode": config }))?;
        if c.netns.is_some() {
            return Err(
                "transcode.netns: set by the host agent (a deployed transcoder runs \
                        in its host's namespace); remove it"
                    .into(),
            );
        }
        Ok(c)
    }

    /// Checks the values a deserializer cannot: port, bitrate, thread count, namespace.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.listen_port == 0 {
            return Err(ConfigError::new("listen_port", "must be 1..=65535"));
        }
        if self.output.port() == 0 || self.output.ip().is_unspecified() {
            return Err(ConfigError::new(
                "output",
                format!(
                    "{} is not a destination (address and port must be set)",
                    self.output
                ),
            ));
        }
        if !(16..=100_000).contains(&self.bitrate_kbps) {
            return Err(ConfigError::new(
                "bitrate_kbps",
                format!("{} is out of range 16..=100000", self.bitrate_kbps),
            ));
        }
        if !(1..=16).contains(&self.threads) {
            return Err(ConfigError::new(
                "threads",
                format!("{} is out of range 1..=16", self.threads),
            ));
        }
        if let Some(ns) = &self.netns {
            if !plain_name(ns, 64) {
                return Err(ConfigError::new(
                    "netns",
                    format!("{ns:?} is not a namespace name (A-Z a-z 0-9 - _ .)"),
                ));
            }
        }
        Ok(())
    }

    /// The ffmpeg command line (without the program name): UDP MPEG-TS in (a lost or
    /// late packet is not fatal; streams are probed for 0.5 s before output starts), the first video stream re-encoded at the bitrate, audio
    /// copied, MPEG-TS out in 1316-byte datagrams (7 TS packets), progress as
    /// `key=value` lines on stdout.
    pub fn ffmpeg_args(&self) -> Vec<String> {
        let input = format!(
            "udp://0.0.0.0:{}?fifo_size=1000000&overrun_nonfatal=1",
            self.listen_port
        );
        let output = format!("udp://{}?pkt_size=1316", self.output);
        let rate = format!("{}k", self.bitrate_kbps);
        let buf = format!("{}k", self.bitrate_kbps * 2);
        let mut a: Vec<String> = [
            "-hide_banner",
            "-nostdin",
            "-loglevel",
            "error",
            "-nostats",
            "-progress",
            "pipe:1",
            "-stats_period",
            "0.25",
            "-fflags",
            "+genpts+discardcorrupt",
            "-analyzeduration",
            "500000",
            "-probesize",
            "500000",
            "-i",
            &input,
            "-map",
            "0:v:0",
            "-map",
            "0:a?",
            "-c:v",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(self.codec.encoder().iter().map(|s| s.to_string()));
        for s in [
            "-b:v",
            &rate,
            "-maxrate",
            &rate,
            "-bufsize",
            &buf,
            "-threads",
            &self.threads.to_string(),
            "-c:a",
            "copy",
            "-f",
            "mpegts",
            &output,
        ] {
            a.push(s.to_string());
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TranscodeConfig {
        let spec = ProcessSpec::from_yaml(
            "transcode: { listen_port: 5000, output: 10.200.3.2:6000, bitrate_kbps: 300 }",
        )
        .unwrap();
        let ProcessSpec::Transcode(c) = spec;
        c
    }

    #[test]
    fn typed_config_with_defaults() {
        let c = cfg();
        assert_eq!(c.codec, Codec::H264);
        assert_eq!(c.threads, 1);
        assert_eq!(c.output.to_string(), "10.200.3.2:6000");
        assert!(c.validate().is_ok());
    }

    #[test]
    fn ffmpeg_command_line() {
        let a = cfg().ffmpeg_args();
        let s = a.join(" ");
        assert!(
            s.contains("-i udp://0.0.0.0:5000?fifo_size=1000000&overrun_nonfatal=1"),
            "{s}"
        );
        assert!(
            s.contains("-c:v libx264 -preset ultrafast -tune zerolatency -b:v 300k"),
            "{s}"
        );
        assert!(
            s.ends_with("-f mpegts udp://10.200.3.2:6000?pkt_size=1316"),
            "{s}"
        );
        assert!(s.contains("-progress pipe:1"));
        let mpeg2 = TranscodeConfig {
            codec: Codec::Mpeg2,
            ..cfg()
        };
        assert!(mpeg2
            .ffmpeg_args()
            .join(" ")
            .contains("-c:v mpeg2video -b:v"));
    }

    #[test]
    fn a_function_config_is_checked_as_the_command_checks_it() {
        let ok = serde_json::json!({"listen_port": 5000, "output": "10.0.0.1:6000", "bitrate_kbps": 300});
        let c = TranscodeConfig::from_function_config(&ok).unwrap();
        assert_eq!((c.listen_port, c.threads), (5000, 1));
        for (bad, field) in [
            (
                serde_json::json!({"listen_port": 5000, "output": "10.0.0.1:6000", "bitrate_kbps": 1}),
                "bitrate_kbps",
            ),
            (
                serde_json::json!({"listen_port": 5000, "output": "10.0.0.1:6000", "bitrate_kbps": 300, "colour": 1}),
                "colour",
            ),
            (
                serde_json::json!({"listen_port": 5000, "bitrate_kbps": 300}),
                "output",
            ),
            (
                serde_json::json!({"listen_port": 5000, "output": "10.0.0.1:6000", "bitrate_kbps": 300, "netns": "x"}),
                "netns",
            ),
            (serde_json::Value::Null, "TranscodeConfig"),
        ] {
            let e = TranscodeConfig::from_function_config(&bad).unwrap_err();
            assert!(e.contains(field), "{bad}: {e}");
            let text = format!("transcode: {bad}");
            if field != "netns" {
                // The same error `nfx transcode --config` gives for that file.
                assert_eq!(ProcessSpec::from_yaml(&text).unwrap_err(), e, "{text}");
            }
        }
    }

    #[test]
    fn bad_values_name_their_field() {
        let bad = |f: &dyn Fn(&mut TranscodeConfig)| {
            let mut c = cfg();
            f(&mut c);
            c.validate().unwrap_err().field
        };
        assert_eq!(bad(&|c| c.listen_port = 0), "listen_port");
        assert_eq!(
            bad(&|c| c.output = "0.0.0.0:6000".parse().unwrap()),
            "output"
        );
        assert_eq!(bad(&|c| c.output = "10.0.0.1:0".parse().unwrap()), "output");
        assert_eq!(bad(&|c| c.bitrate_kbps = 5), "bitrate_kbps");
        assert_eq!(bad(&|c| c.threads = 0), "threads");
        assert_eq!(bad(&|c| c.netns = Some("../x".into())), "netns");
        for text in [
            "transcode: { listen_port: 5000, output: 10.0.0.1:6000, bitrate_kbps: 300, colour: red }",
            "transcode: { listen_port: 5000, output: 10.0.0.1, bitrate_kbps: 300 }",
            "transcode: { listen_port: 5000, output: 10.0.0.1:6000, bitrate_kbps: 300, codec: vp9 }",
            "transcoder: {}",
        ] {
            assert!(ProcessSpec::from_yaml(text).is_err(), "{text}");
        }
        let e = ProcessSpec::from_yaml(
            "transcode: { listen_port: 5000, output: 10.0.0.1:6000, bitrate_kbps: 1 }",
        )
        .unwrap_err();
        assert!(e.contains("transcode.field `bitrate_kbps`"), "{e}");
    }
}
