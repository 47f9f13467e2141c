//! Per-packet cost of the firewall and NAT nodes with large tables, in process (no
//! I/O): `cargo run --release -p nfx-vnf --example vnf_cost -- [flows] [vector]`.
//!
//! Each case copies a 64-byte frame into each slot of a 256-packet vector, parses it
//! and runs the nodes over the vector; the parse-only case is the baseline, so a
//! node's cost is its row minus the baseline. Flows are picked round-robin from
//! `flows` established flows (default 1,000,000), so lookups miss the CPU caches as
//! they would with that many live flows.

use nfx_packet::{parse, Direction, Packet, PacketBuf};
use nfx_vnf::{EventSink, Node, NodeCtx, NodeSpec};

/// Flow `i`: UDP from an inside host (10.0.x.y) to a remote (10.200.x.y) port 5201,
/// or its reply (to the NAT's public address when `public`).
fn frame(i: u32, reply: bool, public: bool) -> Vec<u8> {
    let inside = (0x0a00_0000u32 + (i >> 12)).to_be_bytes();
    let port = 1024 + (i & 0xfff) as u16;
    let remote = (0x0ac8_0000u32 + (i >> 12)).to_be_bytes();
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let b = if !reply {
        b.ipv4(inside, remote, 64).udp(port, 5201)
    } else if public {
        b.ipv4(remote, [10, 200, 2, 100], 64).udp(5201, port)
    } else {
        b.ipv4(remote, inside, 64).udp(5201, port)
    };
    let mut v = Vec::new();
    b.write(&mut v, &[0u8; 18]).expect("frame builds");
    v
}

fn node(yaml: &str) -> Box<dyn Node> {
    let v: serde_json::Value = serde_yaml_ng::from_str(yaml).expect("yaml");
    let spec: NodeSpec = serde_json::from_value(v).expect("spec");
    nfx_vnf::build(&spec, spec.kind(), &nfx_vnf::FileScope::new(".")).expect("node builds")
}

/// CPU time this thread has run, in ns (CLOCK_THREAD_CPUTIME_ID), so that other load
/// on a shared machine does not inflate the figures.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, owned `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `frames` through `nodes` in vectors; returns ns per packet and drops.
fn run(
    nodes: &mut [Box<dyn Node>],
    frames: &[Vec<u8>],
    dir: Direction,
    rounds: usize,
    vector: usize,
) -> (f64, usize) {
    let mut vec: Vec<Packet> = (0..vector)
        .map(|_| Packet::new(PacketBuf::with_capacity(2048), dir))
        .collect();
    let mut sink = EventSink::default();
    let mut drops = 0;
    let start = cpu_ns();
    let mut n = 0usize;
    for r in 0..rounds {
        for chunk in frames.chunks(vector) {
            for (p, f) in vec.iter_mut().zip(chunk) {
                p.buf.storage_mut()[..f.len()].copy_from_slice(f);
                p.buf.set_len(f.len());
                p.drop = None;
                match parse(p.buf.frame()) {
                    Ok(m) => p.meta = m,
                    Err(e) => p.drop = Some(e),
                }
            }
            let pkts = &mut vec[..chunk.len()];
            let mut ctx = NodeCtx {
                now_ns: 1_000_000_000 + r as u64,
                events: &mut sink,
            };
            for node in nodes.iter_mut() {
                node.process(pkts, &mut ctx);
            }
            drops += pkts.iter().filter(|p| !p.alive()).count();
            n += chunk.len();
        }
    }
    ((cpu_ns() - start) as f64 / n as f64, drops)
}

fn main() {
    let arg = |i: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse::<usize>().ok())
    };
    let vector = arg(2)
        .unwrap_or(nfx_packet::MAX_VECTOR)
        .clamp(1, nfx_packet::MAX_VECTOR);
    let flows: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let mut rules = String::new();
    for i in 0..99 {
        rules.push_str(&format!(
            "{{action: deny, proto: tcp, dport: {}}},",
            10000 + i
        ));
    }
    rules.push_str("{action: allow, proto: udp, dst: 10.200.0.0/16, dport: 5201}");
    let fw_yaml = format!("firewall: {{ default: deny, max_flows: {flows}, rules: [{rules}] }}");
    let nat_yaml = format!(
        "nat: {{ snat: {{ public_ip: 10.200.2.100, port_range: [1024, 65535] }}, max_flows: {flows} }}"
    );
    let fwd: Vec<Vec<u8>> = (0..flows).map(|i| frame(i, false, false)).collect();
    let rev_fw: Vec<Vec<u8>> = (0..flows).map(|i| frame(i, true, false)).collect();
    let rev_nat: Vec<Vec<u8>> = (0..flows).map(|i| frame(i, true, true)).collect();
    let rounds = (4_000_000 / flows as usize).max(1);

    let (base, _) = run(&mut [], &fwd, Direction::Forward, rounds, vector);
    println!(
        "flows {flows}; vector {vector}; 64-byte UDP frames; CPU ns/packet (node cost = row - parse)"
    );
    println!("{:<40} {:>8.1}", "copy + parse", base);

    let mut fw = vec![node(&fw_yaml)];
    let (create, d) = run(&mut fw, &fwd, Direction::Forward, 1, vector);
    println!(
        "{:<40} {:>8.1}  drops {d}",
        "firewall: new flows (100-rule ACL)", create
    );
    run(&mut fw, &rev_fw, Direction::Reverse, 1, vector);
    let (est, d) = run(&mut fw, &fwd, Direction::Forward, rounds, vector);
    println!(
        "{:<40} {:>8.1}  drops {d}",
        "firewall: established flows", est
    );
    println!("firewall stats: {}", fw[0].stats());

    let mut nat = vec![node(&nat_yaml)];
    let (create, d) = run(&mut nat, &fwd, Direction::Forward, 1, vector);
    println!("{:<40} {:>8.1}  drops {d}", "nat: new mappings", create);
    let (rev, d) = run(&mut nat, &rev_nat, Direction::Reverse, rounds, vector);
    println!(
        "{:<40} {:>8.1}  drops {d}",
        "nat: replies (reverse translation)", rev
    );
    let (est, d) = run(&mut nat, &fwd, Direction::Forward, rounds, vector);
    println!("{:<40} {:>8.1}  drops {d}", "nat: forward translation", est);
    println!("nat stats: {}", nat[0].stats());
}
