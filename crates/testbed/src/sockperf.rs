//! sockperf TCP ping-pong: server in one namespace, bounded client in another, and the
//! parser of its latency percentiles (sockperf reports half round trips, in µs).

use crate::netns;
use crate::process::{self, ChildGuard};
use anyhow::Context;
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

/// A running `sockperf server`, killed when dropped.
pub struct SockperfServer {
    _child: ChildGuard,
}

impl SockperfServer {
    /// Starts `sockperf server --tcp` on `addr:port` inside `ns` and waits until it listens.
    pub fn start(ns: &str, addr: Ipv4Addr, port: u16) -> anyhow::Result<Self> {
        let (a, p) = (addr.to_string(), port.to_string());
        let mut cmd = netns::command(ns, &["sockperf", "server", "--tcp", "-i", &a, "-p", &p]);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = ChildGuard::spawn(cmd)?;
        netns::wait_listening(ns, port, false, Duration::from_secs(5))
            .context("sockperf server did not start")?;
        Ok(Self { _child: child })
    }
}

/// Latency percentiles from one ping-pong run (µs, sockperf's half round trip).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Number of observations.
    pub observations: u64,
}

/// Runs `sockperf ping-pong --tcp` from `ns` to `server:port` for `secs` seconds
/// (one message in flight: low load), bounded to `secs + 15` s.
pub fn ping_pong(ns: &str, server: Ipv4Addr, port: u16, secs: u32) -> anyhow::Result<Latency> {
    let (a, p, t) = (server.to_string(), port.to_string(), secs.to_string());
    let out = process::run(
        &[
            "ip",
            "netns",
            "exec",
            ns,
            "sockperf",
            "ping-pong",
            "--tcp",
            "-i",
            &a,
            "-p",
            &p,
            "-t",
            &t,
        ],
        Duration::from_secs(u64::from(secs) + 15),
    )?;
    parse(&out).with_context(|| format!("sockperf ping-pong {server}:{port} from {ns}"))
}

/// Parses sockperf's summary: `---> percentile 50.000 = 29.1`, `... 99.000 = ...`,
/// and `[Valid Duration] ... ReceivedMessages=N`.
pub fn parse(text: &str) -> anyhow::Result<Latency> {
    let pct = |want: &str| -> Option<f64> {
        text.lines().find_map(|l| {
            let rest = l.split("percentile ").nth(1)?;
            let (p, v) = rest.split_once('=')?;
            (p.trim() == want).then(|| v.trim().parse().ok())?
        })
    };
    let observations = text
        .lines()
        .filter(|l| l.contains("Valid Duration"))
        .find_map(|l| {
            l.split("ReceivedMessages=")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    Ok(Latency {
        p50_us: pct("50.000").context("sockperf output has no 50th percentile")?,
        p99_us: pct("99.000").context("sockperf output has no 99th percentile")?,
        observations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "sockperf: [Total Run] RunTime=1.000 sec; Warm up time=400 msec; SentMessages=30000; ReceivedMessages=29999
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=0.550 sec; SentMessages=16000; ReceivedMessages=16000
sockperf: ====> avg-latency=16.820 (std-dev=3.010)
sockperf: ---> percentile 99.999 =  120.3
sockperf: ---> percentile 99.000 =   28.117
sockperf: ---> percentile 50.000 =   16.204
sockperf: ---> <MIN> observation =   12.101
";

    #[test]
    fn percentiles_parse() {
        let l = parse(SAMPLE).unwrap();
        assert_eq!(l.p50_us, 16.204);
        assert_eq!(l.p99_us, 28.117);
        assert_eq!(l.observations, 16000);
    }

    #[test]
    fn missing_percentile_is_an_error() {
        assert!(parse("sockperf: ERROR: connect failed").is_err());
    }
}
