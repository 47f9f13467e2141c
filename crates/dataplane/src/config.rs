//! The `nfx run` configuration file (YAML): ports, vector size, poll mode, events file
//! and what the worker runs — a `chain:` of VNF specs, or `services:` over
//! `instances:` (see [`crate::services`]). Every error names the file, the field and
//! the problem.

use crate::services::{InstanceConfig, ServiceConfig, ServiceSet, Topology};
use nfx_io::sys::parse_mac;
use nfx_io::PollMode;
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
    /// taps, while the instance runs; `keep` leaves the kernel stack on (docs/dataplane.md,
    /// "Kernel stack").
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
}

/// The table tier of an instance.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FastPathConfig {
    /// Flow table entries (one per flow direction), 1..=4194304; the kernel memory it
    /// takes is `capacity` × [`nfx_fastpath::BYTES_PER_FLOW`].
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
    /// read from the socket queue), `sendmmsg` batches: the `ring` of before session 5.
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
    nfx_packet::MAX_VECTOR
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
    /// Reads, parses and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            field: String::new(),
            problem: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, &file)
    }

    /// Parses and validates configuration text; `file` is used in error messages.
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

    /// Checks the values serde cannot: name charset, vector range, MACs, interface names.
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
        if !(1..=nfx_packet::MAX_VECTOR).contains(&self.vector) {
            return Err(err(
                "vector",
                format!(
                    "{} is out of range 1..={}",
                    self.vector,
                    nfx_packet::MAX_VECTOR
                ),
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
            if self.kernel_stack == KernelStack::Keep {
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
        self.topology().map(|_| ()).map_err(|e| ConfigError {
            file: file.to_string(),
            ..e
        })
    }

    /// True when the config uses `services:`/`instances:` rather than `chain:`.
    pub fn has_services(&self) -> bool {
        self.services.is_some() || self.instances.is_some()
    }

    /// What the worker runs, checked (the file is left empty in errors).
    pub fn topology(&self) -> Result<Topology, ConfigError> {
        if !self.has_services() {
            return Topology::from_chain(&self.chain);
        }
        if !self.chain.is_empty() {
            return Err(ConfigError {
                file: String::new(),
                field: "chain".into(),
                problem: "`chain` and `services`/`instances` are two forms of what the worker runs; give one (a chain is a service of its own instances)".into(),
            });
        }
        Topology::from_services(&ServiceSet {
            services: self.services.clone().unwrap_or_default(),
            instances: self.instances.clone().unwrap_or_default(),
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name: edge
netns: nfx-edge
ports:
  inside:  { iface: to-src,   peer_mac: "02:00:00:00:00:01" }
  outside: { iface: to-cloud, peer_mac: "02:00:00:00:00:02" }
vector: 64
poll: busy
events: /tmp/run/events.jsonl
chain:
  - firewall: { default: allow }
  - nat: {}
"#;

    #[test]
    fn agreed_example_parses() {
        let c = RunConfig::parse(GOOD, "edge.yaml").unwrap();
        assert_eq!(c.name, "edge");
        assert_eq!(c.netns.as_deref(), Some("nfx-edge"));
        assert_eq!(c.vector, 64);
        assert_eq!(c.poll, PollMode::Busy);
        assert_eq!(c.chain.len(), 2);
        assert_eq!(c.chain[0]["firewall"]["default"], "allow");
        assert_eq!(c.socket_path(), PathBuf::from("/run/nfx/edge.sock"));
        assert!(!c.scalar());
    }

    #[test]
    fn allowed_dirs_are_absolute_and_widen_the_file_scope() {
        let c = RunConfig::parse(
            &format!("{GOOD}allowed_dirs: [/etc/nfx/acl, /usr/share/nfx]\n"),
            "/etc/nfx/edge.yaml",
        )
        .unwrap();
        let scope = c.file_scope();
        assert_eq!(scope.base(), Path::new("/etc/nfx"));
        assert_eq!(
            scope,
            nfx_io::FileScope::new("/etc/nfx")
                .with_allowed([PathBuf::from("/etc/nfx/acl"), "/usr/share/nfx".into()])
        );
        for bad in ["[acl]", "['/etc/nfx/../../root']"] {
            let e = RunConfig::parse(&format!("{GOOD}allowed_dirs: {bad}\n"), "f").unwrap_err();
            assert_eq!(e.field, "allowed_dirs[0]", "{e}");
        }
        assert_eq!(
            RunConfig::parse(GOOD, "edge.yaml").unwrap().file_scope(),
            nfx_io::FileScope::new("")
        );
    }

    #[test]
    fn defaults_apply() {
        let c = RunConfig::parse(
            "name: a\nports: {inside: {iface: x, peer_mac: '02:00:00:00:00:01'}, outside: {iface: y, peer_mac: '02:00:00:00:00:02'}}\n",
            "f",
        )
        .unwrap();
        assert_eq!(c.vector, 256);
        assert_eq!(c.poll, PollMode::Adaptive);
        assert_eq!(c.io, IoMode::Ring);
        assert_eq!(c.kernel_stack, KernelStack::Isolate);
        assert_eq!(c.workers, 1);
        assert!(c.chain.is_empty());
    }

    #[test]
    fn io_and_workers_parse() {
        let c = RunConfig::parse(&format!("{GOOD}io: mmsg\nworkers: 4\n"), "f").unwrap();
        assert_eq!((c.io, c.workers), (IoMode::Mmsg, 4));
        let c = RunConfig::parse(&format!("{GOOD}io: rings\n"), "f").unwrap();
        assert_eq!(c.io, IoMode::Rings);
        assert!(c.io.rx_in_place());
        assert!(!IoMode::RingCopy.rx_in_place() && IoMode::RingCopy.rx_ring());
        assert!(c.io.rx_ring() && c.io.tx_ring());
        for m in IoMode::ALL {
            assert_eq!(m.as_str().parse::<IoMode>(), Ok(m));
        }
        assert!("xdp".parse::<IoMode>().unwrap_err().contains("xdp"));
    }

    #[test]
    fn kernel_stack_parses() {
        let c = RunConfig::parse(&format!("{GOOD}ring_slots: 64\n"), "f").unwrap();
        assert_eq!(c.ring_slots, Some(64));
        let c = RunConfig::parse(&format!("{GOOD}kernel_stack: keep\n"), "f").unwrap();
        assert_eq!(c.kernel_stack, KernelStack::Keep);
        let c = RunConfig::parse(&format!("{GOOD}kernel_stack: isolate\n"), "f").unwrap();
        assert_eq!(c.kernel_stack, KernelStack::Isolate);
    }

    fn err_of(text: &str) -> ConfigError {
        RunConfig::parse(text, "bad.yaml").unwrap_err()
    }

    #[test]
    fn unknown_field_names_file_and_path() {
        let e = err_of(&GOOD.replace(
            "peer_mac: \"02:00:00:00:00:02\"",
            "peer_mac: \"02:00:00:00:00:02\", mtu: 9000",
        ));
        assert_eq!(e.file, "bad.yaml");
        assert_eq!(e.field, "ports.outside.mtu");
        assert!(e.problem.contains("mtu"), "{e}");
        assert!(
            e.to_string()
                .starts_with("bad.yaml: field `ports.outside.mtu`"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases = [
            (GOOD.replace("vector: 64", "vector: 0"), "vector"),
            (GOOD.replace("vector: 64", "vector: 300"), "vector"),
            (GOOD.replace("poll: busy", "poll: lazy"), "poll"),
            (
                GOOD.replace("02:00:00:00:00:01", "02:00:00:00:01"),
                "ports.inside.peer_mac",
            ),
            (GOOD.replace("to-cloud", "to-src"), "ports.outside.iface"),
            (GOOD.replace("name: edge", "name: ../etc"), "name"),
            (
                GOOD.replace("  - nat: {}", "  - nat: {}\n    dpi: {}"),
                "chain[1]",
            ),
            (GOOD.replace("vector: 64", "vector: many"), "vector"),
            (
                format!("{GOOD}fanout: {{ group: 65535 }}\n"),
                "fanout.group",
            ),
            (
                format!("{GOOD}fanout: {{ group: 7, role: lead }}\n"),
                "fanout.role",
            ),
            (format!("{GOOD}workers: 0\n"), "workers"),
            (format!("{GOOD}workers: 17\n"), "workers"),
            (
                format!("{GOOD}workers: 2\nfanout: {{ group: 7 }}\n"),
                "workers",
            ),
            (format!("{GOOD}io: xdp\n"), "io"),
            (format!("{GOOD}kernel_stack: off\n"), "kernel_stack"),
            (format!("{GOOD}ring_slots: 15\n"), "ring_slots"),
            (format!("{GOOD}ring_slots: 16385\n"), "ring_slots"),
        ];
        for (text, field) in cases {
            let e = err_of(&text);
            assert_eq!(e.field, field, "{e}");
            assert!(!e.problem.is_empty());
        }
    }

    #[test]
    fn fanout_parses_with_default_role() {
        let c = RunConfig::parse(&format!("{GOOD}fanout: {{ group: 7 }}\n"), "f").unwrap();
        assert_eq!(
            c.fanout,
            Some(FanoutConfig {
                group: 7,
                role: Role::Active
            })
        );
        let c = RunConfig::parse(
            &format!("{GOOD}fanout: {{ group: 7, role: standby }}\n"),
            "f",
        )
        .unwrap();
        assert_eq!(c.fanout.unwrap().role, Role::Standby);
        assert_eq!(RunConfig::parse(GOOD, "f").unwrap().fanout, None);
    }

    const SERVICES: &str = r#"
name: edge
ports:
  inside:  { iface: to-src,   peer_mac: "02:00:00:00:00:01" }
  outside: { iface: to-cloud, peer_mac: "02:00:00:00:00:02" }
classifier: { flows: 1024, timeout_s: 60 }
services:
  - id: web-acme
    selector: { src: 10.200.1.0/24, dst: 10.200.3.0/24, proto: tcp, sport: 1024-65535, dport: 80 }
    chain: [inst-fw-1, inst-nat-1]
  - id: dns-beta
    selector: { src: "2001:db8:1::/48", proto: 17, dport: 53 }
    chain: [inst-nat-1]
instances:
  inst-fw-1: { function: firewall, config: { default: allow } }
  inst-nat-1: { function: nat, config: { snat: { public_ip: 10.200.2.100 } } }
"#;

    #[test]
    fn the_services_form_parses() {
        let c = RunConfig::parse(SERVICES, "s.yaml").unwrap();
        assert!(c.has_services());
        assert_eq!(
            c.classifier,
            ClassifierConfig {
                flows: 1024,
                timeout_s: 60
            }
        );
        let t = c.topology().unwrap();
        assert_eq!(t.instance_ids(), ["inst-fw-1", "inst-nat-1"]);
        assert_eq!(t.service_ids(), ["web-acme", "dns-beta"]);
        assert_eq!(t.services[0].chain, [0, 1]);
        assert!(!t.services[1].selector.src.unwrap().is_v4());
        let d = RunConfig::parse(GOOD, "f").unwrap();
        assert_eq!(d.classifier, ClassifierConfig::default());
        assert!(d.topology().unwrap().implicit);
        // Instances alone: a closed worker.
        let closed = GOOD.replace(
            "chain:\n  - firewall: { default: allow }\n  - nat: {}\n",
            "instances: {}\n",
        );
        let t = RunConfig::parse(&closed, "f").unwrap().topology().unwrap();
        assert!(!t.implicit && t.services.is_empty());
    }

    #[test]
    fn bad_services_name_file_and_field() {
        let cases = [
            (format!("{SERVICES}chain: [{{nat: {{}}}}]\n"), "chain"),
            (
                SERVICES.replace("chain: [inst-nat-1]", "chain: [inst-nat-2]"),
                "services[1].chain[0]",
            ),
            (SERVICES.replace("dns-beta", "web-acme"), "services[1].id"),
            (
                SERVICES.replace("dport: 80", "dport: 80-70"),
                "services[0].selector.dport",
            ),
            (
                SERVICES.replace("dport: 80", "port: 80"),
                "services[0].selector",
            ),
            (
                SERVICES.replace("flows: 1024", "flows: 0"),
                "classifier.flows",
            ),
            (
                SERVICES.replace("timeout_s: 60", "timeout_s: 0"),
                "classifier.timeout_s",
            ),
            (SERVICES.replace("inst-fw-1:", "parse:"), "instances.parse"),
        ];
        for (text, field) in cases {
            let e = err_of(&text);
            assert_eq!(e.file, "bad.yaml", "{e}");
            assert!(e.field.starts_with(field), "{field}: {e}");
        }
    }

    #[test]
    fn missing_file_names_the_file() {
        let e = RunConfig::load(Path::new("/nonexistent/nfx.yaml")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/nonexistent/nfx.yaml: cannot read"),
            "{e}"
        );
    }
}
