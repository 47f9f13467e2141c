//! nfx as an installed program: `cargo install` into a temporary root and the demo run
//! from outside the repository, the services' systemd readiness notification, the units,
//! the shell completions and the man page. docs/install.md describes all of it.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const NFX: &str = env!("CARGO_BIN_EXE_nfx");
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn root() -> bool {
    let ok = nfx_testbed::root::effective_uid() == 0;
    if !ok {
        eprintln!("skipped: needs root");
    }
    ok
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn tempdir() -> nfx_testbed::tempfile::TempDir {
    nfx_testbed::tempfile::Builder::new()
        .prefix("nfx-install-test-")
        .tempdir()
        .unwrap()
}

/// Kills and reaps a started service whatever the test's outcome.
struct Service(Child);
impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A datagram socket standing in for systemd's `$NOTIFY_SOCKET`.
fn notify_socket(dir: &Path) -> (UnixDatagram, PathBuf) {
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    (sock, path)
}

fn recv_ready(sock: &UnixDatagram, what: &str) {
    let mut buf = [0u8; 256];
    let n = sock
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("{what}: no READY=1 within 20 s: {e}"));
    let msg = String::from_utf8_lossy(&buf[..n]);
    assert!(msg.lines().any(|l| l == "READY=1"), "{what}: got {msg:?}");
}

#[test]
fn services_notify_readiness() {
    let dir = tempdir();
    let (sock, notify) = notify_socket(dir.path());

    // The lookaside device: ready means its socket accepts clients.
    let accel_dir = dir.path().join("accel");
    std::fs::create_dir(&accel_dir).unwrap();
    let accel_sock = accel_dir.join("accel.sock");
    let _accel = Service(
        Command::new(NFX)
            .args(["accel", "serve", "--socket"])
            .arg(&accel_sock)
            .env("NOTIFY_SOCKET", &notify)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    recv_ready(&sock, "nfx accel serve");
    nfx_accel::LookasideEngine::connect(&accel_sock, nfx_accel::EngineKind::Soft)
        .expect("the device takes a client once it said READY=1");

    // The controller: ready means its API answers.
    let ready_file = dir.path().join("up.addr");
    let _up = Service(
        Command::new(NFX)
            .args(["up", "--listen", "127.0.0.1:0", "--sim-deploy-ms", "0"])
            .arg("--db")
            .arg(dir.path().join("state.db"))
            .arg("--token-file")
            .arg(dir.path().join("token"))
            .arg("--ready-file")
            .arg(&ready_file)
            .env("NOTIFY_SOCKET", &notify)
            .env_remove("NFX_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    recv_ready(&sock, "nfx up");
    let addr = std::fs::read_to_string(&ready_file).unwrap();
    let answer = nfx_control::client::Client::new(&format!("http://{}", addr.trim()), None)
        .get("/healthz")
        .unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
}

#[test]
fn units_pass_systemd_analyze() {
    let Ok(o) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    assert!(o.status.success());
    let dir = tempdir();
    let units = Path::new(REPO).join("deploy/systemd");
    let mut names = Vec::new();
    for e in std::fs::read_dir(&units).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "service") {
            let unit = std::fs::read_to_string(&p)
                .unwrap()
                .replace("/usr/local/bin/nfx", NFX);
            assert!(unit.contains("Type=notify"), "{}", p.display());
            let name = p.file_name().unwrap().to_owned();
            std::fs::write(dir.path().join(&name), unit).unwrap();
            names.push(dir.path().join(name));
        }
    }
    assert_eq!(names.len(), 3, "{names:?}");
    let o = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&names)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn completions_and_man_page_come_from_the_cli() {
    let run = |args: &[&str]| {
        let o = Command::new(NFX).args(args).output().unwrap();
        assert!(o.status.success(), "nfx {args:?}: {}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let bash = run(&["completions", "bash"]);
    assert!(bash.contains("complete -F"), "{bash}");
    for sub in ["demo", "bench", "deploy", "completions"] {
        assert!(bash.contains(sub), "bash completion lacks {sub}");
    }
    assert!(run(&["completions", "zsh"]).contains("#compdef nfx"));
    assert!(run(&["completions", "fish"]).contains("complete -c nfx"));
    let bad = Command::new(NFX)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "a bad value is a usage error");

    let man = run(&["man"]);
    assert!(man.starts_with(".ie") || man.starts_with(".TH"), "{man}");
    assert!(man.contains(".TH nfx 1"), "{man}");
    for section in ["NFX BENCH PLACEMENT", "NFX DEPLOY", "NFX ACCEL SERVE"] {
        assert!(man.contains(section), "man page lacks {section}");
    }
    assert!(
        man.contains("time\\-limit"),
        "options of subcommands are listed"
    );
}

/// `cargo install` into a temporary root, then the demo from a directory outside the
/// repository: the DPI patterns and the tenants' service files come from the binary itself.
#[test]
fn cargo_install_runs_the_demo_outside_the_repo() {
    if !root() {
        return;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The binary under test is <target>/<profile>/nfx: reuse that target directory and
    // profile (the suite builds with `ci`, a developer's `cargo test --release` with
    // `release`).
    let profile_dir = Path::new(NFX).parent().unwrap();
    let profile = profile_dir.file_name().unwrap().to_str().unwrap();
    let target = profile_dir.parent().unwrap();
    let prefix = tempdir();
    let mut install = Command::new(&cargo);
    // Cargo gives this test process its own CARGO_* variables and OUT_DIR; build scripts
    // that watch them (ring's watches both) would see a change and rebuild the workspace
    // instead of reusing the tested build.
    for (k, _) in std::env::vars_os() {
        let ours = k
            .to_str()
            .is_some_and(|k| (k.starts_with("CARGO_") && k != "CARGO_HOME") || k == "OUT_DIR");
        if ours {
            install.env_remove(k);
        }
    }
    let o = install
        .args([
            "install",
            "--locked",
            "--offline",
            "--profile",
            profile,
            "--path",
        ])
        .arg(Path::new(REPO).join("crates/nfx"))
        .arg("--root")
        .arg(prefix.path())
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    assert!(o.status.success(), "cargo install: {}", text(&o));
    let rebuilt = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.trim_start().starts_with("Compiling"))
        .count();
    if rebuilt > 1 {
        eprintln!(
            "note: cargo install recompiled {rebuilt} crates: their features differ from the \
             test build's (docs/install.md, feature alignment)"
        );
    }
    let nfx = prefix.path().join("bin/nfx");
    assert!(nfx.is_file());

    let cwd = tempdir();
    let _down = Down("hu-inst-");
    let o = Command::new(&nfx)
        .args([
            "demo",
            "--duration",
            "5",
            "--prefix",
            "hu-inst-",
            "--subnet-base",
            "158",
        ])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("tenant A's DPI"), "{t}");
    assert!(!t.contains("FAIL"), "{t}");
    assert!(
        std::fs::read_dir(cwd.path()).unwrap().next().is_none(),
        "the demo wrote nothing into its working directory"
    );
}

/// Removes the demo's multi-host testbed on drop, whatever happened in the test.
struct Down(&'static str);
impl Drop for Down {
    fn drop(&mut self) {
        let _ = nfx_testbed::hosts::down(self.0);
    }
}
