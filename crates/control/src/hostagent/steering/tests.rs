//! Rendering and switching of host paths, against recorded tools (no root needed); the
//! namespace end-to-end tests run the same code against the kernel.

use super::*;
use std::sync::{Arc, Mutex};

/// Records every call; `ip route get` answers with `dev`.
#[derive(Clone, Default)]
struct Rec {
    calls: Arc<Mutex<Vec<String>>>,
    fail_nft: Arc<Mutex<bool>>,
    /// What `ip -j rule show pref 1000` lists (JSON; empty: none).
    rules: Arc<Mutex<String>>,
}

impl HostTools for Rec {
    fn nft(&mut self, script: &str) -> Result<(), String> {
        self.calls.lock().unwrap().push(format!("NFT\n{script}"));
        if *self.fail_nft.lock().unwrap() {
            return Err("refused".into());
        }
        Ok(())
    }

    fn ip(&mut self, args: &[&str]) -> Result<String, String> {
        let line = args.join(" ");
        self.calls.lock().unwrap().push(format!("ip {line}"));
        if line.starts_with("-j route get 10.9.1.") {
            return Ok(r#"[{"dst":"10.9.1.2","dev":"to-src"}]"#.into());
        }
        if line.starts_with("-j route get 10.9.2.") {
            return Ok(r#"[{"dst":"10.9.2.2","dev":"to-dst"}]"#.into());
        }
        if line == "-j rule show pref 1000" {
            let rules = self.rules.lock().unwrap().clone();
            return Ok(if rules.is_empty() { "[]".into() } else { rules });
        }
        Ok("[]".into())
    }
}

impl Rec {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

fn steering(rec: &Rec) -> Steering {
    let mut s = unreset(rec);
    s.reset().unwrap();
    rec.take();
    s
}

/// The test host's steering before its start-up step (reset or restore).
fn unreset(rec: &Rec) -> Steering {
    let n = |iface: &str, peer: &str| NeighborLink {
        iface: iface.into(),
        peer: peer.parse().unwrap(),
    };
    let neighbors = BTreeMap::from([
        ("h1".to_string(), n("to-h1", "10.9.101.1")),
        ("h3".to_string(), n("to-h3", "10.9.102.2")),
    ]);
    let stages = BTreeMap::from([
        ("sw0".to_string(), Stage::new("sw0", 0)),
        ("sw1".to_string(), Stage::new("sw1", 1)),
    ]);
    Steering::new(Box::new(rec.clone()), neighbors, stages)
}

fn sel() -> Selector {
    serde_json::from_value(serde_json::json!(
        {"src": "10.9.1.2/32", "dst": "10.9.2.2/32", "proto": "tcp", "dport": 5201}
    ))
    .unwrap()
}

fn path(prev: Option<&str>, next: Option<&str>, stages: &[&str]) -> HostPath {
    HostPath {
        after_nat: Vec::new(),
        nat_before: false,
        selector: sel(),
        prev: prev.map(String::from),
        next: next.map(String::from),
        stages: stages.iter().map(|s| s.to_string()).collect(),
        instances: stages
            .iter()
            .map(|s| (s.to_string(), vec![format!("{s}-fw")]))
            .collect(),
        tunnel_next: None,
        tunnel_prev: None,
    }
}

fn nft_scripts(calls: &[String]) -> Vec<&String> {
    calls.iter().filter(|c| c.starts_with("NFT")).collect()
}

#[test]
fn empty_host_is_closed() {
    let r = closed_ruleset();
    assert!(r.contains("policy drop"), "{r}");
    assert!(r.contains("delete table inet nfx_steer"));
    assert!(!r.contains("mark set"));
}

#[test]
fn transit_host_marks_both_directions_and_routes_to_neighbors() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    s.program("web", &path(Some("h1"), Some("h3"), &[]))
        .unwrap();
    let calls = rec.take();
    let nft = nft_scripts(&calls);
    assert_eq!(nft.len(), 1, "one transaction: {calls:?}");
    let script = nft[0];
    assert!(script.contains(
        "iifname \"to-h1\" ip saddr 10.9.1.2/32 ip daddr 10.9.2.2/32 meta l4proto tcp th dport 5201 meta mark set 0x4e580010 comment \"web\""
    ), "{script}");
    assert!(script.contains(
        "iifname \"to-h3\" ip saddr 10.9.2.2/32 meta l4proto tcp th sport 5201 meta mark set 0x4e580018"
    ), "{script}");
    assert!(script.contains("meta mark and 0xffff0000 == 0x4e580000 accept"));
    // Routes before the transaction, for both directions.
    let nft_at = calls.iter().position(|c| c.starts_with("NFT")).unwrap();
    let route = |gw: &str| {
        calls
            .iter()
            .position(|c| c.contains(&format!("route replace default via {gw}")))
            .unwrap_or_else(|| panic!("no route via {gw}: {calls:?}"))
    };
    assert!(route("10.9.102.2") < nft_at);
    assert!(route("10.9.101.1") < nft_at);
    assert!(calls
        .iter()
        .any(|c| c == "ip rule add fwmark 1314390032 table 1314390032 pref 1000"));
}

#[test]
fn worker_host_routes_through_the_worker_and_ends_use_the_main_table() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    s.program("web", &path(None, None, &["sw1"])).unwrap();
    let calls = rec.take();
    let script = nft_scripts(&calls)[0];
    // Ingress from the endpoint's interface, found by a route lookup of the source.
    assert!(
        script.contains("iifname \"to-src\" ip saddr 10.9.1.2/32"),
        "{script}"
    );
    // The worker's outputs continue the path.
    assert!(
        script.contains("iifname \"sk1o\" ip daddr 10.9.2.2/32"),
        "{script}"
    );
    assert!(
        script.contains("iifname \"sk1i\" ip saddr 10.9.2.2/32"),
        "{script}"
    );
    assert!(
        script.contains("iifname \"to-dst\" ip saddr 10.9.2.2/32"),
        "{script}"
    );
    // Into the worker's inside port forwards, its outside port for replies; the ends
    // (an endpoint attached here) need no table.
    assert!(
        calls
            .iter()
            .any(|c| c.contains("via 169.254.2.2 dev sk1i onlink")),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.contains("via 169.254.2.6 dev sk1o onlink")),
        "{calls:?}"
    );
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("ip rule add"))
            .count(),
        2
    );
}

