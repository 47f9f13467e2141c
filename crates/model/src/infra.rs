//! The infrastructure descriptor: hosts, devices of the three tiers, links.

use crate::check::{ident, non_negative, positive, Unique};
use crate::error::{parse_yaml, read_file, ModelError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Crypto algorithms an accelerator may declare (the set nfx's engines implement).
pub const ALGORITHMS: &[&str] = &[
    "aes-128-gcm",
    "aes-256-gcm",
    "chacha20-poly1305",
    "aes-128-ctr-hmac-sha256",
    "present-80",
    "present-128",
    "sha-256",
];

/// Everything the control plane may place VNFs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Infrastructure {
    /// Physical (or namespace) hosts.
    pub hosts: Vec<Host>,
    /// Devices that run VNF instances, each on one host.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Links between hosts; their latency is the transfer latency of chaining.
    #[serde(default)]
    pub links: Vec<Link>,
    /// How the controller reaches the hosts' agents (`hosts[].agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management: Option<Management>,
    /// Measurement files whose figures replace the nominal latency and throughput of
    /// the devices that name a `calibration` (applied by [`Infrastructure::load`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<crate::calibration::CalibrationFiles>,
}

/// The controller's side of the management network: where it opens agent connections
/// from, its TLS material and the agents' bearer token. Relative paths are relative to
/// the descriptor's directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Management {
    /// Network namespace the controller opens its agent connections from (sockets keep
    /// the namespace they were opened in); absent: the controller's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// TLS material of the controller (required for `https://` agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFiles>,
    /// File holding the agents' bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
}

/// One party's TLS material: the CA its peers' certificates must chain to, its own
/// certificate and private key (PEM files).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// CA certificate that signed the peers' certificates.
    pub ca: PathBuf,
    /// This party's certificate.
    pub cert: PathBuf,
    /// This party's private key.
    pub key: PathBuf,
}

/// One host: cores to share among software devices and a power model for energy accounting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Unique host id.
    pub id: String,
    /// CPU cores of the host.
    pub cores: u32,
    /// Power draw model; absent means energy is not accounted for this host.
    #[serde(default)]
    pub power: Option<PowerModel>,
    /// URL of the host's agent (`https://addr:port`); absent: the host is not run by an
    /// agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// Linear power model between idle and full load, optionally per CPU frequency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerModel {
    /// Watts drawn when idle.
    pub idle_w: f64,
    /// Watts drawn at full load.
    pub max_w: f64,
    /// The same pair at specific CPU frequencies, where the host can change frequency.
    #[serde(default)]
    pub frequencies: Vec<FrequencyPower>,
}

impl PowerModel {
    /// Checks the model as the infrastructure descriptor does (finite watts, `0 ≤ idle_w
    /// ≤ max_w`, distinct frequencies), naming `field` of `file` in the error; for
    /// copies of the model outside the descriptor (the host agent's configuration).
    pub fn check(&self, file: &str, field: &str) -> Result<(), ModelError> {
        check_power(file, field, self)
    }
}

/// Idle and maximum power at one CPU frequency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrequencyPower {
    /// Frequency in MHz.
    pub mhz: u32,
    /// Watts when idle at this frequency.
    pub idle_w: f64,
    /// Watts at full load at this frequency.
    pub max_w: f64,
}

/// The three kinds of infrastructure (HYPER's software and hardware, plus accelerators).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Vector dataplane workers on CPU cores; capacity in cores.
    Software,
    /// Match-action tables with bounded entries; capacity in entries.
    Table,
    /// Crypto accelerators; capacity in queue pairs.
    Accelerator,
}

impl Tier {
    /// The lowercase name used in descriptors.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Software => "software",
            Tier::Table => "table",
            Tier::Accelerator => "accelerator",
        }
    }
}

