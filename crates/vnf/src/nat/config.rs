//! NAT configuration (YAML) and its validation.

use super::{Dnat, Nat, Snat, Timeouts};
use crate::firewall::acl::Prefix;
use crate::spec::{parse_ipv4, ConfigError, Proto};

/// Largest `max_flows` (mappings) accepted (about 1.9 GB of table).
pub const MAX_FLOWS_LIMIT: usize = 16 << 20;

/// Source NAT / masquerade: `{public_ip: 10.200.2.100, port_range: [1024, 65535]}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnatConfig {
    /// Address that Forward flows leave with.
    pub public_ip: String,
    /// Inclusive range of public ports (and ICMP echo ids) to allocate from.
    #[serde(default = "default_range")]
    pub port_range: [u64; 2],
}

fn default_range() -> [u64; 2] {
    [1024, 65535]
}

/// One port forward: `{proto: tcp, public_port: 8080, to_ip: 10.200.1.1, to_port: 80}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnatConfig {
    /// tcp | udp.
    pub proto: Proto,
    /// Public address (defaults to `snat.public_ip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_ip: Option<String>,
    /// Public port that outside hosts connect to.
    pub public_port: u64,
    /// Inside address the connections go to.
    pub to_ip: String,
    /// Inside port (defaults to `public_port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_port: Option<u64>,
}

/// Mapping timeouts in seconds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatTimeoutConfig {
    /// TCP mapping that saw traffic both ways.
    pub tcp: u64,
    /// TCP mapping not answered yet.
    pub tcp_syn: u64,
    /// TCP mapping after FIN both ways or RST.
    pub tcp_close: u64,
    /// UDP mapping not answered yet.
    pub udp: u64,
    /// UDP mapping that saw a reply.
    pub udp_stream: u64,
    /// ICMP echo mapping.
    pub icmp: u64,
    /// Other protocols.
    pub generic: u64,
}

impl Default for NatTimeoutConfig {
    fn default() -> Self {
        Self {
            tcp: 7440,
            tcp_syn: 120,
            tcp_close: 10,
            udp: 30,
            udp_stream: 120,
            icmp: 30,
            generic: 600,
        }
    }
}

fn default_max_flows() -> usize {
    262_144
}

/// The `nat:` node of a chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatConfig {
    /// Source NAT for Forward flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snat: Option<SnatConfig>,
    /// Port forwards for Reverse-direction new flows.
    #[serde(default)]
    pub dnat: Vec<DnatConfig>,
    /// Most mappings (default 262144); each uses two table entries.
    #[serde(default = "default_max_flows")]
    pub max_flows: usize,
    /// Mapping timeouts in seconds.
    #[serde(default)]
    pub timeouts: NatTimeoutConfig,
    /// Networks (CIDR prefixes) whose hosts source NAT translates; Forward packets
    /// from other sources get no mapping (`not_inside`). Empty (default): any source.
    #[serde(default)]
    pub inside_networks: Vec<String>,
    /// Most mappings one address may have opened at once (0, the default: no limit).
    #[serde(default)]
    pub max_flows_per_source: u32,
}

fn port(field: &str, v: u64, min: u16) -> Result<u16, ConfigError> {
    u16::try_from(v)
        .ok()
        .filter(|&p| p >= min)
        .ok_or_else(|| ConfigError::new(field, format!("{v} is not a port in {min}..=65535")))
}

impl NatTimeoutConfig {
    /// The timeouts in nanoseconds, unchecked.
    pub(crate) fn as_timeouts(&self) -> Timeouts {
        let ns = |s: u64| s.saturating_mul(1_000_000_000);
        Timeouts {
            tcp: ns(self.tcp),
            tcp_syn: ns(self.tcp_syn),
            tcp_close: ns(self.tcp_close),
            udp: ns(self.udp),
            udp_stream: ns(self.udp_stream),
            icmp: ns(self.icmp),
            generic: ns(self.generic),
        }
    }