#[test]
fn migration_switches_once_drains_the_old_worker_then_cleans_up() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    s.program("web", &path(Some("h1"), Some("h3"), &["sw0"]))
        .unwrap();
    rec.take();
    s.program("web", &path(Some("h1"), Some("h3"), &["sw1"]))
        .unwrap();
    let calls = rec.take();
    let nft_at = calls.iter().position(|c| c.starts_with("NFT")).unwrap();
    let script = &calls[nft_at];
    assert_eq!(nft_scripts(&calls).len(), 1);
    assert!(script.contains("iifname \"sk1o\""), "{script}");
    // The old worker's outputs still lead on (drain), its input is no longer used.
    assert!(script.contains("iifname \"sk0o\" ip daddr 10.9.2.2/32 meta l4proto tcp th dport 5201 meta mark set 0x4e580021 comment \"drain web\""), "{script}");
    assert!(
        !script.contains("0x4e580010"),
        "old marks are gone: {script}"
    );
    // Old rules removed only after the switch.
    let first_del = calls
        .iter()
        .position(|c| c.starts_with("ip rule del"))
        .unwrap();
    assert!(first_del > nft_at, "{calls:?}");
    // Drains end.
    assert!(!s.expire_drains(Instant::now()).unwrap());
    assert!(s.expire_drains(Instant::now() + DRAIN).unwrap());
    let calls = rec.take();
    assert!(!nft_scripts(&calls)[0].contains("drain"), "{calls:?}");
}

#[test]
fn same_path_again_changes_nothing_and_withdraw_closes() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    let p = path(Some("h1"), None, &[]);
    s.program("a", &p).unwrap();
    rec.take();
    s.sync(&BTreeMap::from([("a".to_string(), p.clone())]))
        .unwrap();
    let calls = rec.take();
    assert!(!calls.iter().any(|c| c.starts_with("ip ")), "{calls:?}");
    s.withdraw("a").unwrap();
    let calls = rec.take();
    assert!(!nft_scripts(&calls)[0].contains("mark set"));
    assert!(calls.iter().any(|c| c.starts_with("ip rule del")));
    s.withdraw("a").unwrap();
    assert!(rec.take().is_empty(), "withdrawing twice does nothing");
}

#[test]
fn bad_requests_are_refused_before_anything_changes() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    for (svc, p, want) in [
        ("a", path(Some("h9"), None, &[]), "not a neighbor"),
        ("a", path(None, None, &["gpu"]), "not a device of this host"),
        ("a", path(None, None, &["sw0", "sw0"]), "twice"),
        ("a b", path(None, None, &[]), "service id"),
        ("a\"x", path(None, None, &[]), "service id"),
    ] {
        let e = s.program(svc, &p).unwrap_err();
        assert!(
            matches!(e, SteerError::Invalid(_)) && e.to_string().contains(want),
            "{e}"
        );
    }
    let mut bad = path(None, None, &[]);
    bad.selector.sport = Some("80".parse().unwrap());
    bad.selector.proto = None;
    assert!(s
        .program("a", &bad)
        .unwrap_err()
        .to_string()
        .contains("selector"));
    assert!(nft_scripts(&rec.take()).is_empty());
}