/// A device that hosts VNF instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Unique device id.
    pub id: String,
    /// Id of the host the device sits in.
    pub host: String,
    /// Which tier it belongs to.
    pub tier: Tier,
    /// Functions (e.g. `firewall`, `nat`) it can run.
    pub functions: Vec<String>,
    /// Processing latency of one instance, µs.
    pub latency_us: f64,
    /// Total throughput, Gbit/s.
    pub throughput_gbps: f64,
    /// Cost of using the device (weighted power/CAPEX/OPEX, operator's unit).
    #[serde(default)]
    pub cost: f64,
    /// Software tier: CPU cores dedicated to the device.
    #[serde(default)]
    pub cpu_cores: Option<u32>,
    /// Table tier: match-action entries available.
    #[serde(default)]
    pub table_entries: Option<u64>,
    /// Accelerator tier: queue pairs (its scarce capacity).
    #[serde(default)]
    pub queue_pairs: Option<u32>,
    /// Accelerator tier: algorithms offered.
    #[serde(default)]
    pub algorithms: Vec<String>,
    /// Name of a measurement to take latency/throughput from: a dataplane bench case
    /// (software) or a crypto engine (accelerator).
    #[serde(default)]
    pub calibration: Option<String>,
}

impl Device {
    /// Capacity in the tier's unit (cores, entries or queue pairs).
    pub fn capacity(&self) -> f64 {
        match self.tier {
            Tier::Software => f64::from(self.cpu_cores.unwrap_or(0)),
            Tier::Table => self.table_entries.unwrap_or(0) as f64,
            Tier::Accelerator => f64::from(self.queue_pairs.unwrap_or(0)),
        }
    }

    /// Whether the device can run `function`.
    pub fn supports(&self, function: &str) -> bool {
        self.functions.iter().any(|f| f == function)
    }
}

/// A bidirectional link between two hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// One end (host id).
    pub a: String,
    /// The other end (host id).
    pub b: String,
    /// One-way latency, µs.
    pub latency_us: f64,
    /// Bandwidth, Gbit/s, if known.
    #[serde(default)]
    pub bandwidth_gbps: Option<f64>,
}

impl Infrastructure {
    /// Reads and validates an infrastructure descriptor file, then applies the
    /// measurement files of its `calibration` block (relative to its directory).
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let text = read_file(path)?;
        let file = path.display().to_string();
        let mut infra = Self::from_yaml(&file, &text)?;
        let dir = path.parent().unwrap_or(Path::new(""));
        infra.apply_calibration_files(&file, dir)?;
        Ok(infra)
    }

    /// Parses and validates descriptor text; `file` names it in errors.
    pub fn from_yaml(file: &str, text: &str) -> Result<Self, ModelError> {
        let infra: Infrastructure = parse_yaml(file, text)?;
        infra.validate(file)?;
        Ok(infra)
    }

    /// Semantic checks beyond the schema: ids, references, ranges, tier fields.
    pub fn validate(&self, file: &str) -> Result<(), ModelError> {
        if self.hosts.is_empty() {
            return Err(ModelError::new(
                file,
                "hosts",
                "at least one host is required",
            ));
        }
        let mut hosts = Unique::new("host");
        let mut host_cores = HashMap::new();
        for (i, h) in self.hosts.iter().enumerate() {
            let f = format!("hosts[{i}]");
            hosts.insert(file, &format!("{f}.id"), &h.id)?;
            if h.cores == 0 {
                return Err(ModelError::new(file, format!("{f}.cores"), "must be >= 1"));
            }
            host_cores.insert(h.id.as_str(), (h.cores, 0u32));
            if let Some(p) = &h.power {
                check_power(file, &format!("{f}.power"), p)?;
            }
            if let Some(url) = &h.agent {
                check_agent_url(file, &format!("{f}.agent"), url, self.management.as_ref())?;
            }
        }
        let mut devices = Unique::new("device");
        for (i, d) in self.devices.iter().enumerate() {
            let f = format!("devices[{i}]");
            devices.insert(file, &format!("{f}.id"), &d.id)?;
            let Some(cores) = host_cores.get_mut(d.host.as_str()) else {
                return Err(ModelError::new(
                    file,
                    format!("{f}.host"),
                    format!("unknown host {:?}", d.host),
                ));
            };
            check_device(file, &f, d)?;
            if let Some(c) = d.cpu_cores {
                cores.1 += c;
                if cores.1 > cores.0 {
                    return Err(ModelError::new(
                        file,
                        format!("{f}.cpu_cores"),
                        format!(
                            "host {:?} has {} cores but its software devices claim {}",
                            d.host, cores.0, cores.1
                        ),
                    ));
                }
            }
        }
        let mut pairs = HashMap::new();
        for (i, l) in self.links.iter().enumerate() {
            let f = format!("links[{i}]");
            for (end, id) in [("a", &l.a), ("b", &l.b)] {
                if !hosts.contains(id) {
                    return Err(ModelError::new(
                        file,
                        format!("{f}.{end}"),
                        format!("unknown host {id:?}"),
                    ));
                }
            }
            if l.a == l.b {
                return Err(ModelError::new(
                    file,
                    format!("{f}.b"),
                    "a link must join two different hosts",
                ));
            }
            let key = if l.a < l.b {
                (&l.a, &l.b)
            } else {
                (&l.b, &l.a)
            };
            if let Some(first) = pairs.insert(key, i) {
                return Err(ModelError::new(
                    file,
                    f,
                    format!("duplicate link {}—{} (first at links[{first}])", l.a, l.b),
                ));
            }
            non_negative(file, &format!("{f}.latency_us"), l.latency_us)?;
            if let Some(bw) = l.bandwidth_gbps {
                positive(file, &format!("{f}.bandwidth_gbps"), bw)?;
            }
        }
        Ok(())
    }

    /// The host with `id`.
    pub fn host(&self, id: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.id == id)
    }

    /// The device with `id`.
    pub fn device(&self, id: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.id == id)
    }

    /// Index of host `id` in `hosts`.
    pub fn host_index(&self, id: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.id == id)
    }

    /// Whether some device supports `function`.
    pub fn supports(&self, function: &str) -> bool {
        self.devices.iter().any(|d| d.supports(function))
    }

    /// All-pairs shortest transfer latency (µs) between hosts over the links, indexed like
    /// `hosts`; `f64::INFINITY` where no route exists, 0 on the diagonal.
    pub fn transfer_latency_us(&self) -> Vec<Vec<f64>> {
        let n = self.hosts.len();
        let mut d = vec![vec![f64::INFINITY; n]; n];
        for (i, row) in d.iter_mut().enumerate() {
            row[i] = 0.0;
        }
        for l in &self.links {
            if let (Some(a), Some(b)) = (self.host_index(&l.a), self.host_index(&l.b)) {
                d[a][b] = d[a][b].min(l.latency_us);
                d[b][a] = d[a][b];
            }
        }
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    let via = d[i][k] + d[k][j];
                    if via < d[i][j] {
                        d[i][j] = via;
                    }
                }
            }
        }
        d
    }
}

