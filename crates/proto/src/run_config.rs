//! The worker's run configuration (`nfx run --config`, YAML): ports, vector size, poll
//! mode, events file and what the worker runs — a `chain:` of VNF specs, or `services:`
//! over `instances:` ([`crate::services`]). It lives beside the control protocol because
//! the worker reads it and the VNFMs and the testbed write it: one typed home for both
//! sides. [`RunConfig::parse`] checks every field of the file format; what the worker
//! runs (the chain's and services' structure, each VNF's own configuration) is checked
//! by the worker (`nfx_dataplane::config::parse`). Every error names the file, the field
//! and the problem.

use crate::request::{Reconfigure, ReconfigureForm};
use crate::services::{InstanceConfig, ServiceConfig, ServiceSet};
use nfx_io::sys::parse_mac;
use nfx_io::PollMode;
use nfx_packet::MAX_VECTOR;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A whole run configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// The file this config was read from (for error messages; not part of the YAML).
    #[serde(skip)]
    pub source: String,
    /// Instance name; names the control socket `/run/nfx/<name>.sock`.
    pub name: String,
    /// Network namespace (an `ip netns` name or a path) the worker enters before opening ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// Control socket path, overriding `/run/nfx/<name>.sock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_socket: Option<PathBuf>,
    /// A group (name or gid) whose members may use the control socket besides this user
    /// and root: the socket is then 0660 and owned by the group (0600 without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_group: Option<String>,
    /// The two ports: frames from `inside` travel Forward, from `outside` Reverse.
    pub ports: Ports,
    /// Largest vector moved at once, 1..=256; 1 is scalar mode.
    #[serde(default = "default_vector")]
    pub vector: usize,
    /// How the worker waits for packets.
    #[serde(default = "default_poll")]
    pub poll: PollMode,
    /// How AF_PACKET ports receive and send: `ring` (PACKET_MMAP receive ring, no
    /// system call while frames wait; `sendmmsg`), `mmsg` (`recvmmsg`/`sendmmsg`) or
    /// `rings` (receive ring and a PACKET_MMAP transmit ring, one `send()` per vector).
    #[serde(default)]
    pub io: IoMode,
    /// Receive ring slots per port, 16..=16384 (`io: ring`, `rings`, `ring-copy`;
    /// default 512 slots of 68 KiB, or 16384 of 2 KiB with `ring-copy`). The kernel
    /// allocates and zeroes the ring when the port opens: a smaller ring starts faster
    /// and holds less traffic while the worker is away (a host agent's workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_slots: Option<usize>,
    /// Whether the kernel of the ports' namespace also sees the frames nfx forwards:
    /// `isolate` (default) drops IPv4/IPv6 at the ports' ingress hook, behind nfx's packet
    /// taps, while the instance runs; `keep` leaves the kernel stack on; `external`: the
    /// ports' owner installed that drop already (docs/dataplane.md, "Kernel stack").
    #[serde(default)]
    pub kernel_stack: KernelStack,
    /// Worker threads, 1..=16. With more than one, each owns its own sockets on both
    /// interfaces and its own flow tables; PACKET_FANOUT spreads flows over them so both
    /// directions of a flow meet the same worker (docs/dataplane.md, "Workers").
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// JSON-lines file that receives every event (DPI matches, elephants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<PathBuf>,
    /// Directories, besides the config file's own, from which chain specs may read
    /// files (a firewall's `rules_file`, DPI `patterns`). Absolute paths; a file
    /// anywhere else is refused (see [`nfx_io::FileScope`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_dirs: Vec<PathBuf>,
    /// Node specs in Forward order (`- firewall: {...}`), built by the chain builder:
    /// one implicit service that takes every frame. Not together with `services`.
    #[serde(default)]
    pub chain: Vec<serde_json::Value>,
    /// Services in classification order, each with its selector and its chain of
    /// instance ids; frames no service takes are dropped (`no_service`). Present (even
    /// empty) or with `instances`, this replaces `chain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<Vec<ServiceConfig>>,
    /// Every VNF instance the services use, by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<BTreeMap<String, InstanceConfig>>,
    /// The classifier's flow table (with `services`).
    #[serde(default)]
    pub classifier: ClassifierConfig,
    /// Share the two interfaces with another instance through PACKET_FANOUT groups, so
    /// that traffic can be handed from one to the other without loss (migration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fanout: Option<FanoutConfig>,
    /// Run the table tier beside the worker: a kernel fast path (eBPF on tcx ingress)
    /// that forwards the chain's settled flows, as the chain decided, without copying
    /// them to userspace (docs/dataplane.md, "Fast path"). One worker, no fanout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<FastPathConfig>,
    /// Measure each packet's time in the worker, from the kernel's receive stamp to the
    /// end of its vector's send (receive rings only; stats `workers[].latency`). On by
    /// default; `false` only to measure what the measurement costs.
    #[serde(
        default = "default_latency",
        skip_serializing_if = "is_default_latency"
    )]
    pub latency: bool,
}