#[test]
fn a_refused_transaction_keeps_the_previous_paths() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    s.program("a", &path(Some("h1"), Some("h3"), &[])).unwrap();
    *rec.fail_nft.lock().unwrap() = true;
    let e = s
        .program("b", &path(Some("h3"), Some("h1"), &[]))
        .unwrap_err();
    assert!(matches!(e, SteerError::Failed(_)), "{e}");
    assert_eq!(s.paths().keys().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn a_tunnel_hop_goes_through_the_endpoints_tun_device() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    let mut p = path(Some("h1"), Some("h3"), &[]);
    p.tunnel_next = Some("vpn-esp-h2".into());
    let e = s.program("vpn", &p).unwrap_err();
    assert!(e.to_string().contains("does not run on this host"), "{e}");
    s.set_tunnel(
        "vpn-esp-h2",
        NeighborLink {
            iface: "nt0".into(),
            peer: "169.254.200.2".parse().unwrap(),
        },
    );
    s.program("vpn", &p).unwrap();
    let calls = rec.take();
    let script = nft_scripts(&calls)[0];
    // Forward traffic from h1 is routed into the TUN; replies come back out of it.
    assert!(
        calls
            .iter()
            .any(|c| c.contains("route replace default via 169.254.200.2 dev nt0 onlink")),
        "{calls:?}"
    );
    assert!(
        script.contains("iifname \"nt0\" ip saddr 10.9.2.2/32"),
        "{script}"
    );
    assert!(!script.contains("to-h3"), "{script}");
    p.tunnel_next = None;
    p.tunnel_prev = Some("vpn-esp-h2".into());
    s.program("vpn", &p).unwrap();
    let script = nft_scripts(&rec.take())[0].clone();
    assert!(
        script.contains("iifname \"nt0\" ip saddr 10.9.1.2/32"),
        "{script}"
    );
    let mut end = path(None, Some("h3"), &[]);
    end.tunnel_prev = Some("vpn-esp-h2".into());
    let e = s.program("bad", &end).unwrap_err();
    assert!(e.to_string().contains("at an end of the path"), "{e}");
}

