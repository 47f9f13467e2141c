//! iperf3 drivers: a server in one namespace, a bounded client in another, and the
//! parser of the client's JSON (`-J`) report.

use crate::netns;
use crate::process::ChildGuard;
use anyhow::{bail, Context};
use nfx_io::cpu::TaskStat;
use serde_json::Value;
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

/// A running `iperf3 -s`, killed when dropped.
pub struct IperfServer {
    _child: ChildGuard,
    /// Address it listens on.
    pub addr: Ipv4Addr,
    /// Port it listens on.
    pub port: u16,
}

impl IperfServer {
    /// Starts `iperf3 -s -B addr -p port` inside `ns` and waits until it listens.
    pub fn start(ns: &str, addr: Ipv4Addr, port: u16) -> anyhow::Result<Self> {
        let (a, p) = (addr.to_string(), port.to_string());
        let mut cmd = netns::command(ns, &["iperf3", "-s", "-B", &a, "-p", &p]);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = ChildGuard::spawn(cmd)?;
        netns::wait_listening(ns, port, false, Duration::from_secs(5))
            .context("iperf3 server did not start")?;
        Ok(Self {
            _child: child,
            addr,
            port,
        })
    }

    /// The server's process id (`ip netns exec` execs iperf3 in place), so its CPU
    /// time can be read from the kernel.
    pub fn pid(&self) -> u32 {
        self._child.id()
    }
}

/// One client run.
#[derive(Debug, Clone)]
pub struct ClientSpec {
    /// Namespace the client runs in.
    pub ns: String,
    /// Server address.
    pub server: Ipv4Addr,
    /// Server port.
    pub port: u16,
    /// Test length in seconds (`-t`).
    pub secs: u32,
    /// Parallel streams (`-P`).
    pub streams: u32,
    /// UDP mode: (`-b` bitrate, `-l` datagram length); `None` is TCP.
    pub udp: Option<(String, usize)>,
    /// TCP pacing (`-b`, e.g. `2G`); `None`: as fast as the path allows.
    pub tcp_rate: Option<String>,
}

impl ClientSpec {
    /// TCP with `streams` streams for `secs` seconds.
    pub fn tcp(ns: &str, server: Ipv4Addr, port: u16, secs: u32, streams: u32) -> Self {
        Self {
            ns: ns.into(),
            server,
            port,
            secs,
            streams,
            udp: None,
            tcp_rate: None,
        }
    }

    /// The same run paced at `rate` (iperf3 `-b`, e.g. `2G`): TCP that leaves the
    /// machine's cores to the rest of a testbed sharing them.
    pub fn paced(mut self, rate: &str) -> Self {
        self.tcp_rate = Some(rate.to_string());
        self
    }
}

/// The figures nfx uses from an iperf3 client report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IperfResult {
    /// Payload bytes the client sent.
    pub sent_bytes: u64,
    /// Payload bytes the server received.
    pub received_bytes: u64,
    /// Receiver throughput, Gbit/s.
    pub gbps: f64,
    /// Sender throughput, Gbit/s.
    pub sent_gbps: f64,
    /// TCP segments the sender retransmitted (0 for UDP).
    pub retransmits: u64,
    /// UDP datagrams sent (0 for TCP).
    pub udp_packets: u64,
    /// UDP datagrams lost (0 for TCP).
    pub udp_lost: u64,
}

/// Runs the client; the run is bounded to `secs + 15` s of wall time.
pub fn client(spec: &ClientSpec) -> anyhow::Result<IperfResult> {
    client_with_cpu(spec).map(|(r, _)| r)
}

