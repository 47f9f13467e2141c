//! `nfx testbed up --hosts N --out DIR`: the multi-host testbed with one `nfx agent` per
//! host over mutual TLS, and the two files a controller and a test need:
//! `DIR/infrastructure.yaml` (hosts with their agents, devices per tier, links, the
//! controller's management settings) and `DIR/endpoints.json`.
//!
//! Every host has software devices (workers on its cores) and one accelerator-tier
//! device: a lookaside crypto device that its agent runs as an `nfx accel serve`
//! process on a reserved core when a tunnel endpoint is placed on it. That device is
//! modelled hardware (a CPU core standing in for a QAT/FPGA card), and its figures
//! below are nominal. Where the kernel runs the table tier's eBPF programs (probed once
//! at `up`), every host also has one table-tier device: its agent runs the functions
//! placed on it as a real `TableChain` (tc programs over bounded maps) on the device's
//! veth ports; its latency and throughput figures are nominal too.

use anyhow::{bail, Context};
use nfx_control::hostagent::steering::{closed_ruleset, NeighborLink};
use nfx_control::hostagent::tablepins;
use nfx_control::hostagent::tables::TableDevice;
use nfx_control::hostagent::tunnels::AcceleratorDevice;
use nfx_control::hostagent::{AgentConfig, SoftwareDevice};
use nfx_control::tls::{self, AgentSubject};
use nfx_model::{Device, Host, Infrastructure, Link, Management, Tier, TlsFiles};
use nfx_testbed::hosts::{self, HostInfo, HostsSpec, Layout};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Port every agent listens on (on its host's management address).
pub const AGENT_PORT: u16 = 7443;
/// How long an agent may take to listen.
const AGENT_START: Duration = Duration::from_secs(20);
/// Functions a software device runs: its worker's (crates/vnf) and the transcoder, a
/// process of its own beside the worker.
const SOFTWARE_FUNCTIONS: [&str; 5] = ["firewall", "nat", "elephant", "dpi", "transcode"];
/// Nominal processing latency of a software worker, µs (import `nfx bench dataplane`
/// figures through the descriptor's `calibration` for measured ones).
const SOFTWARE_LATENCY_US: f64 = 30.0;
/// Nominal throughput of a software worker, Gbit/s.
const SOFTWARE_GBPS: f64 = 10.0;
/// Queue pairs of each host's lookaside device (one per tunnel endpoint).
const ACCEL_QUEUE_PAIRS: u32 = 2;
/// Nominal latency (µs) and throughput (Gbit/s) of the modelled lookaside device
/// (`nfx bench accel` measures it; import through the descriptor's `calibration`).
const ACCEL_LATENCY_US: f64 = 20.0;
const ACCEL_GBPS: f64 = 2.0;
/// ESP transforms the lookaside device runs.
const ACCEL_ALGORITHMS: [&str; 3] = ["aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"];
/// Functions the table tier runs (crates/fastpath, `table`).
const TABLE_FUNCTIONS: [&str; 3] = ["firewall", "nat", "elephant"];
/// Entries of each host's table device (rules + flow rows of the functions on it).
const TABLE_ENTRIES: u64 = 1 << 20;
/// Nominal latency (µs) and throughput (Gbit/s) of a table device (`nfx bench
/// dataplane` measures the table tier; import through the descriptor's `calibration`).
const TABLE_LATENCY_US: f64 = 5.0;
const TABLE_GBPS: f64 = 20.0;

/// One endpoint in `endpoints.json`.
#[derive(Serialize)]
struct EndpointEntry {
    netns: String,
    address: String,
    host: String,
}

/// Where `up` writes by default for `prefix`.
pub fn default_out(prefix: &str) -> PathBuf {
    PathBuf::from(format!("/run/nfx/testbed/{prefix}out"))
}

/// The testbed shaped as `infra`: its hosts (by id, in order) and links, `src` on the
/// first host and `dst` on the last, `extra_endpoints` round-robin.
pub fn spec_for(
    infra: &Infrastructure,
    prefix: &str,
    subnet_base: u8,
    extra_endpoints: Vec<String>,
) -> HostsSpec {
    HostsSpec {
        prefix: prefix.to_string(),
        subnet_base,
        hosts: infra.hosts.len(),
        extra_endpoints,
        names: infra.hosts.iter().map(|h| h.id.clone()).collect(),
        links: infra
            .links
            .iter()
            .map(|l| hosts::LinkInfo {
                a: l.a.clone(),
                b: l.b.clone(),
                latency_us: l.latency_us.round().clamp(0.0, f64::from(u32::MAX)) as u32,
            })
            .collect(),
    }
}

/// Builds the testbed, starts its agents and writes the files; returns the layout. The
/// agents let workers read files (DPI patterns) under `allowed_dirs`;
/// with `shape` (an infrastructure descriptor, `spec` from [`spec_for`]) every agent runs
/// the devices `shape` gives its host, and the written infrastructure is `shape` with
/// the agents and management settings added.
pub fn up_with(
    spec: &HostsSpec,
    out: &Path,
    allowed_dirs: &[PathBuf],
    shape: Option<&Infrastructure>,
) -> anyhow::Result<Layout> {
    let lay = hosts::up(spec, &closed_ruleset())?;
    std::fs::create_dir_all(out.join("agents"))
        .with_context(|| format!("creating {}", out.display()))?;
    let (pki, token_file) = pki(&lay, out)?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let tables = table_tier_probe();
    if let Err(e) = &tables {
        crate::note!("no table-tier devices on this testbed: {e}");
    }
    let mut infra = match shape {
        Some(s) => with_agents(s, &lay)?,
        None => infrastructure(&lay, cores, true),
    };
    infra.management = Some(Management {
        netns: Some(lay.mgmt_netns.clone()),
        tls: Some(TlsFiles {
            ca: PathBuf::from("pki").join(tls::CA_FILE),
            cert: PathBuf::from("pki/controller.pem"),
            key: PathBuf::from("pki/controller.key"),
        }),
        token_file: Some(PathBuf::from("token")),
    });
    let nfx_bin = std::env::current_exe().context("locating the nfx binary")?;
    for h in &lay.hosts {
        let (devs, power) = match shape {
            Some(s) => (
                shaped_devices(s, &h.id, cores, &tables)?,
                host_power(s, &h.id),
            ),
            None => {
                let d = generic_devices(&h.id, cores, tables.is_ok());
                if let Some(t) = d.tables.first() {
                    infra.devices.push(table_device(&h.id, t));
                }
                (d, nfx_energy::model::default_power(cores))
            }
        };
        let cfg = AgentConfig {
            host: h.id.clone(),
            listen: (h.mgmt, AGENT_PORT).into(),
            tls: Some(pki.agents[&h.id].clone()),
            token_file: token_file.clone(),
            run_dir: out.join("agents").join(&h.id),
            nfx_bin: Some(nfx_bin.clone()),
            software: devs.software,
            neighbors: h
                .neighbors
                .iter()
                .map(|n| {
                    (
                        n.host.clone(),
                        NeighborLink {
                            iface: n.iface.clone(),
                            peer: n.peer,
                        },
                    )
                })
                .collect(),
            ready_file: Some(out.join("agents").join(format!("{}.ready", h.id))),
            allowed_dirs: allowed_dirs.to_vec(),
            power: Some(power),
            accelerators: devs.accelerators,
            tables: devs.tables,
        };
        if !cfg.tables.is_empty() {
            hosts::record_pins(&spec.prefix, &[pin_root(&cfg)?])?;
        }
        start_agent(h, &cfg, &out.join("agents"), &nfx_bin)?;
    }
    infra
        .validate("<generated infrastructure>")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    write(
        &out.join("infrastructure.yaml"),
        &serde_yaml_ng::to_string(&infra)?,
    )?;
    write_endpoints(&lay, out)?;
    Ok(lay)
}

/// The agents' TLS material and the API token file: a rebuild keeps the material its
/// running agents hold; anything missing means new material and restarted agents.
fn pki(lay: &Layout, out: &Path) -> anyhow::Result<(tls::Pki, PathBuf)> {
    let subjects: Vec<AgentSubject> = lay
        .hosts
        .iter()
        .map(|h| AgentSubject {
            name: h.id.clone(),
            ips: vec![h.mgmt.into()],
        })
        .collect();
    let pki_dir = out.join("pki");
    let token_file = out.join("token");
    let pki = match tls::existing(&pki_dir, &subjects).filter(|_| token_file.exists()) {
        Some(p) => p,
        None => {
            for h in &lay.hosts {
                stop_agent(h, &out.join("agents"));
            }
            nfx_control::client::write_new_token(&token_file)?;
            tls::generate(&pki_dir, &subjects)?
        }
    };
    Ok((pki, token_file))
}

fn write_endpoints(lay: &Layout, out: &Path) -> anyhow::Result<()> {
    let eps: BTreeMap<&str, EndpointEntry> = lay
        .endpoints
        .iter()
        .map(|e| {
            (
                e.name.as_str(),
                EndpointEntry {
                    netns: e.netns.clone(),
                    address: e.address.to_string(),
                    host: e.host.clone(),
                },
            )
        })
        .collect();
    write(
        &out.join("endpoints.json"),
        &serde_json::to_string_pretty(&eps)?,
    )
}

/// The devices one host's agent runs.
struct HostDevices {
    software: Vec<SoftwareDevice>,
    accelerators: Vec<AcceleratorDevice>,
    tables: Vec<TableDevice>,
}

/// A generic host's devices: software workers sharing the cores, one lookaside device,
/// and one table device where the kernel runs the table tier.
fn generic_devices(host: &str, cores: u32, tables: bool) -> HostDevices {
    HostDevices {
        software: software_devices(host, cores),
        accelerators: vec![accelerator(host, cores)],
        tables: if tables {
            vec![table(host)]
        } else {
            Vec::new()
        },
    }
}

/// The devices `infra` gives `host`, as its agent runs them: a software device's
/// `cpu_cores`, an accelerator's `queue_pairs` (its process pinned to the machine's last
/// core), a table device's `table_entries`. A table device where the kernel does not run
/// the table tier is an error naming it.
fn shaped_devices(
    infra: &Infrastructure,
    host: &str,
    cores: u32,
    tables: &Result<(), String>,
) -> anyhow::Result<HostDevices> {
    let mut d = HostDevices {
        software: Vec::new(),
        accelerators: Vec::new(),
        tables: Vec::new(),
    };
    for dev in infra.devices.iter().filter(|d| d.host == host) {
        match dev.tier {
            Tier::Software => d.software.push(SoftwareDevice {
                id: dev.id.clone(),
                cores: dev.cpu_cores.unwrap_or(1).max(1),
            }),
            Tier::Accelerator => d.accelerators.push(AcceleratorDevice {
                id: dev.id.clone(),
                queue_pairs: dev.queue_pairs.unwrap_or(1),
                core: Some(cores.saturating_sub(1) as usize),
            }),
            Tier::Table => match tables {
                Ok(()) => d.tables.push(TableDevice {
                    id: dev.id.clone(),
                    entries: dev.table_entries.unwrap_or(TABLE_ENTRIES),
                }),
                Err(e) => bail!(
                    "device {} is of the table tier, which this machine does not run: {e}",
                    dev.id
                ),
            },
        }
    }
    Ok(d)
}

/// The power model of `host` in `infra`, else the default one for its cores.
fn host_power(infra: &Infrastructure, host: &str) -> nfx_model::PowerModel {
    let h = infra.hosts.iter().find(|h| h.id == host);
    h.and_then(|h| h.power.clone())
        .unwrap_or_else(|| nfx_energy::model::default_power(h.map_or(1, |h| h.cores)))
}

/// `infra` with each host's agent URL on the testbed `lay` (built from it). Its
/// `calibration` block is left out: loading `infra` applied its figures to the devices,
/// and its paths are relative to the file it came from.
fn with_agents(infra: &Infrastructure, lay: &Layout) -> anyhow::Result<Infrastructure> {
    let mut infra = infra.clone();
    infra.calibration = None;
    for h in &mut infra.hosts {
        let mgmt = lay
            .host(&h.id)
            .context("a host of the shape is not built")?
            .mgmt;
        h.agent = Some(format!("https://{mgmt}:{AGENT_PORT}"));
    }
    Ok(infra)
}

/// The hosts (with their agents' URLs if `agents`), software devices and links of
/// `lay`, without management settings. Without agents the controller serves every host
/// with its simulated VNFM (`nfx demo --simulate`).
pub fn infrastructure(lay: &Layout, cores: u32, agents: bool) -> Infrastructure {
    let mut infra = Infrastructure {
        hosts: Vec::new(),
        devices: Vec::new(),
        links: lay
            .links
            .iter()
            .map(|l| Link {
                a: l.a.clone(),
                b: l.b.clone(),
                latency_us: f64::from(l.latency_us),
                bandwidth_gbps: None,
            })
            .collect(),
        management: None,
        calibration: None,
    };
    for h in &lay.hosts {
        infra.hosts.push(Host {
            id: h.id.clone(),
            cores,
            power: Some(nfx_energy::model::default_power(cores)),
            agent: agents.then(|| format!("https://{}:{AGENT_PORT}", h.mgmt)),
        });
        infra.devices.extend(
            software_devices(&h.id, cores)
                .iter()
                .map(|d| software_device(&h.id, d)),
        );
        infra
            .devices
            .push(accelerator_device(&h.id, &accelerator(&h.id, cores)));
    }
    infra
}

/// The host's software devices: up to two workers sharing the host's cores, so that an
/// instance can migrate within the host.
fn software_devices(host: &str, cores: u32) -> Vec<SoftwareDevice> {
    let n = cores.clamp(1, 2);
    (0..n)
        .map(|k| SoftwareDevice {
            id: format!("{host}-sw{k}"),
            cores: cores / n + u32::from(k < cores % n),
        })
        .collect()
}

fn software_device(host: &str, d: &SoftwareDevice) -> Device {
    Device {
        id: d.id.clone(),
        host: host.to_string(),
        tier: Tier::Software,
        functions: SOFTWARE_FUNCTIONS.iter().map(|f| f.to_string()).collect(),
        latency_us: SOFTWARE_LATENCY_US,
        throughput_gbps: SOFTWARE_GBPS,
        cost: 1.0,
        cpu_cores: Some(d.cores),
        table_entries: None,
        queue_pairs: None,
        algorithms: Vec::new(),
        calibration: None,
    }
}

/// The host's lookaside device as its agent runs it: pinned to the host's last core
/// (the core reserved for it; on a small machine it shares that core with workers).
fn accelerator(host: &str, cores: u32) -> AcceleratorDevice {
    AcceleratorDevice {
        id: format!("{host}-acc0"),
        queue_pairs: ACCEL_QUEUE_PAIRS,
        core: Some(cores.saturating_sub(1) as usize),
    }
}

fn accelerator_device(host: &str, a: &AcceleratorDevice) -> Device {
    Device {
        id: a.id.clone(),
        host: host.to_string(),
        tier: Tier::Accelerator,
        functions: vec!["esp".into()],
        latency_us: ACCEL_LATENCY_US,
        throughput_gbps: ACCEL_GBPS,
        cost: 2.0,
        cpu_cores: None,
        table_entries: None,
        queue_pairs: Some(a.queue_pairs),
        algorithms: ACCEL_ALGORITHMS.iter().map(|a| a.to_string()).collect(),
        calibration: None,
    }
}

/// Whether this kernel loads and verifies the table tier's programs (root, BPF, tcx):
/// one blank device is programmed and dropped.
fn table_tier_probe() -> Result<(), String> {
    nfx_fastpath::table::TableChain::prepare(nfx_fastpath::table::Shape::default())
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The host's table device as its agent runs it.
fn table(host: &str) -> TableDevice {
    TableDevice {
        id: format!("{host}-tt0"),
        entries: TABLE_ENTRIES,
    }
}

fn table_device(host: &str, t: &TableDevice) -> Device {
    Device {
        id: t.id.clone(),
        host: host.to_string(),
        tier: Tier::Table,
        functions: TABLE_FUNCTIONS.iter().map(|f| f.to_string()).collect(),
        latency_us: TABLE_LATENCY_US,
        throughput_gbps: TABLE_GBPS,
        cost: 2.0,
        cpu_cores: None,
        table_entries: Some(t.entries),
        queue_pairs: None,
        algorithms: Vec::new(),
        calibration: None,
    }
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Where the agent of `cfg` pins its table chains (`nfx testbed down` removes it): its
/// run directory is made first, so that the agent's name for it (canonical) is this one.
fn pin_root(cfg: &AgentConfig) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(&cfg.run_dir)
        .with_context(|| format!("creating {}", cfg.run_dir.display()))?;
    Ok(tablepins::root_of(
        Path::new(tablepins::BPF_FS),
        &cfg.host,
        &cfg.run_dir,
    ))
}

/// Stops the recorded agent of `h` (SIGTERM), if it runs.
fn stop_agent(h: &HostInfo, dir: &Path) {
    let pid_file = dir.join(format!("{}.pid", h.id));
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    {
        if nfx_testbed::netns::pids(&h.netns).contains(&(pid as u32)) {
            // SAFETY: kill(2) on the agent this testbed started (checked to run inside
            // the host's namespace).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
    let _ = std::fs::remove_file(pid_file);
}

/// Starts `nfx agent --config` inside the host's network namespace in its own session (it
/// outlives this command; `nfx testbed down` stops it), unless it already runs, and
/// waits until it listens.
fn start_agent(h: &HostInfo, cfg: &AgentConfig, dir: &Path, nfx_bin: &Path) -> anyhow::Result<()> {
    let cfg_file = dir.join(format!("{}.yaml", h.id));
    let pid_file = dir.join(format!("{}.pid", h.id));
    let ready = cfg.ready_file.clone().context("ready file")?;
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
    {
        if nfx_testbed::netns::pids(&h.netns).contains(&pid) {
            write(&cfg_file, &serde_yaml_ng::to_string(cfg)?)?;
            return Ok(());
        }
    }
    write(&cfg_file, &serde_yaml_ng::to_string(cfg)?)?;
    let _ = std::fs::remove_file(&ready);
    let log_file = dir.join(format!("{}.log", h.id));
    let log = std::fs::File::create(&log_file)
        .with_context(|| format!("creating {}", log_file.display()))?;
    // Only the network namespace is entered (not `ip netns exec`, which remounts /sys
    // without the cgroup mounts): the agent sees the host's cgroups and can put a CPU
    // limit on its workers.
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net={}", nfx_io::netns::netns_path(&h.netns)))
        .arg("--")
        .arg(nfx_bin)
        .arg("agent")
        .arg("--config")
        .arg(&cfg_file)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid(2) in the child before exec; async-signal-safe, touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting the agent of {}", h.id))?;
    write(&pid_file, &child.id().to_string())?;
    let start = Instant::now();
    while !ready.exists() {
        if let Ok(Some(st)) = child.try_wait() {
            let tail = std::fs::read_to_string(&log_file).unwrap_or_default();
            bail!("the agent of {} exited ({st}): {}", h.id, tail.trim());
        }
        if start.elapsed() > AGENT_START {
            let _ = child.kill();
            bail!(
                "the agent of {} did not listen within {AGENT_START:?}; see {}",
                h.id,
                log_file.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_devices_share_the_cores() {
        let d = software_devices("h1", 3);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].cores, d[1].cores), (2, 1));
        assert_eq!(d[1].id, "h1-sw1");
        assert_eq!(software_devices("h2", 1).len(), 1);
    }

    #[test]
    fn infrastructure_with_and_without_agents() {
        let lay = HostsSpec {
            prefix: "t-".into(),
            subnet_base: 152,
            hosts: 3,
            extra_endpoints: Vec::new(),
            names: Vec::new(),
            links: Vec::new(),
        }
        .layout();
        let real = infrastructure(&lay, 2, true);
        assert_eq!(
            real.hosts[0].agent.as_deref(),
            Some("https://10.152.201.2:7443")
        );
        let sim = infrastructure(&lay, 2, false);
        assert!(sim.hosts.iter().all(|h| h.agent.is_none()));
        assert_eq!(
            (sim.hosts.len(), sim.devices.len(), sim.links.len()),
            (3, 9, 3)
        );
        let acc = sim
            .device("h2-acc0")
            .expect("every host has a lookaside device");
        assert_eq!(
            (acc.tier, acc.queue_pairs, acc.functions.as_slice()),
            (Tier::Accelerator, Some(2), &["esp".to_string()][..])
        );
        assert!(sim.management.is_none());
        sim.validate("sim").unwrap();
    }
}