fn record_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("nfx-steer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `ip -j rule show` of the rules `calls` added.
fn listed_rules(calls: &[String]) -> String {
    let tables: Vec<String> = calls
        .iter()
        .filter_map(|c| c.strip_prefix("ip rule add fwmark "))
        .map(|r| {
            format!(
                r#"{{"priority":1000,"table":"{}"}}"#,
                r.split(' ').next().unwrap()
            )
        })
        .collect();
    format!("[{}]", tables.join(","))
}

#[test]
fn a_restarted_agent_loads_its_recorded_paths_without_closing_the_host() {
    let dir = record_dir("restore");
    let file = dir.join("steering.json");
    let rec = Rec::default();
    let mut s = unreset(&rec).with_record(file.clone());
    s.reset().unwrap();
    s.program("a", &path(Some("h1"), Some("h3"), &["sw0"]))
        .unwrap();
    s.program("b", &path(None, Some("h3"), &[])).unwrap();
    s.withdraw("b").unwrap();
    s.program("c", &path(Some("h1"), None, &["sw1"])).unwrap();
    let before = s.paths();
    let calls = rec.take();
    let table = nft_scripts(&calls).last().unwrap().to_string();
    // The kernel holds the rules of every mark ever added (b's included, as if the
    // agent died before removing them) and a stray one.
    let mut rules = listed_rules(&calls);
    rules.insert_str(1, r#"{"priority":1000,"table":"1314390080"},"#);
    *rec.rules.lock().unwrap() = rules;
    drop(s);

    let mut again = unreset(&rec).with_record(file.clone());
    assert_eq!(again.restore().unwrap(), Restored::Paths(2));
    let calls = rec.take();
    assert_eq!(again.paths(), before);
    let nft = nft_scripts(&calls);
    assert_eq!(nft.len(), 1, "{calls:?}");
    assert_eq!(*nft[0], table, "the same table, marks included");
    assert!(
        !calls.iter().any(|c| c.starts_with("ip rule add")),
        "{calls:?}"
    );
    let replaced = calls.iter().filter(|c| c.contains("route replace")).count();
    assert_eq!(
        replaced, 7,
        "routes of kept marks replaced in place: {calls:?}"
    );
    let deleted: BTreeSet<&String> = calls
        .iter()
        .filter(|c| c.starts_with("ip rule del"))
        .collect();
    assert_eq!(
        deleted,
        BTreeSet::from([
            &"ip rule del table 1314390048 pref 1000".to_string(),
            &"ip rule del table 1314390080 pref 1000".to_string()
        ]),
        "only the rules of marks no longer used (b's, withdrawn, and a stray one) go"
    );
    // The controller's paths then change nothing that is the same.
    again.sync(&before).unwrap();
    assert!(!rec.take().iter().any(|c| c.starts_with("ip ")));
    // A new path after the restore takes a slot the recorded ones do not use.
    again.program("d", &path(None, Some("h1"), &[])).unwrap();
    let marks: BTreeSet<u32> = again.services.values().map(|p| p.slot).collect();
    assert_eq!(marks.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_or_foreign_record_closes_the_host() {
    let dir = record_dir("refuse");
    let file = dir.join("steering.json");
    let rec = Rec::default();
    let mut s = unreset(&rec).with_record(file.clone());
    assert_eq!(s.restore().unwrap(), Restored::Closed, "no record yet");
    s.program("a", &path(None, None, &["sw1"])).unwrap();
    let good = std::fs::read_to_string(&file).unwrap();
    for (text, want) in [
        (good[..good.len() / 2].to_string(), "not a record"),
        (good.replace("sw1", "gpu"), "not a device of this host"),
        (good.replace("\"slot\":1", "\"slot\":0"), "slot 0"),
        (good.replace("\"version\":1", "\"version\":9"), "version 9"),
    ] {
        assert_ne!(text, good, "{want}");
        std::fs::write(&file, &text).unwrap();
        rec.take();
        let mut again = unreset(&rec).with_record(file.clone());
        match again.restore().unwrap() {
            Restored::Refused(why) => assert!(why.contains(want), "{why}"),
            other => panic!("{want}: {other:?}"),
        }
        assert!(again.paths().is_empty());
        let calls = rec.take();
        assert!(!nft_scripts(&calls).last().unwrap().contains("mark set"));
        assert!(dir.join("damaged/steering.json").exists());
        assert!(file.exists(), "the closed host is recorded");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_selector_without_addresses_leaves_interface_bound_segments_the_last_word() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    let mut p = path(Some("h1"), None, &[]);
    p.selector = serde_json::from_value(serde_json::json!({"proto": "tcp"})).unwrap();
    s.program("web", &p).unwrap();
    let calls = rec.take();
    let script = nft_scripts(&calls)[0];
    // At the egress host the replies' interface is unknown: their rule matches on every
    // interface, so it must come before the forward rule bound to the link from h1
    // (the last matching rule's mark wins).
    let reply = script
        .find(" meta l4proto tcp meta mark set 0x4e580018")
        .unwrap_or_else(|| panic!("{script}"));
    let forward = script
        .find("iifname \"to-h1\" meta l4proto tcp meta mark set 0x4e580010")
        .unwrap_or_else(|| panic!("{script}"));
    assert!(reply < forward, "{script}");
}

/// The redirect of a transcoder listening on `listen_port` for the stream to
/// 10.9.2.2:6000.
fn redirect(listen_port: u16) -> Redirect {
    Redirect {
        output: "10.9.2.2:6000".parse().unwrap(),
        listen_port,
        source: None,
    }
}

/// A transcoder's redirect is one `nat` prerouting rule in the same table, kept across
/// path changes, removed with the transcoder; a refused load keeps the old set.
#[test]
fn transcoder_redirects_ride_in_the_table() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    let x = redirect(5000);
    s.set_redirect("xc.1", Some(x)).unwrap();
    let calls = rec.take();
    let nft = nft_scripts(&calls);
    assert_eq!(nft.len(), 1, "{calls:?}");
    let rule = "ip daddr 10.9.2.2 udp dport 6000 redirect to :5000 comment \"xc_1\"";
    assert!(
        nft[0].contains("type nat hook prerouting priority dstnat"),
        "{}",
        nft[0]
    );
    assert!(nft[0].contains(rule), "{}", nft[0]);
    // The same redirect again loads nothing.
    s.set_redirect("xc.1", Some(x)).unwrap();
    assert!(nft_scripts(&rec.take()).is_empty());
    s.program("web", &path(Some("h1"), Some("h3"), &[]))
        .unwrap();
    let calls = rec.take();
    assert!(nft_scripts(&calls)[0].contains(rule), "{calls:?}");
    *rec.fail_nft.lock().unwrap() = true;
    assert!(s.set_redirect("xc.1", None).is_err());
    rec.take();
    *rec.fail_nft.lock().unwrap() = false;
    s.withdraw("web").unwrap();
    assert!(
        nft_scripts(&rec.take())[0].contains(rule),
        "kept after a refused removal"
    );
    s.set_redirect("xc.1", None).unwrap();
    let calls = rec.take();
    assert!(
        !nft_scripts(&calls)[0].contains("chain transcode"),
        "{calls:?}"
    );
}

/// The original source is restored on the transcoder's own stream only: a `nat`
/// postrouting rule for packets to `output` sent from an address of the host; set and
/// cleared with the redirect, kept across a reconfigured redirect, absent without a
/// source.
#[test]
fn a_transcoders_output_gets_the_original_source_back() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    s.set_redirect("xc.1", Some(redirect(5000))).unwrap();
    assert!(!nft_scripts(&rec.take())[0].contains("transcode_out"));
    // No redirect: no source to set, nothing loaded.
    s.set_redirect_source("other", Some("10.9.1.2".parse().unwrap()))
        .unwrap();
    assert!(nft_scripts(&rec.take()).is_empty());
    s.set_redirect_source("xc.1", Some("10.9.1.2".parse().unwrap()))
        .unwrap();
    let calls = rec.take();
    let nft = nft_scripts(&calls);
    assert_eq!(nft.len(), 1, "{calls:?}");
    let snat = "fib saddr type local ip daddr 10.9.2.2 udp dport 6000 snat ip to 10.9.1.2 \
                comment \"xc_1\"";
    assert!(
        nft[0].contains("chain transcode_out {\n    type nat hook postrouting priority srcnat;"),
        "{}",
        nft[0]
    );
    assert!(nft[0].contains(snat), "{}", nft[0]);
    assert_eq!(nft[0].matches("snat ip to").count(), 1, "{}", nft[0]);
    // The redirect itself is unchanged.
    assert!(nft[0].contains("ip daddr 10.9.2.2 udp dport 6000 redirect to :5000"));
    assert_eq!(
        s.redirect("xc.1").unwrap().source,
        Some("10.9.1.2".parse().unwrap())
    );
    // The same source again loads nothing; a new listen port keeps the source.
    s.set_redirect_source("xc.1", Some("10.9.1.2".parse().unwrap()))
        .unwrap();
    assert!(nft_scripts(&rec.take()).is_empty());
    let moved = Redirect {
        listen_port: 5001,
        ..s.redirect("xc.1").unwrap()
    };
    s.set_redirect("xc.1", Some(moved)).unwrap();
    let calls = rec.take();
    assert!(nft_scripts(&calls)[0].contains(snat), "{calls:?}");
    // Removed with the redirect.
    s.set_redirect("xc.1", None).unwrap();
    let calls = rec.take();
    assert!(!nft_scripts(&calls)[0].contains("snat"), "{calls:?}");
}

/// Two transcoders of one host cannot take the same output's stream nor listen on the
/// same port: the second is refused by name and nothing is loaded; the first may still
/// change its own redirect, and once it is gone the second fits.
#[test]
fn a_second_transcoder_for_the_same_output_or_port_is_refused() {
    let rec = Rec::default();
    let mut s = steering(&rec);
    s.set_redirect("xc.1", Some(redirect(5000))).unwrap();
    rec.take();
    let same_output = s.set_redirect("xc.2", Some(redirect(5001))).unwrap_err();
    assert!(
        same_output.to_string().contains("xc.1")
            && same_output.to_string().contains("10.9.2.2:6000"),
        "{same_output}"
    );
    let other_output = Redirect {
        output: "10.9.2.3:6000".parse().unwrap(),
        ..redirect(5000)
    };
    let same_port = s.set_redirect("xc.2", Some(other_output)).unwrap_err();
    assert!(
        same_port.to_string().contains("UDP port 5000"),
        "{same_port}"
    );
    assert!(nft_scripts(&rec.take()).is_empty());
    assert_eq!(s.redirect("xc.2"), None);
    s.set_redirect("xc.1", Some(redirect(5002))).unwrap();
    s.set_redirect("xc.1", None).unwrap();
    s.set_redirect("xc.2", Some(redirect(5001))).unwrap();
    assert_eq!(s.redirect("xc.2"), Some(redirect(5001)));
}
