//! The 64-byte UDP flood of `nfx bench dataplane`: which generator, where it is counted,
//! CPU isolation of the generator and the device under test, and one measured run.

use super::affinity;
use crate::acl::UDPGEN_PORT;
use crate::pktgen::{self, PktGenSpec, TxMethod};
use crate::udpgen::{self, CountingSink, GenReport, GenSpec, Sink};
use crate::{Host, TestbedGuard};
use std::time::{Duration, Instant};

/// Which 64-byte generator floods from src.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generator {
    /// sendmmsg on UDP sockets ([`crate::udpgen`]): src's whole UDP/IP stack per packet.
    Udp,
    /// Pre-built frames on a raw AF_PACKET socket ([`crate::pktgen`]).
    AfPacket(TxMethod),
}

impl Generator {
    /// Names accepted by [`Generator::parse`].
    pub const NAMES: [&'static str; 3] = ["mmsg", "ring", "udp"];

    /// `mmsg` (AF_PACKET sendmmsg), `ring` (AF_PACKET TX ring) or `udp` (UDP sockets).
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "ring" => Generator::AfPacket(TxMethod::Ring),
            "mmsg" => Generator::AfPacket(TxMethod::Mmsg),
            "udp" => Generator::Udp,
            _ => anyhow::bail!(
                "unknown generator {s:?}; generators are {}",
                Self::NAMES.join(", ")
            ),
        })
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Generator::Udp => "udp",
            Generator::AfPacket(m) => m.as_str(),
        }
    }
}

/// Where and how the 64-byte flood is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// At the device under test's next hop: cloud's forwarding is turned off for the run
    /// and its `Ip: InAddrErrors` counts what edge delivered ([`CountingSink::at_router`]).
    /// Cloud drops each frame after one route lookup, so the least CPU goes to the sink.
    NextHop,
    /// At dst: dst's `Udp: NoPorts`, the port unbound ([`CountingSink::start`]).
    Counter,
    /// A recvmmsg receiver thread ([`Sink`]).
    Socket,
    /// At the device under test's next hop, before its IP stack: a netdev-family
    /// nftables ingress rule on cloud's `to-edge` counts and drops the flood
    /// ([`IngressSink`]); the cheapest sink — cloud's receive of each frame runs inside
    /// the sender's (nfx's) transmit on veth, so a costly sink is charged to nfx.
    Ingress,
}

impl SinkKind {
    /// Names accepted by [`SinkKind::parse`].
    pub const NAMES: [&'static str; 4] = ["next-hop", "counter", "socket", "ingress"];

    /// `next-hop`, `counter`, `socket` or `ingress`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "next-hop" => Ok(SinkKind::NextHop),
            "counter" => Ok(SinkKind::Counter),
            "socket" => Ok(SinkKind::Socket),
            "ingress" => Ok(SinkKind::Ingress),
            _ => anyhow::bail!("unknown sink {s:?}; sinks are {}", Self::NAMES.join(", ")),
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::NextHop => "next-hop",
            SinkKind::Counter => "counter",
            SinkKind::Socket => "socket",
            SinkKind::Ingress => "ingress",
        }
    }
}

/// The 64-byte flood of one bench run: generator, sink, how long and how often.
#[derive(Debug, Clone, Copy)]
pub struct FloodOpts {
    /// Generator in src.
    pub generator: Generator,
    /// Counter in dst.
    pub sink: SinkKind,
    /// Seconds per run.
    pub secs: u32,
    /// Runs per measurement; the median is reported.
    pub repeat: u32,
    /// Pin the generator and the nfx process to different CPUs during the flood (see
    /// [`Isolation`]).
    pub isolate: bool,
    /// Frames per sendmmsg call or TX-ring flush of the AF_PACKET generators
    /// (1..=[`pktgen::MAX_BATCH`]; the UDP generator keeps its own).
    pub batch: usize,
}

/// One 64-byte UDP flood: what the generator offered and what arrived.
#[derive(Debug, Clone, Copy)]
pub struct Udp64 {
    /// Datagrams per second (millions) that arrived at the sink (dst, or edge's next hop).
    pub received_mpps: f64,
    /// Frames per second (millions) the kernel accepted from the generator in src.
    pub offered_mpps: f64,
    /// Frames the sink's interface received that were not the flood (counting sinks).
    pub other: u64,
    /// The generator thread's CPU µs per frame it offered, including what veth runs
    /// inside its sends (edge's receive of each frame: the copy into nfx's ring).
    pub gen_cpu_us_per_frame: Option<f64>,
}

