//! The kernel's per-interface counters (`/proc/<pid>/net/dev`): what arrived on an
//! interface and what left it, counted by the kernel when the frame crosses the
//! interface, not when a process reads it. The power manager counts a worker's offered
//! load here, because a CPU limit on the worker makes its own receive counters bursty
//! (it reads a quota period's worth of frames at a time).
//!
//! `/proc/<pid>/net/dev` shows the interfaces of `pid`'s network namespace, so an agent
//! reads a worker's ports in whatever namespace the worker runs, without entering it.

use std::io::{self, Read};

/// Most bytes of `net/dev` read (a few hundred interfaces).
const MAX_LEN: usize = 1 << 20;

/// One interface's cumulative counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfCounters {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Received frames the kernel dropped (backlog full, no protocol).
    pub rx_dropped: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
}

impl IfCounters {
    /// The sum of two interfaces' counters.
    pub fn plus(self, o: IfCounters) -> IfCounters {
        IfCounters {
            rx_packets: self.rx_packets + o.rx_packets,
            rx_bytes: self.rx_bytes + o.rx_bytes,
            rx_dropped: self.rx_dropped + o.rx_dropped,
            tx_packets: self.tx_packets + o.tx_packets,
            tx_bytes: self.tx_bytes + o.tx_bytes,
        }
    }
}

/// The counters of `iface` in a `net/dev` text; `None` when it is not listed or its
/// line is malformed.
pub fn parse(text: &str, iface: &str) -> Option<IfCounters> {
    text.lines().skip(2).find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != iface {
            return None;
        }
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets ...
        (f.len() >= 16).then(|| IfCounters {
            rx_bytes: f[0],
            rx_packets: f[1],
            rx_dropped: f[3],
            tx_bytes: f[8],
            tx_packets: f[9],
        })
    })
}

/// The summed counters of `ifaces` in the network namespace of `pid`. Fails when the
/// process is gone or one of the interfaces is not there.
pub fn counters(pid: u32, ifaces: &[String]) -> io::Result<IfCounters> {
    let path = format!("/proc/{pid}/net/dev");
    let mut text = String::new();
    std::fs::File::open(&path)?
        .take(MAX_LEN as u64)
        .read_to_string(&mut text)?;
    ifaces.iter().try_fold(IfCounters::default(), |sum, i| {
        parse(&text, i).map(|c| sum.plus(c)).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{path} lists no interface {i:?}"),
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1200      12    0    0    0     0          0         0     1200      12    0    0    0     0       0          0
  sw0i: 1048576    2048    0    7    0     0          0         0      540       6    0    0    0     0       0          0
  sw0o:     300       3    0    0    0     0          0         0  1040000    2031    0    0    0     0       0          0
";

    #[test]
    fn parses_the_kernels_columns_and_sums_ports() {
        let i = parse(TEXT, "sw0i").unwrap();
        assert_eq!(
            i,
            IfCounters {
                rx_packets: 2048,
                rx_bytes: 1_048_576,
                rx_dropped: 7,
                tx_packets: 6,
                tx_bytes: 540,
            }
        );
        let o = parse(TEXT, "sw0o").unwrap();
        assert_eq!(i.plus(o).tx_packets, 2037);
        assert_eq!(parse(TEXT, "sw0"), None);
        assert_eq!(parse("x\ny\n  eth0: 1 2 3\n", "eth0"), None);
        assert_eq!(
            parse("x\ny\n  eth0: 1 2 3 4 5 6 7 8 a 1 1 1 1 1 1 1\n", "eth0"),
            None
        );
    }

    #[test]
    fn reads_this_process_loopback_and_names_a_missing_interface() {
        let lo = counters(std::process::id(), &["lo".to_string()]).unwrap();
        assert!(lo.rx_packets >= lo.rx_dropped);
        let e = counters(std::process::id(), &["no-such-if0".to_string()]).unwrap_err();
        assert!(e.to_string().contains("no-such-if0"), "{e}");
    }
}