/// Runs the client like [`client`] and also returns the client process's own CPU time,
/// read from the kernel (`/proc/<pid>/stat`) after it exits and before it is reaped.
pub fn client_with_cpu(spec: &ClientSpec) -> anyhow::Result<(IperfResult, TaskStat)> {
    let (srv, port, t, p) = (
        spec.server.to_string(),
        spec.port.to_string(),
        spec.secs.to_string(),
        spec.streams.to_string(),
    );
    let mut args = vec![
        "iperf3",
        "-c",
        &srv,
        "-p",
        &port,
        "-t",
        &t,
        "-P",
        &p,
        "-J",
        "--connect-timeout",
        "3000",
    ];
    let len;
    if let Some((rate, l)) = &spec.udp {
        len = l.to_string();
        args.extend_from_slice(&["-u", "-b", rate, "-l", &len]);
    } else if let Some(rate) = &spec.tcp_rate {
        args.extend_from_slice(&["-b", rate]);
    }
    let out = tempfile::tempfile().context("iperf3 output file")?;
    let err = tempfile::tempfile().context("iperf3 error file")?;
    let mut cmd = netns::command(&spec.ns, &args);
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(err.try_clone()?);
    let mut child = ChildGuard::spawn(cmd)?;
    let limit = Duration::from_secs(u64::from(spec.secs) + 15);
    let (_, cpu) = child.wait_within_stat(limit)?;
    let read = |mut f: &std::fs::File| -> anyhow::Result<String> {
        use std::io::{Read, Seek};
        let mut s = String::new();
        f.rewind()?;
        f.read_to_string(&mut s)?;
        Ok(s)
    };
    let text = read(&out)?;
    let r = parse_client_json(&text).with_context(|| {
        format!(
            "iperf3 to {}:{} from {} ({})",
            spec.server,
            spec.port,
            spec.ns,
            read(&err).unwrap_or_default().trim()
        )
    })?;
    Ok((r, cpu))
}

/// Parses an iperf3 3.x client `-J` report (TCP or UDP).
pub fn parse_client_json(text: &str) -> anyhow::Result<IperfResult> {
    let v: Value = serde_json::from_str(text.trim()).context("iperf3 output is not JSON")?;
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        bail!("iperf3: {e}");
    }
    let end = v.get("end").context("iperf3 JSON has no `end`")?;
    let num = |o: &Value, k: &str| o.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    if let Some(sum) = end
        .get("sum")
        .filter(|_| end.get("sum_sent").is_none() || is_udp(&v))
    {
        let sent = end.get("sum_sent").unwrap_or(sum);
        let recv = end.get("sum_received").unwrap_or(sum);
        let packets = num(sum, "packets") as u64;
        let lost = num(sum, "lost_packets") as u64;
        return Ok(IperfResult {
            sent_bytes: num(sent, "bytes") as u64,
            received_bytes: num(recv, "bytes") as u64,
            gbps: num(recv, "bits_per_second") / 1e9,
            sent_gbps: num(sent, "bits_per_second") / 1e9,
            retransmits: 0,
            udp_packets: packets,
            udp_lost: lost,
        });
    }
    let sent = end
        .get("sum_sent")
        .context("iperf3 JSON has no end.sum_sent")?;
    let recv = end
        .get("sum_received")
        .context("iperf3 JSON has no end.sum_received")?;
    Ok(IperfResult {
        sent_bytes: num(sent, "bytes") as u64,
        received_bytes: num(recv, "bytes") as u64,
        gbps: num(recv, "bits_per_second") / 1e9,
        sent_gbps: num(sent, "bits_per_second") / 1e9,
        retransmits: num(sent, "retransmits") as u64,
        udp_packets: 0,
        udp_lost: 0,
    })
}

fn is_udp(v: &Value) -> bool {
    v.pointer("/start/test_start/protocol")
        .and_then(Value::as_str)
        == Some("UDP")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_report_parses() {
        let j = r#"{"start":{"test_start":{"protocol":"TCP"}},
            "end":{"sum_sent":{"bytes":1000,"bits_per_second":8e9,"retransmits":7},
                   "sum_received":{"bytes":990,"bits_per_second":7.9e9}}}"#;
        let r = parse_client_json(j).unwrap();
        assert_eq!((r.sent_bytes, r.received_bytes), (1000, 990));
        assert!((r.gbps - 7.9).abs() < 1e-9);
        assert!((r.sent_gbps - 8.0).abs() < 1e-9);
        assert_eq!(r.retransmits, 7);
        assert_eq!(r.udp_packets, 0);
    }

    #[test]
    fn udp_report_parses() {
        let j = r#"{"start":{"test_start":{"protocol":"UDP"}},
            "end":{"sum":{"bytes":6400,"bits_per_second":1e6,"packets":100,"lost_packets":3},
                   "sum_sent":{"bytes":6400,"bits_per_second":1e6},
                   "sum_received":{"bytes":6208,"bits_per_second":0.97e6}}}"#;
        let r = parse_client_json(j).unwrap();
        assert_eq!((r.udp_packets, r.udp_lost), (100, 3));
        assert_eq!(r.received_bytes, 6208);
    }

    #[test]
    fn errors_are_reported() {
        let e =
            parse_client_json(r#"{"start":{},"end":{},"error":"unable to connect"}"#).unwrap_err();
        assert!(e.to_string().contains("unable to connect"));
        assert!(parse_client_json("garbage").is_err());
        assert!(parse_client_json("{}").is_err());
    }
}