/// Floods 64-byte UDP frames from src for `flood.secs`: offered and received Mpps.
/// `dut` is the nfx process under test (pinned when `flood.isolate`).
pub fn udp64(tb: &TestbedGuard, flood: &FloodOpts, dut: Option<u32>) -> anyhow::Result<Udp64> {
    let dst_ns = tb.ns(Host::Dst);
    let secs = Duration::from_secs(u64::from(flood.secs));
    let pkt = match flood.generator {
        Generator::AfPacket(m) => {
            let mut p = PktGenSpec::flood(tb, UDPGEN_PORT, secs, m)?;
            p.batch = flood.batch;
            Some(p)
        }
        Generator::Udp => None,
    };
    let udp = GenSpec::flood(&tb.ns(Host::Src), tb.dst_ip(), UDPGEN_PORT, secs);
    let iso = if flood.isolate {
        Some(Isolation::apply(dut)?)
    } else {
        None
    };
    let gen_cpu = iso.as_ref().map(|i| i.gen_cpu);
    let gen = move || -> anyhow::Result<GenReport> {
        // The generator's thread inherits this thread's CPU affinity.
        std::thread::spawn(move || {
            if let Some(cpu) = gen_cpu {
                affinity::pin(0, &[cpu])?;
            }
            match pkt {
                Some(p) => pktgen::generate(p),
                None => udpgen::generate(udp),
            }
        })
        .join()
        .map_err(|_| anyhow::anyhow!("generator thread panicked"))?
    };
    let (g, got, other) = match flood.sink {
        SinkKind::NextHop => {
            let cloud = tb.ns(Host::Cloud);
            let _off = ForwardingOff::apply(&cloud)?;
            let sink = CountingSink::at_router(&cloud, "to-edge")?;
            let g = gen()?;
            let c = sink.finish()?;
            (g, c.packets, c.other())
        }
        SinkKind::Counter => {
            let sink = CountingSink::start(&dst_ns, "veth0", UDPGEN_PORT)?;
            let g = gen()?;
            let c = sink.finish()?;
            (g, c.packets, c.other())
        }
        SinkKind::Ingress => {
            let sink = IngressSink::start(&tb.ns(Host::Cloud), "to-edge", UDPGEN_PORT)?;
            let g = gen()?;
            let (packets, rx) = sink.read()?;
            (g, packets, rx.saturating_sub(packets))
        }
        SinkKind::Socket => {
            let sink = Sink::start(&dst_ns, UDPGEN_PORT, &[])?;
            let g = gen()?;
            drain(&sink);
            (g, sink.finish()?.packets, 0)
        }
    };
    if let Some(i) = iso {
        i.undo()?;
    }
    if got == 0 {
        anyhow::bail!("no UDP packet arrived (sent {})", g.sent);
    }
    Ok(Udp64 {
        received_mpps: got as f64 / g.secs / 1e6,
        offered_mpps: g.mpps(),
        other,
        gen_cpu_us_per_frame: g.cpu_us_per_frame(),
    })
}

/// CPU isolation of one 64-byte run on a machine with ≥ 2 CPUs: the generator thread
/// is pinned to one CPU and the whole nfx process to the other, so that the device under
/// test never waits for the generator's CPU or the other way round. Undone afterwards
/// (also on drop): nfx back on every CPU it had.
///
/// Not moved: veth hands a frame to the receiving namespace's stack in the sender's
/// context, so the worker's `sendmmsg` also runs cloud's receive of what it forwards
/// (with the `next-hop` sink: one route lookup and a drop per frame). Steering that to
/// the generator's CPU with RPS was tried and costs the worker an inter-processor
/// interrupt per send call instead — per frame in scalar mode — which is worse.
pub struct Isolation {
    dut: Option<(u32, Vec<usize>)>,
    /// CPU of the generator.
    pub gen_cpu: usize,
    active: bool,
}

impl Isolation {
    /// Pins the nfx process `dut` (if any) and picks the generator's CPU; fails on a
    /// machine with fewer than two usable CPUs.
    pub fn apply(dut: Option<u32>) -> anyhow::Result<Self> {
        let cpus = affinity::allowed()?;
        let (&gen_cpu, &dut_cpu) = match cpus.as_slice() {
            [a, b, ..] => (a, b),
            _ => anyhow::bail!("isolation needs at least 2 CPUs, this process may use {cpus:?}"),
        };
        let iso = Self {
            dut: dut.map(|p| (p, cpus.clone())),
            gen_cpu,
            active: true,
        };
        if let Some(pid) = dut {
            affinity::pin_process(pid, &[dut_cpu])?;
        }
        Ok(iso)
    }

    /// Restores the previous state and reports a failure to do so.
    pub fn undo(mut self) -> anyhow::Result<()> {
        self.active = false;
        self.restore()
    }

    fn restore(&self) -> anyhow::Result<()> {
        if let Some((pid, cpus)) = &self.dut {
            affinity::pin_process(*pid, cpus)?;
        }
        Ok(())
    }
}