fn check_power(file: &str, f: &str, p: &PowerModel) -> Result<(), ModelError> {
    check_watts(file, f, p.idle_w, p.max_w)?;
    let mut seen = HashMap::new();
    for (i, fr) in p.frequencies.iter().enumerate() {
        let ff = format!("{f}.frequencies[{i}]");
        if fr.mhz == 0 {
            return Err(ModelError::new(file, format!("{ff}.mhz"), "must be >= 1"));
        }
        if let Some(first) = seen.insert(fr.mhz, i) {
            return Err(ModelError::new(
                file,
                format!("{ff}.mhz"),
                format!(
                    "duplicate frequency {} MHz (first at frequencies[{first}])",
                    fr.mhz
                ),
            ));
        }
        check_watts(file, &ff, fr.idle_w, fr.max_w)?;
    }
    Ok(())
}

fn check_watts(file: &str, f: &str, idle: f64, max: f64) -> Result<(), ModelError> {
    non_negative(file, &format!("{f}.idle_w"), idle)?;
    non_negative(file, &format!("{f}.max_w"), max)?;
    if max < idle {
        return Err(ModelError::new(
            file,
            format!("{f}.max_w"),
            format!("must be >= idle_w ({idle}), got {max}"),
        ));
    }
    Ok(())
}