fn default_latency() -> bool {
    true
}

fn is_default_latency(on: &bool) -> bool {
    *on
}

/// The table tier of an instance.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FastPathConfig {
    /// Flow table entries (one per flow direction), 1..=4194304; the kernel memory it
    /// takes is `capacity` × `nfx_fastpath::BYTES_PER_FLOW`.
    #[serde(default = "default_fast_path_capacity")]
    pub capacity: u32,
}

fn default_fast_path_capacity() -> u32 {
    65536
}

/// The flow table of the classifier: how many flows' services it remembers for their
/// return frames (per worker thread) and for how long without traffic.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClassifierConfig {
    /// Flows, 1..=16777216 (about 35 bytes each).
    #[serde(default = "default_classifier_flows")]
    pub flows: usize,
    /// Seconds a flow is remembered without a frame, 1..=432000 (default: the NAT's TCP
    /// mapping timeout, so a reply never outlives its service's memory of the flow).
    #[serde(default = "default_classifier_timeout")]
    pub timeout_s: u64,
}

impl Default for ClassifierConfig {
    fn default() -> Self {
        Self {
            flows: default_classifier_flows(),
            timeout_s: default_classifier_timeout(),
        }
    }
}

fn default_classifier_flows() -> usize {
    262_144
}

fn default_classifier_timeout() -> u64 {
    7440
}

/// Largest classifier flow table.
pub const MAX_CLASSIFIER_FLOWS: usize = 1 << 24;

/// Longest classifier flow timeout (the firewall's established-TCP default).
pub const MAX_CLASSIFIER_TIMEOUT_S: u64 = 432_000;

/// Largest fast-path table.
pub const MAX_FAST_PATH_CAPACITY: u32 = 1 << 22;

/// Fanout membership of an instance: the inside port joins group `group`, the outside
/// port `group + 1` (a group belongs to one interface).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FanoutConfig {
    /// Group id of the inside port, 0..=65534 (the outside port uses the next id).
    pub group: u16,
    /// `active` processes what it receives from the start; `standby` holds everything
    /// (leaves it queued in its sockets) until told to `release`.
    #[serde(default)]
    pub role: Role,
}

/// How AF_PACKET ports receive and send frames.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// PACKET_MMAP receive ring (TPACKET_V2), `sendmmsg` batches.
    #[default]
    Ring,
    /// `recvmmsg` and `sendmmsg` batches.
    Mmsg,
    /// PACKET_MMAP receive ring and transmit ring (TPACKET_V2).
    Rings,
    /// The receive ring of MTU slots whose frames are copied out (GSO super-packets
    /// read from the socket queue), `sendmmsg` batches.
    #[serde(rename = "ring-copy")]
    RingCopy,
}

impl IoMode {
    /// Every mode, for help texts and errors.
    pub const ALL: [IoMode; 4] = [IoMode::Ring, IoMode::Mmsg, IoMode::Rings, IoMode::RingCopy];