    fn to_timeouts(&self) -> Result<Timeouts, ConfigError> {
        for (name, secs) in [
            ("tcp", self.tcp),
            ("tcp_syn", self.tcp_syn),
            ("tcp_close", self.tcp_close),
            ("udp", self.udp),
            ("udp_stream", self.udp_stream),
            ("icmp", self.icmp),
            ("generic", self.generic),
        ] {
            if secs == 0 || secs > 10 * 365 * 86_400 {
                return Err(ConfigError::new(
                    format!("timeouts.{name}"),
                    format!("{secs} s is outside 1 s .. 10 years"),
                ));
            }
        }
        Ok(self.as_timeouts())
    }
}

impl NatConfig {
    /// Validates the configuration and builds the node.
    pub fn build(&self, name: &str) -> Result<Nat, ConfigError> {
        if self.snat.is_none() && self.dnat.is_empty() {
            return Err(ConfigError::new(
                "snat",
                "a nat node needs `snat`, `dnat` or both",
            ));
        }
        if self.max_flows == 0 || self.max_flows > MAX_FLOWS_LIMIT {
            return Err(ConfigError::new(
                "max_flows",
                format!("{} is outside 1 ..= {MAX_FLOWS_LIMIT}", self.max_flows),
            ));
        }
        let snat = match &self.snat {
            None => None,
            Some(s) => {
                let public_ip = parse_ipv4("snat.public_ip", &s.public_ip)?;
                let lo = port("snat.port_range[0]", s.port_range[0], 1)?;
                let hi = port("snat.port_range[1]", s.port_range[1], 1)?;
                if lo > hi {
                    return Err(ConfigError::new(
                        "snat.port_range",
                        format!("[{lo}, {hi}] is empty (start above end)"),
                    ));
                }
                Some(Snat { public_ip, lo, hi })
            }
        };
        let mut dnat: Vec<Dnat> = Vec::with_capacity(self.dnat.len());
        for (i, d) in self.dnat.iter().enumerate() {
            let at = format!("dnat[{i}]");
            let proto = match d.proto {
                Proto::Tcp | Proto::Udp => d.proto.number().unwrap_or(6),
                other => {
                    return Err(ConfigError::new(
                        format!("{at}.proto"),
                        format!("{other:?} cannot be port-forwarded: use tcp or udp")
                            .to_lowercase(),
                    ))
                }
            };
            let public_ip = match (&d.public_ip, &snat) {
                (Some(ip), _) => parse_ipv4(&format!("{at}.public_ip"), ip)?,
                (None, Some(s)) => s.public_ip,
                (None, None) => {
                    return Err(ConfigError::new(
                        format!("{at}.public_ip"),
                        "missing, and there is no `snat.public_ip` to default to",
                    ))
                }
            };
            let public_port = port(&format!("{at}.public_port"), d.public_port, 1)?;
            let to_port = port(
                &format!("{at}.to_port"),
                d.to_port.unwrap_or(d.public_port),
                1,
            )?;
            let to_ip = parse_ipv4(&format!("{at}.to_ip"), &d.to_ip)?;
            let rule = Dnat {
                proto,
                public_ip,
                public_port,
                to_ip,
                to_port,
            };
            if dnat
                .iter()
                .any(|o| (o.proto, o.public_ip, o.public_port) == (proto, public_ip, public_port))
            {
                return Err(ConfigError::new(
                    format!("{at}.public_port"),
                    format!("{public_port}/{:?} is forwarded twice", d.proto).to_lowercase(),
                ));
            }
            dnat.push(rule);
        }
        let timeouts = self.timeouts.to_timeouts()?;
        let inside = self
            .inside_networks
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Prefix::parse(p).map_err(|m| ConfigError::new(format!("inside_networks[{i}]"), m))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Nat::new(name, snat, dnat, self.max_flows, timeouts)
            .with_limits(inside, self.max_flows_per_source))
    }
}
