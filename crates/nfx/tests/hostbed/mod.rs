//! Helpers of the end-to-end tests on the multi-host testbed (`nfx testbed up --hosts`):
//! running the CLI with the API token, and guards that tear the testbed and the
//! controller down on failure too.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `nfx` binary under test.
pub const NFX: &str = env!("CARGO_BIN_EXE_nfx");

/// Runs `nfx ARGS` with `NFX_TOKEN=token`, bounded; returns stdout or fails with stderr.
pub fn nfx(token: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(NFX);
    cmd.args(args)
        .env("NFX_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = nfx_testbed::process::output_within(cmd, Duration::from_secs(120)).unwrap();
    assert!(
        out.status.success(),
        "nfx {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes the testbed of this prefix (agents and workers with it) on drop.
pub struct Down(pub &'static str);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new(NFX)
            .args(["testbed", "down", "--prefix", self.0])
            .status();
    }
}

/// Kills the controller on drop.
pub struct Ctl(pub Child);

impl Drop for Ctl {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A testbed brought up by `nfx testbed up --hosts N --out DIR` into a temporary
/// directory; torn down (and the directory removed) on drop.
pub struct Testbed {
    down: Option<Down>,
    _dir: nfx_testbed::tempfile::TempDir,
    /// The `--out` directory: infrastructure.yaml, endpoints.json, the controller's files.
    pub out: PathBuf,
    /// endpoints.json, parsed.
    pub eps: Value,
}

/// Runs `nfx testbed up` with `hosts` hosts under `prefix` and subnet base `base`.
// examples_e2e shapes its testbed with testbed_up_shaped.
#[allow(dead_code)]
pub fn testbed_up(token: &str, prefix: &'static str, base: &str, hosts: u32) -> Testbed {
    let n = hosts.to_string();
    testbed_up_shaped(token, prefix, base, &["--hosts", &n])
}

/// `nfx testbed up SHAPE` (`--hosts N`, or `--infra FILE` and its options) under
/// `prefix` and subnet base `base`, into a temporary `--out` directory.
pub fn testbed_up_shaped(token: &str, prefix: &'static str, base: &str, shape: &[&str]) -> Testbed {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let out = dir.path().to_path_buf();
    let down = Down(prefix);
    let rest = ["--prefix", prefix, "--subnet-base", base, "--out"];
    let out_s = out.to_str().unwrap();
    nfx(
        token,
        &[&["testbed", "up"][..], shape, &rest[..], &[out_s]].concat(),
    );
    let eps = serde_json::from_str(&std::fs::read_to_string(out.join("endpoints.json")).unwrap())
        .unwrap();
    Testbed {
        down: Some(down),
        _dir: dir,
        out,
        eps,
    }
}

impl Testbed {
    /// Endpoint `name` of endpoints.json: its namespace, address and host.
    // hosts_e2e reads its endpoints into its own type.
    #[allow(dead_code)]
    pub fn endpoint(&self, name: &str) -> (String, std::net::Ipv4Addr, String) {
        let e = &self.eps[name];
        (
            e["netns"].as_str().unwrap().into(),
            e["address"].as_str().unwrap().parse().unwrap(),
            e["host"].as_str().unwrap().into(),
        )
    }

    /// Tears the testbed down now (the directory stays until drop).
    pub fn down(&mut self) {
        self.down.take();
    }
}

/// Starts `nfx up` on the testbed's infrastructure.yaml with `token` (its log in
/// `out/controller.log`); returns its guard and URL once it is ready.
// power_manager_e2e starts its controller with controller_with.
#[allow(dead_code)]
pub fn controller(out: &Path, token: &str) -> (Ctl, String) {
    controller_with(out, token, &[])
}

/// [`controller`] with extra `nfx up` arguments.
pub fn controller_with(out: &Path, token: &str, extra: &[&str]) -> (Ctl, String) {
    let ready = out.join("ready");
    let ctl = Command::new(NFX)
        .args(["up", "--listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--db")
        .arg(out.join("state.db"))
        .arg("--infra")
        .arg(out.join("infrastructure.yaml"))
        .arg("--ready-file")
        .arg(&ready)
        .env("NFX_TOKEN", token)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(out.join("controller.log")).unwrap())
        .spawn()
        .unwrap();
    let ctl = Ctl(ctl);
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        match std::fs::read_to_string(&ready) {
            Ok(s) if !s.trim().is_empty() => break s.trim().to_string(),
            _ if Instant::now() > deadline => panic!("controller never became ready"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    (ctl, format!("http://{addr}"))
}

/// CPU seconds of every thread of `pid`, from `/proc` (0 once it is gone).
// hosts_e2e measures no CPU.
#[allow(dead_code)]
pub fn cpu_s(pid: u32) -> f64 {
    nfx_io::cpu::thread_ids(pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|t| nfx_io::cpu::task_cpu_time(pid, t).ok())
        .map(|d| d.as_secs_f64())
        .sum()
}

/// `nfx deploy FILE` through the CLI with `token`; the operation must complete.
// Only the hosts and table-tier tests deploy through the CLI.
#[allow(dead_code)]
pub fn deploy(token: &str, file: &Path, url: &str) {
    let op: Value = serde_json::from_str(&nfx(
        token,
        &["deploy", file.to_str().unwrap(), "--json", "--url", url],
    ))
    .unwrap();
    assert_eq!(op["state"], "COMPLETED", "{op}");
}

/// Every instance row the controller has (`GET /api/v1/instances`).
// The migration, energy and power-manager tests read no instance list.
#[allow(dead_code)]
pub fn instances(c: &nfx_control::client::Client) -> Vec<Value> {
    c.get("/api/v1/instances")
        .unwrap()
        .body
        .as_array()
        .unwrap()
        .clone()
}

/// The controller's operations of `kind` on `target` (`GET /api/v1/operations`).
#[allow(dead_code)]
pub fn operations(c: &nfx_control::client::Client, kind: &str, target: &str) -> Vec<Value> {
    c.get("/api/v1/operations")
        .unwrap()
        .body
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == kind && o["target"] == target)
        .cloned()
        .collect()
}

/// Sends `payload`-byte datagrams starting with `pattern` at `pps` a second for `secs`
/// from namespace `src` to `dst:port` while a sink in namespace `dst_ns` counts them;
/// waits up to 3 s for the stragglers. Returns how many were sent and what the sink got.
// Not every test binary sends paced datagrams.
#[allow(dead_code)]
pub fn paced_udp(
    (src, dst_ns): (&str, &str),
    (dst, port): (std::net::Ipv4Addr, u16),
    (payload, pattern): (usize, &[u8]),
    (pps, secs): (u64, f64),
) -> (u64, nfx_testbed::udpgen::SinkReport) {
    use nfx_testbed::udpgen;
    let sink = udpgen::Sink::start(dst_ns, port, pattern).unwrap();
    let sent = udpgen::generate(udpgen::GenSpec {
        ns: src.to_string(),
        dst,
        port,
        payload,
        pattern: pattern.to_vec(),
        flows: 1,
        duration: Duration::from_secs_f64(secs),
        batch: 8,
        pps: Some(pps),
    })
    .unwrap()
    .sent;
    let deadline = Instant::now() + Duration::from_secs(3);
    while sink.packets() < sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    (sent, sink.finish().unwrap())
}