    /// The name used in config files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            IoMode::Ring => "ring",
            IoMode::Mmsg => "mmsg",
            IoMode::Rings => "rings",
            IoMode::RingCopy => "ring-copy",
        }
    }

    /// Whether ports receive through a PACKET_MMAP ring.
    pub fn rx_ring(self) -> bool {
        matches!(self, IoMode::Ring | IoMode::Rings | IoMode::RingCopy)
    }

    /// Whether the receive ring has GSO-sized slots whose frames the graph works on in
    /// place (sent straight from the slot), rather than MTU slots copied out.
    pub fn rx_in_place(self) -> bool {
        matches!(self, IoMode::Ring | IoMode::Rings)
    }

    /// Whether ports send through a PACKET_MMAP ring.
    pub fn tx_ring(self) -> bool {
        self == IoMode::Rings
    }
}

impl std::str::FromStr for IoMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        IoMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!("unknown io mode `{s}` (expected ring, mmsg, rings or ring-copy)")
            })
    }
}

/// What the kernel of the ports' namespace does with the frames nfx takes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum KernelStack {
    /// An nftables netdev ingress drop of IPv4 and IPv6 on both ports (ARP and IPv6
    /// neighbour discovery pass), installed at start and removed at exit
    /// ([`nfx_io::isolate`]): the kernel neither routes, answers nor rejects them.
    #[default]
    Isolate,
    /// The kernel receives a copy of every frame too (the AF_PACKET sockets only tap).
    Keep,
    /// The same drop, installed and owned by whoever made the ports: an `nfx agent`
    /// keeps one standing table per device port (`nfx_io::isolate::install_standing`),
    /// so its workers start and exit without an `nft` run and the ports stay closed to
    /// the kernel between workers. The worker installs nothing.
    External,
}

/// Most worker threads an instance may run.
pub const MAX_WORKERS: usize = 16;

/// Fewest receive ring slots per port (`ring_slots`): one vector of frames waiting.
pub const MIN_RING_SLOTS: usize = 16;

/// Most receive ring slots per port (`ring_slots`).
pub const MAX_RING_SLOTS: usize = 16384;

/// Whether an instance starts processing or holding.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads and processes its ports.
    #[default]
    Active,
    /// Joined to the groups but not reading: a handoff target.
    Standby,
}

/// The inside and outside ports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Ports {
    /// Port whose received frames travel Forward through the chain.
    pub inside: PortConfig,
    /// Port whose received frames travel Reverse through the chain.
    pub outside: PortConfig,
}

/// One port: the interface and the MAC of the next hop behind it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Interface name in the worker's namespace.
    pub iface: String,
    /// Destination MAC written into frames leaving through this port.
    pub peer_mac: String,
    /// A table-tier chain (`nfx_fastpath::table`, run by a host agent or `nfx table`)
    /// shares this interface in a hybrid chain: the port receives after the tc ingress
    /// hook (bound to IPv4, the kernel stack kept off at prerouting instead of ingress)
    /// and sends through the qdisc layer, so that the table tier's egress hook sees what
    /// the worker sends (docs/dataplane.md, "Hybrid chains").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub table_tier: bool,
}

fn default_vector() -> usize {
    MAX_VECTOR
}

fn default_workers() -> usize {
    1
}

fn default_poll() -> PollMode {
    PollMode::Adaptive
}

/// A configuration error that names the file, the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or `<inline>`).
    pub file: String,
    /// Dotted path of the field (`ports.inside.peer_mac`, `chain[2]`), empty for the whole file.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file, self.problem)
        } else {
            write!(f, "{}: field `{}`: {}", self.file, self.field, self.problem)
        }
    }
}

impl std::error::Error for ConfigError {}