fn check_device(file: &str, f: &str, d: &Device) -> Result<(), ModelError> {
    if d.functions.is_empty() {
        return Err(ModelError::new(
            file,
            format!("{f}.functions"),
            "a device must support at least one function",
        ));
    }
    let mut fns = Unique::new("function");
    for (j, func) in d.functions.iter().enumerate() {
        fns.insert(file, &format!("{f}.functions[{j}]"), func)?;
    }
    non_negative(file, &format!("{f}.latency_us"), d.latency_us)?;
    positive(file, &format!("{f}.throughput_gbps"), d.throughput_gbps)?;
    non_negative(file, &format!("{f}.cost"), d.cost)?;
    if let Some(c) = &d.calibration {
        ident(file, &format!("{f}.calibration"), c)?;
    }
    let tier = d.tier.as_str();
    let present = [
        ("cpu_cores", d.cpu_cores.is_some(), Tier::Software),
        ("table_entries", d.table_entries.is_some(), Tier::Table),
        ("queue_pairs", d.queue_pairs.is_some(), Tier::Accelerator),
        ("algorithms", !d.algorithms.is_empty(), Tier::Accelerator),
    ];
    for (name, is_set, owner) in present {
        if is_set && owner != d.tier {
            return Err(ModelError::new(
                file,
                format!("{f}.{name}"),
                format!(
                    "only {} devices have {name}; this one is {tier}",
                    owner.as_str()
                ),
            ));
        }
    }
    for (name, is_set, owner) in present {
        if !is_set && owner == d.tier {
            return Err(ModelError::new(
                file,
                format!("{f}.{name}"),
                format!("required for a {tier} device"),
            ));
        }
    }
    if d.capacity() <= 0.0 {
        let name = match d.tier {
            Tier::Software => "cpu_cores",
            Tier::Table => "table_entries",
            Tier::Accelerator => "queue_pairs",
        };
        return Err(ModelError::new(file, format!("{f}.{name}"), "must be >= 1"));
    }
    for (j, alg) in d.algorithms.iter().enumerate() {
        if !ALGORITHMS.contains(&alg.as_str()) {
            return Err(ModelError::new(
                file,
                format!("{f}.algorithms[{j}]"),
                format!(
                    "unknown algorithm {alg:?} (known: {})",
                    ALGORITHMS.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// An agent URL is `http(s)://host:port` without a path; https needs the controller's TLS
/// material in `management.tls`.
fn check_agent_url(
    file: &str,
    field: &str,
    url: &str,
    mgmt: Option<&Management>,
) -> Result<(), ModelError> {
    let rest = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(r), _) => {
            if mgmt.and_then(|m| m.tls.as_ref()).is_none() {
                return Err(ModelError::new(
                    file,
                    field,
                    "an https agent needs management.tls (the controller's CA, certificate and key)",
                ));
            }
            r
        }
        (None, Some(r)) => r,
        _ => {
            return Err(ModelError::new(
                file,
                field,
                format!("{url:?}: expected https://ADDRESS:PORT"),
            ))
        }
    };
    let ok = rest
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
    if !ok || rest.contains('/') {
        return Err(ModelError::new(
            file,
            field,
            format!("{url:?}: expected https://ADDRESS:PORT"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "
hosts:
  - { id: edge, cores: 4, power: { idle_w: 40, max_w: 120, frequencies: [{ mhz: 2000, idle_w: 35, max_w: 100 }] } }
  - { id: cloud, cores: 8 }
  - { id: far, cores: 2 }
devices:
  - { id: edge-sw, host: edge, tier: software, functions: [firewall, nat], latency_us: 30, throughput_gbps: 10, cost: 1, cpu_cores: 2 }
  - { id: edge-tbl, host: edge, tier: table, functions: [firewall], latency_us: 2, throughput_gbps: 100, cost: 5, table_entries: 4096 }
  - { id: cloud-qat, host: cloud, tier: accelerator, functions: [esp], latency_us: 8, throughput_gbps: 40, cost: 8, queue_pairs: 4, algorithms: [aes-128-gcm] }
links:
  - { a: edge, b: cloud, latency_us: 20 }
  - { a: cloud, b: far, latency_us: 30 }
";

    fn err(text: &str) -> ModelError {
        Infrastructure::from_yaml("infra.yaml", text).unwrap_err()
    }

    fn mutate(from: &str, to: &str) -> ModelError {
        assert!(GOOD.contains(from), "{from}");
        err(&GOOD.replacen(from, to, 1))
    }

    #[test]
    fn good_descriptor_loads() {
        let i = Infrastructure::from_yaml("infra.yaml", GOOD).unwrap();
        assert_eq!(i.hosts.len(), 3);
        assert_eq!(i.device("edge-tbl").unwrap().capacity(), 4096.0);
        assert!(i.supports("esp") && !i.supports("dpi"));
    }

    #[test]
    fn transfer_latency_follows_shortest_route() {
        let i = Infrastructure::from_yaml("infra.yaml", GOOD).unwrap();
        let t = i.transfer_latency_us();
        assert_eq!(t[0][2], 50.0);
        assert_eq!(t[2][0], 50.0);
        assert_eq!(t[1][1], 0.0);
    }

    #[test]
    fn unknown_field_is_an_error() {
        let e = mutate("cost: 1,", "cost: 1, colour: red,");
        assert_eq!(e.file, "infra.yaml");
        assert_eq!(e.field, "devices[0].colour");
        assert!(e.message.contains("unknown field"));
    }

    #[test]
    fn dangling_host() {
        let e = mutate("host: cloud,", "host: moon,");
        assert_eq!(e.field, "devices[2].host");
        assert!(e.message.contains("moon"));
        let e = mutate("{ a: cloud, b: far", "{ a: cloud, b: mars");
        assert_eq!(e.field, "links[1].b");
    }

    #[test]
    fn duplicate_ids() {
        let e = mutate("id: far", "id: edge");
        assert_eq!(e.field, "hosts[2].id");
        assert!(e.message.contains("duplicate host"));
        let e = mutate("id: edge-tbl", "id: edge-sw");
        assert_eq!(e.field, "devices[1].id");
        let e = mutate("{ a: cloud, b: far", "{ a: cloud, b: edge");
        assert_eq!(e.field, "links[1]");
        assert!(e.message.contains("duplicate link"));
    }

    #[test]
    fn negative_values() {
        let e = mutate("throughput_gbps: 100", "throughput_gbps: -100");
        assert_eq!(e.field, "devices[1].throughput_gbps");
        let e = mutate("table_entries: 4096", "table_entries: -4096");
        assert_eq!(e.field, "devices[1].table_entries");
        let e = mutate("latency_us: 20", "latency_us: -20");
        assert_eq!(e.field, "links[0].latency_us");
        let e = mutate("cost: 8", "cost: -8");
        assert_eq!(e.field, "devices[2].cost");
    }

    #[test]
    fn zero_capacity() {
        let e = mutate("queue_pairs: 4", "queue_pairs: 0");
        assert_eq!(e.field, "devices[2].queue_pairs");
        let e = mutate("id: cloud, cores: 8", "id: cloud, cores: 0");
        assert_eq!(e.field, "hosts[1].cores");
    }

    #[test]
    fn tier_fields() {
        let e = mutate("cpu_cores: 2", "table_entries: 2");
        assert_eq!(e.field, "devices[0].table_entries");
        assert!(e.message.contains("only table devices"));
        let e = mutate(", queue_pairs: 4", "");
        assert_eq!(e.field, "devices[2].queue_pairs");
        assert!(e.message.contains("required"));
        let e = mutate("tier: table", "tier: fpga");
        assert_eq!(e.field, "devices[1].tier");
    }

    #[test]
    fn oversubscribed_cores() {
        let e = mutate("cpu_cores: 2", "cpu_cores: 5");
        assert_eq!(e.field, "devices[0].cpu_cores");
        assert!(e.message.contains("4 cores"));
    }

    #[test]
    fn power_model() {
        let e = mutate("idle_w: 40, max_w: 120", "idle_w: 40, max_w: 20");
        assert_eq!(e.field, "hosts[0].power.max_w");
        let e = mutate("mhz: 2000", "mhz: 0");
        assert_eq!(e.field, "hosts[0].power.frequencies[0].mhz");
    }

    #[test]
    fn algorithms_and_functions() {
        let e = mutate("[aes-128-gcm]", "[rot13]");
        assert_eq!(e.field, "devices[2].algorithms[0]");
        let e = mutate("[firewall, nat]", "[firewall, firewall]");
        assert_eq!(e.field, "devices[0].functions[1]");
        let e = mutate("functions: [esp]", "functions: []");
        assert_eq!(e.field, "devices[2].functions");
    }

    #[test]
    fn links_need_two_hosts_and_at_least_one_host() {
        let e = mutate("{ a: edge, b: cloud", "{ a: edge, b: edge");
        assert_eq!(e.field, "links[0].b");
        assert_eq!(err("hosts: []").field, "hosts");
    }
}
