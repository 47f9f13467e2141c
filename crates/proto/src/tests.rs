//! The protocol's known answers: every request's wire text, every refusal's message,
//! and the client against a socket that answers garbage, too much or nothing.

use crate::request::{ExportState, ImportState, Poll, Steer};
use crate::*;
use nfx_io::PollMode;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::time::Duration;

/// Every request and the exact line the hand-written clients sent for it (their JSON
/// objects sorted keys; the tag leads here, which only moves `cmd` in a `chain` request).
fn known() -> Vec<(Request, &'static str)> {
    let set = ServiceSet {
        services: vec![ServiceConfig {
            id: "all".into(),
            selector: Default::default(),
            chain: vec!["fw".into()],
        }],
        instances: [(
            "fw".to_string(),
            InstanceConfig {
                function: "firewall".into(),
                config: serde_json::json!({"default": "deny"}),
            },
        )]
        .into(),
    };
    vec![
        (Request::Stats {}, r#"{"cmd":"stats"}"#),
        (
            Request::ExportState(ExportState { node: "fw".into() }),
            r#"{"cmd":"export_state","node":"fw"}"#,
        ),
        (
            Request::ImportState(ImportState {
                data_b64: "AAAA".into(),
                node: "nat".into(),
            }),
            r#"{"cmd":"import_state","data_b64":"AAAA","node":"nat"}"#,
        ),
        (Request::Hold {}, r#"{"cmd":"hold"}"#),
        (Request::Release {}, r#"{"cmd":"release"}"#),
        (Request::Drain {}, r#"{"cmd":"drain"}"#),
        (
            Request::Steer(Steer { member: 1 }),
            r#"{"cmd":"steer","member":1}"#,
        ),
        (
            Request::Poll(Poll {
                mode: PollMode::Adaptive,
                worker: Some(0),
            }),
            r#"{"cmd":"poll","mode":"adaptive","worker":0}"#,
        ),
        (
            Request::Poll(Poll {
                mode: PollMode::Busy,
                worker: None,
            }),
            r#"{"cmd":"poll","mode":"busy"}"#,
        ),
        (Request::Shutdown {}, r#"{"cmd":"shutdown"}"#),
        (
            Request::Reconfigure(Reconfigure::services(set)),
            r#"{"cmd":"reconfigure","instances":{"fw":{"function":"firewall","config":{"default":"deny"}}},"services":[{"id":"all","selector":{},"chain":["fw"]}]}"#,
        ),
        (
            Request::Reconfigure(Reconfigure::chain(vec![
                serde_json::json!({"firewall": {"default": "allow"}}),
                serde_json::json!({"elephant": {}}),
            ])),
            r#"{"cmd":"reconfigure","chain":[{"firewall":{"default":"allow"}},{"elephant":{}}]}"#,
        ),
    ]
}

#[test]
fn every_request_has_its_known_wire_text_and_reads_back() {
    for (req, line) in known() {
        assert_eq!(req.to_line(), line);
        assert_eq!(Request::parse(line).unwrap(), req, "{line}");
    }
    // The old chain request, `cmd` last, is the same request.
    let old = r#"{"chain":[{"elephant":{}}],"cmd":"reconfigure"}"#;
    assert_eq!(
        Request::parse(old).unwrap(),
        Request::Reconfigure(Reconfigure::chain(vec![
            serde_json::json!({"elephant": {}})
        ]))
    );
}

#[test]
fn the_fuzz_seed_session_reads_as_requests_except_its_bad_lines() {
    let session = include_str!("../../dataplane/fuzz/seeds/control_line/session.txt");
    let parsed: Vec<bool> = session
        .lines()
        .map(|l| Request::parse(l.trim()).is_ok())
        .collect();
    let mut want = vec![true; parsed.len()];
    let n = want.len();
    // `bogus`, `not json`
    want[n - 2] = false;
    want[n - 1] = false;
    assert_eq!(parsed, want);
}

#[test]
fn refusals_say_what_and_where() {
    for (line, needle) in [
        ("not json", "request is not JSON"),
        ("[1]", "not a JSON object"),
        (r#"{"nocmd":1}"#, "no string field `cmd`"),
        (r#"{"cmd":7}"#, "no string field `cmd`"),
        (
            r#"{"cmd":"dance"}"#,
            "unknown cmd `dance` (stats, reconfigure",
        ),
        (r#"{"cmd":"handoff"}"#, "drain, steer"),
        (
            r#"{"cmd":"export_state"}"#,
            "export_state: missing field `node`",
        ),
        (r#"{"cmd":"steer","member":-1}"#, "steer: field `member`"),
        (r#"{"cmd":"steer","member":"one"}"#, "steer: field `member`"),
        (
            r#"{"cmd":"steer","member":4294967296}"#,
            "steer: field `member`",
        ),
        (
            r#"{"cmd":"poll","mode":"spin"}"#,
            "unknown poll mode `spin`",
        ),
        (r#"{"cmd":"poll"}"#, "poll: missing field `mode`"),
        (
            r#"{"cmd":"poll","mode":"busy","worker":-1}"#,
            "field `worker`",
        ),
        (
            r#"{"cmd":"stats","x":1}"#,
            "stats: field `x`: unknown field",
        ),
        (
            r#"{"cmd":"reconfigure","services":[{"id":"x","selector":{"port":1}}]}"#,
            "field `services[0].selector",
        ),
    ] {
        let e = Request::parse(line).unwrap_err();
        assert!(e.contains(needle), "{line}: {e}");
    }
    let topo = |line: &str| match Request::parse(line).unwrap() {
        Request::Reconfigure(r) => r.topology(),
        other => panic!("{other:?}"),
    };
    assert!(topo(r#"{"cmd":"reconfigure"}"#)
        .unwrap_err()
        .contains("`chain`"));
    assert!(topo(r#"{"cmd":"reconfigure","chain":[],"services":[]}"#)
        .unwrap_err()
        .contains("not both"));
    assert!(matches!(
        topo(r#"{"cmd":"reconfigure","instances":{}}"#),
        Ok(ReconfigureForm::Services(_))
    ));
}

#[test]
fn answers_and_refusals_read_as_their_types() {
    let a: Drained =
        client::parse_answer(br#"{"ok":true,"held":true,"packets":3}"#, "drain").unwrap();
    assert_eq!(a.packets, 3);
    match client::parse_answer::<Drained>(br#"{"error":"drain: frames still arriving"}"#, "drain") {
        Err(client::AnswerError::Refused(m)) => assert!(m.contains("still arriving")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client::parse_answer::<Stats>(b"<html>", "stats"),
        Err(client::AnswerError::Bad("stats", _))
    ));
    assert_eq!(
        answer_line::<Ack>(Err("no node `x`".into())),
        r#"{"error":"no node `x`"}"#
    );
    assert_eq!(answer_line(Ok(Ack { ok: true })), r#"{"ok":true}"#);
    // The export answer written in one piece is the serde line, also for a node name
    // that needs escaping; text that is not base64 takes the serde path.
    for (node, b64) in [
        ("nat", "AQID+/=="),
        ("a\"b\n", "AQID"),
        ("x", "not \"base64\""),
    ] {
        let e = Exported {
            node: node.into(),
            bytes: 3,
            data_b64: b64.into(),
        };
        assert_eq!(e.to_line(), serde_json::to_string(&e).unwrap());
    }
}

/// A socket that reads one request line and writes `answer` (as is) for each of
/// `conns` connections; returns the lines it read.
fn serve_raw(
    path: &std::path::Path,
    answer: Vec<u8>,
    conns: usize,
) -> std::thread::JoinHandle<Vec<String>> {
    let l = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for _ in 0..conns {
            let (s, _) = l.accept().unwrap();
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).unwrap();
            seen.push(line.trim().to_string());
            let _ = (&s).write_all(&answer);
        }
        seen
    })
}

#[test]
fn client_reports_garbage_oversized_and_missing_answers_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let sock = |n: &str| dir.path().join(n);
    let e = Client::connect(sock("missing.sock")).err().unwrap();
    assert!(e.to_string().contains("missing.sock"), "{e}");

    let t = serve_raw(&sock("garbage.sock"), b"\x00\xffnot json\n".to_vec(), 1);
    let e = Client::connect(sock("garbage.sock"))
        .unwrap()
        .stats()
        .unwrap_err();
    assert!(
        matches!(e, ClientError::BadAnswer { cmd: "stats", .. }),
        "{e}"
    );
    assert_eq!(t.join().unwrap(), [r#"{"cmd":"stats"}"#]);

    // An endless line: the client stops at its limit, the server is not waited for.
    let t = serve_raw(&sock("long.sock"), vec![b'x'; 1 << 20], 1);
    let e = Client::connect(sock("long.sock"))
        .unwrap()
        .with_max_line(4096)
        .hold()
        .unwrap_err();
    assert!(matches!(e, ClientError::TooLong { limit: 4096, .. }), "{e}");
    t.join().unwrap();

    let t = serve_raw(&sock("mute.sock"), Vec::new(), 1);
    let e = Client::connect(sock("mute.sock"))
        .unwrap()
        .drain()
        .unwrap_err();
    assert!(matches!(e, ClientError::Closed { .. }), "{e}");
    t.join().unwrap();

    // A peer that answers nothing and keeps the connection open: the timeout ends it.
    let l = UnixListener::bind(sock("silent.sock")).unwrap();
    let mut c = Client::connect(sock("silent.sock"))
        .unwrap()
        .with_timeout(Duration::from_millis(100));
    let (_held, _) = l.accept().unwrap();
    assert!(matches!(c.stats().unwrap_err(), ClientError::Io { .. }));
}

#[test]
fn client_refusal_keeps_the_connection_and_typed_answers_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.sock");
    let l = UnixListener::bind(&path).unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(&s);
        let mut lines = Vec::new();
        for answer in [
            r#"{"error":"no node `nat` in the chain"}"#,
            r#"{"node":"nat","bytes":3,"data_b64":"AQID"}"#,
        ] {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            lines.push(line.trim().to_string());
            writeln!(&s, "{answer}").unwrap();
        }
        lines
    });
    let mut c = Client::connect(&path).unwrap();
    let e = c.export_state("nat").unwrap_err();
    assert!(
        e.is_refusal() && e.to_string().contains("no node `nat`"),
        "{e}"
    );
    assert_eq!(c.export_state("nat").unwrap(), [1, 2, 3]);
    assert_eq!(t.join().unwrap().len(), 2, "one connection served both");
}

/// The fenced block after `marker` in docs/dataplane.md, line by line.
fn doc_block(marker: &str) -> Vec<&'static str> {
    let doc = include_str!("../../../docs/dataplane.md");
    let after = &doc[doc.find(marker).expect("marker in docs/dataplane.md")..];
    let body = after.split("```").nth(1).expect("a fenced block");
    body.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[test]
fn docs_examples_are_the_types() {
    let requests: Vec<Request> = doc_block("<!-- proto:requests -->")
        .into_iter()
        .map(|l| {
            let r = Request::parse(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            assert_eq!(r.to_line(), l, "the docs show the exact wire text");
            r
        })
        .collect();
    let cmds: Vec<&str> = requests.iter().map(Request::cmd).collect();
    let mut listed: Vec<&str> = request::COMMANDS.split(", ").collect();
    listed.dedup();
    for c in &listed {
        assert!(cmds.contains(c), "docs show no `{c}` request");
    }
    for line in doc_block("<!-- proto:answers -->") {
        let (cmd, text) = line.split_once(' ').unwrap();
        let b = text.as_bytes();
        let ok = match cmd {
            "reconfigure" => client::parse_answer::<Reconfigured>(b, "reconfigure").is_ok(),
            "export_state" => client::parse_answer::<Exported>(b, "export_state").is_ok(),
            "import_state" => client::parse_answer::<Imported>(b, "import_state").is_ok(),
            "hold" | "release" => client::parse_answer::<Held>(b, "hold").is_ok(),
            "drain" => client::parse_answer::<Drained>(b, "drain").is_ok(),
            "steer" => client::parse_answer::<Steered>(b, "steer").is_ok(),
            "poll" => client::parse_answer::<PollSet>(b, "poll").is_ok(),
            "shutdown" => client::parse_answer::<Ack>(b, "shutdown").is_ok(),
            "error" => matches!(
                client::parse_answer::<Ack>(b, "shutdown"),
                Err(client::AnswerError::Refused(_))
            ),
            other => panic!("unknown answer kind {other}"),
        };
        assert!(ok, "{line}");
    }
}

/// A worker started by an older binary answers `reconfigure` with its whole stats
/// document and none of the report's fields: the answer still parses, with nothing
/// built, so the agent asks for `stats` instead of failing the deploy.
#[test]
fn an_older_workers_reconfigure_answer_parses_with_nothing_built() {
    let old = br#"{"ok":true,"nodes":["fw1"],"flows_carried":0,"stats":{"name":"w","nodes":[]}}"#;
    let r = client::parse_answer::<Reconfigured>(old, "reconfigure").unwrap();
    assert_eq!(r.nodes, ["fw1"]);
    assert!(r.built.is_empty() && r.name.is_empty());
}