impl RunConfig {
    /// A configuration of worker `name` on `ports` with every other field at its
    /// default and nothing to run (an empty `chain:`): what a VNFM starts from.
    pub fn new(name: &str, ports: Ports) -> Self {
        RunConfig {
            source: String::new(),
            name: name.to_string(),
            netns: None,
            control_socket: None,
            control_group: None,
            ports,
            vector: default_vector(),
            poll: default_poll(),
            io: IoMode::default(),
            ring_slots: None,
            kernel_stack: KernelStack::default(),
            workers: default_workers(),
            events: None,
            allowed_dirs: Vec::new(),
            chain: Vec::new(),
            services: None,
            instances: None,
            classifier: ClassifierConfig::default(),
            fanout: None,
            fast_path: None,
            latency: default_latency(),
        }
    }

    /// This configuration running what `body` (a `reconfigure` request's fields) names:
    /// its `chain`, or its `services` and `instances`.
    pub fn running(self, body: Reconfigure) -> Self {
        RunConfig {
            chain: body.chain.unwrap_or_default(),
            services: body.services,
            instances: body.instances,
            ..self
        }
    }

    /// Reads, parses and checks a configuration file (every field of the file format;
    /// see the module documentation for what the worker checks besides).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            field: String::new(),
            problem: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, &file)
    }

    /// Parses and checks configuration text (as [`Self::load`]); `file` is used in
    /// error messages.
    pub fn parse(text: &str, file: &str) -> Result<Self, ConfigError> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let cfg: RunConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            ConfigError {
                file: file.to_string(),
                field: if field == "." { String::new() } else { field },
                problem: e.into_inner().to_string(),
            }
        })?;
        let cfg = RunConfig {
            source: file.to_string(),
            ..cfg
        };
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// Checks the values serde cannot: name charset, vector range, MACs, interface
    /// names, ranges, and that one form of what the worker runs is given.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let err = |field: &str, problem: String| ConfigError {
            file: file.to_string(),
            field: field.to_string(),
            problem,
        };
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            || self.name.starts_with('.')
        {
            return Err(err("name", format!("`{}` must be 1..64 characters of A-Z a-z 0-9 - _ . (it names the control socket)", self.name)));
        }
        if !(1..=MAX_VECTOR).contains(&self.vector) {
            return Err(err(
                "vector",
                format!("{} is out of range 1..={}", self.vector, MAX_VECTOR),
            ));
        }
        if let Some(n) = self.ring_slots {
            if !(MIN_RING_SLOTS..=MAX_RING_SLOTS).contains(&n) {
                return Err(err(
                    "ring_slots",
                    format!("{n} is out of range {MIN_RING_SLOTS}..={MAX_RING_SLOTS}"),
                ));
            }
        }
        if !(1..=MAX_WORKERS).contains(&self.workers) {
            return Err(err(
                "workers",
                format!("{} is out of range 1..={MAX_WORKERS}", self.workers),
            ));
        }
        if self.workers > 1 && self.fanout.is_some() {
            return Err(err(
                "workers",
                "more than one worker cannot be combined with `fanout` (handoff between instances needs one worker)".into(),
            ));
        }
        for (side, p) in [
            ("inside", &self.ports.inside),
            ("outside", &self.ports.outside),
        ] {
            if p.iface.is_empty() || p.iface.len() >= 16 || p.iface.contains(['/', ' ', '\0']) {
                return Err(err(
                    &format!("ports.{side}.iface"),
                    format!("`{}` is not an interface name (1..15 characters)", p.iface),
                ));
            }
            parse_mac(&p.peer_mac).map_err(|e| err(&format!("ports.{side}.peer_mac"), e))?;
        }
        if self.ports.inside.iface == self.ports.outside.iface {
            return Err(err(
                "ports.outside.iface",
                format!(
                    "`{}` is also the inside interface",
                    self.ports.outside.iface
                ),
            ));
        }
        if let Some(fp) = &self.fast_path {
            if !(1..=MAX_FAST_PATH_CAPACITY).contains(&fp.capacity) {
                return Err(err(
                    "fast_path.capacity",
                    format!(
                        "{} is out of range 1..={MAX_FAST_PATH_CAPACITY}",
                        fp.capacity
                    ),
                ));
            }
            if self.workers > 1 || self.fanout.is_some() {
                return Err(err(
                    "fast_path",
                    "the fast path runs with one worker and no `fanout`".into(),
                ));
            }
            if self.kernel_stack != KernelStack::Isolate {
                return Err(err(
                    "fast_path",
                    "the fast path needs `kernel_stack: isolate` (the kernel would forward the frames it hands to nfx)".into(),
                ));
            }
        }
        if let Some(f) = &self.fanout {
            if f.group == u16::MAX {
                return Err(err(
                    "fanout.group",
                    "65535 leaves no id for the outside port (use 0..=65534)".into(),
                ));
            }
        }
        for (i, d) in self.allowed_dirs.iter().enumerate() {
            let climbs = d.components().any(|c| c == std::path::Component::ParentDir);
            if !d.is_absolute() || climbs {
                return Err(err(
                    &format!("allowed_dirs[{i}]"),
                    format!("`{}` must be an absolute path without `..`", d.display()),
                ));
            }
        }
        let c = &self.classifier;
        if !(1..=MAX_CLASSIFIER_FLOWS).contains(&c.flows) {
            return Err(err(
                "classifier.flows",
                format!("{} is out of range 1..={MAX_CLASSIFIER_FLOWS}", c.flows),
            ));
        }
        if !(1..=MAX_CLASSIFIER_TIMEOUT_S).contains(&c.timeout_s) {
            return Err(err(
                "classifier.timeout_s",
                format!(
                    "{} is out of range 1..={MAX_CLASSIFIER_TIMEOUT_S}",
                    c.timeout_s
                ),
            ));
        }
        self.form().map(|_| ()).map_err(|e| ConfigError {
            file: file.to_string(),
            ..e
        })
    }

    /// True when the config uses `services:`/`instances:` rather than `chain:`.
    pub fn has_services(&self) -> bool {
        self.services.is_some() || self.instances.is_some()
    }

    /// Which of the two forms the worker runs (the file is left empty in errors): the
    /// `chain:` form, or the services form; both at once is an error.
    pub fn form(&self) -> Result<ReconfigureForm, ConfigError> {
        if !self.has_services() {
            return Ok(ReconfigureForm::Chain(self.chain.clone()));
        }
        if !self.chain.is_empty() {
            return Err(ConfigError {
                file: String::new(),
                field: "chain".into(),
                problem: "`chain` and `services`/`instances` are two forms of what the worker runs; give one (a chain is a service of its own instances)".into(),
            });
        }
        Ok(ReconfigureForm::Services(ServiceSet {
            services: self.services.clone().unwrap_or_default(),
            instances: self.instances.clone().unwrap_or_default(),
        }))
    }

    /// Directory that relative paths inside the chain specs are resolved against.
    pub fn base_dir(&self) -> PathBuf {
        Path::new(&self.source)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// Where chain specs may read files from: [`Self::base_dir`] (relative names
    /// start there) and `allowed_dirs`.
    pub fn file_scope(&self) -> nfx_io::FileScope {
        nfx_io::FileScope::new(self.base_dir()).with_allowed(self.allowed_dirs.iter().cloned())
    }

    /// The control socket path: `control_socket` or `/run/nfx/<name>.sock`.
    pub fn socket_path(&self) -> PathBuf {
        self.control_socket
            .clone()
            .unwrap_or_else(|| default_socket(&self.name))
    }

    /// The gid of `control_group`, if one is configured.
    pub fn control_gid(&self) -> anyhow::Result<Option<u32>> {
        self.control_group
            .as_deref()
            .map(|g| nfx_io::peer::group_id(g).map_err(|e| anyhow::anyhow!("control_group: {e}")))
            .transpose()
    }

    /// True when the vector is 1 (one packet per syscall).
    pub fn scalar(&self) -> bool {
        self.vector == 1
    }
}

/// Where an instance called `name` listens by default.
pub fn default_socket(name: &str) -> PathBuf {
    PathBuf::from(format!("/run/nfx/{name}.sock"))
}
