//! The `nfx run` configuration file (YAML): ports, vector size, poll mode, events file
//! and the chain of VNF specs. Every error names the file, the field and the problem.

use nfx_io::sys::parse_mac;
use nfx_io::PollMode;
use serde::{Deserialize, Serialize};
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
    /// Node specs in Forward order (`- firewall: {...}`), built by the chain builder.
    #[serde(default)]
    pub chain: Vec<serde_json::Value>,
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
        for (i, spec) in self.chain.iter().enumerate() {
            match spec.as_object() {
                Some(m) if m.len() == 1 => {}
                _ => return Err(err(&format!("chain[{i}]"), "each chain entry is a map with exactly one node kind, e.g. `- firewall: {...}`".into())),
            }
        }
        Ok(())
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