impl Drop for Isolation {
    fn drop(&mut self) {
        if self.active {
            let _ = self.restore();
        }
    }
}

/// Name of the nftables table of [`IngressSink`].
pub const INGRESS_SINK_TABLE: &str = "nfx_flood_sink";

/// Counts and drops UDP datagrams to one port at an interface's netdev ingress (before
/// the IP stack); the table is removed on drop.
pub struct IngressSink {
    ns: String,
    iface: String,
    rx_base: u64,
}

/// The ruleset of an [`IngressSink`] (idempotent: replaces an earlier copy).
pub fn ingress_sink_ruleset(iface: &str, port: u16) -> String {
    let t = INGRESS_SINK_TABLE;
    format!(
        "add table netdev {t}\ndelete table netdev {t}\ntable netdev {t} {{\n  counter flood {{ }}\n  chain sink {{\n    type filter hook ingress device \"{iface}\" priority filter; policy accept;\n    meta protocol ip ip protocol udp udp dport {port} counter name flood drop\n  }}\n}}\n"
    )
}

/// `packets N` of `nft list counter` output.
pub fn parse_nft_counter(text: &str) -> anyhow::Result<u64> {
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "packets" {
            if let Some(n) = words.next().and_then(|n| n.parse().ok()) {
                return Ok(n);
            }
        }
    }
    anyhow::bail!("no packet count in nft output: {text:?}")
}

impl IngressSink {
    /// Installs the rule on `iface` in `ns`.
    pub fn start(ns: &str, iface: &str, port: u16) -> anyhow::Result<Self> {
        let file = tempfile::NamedTempFile::new()?;
        std::fs::write(file.path(), ingress_sink_ruleset(iface, port))?;
        let path = file.path().to_string_lossy().into_owned();
        crate::netns::exec(ns, &["nft", "-f", &path], Duration::from_secs(10))?;
        let mut sink = Self {
            ns: ns.to_string(),
            iface: iface.to_string(),
            rx_base: 0,
        };
        sink.rx_base = sink.iface_rx()?;
        Ok(sink)
    }

    fn iface_rx(&self) -> anyhow::Result<u64> {
        let text =
            crate::netns::exec(&self.ns, &["cat", "/proc/net/dev"], Duration::from_secs(10))?;
        crate::udpgen::parse_net_dev_rx(&text, &self.iface)
    }

    /// Datagrams counted so far and frames the interface received since the start.
    pub fn read(&self) -> anyhow::Result<(u64, u64)> {
        let out = crate::netns::exec(
            &self.ns,
            &[
                "nft",
                "list",
                "counter",
                "netdev",
                INGRESS_SINK_TABLE,
                "flood",
            ],
            Duration::from_secs(10),
        )?;
        Ok((
            parse_nft_counter(&out)?,
            self.iface_rx()?.saturating_sub(self.rx_base),
        ))
    }
}

impl Drop for IngressSink {
    fn drop(&mut self) {
        let _ = crate::netns::exec(
            &self.ns,
            &["nft", "delete", "table", "netdev", INGRESS_SINK_TABLE],
            Duration::from_secs(10),
        );
    }
}

/// Turns a router's IPv4 forwarding off until dropped.
struct ForwardingOff(String);

impl ForwardingOff {
    fn apply(ns: &str) -> anyhow::Result<Self> {
        crate::netns::sysctl_set(ns, "net/ipv4/ip_forward", "0")?;
        Ok(Self(ns.to_string()))
    }
}

impl Drop for ForwardingOff {
    fn drop(&mut self) {
        if let Err(e) = crate::netns::sysctl_set(&self.0, "net/ipv4/ip_forward", "1") {
            log::warn!("restoring forwarding in {}: {e:#}", self.0);
        }
    }
}

/// Waits until the sink stops receiving (queued packets delivered), at most 1 s.
fn drain(sink: &Sink) {
    let until = Instant::now() + Duration::from_secs(1);
    let mut last = sink.packets();
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        let now = sink.packets();
        if now == last {
            return;
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingress_sink_rule_counts_only_the_flood_port() {
        let r = ingress_sink_ruleset("to-edge", 9);
        assert!(r.contains("device \"to-edge\""), "{r}");
        assert!(r.contains("udp dport 9 counter name flood drop"), "{r}");
        assert!(
            r.contains("policy accept"),
            "ARP and other traffic must pass: {r}"
        );
    }

    #[test]
    fn nft_counter_output_parses() {
        let out = "table netdev nfx_flood_sink {\n\tcounter flood {\n\t\tpackets 123456 bytes 7901184\n\t}\n}\n";
        assert_eq!(parse_nft_counter(out).unwrap(), 123456);
        assert!(parse_nft_counter("table netdev x {}").is_err());
        assert!(parse_nft_counter("packets many").is_err());
    }
}
