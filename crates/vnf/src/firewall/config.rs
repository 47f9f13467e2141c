//! Firewall configuration (YAML) and its validation into an [`Acl`] and timeouts.

use super::acl::{Acl, PortRange, Prefix, Rule};
use super::{Firewall, Timeouts};
use crate::spec::{ConfigError, PortField, Proto};
use nfx_io::FileScope;
use std::path::Path;

/// Largest `max_flows` accepted (about 1.1 GB of table).
pub const MAX_FLOWS_LIMIT: usize = 16 << 20;
/// Largest rules file read.
pub const MAX_RULES_FILE_BYTES: u64 = 4 << 20;
/// Most rules (inline and from the file together): every new flow scans them.
pub const MAX_RULES: usize = 65_536;

/// Action of a rule or of the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Let the flow through (and track it).
    Allow,
    /// Drop it (`acl_deny`).
    #[default]
    Deny,
}

/// What to do with a new flow that starts from the outside (Reverse direction).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReverseNew {
    /// Drop it as `invalid_state`: only replies to tracked flows come in.
    #[default]
    Drop,
    /// Check it against the ACL like a Forward flow (servers behind the firewall).
    Acl,
}

/// One ACL rule as written in YAML: `{action: allow, proto: tcp, src: 10.0.0.0/8,
/// dst: any, sport: any, dport: 1000-2000}`. Omitted fields mean "any".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// allow | deny.
    pub action: Action,
    /// tcp | udp | icmp | any.
    #[serde(default)]
    pub proto: Proto,
    /// Source CIDR prefix or address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    /// Destination CIDR prefix or address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// Source port(s): `80`, `1000-2000`, `any` (tcp/udp rules only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<PortField>,
    /// Destination port(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<PortField>,
}

/// Per-state timeouts in seconds; defaults are those of Linux conntrack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutConfig {
    /// TCP SYN_SENT.
    pub syn_sent: u64,
    /// TCP SYN_RECV.
    pub syn_recv: u64,
    /// TCP ESTABLISHED.
    pub established: u64,
    /// TCP FIN_WAIT.
    pub fin_wait: u64,
    /// TCP CLOSE_WAIT.
    pub close_wait: u64,
    /// TCP LAST_ACK.
    pub last_ack: u64,
    /// TCP TIME_WAIT.
    pub time_wait: u64,
    /// TCP CLOSE (after RST).
    pub close: u64,
    /// Cap for an established connection that is not assured, was picked up
    /// mid-stream or has data outstanding (Linux's `tcp_timeout_unacknowledged`).
    pub unacknowledged: u64,
    /// UDP flow not yet answered.
    pub udp: u64,
    /// UDP flow that saw a reply.
    pub udp_stream: u64,
    /// ICMP echo.
    pub icmp: u64,
    /// Other protocols.
    pub generic: u64,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        Self {
            syn_sent: 120,
            syn_recv: 60,
            established: 432_000,
            fin_wait: 120,
            close_wait: 60,
            last_ack: 30,
            time_wait: 120,
            close: 10,
            unacknowledged: 300,
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

/// The `firewall:` node of a chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallConfig {
    /// Action when no rule matches (default deny).
    #[serde(default)]
    pub default: Action,
    /// Rules, first match wins; checked before those of `rules_file`.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// A YAML file holding a list of rules, relative to the config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules_file: Option<String>,
    /// Table capacity (default 262144).
    #[serde(default = "default_max_flows")]
    pub max_flows: usize,
    /// Pick up TCP connections seen mid-stream (a bare ACK without state) as an
    /// unassured, liberal ESTABLISHED entry (default off).
    #[serde(default)]
    pub loose: bool,
    /// Most flows one address may have opened at once (0, the default: no limit).
    #[serde(default)]
    pub max_flows_per_source: u32,
    /// New flows from the outside: drop (default) or acl.
    #[serde(default)]
    pub reverse_new: ReverseNew,
    /// Per-state timeouts in seconds.
    #[serde(default)]
    pub timeouts: TimeoutConfig,
}

fn port_range(field: &str, p: &Option<PortField>) -> Result<PortRange, ConfigError> {
    match p {
        None => Ok(PortRange::ANY),
        Some(PortField::Num(n)) => u16::try_from(*n)
            .map(|n| PortRange { lo: n, hi: n })
            .map_err(|_| ConfigError::new(field, "a port is above 65535")),
        Some(PortField::Text(s)) => PortRange::parse(s).map_err(|m| ConfigError::new(field, m)),
    }
}

fn prefix(field: &str, p: &Option<String>) -> Result<Prefix, ConfigError> {
    p.as_deref().map_or(Ok(Prefix::ANY), |s| {
        Prefix::parse(s).map_err(|m| ConfigError::new(field, m))
    })
}

impl RuleConfig {
    /// Validates the rule; `at` is its field path (e.g. `rules[3]`).
    pub fn to_rule(&self, at: &str) -> Result<Rule, ConfigError> {
        let sport = port_range(&format!("{at}.sport"), &self.sport)?;
        let dport = port_range(&format!("{at}.dport"), &self.dport)?;
        let has_ports = sport != PortRange::ANY || dport != PortRange::ANY;
        if has_ports && !matches!(self.proto, Proto::Tcp | Proto::Udp) {
            let which = if sport != PortRange::ANY {
                "sport"
            } else {
                "dport"
            };
            return Err(ConfigError::new(
                format!("{at}.{which}"),
                "ports need `proto: tcp` or `proto: udp`",
            ));
        }
        Ok(Rule {
            allow: self.action == Action::Allow,
            proto: self.proto.number(),
            src: prefix(&format!("{at}.src"), &self.src)?,
            dst: prefix(&format!("{at}.dst"), &self.dst)?,
            sport,
            dport,
        })
    }
}

impl TimeoutConfig {
    fn fields(&self) -> [(&'static str, u64); 13] {
        [
            ("syn_sent", self.syn_sent),
            ("syn_recv", self.syn_recv),
            ("established", self.established),
            ("fin_wait", self.fin_wait),
            ("close_wait", self.close_wait),
            ("last_ack", self.last_ack),
            ("time_wait", self.time_wait),
            ("close", self.close),
            ("unacknowledged", self.unacknowledged),
            ("udp", self.udp),
            ("udp_stream", self.udp_stream),
            ("icmp", self.icmp),
            ("generic", self.generic),
        ]
    }

    /// The timeouts in nanoseconds, unchecked.
    pub(crate) fn as_timeouts(&self) -> Timeouts {
        Timeouts::from_array(self.fields().map(|(_, s)| s.saturating_mul(1_000_000_000)))
    }

    /// Validates every timeout (1 s .. 10 years) and converts them.
    fn to_timeouts(&self) -> Result<Timeouts, ConfigError> {
        for (name, secs) in self.fields() {
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

/// Reads the rules of a rules file (a YAML list of rules) within `files`, as written.
/// The file is not the operator's config text and may be anything, so no error quotes
/// it: errors give the line (YAML) and what is wrong. Also used by the table tier's
/// firewall.
pub fn read_rules_file(file: &str, files: &FileScope) -> Result<Vec<RuleConfig>, ConfigError> {
    let text = files
        .read_text(Path::new(file), MAX_RULES_FILE_BYTES)
        .map_err(|e| ConfigError::new("rules_file", e.to_string()))?;
    let rules: Vec<RuleConfig> = serde_yaml_ng::from_str(&text).map_err(|e| {
        let at = e
            .location()
            .map_or(String::new(), |l| format!(" at line {}", l.line()));
        ConfigError::new(
            "rules_file",
            format!("`{file}`{at}: not a YAML list of rules ({{action, proto, src, dst, sport, dport}})"),
        )
    })?;
    Ok(rules)
}

/// Reads and validates the rules of a rules file.
fn load_rules_file(file: &str, files: &FileScope) -> Result<Vec<Rule>, ConfigError> {
    let rules = read_rules_file(file, files)?;
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.to_rule(&format!("rules[{i}]"))
                .map_err(|e| e.within(&format!("rules_file({file})")))
        })
        .collect()
}

impl FirewallConfig {
    /// Validates the configuration and builds the node.
    pub fn build(&self, name: &str, files: &FileScope) -> Result<Firewall, ConfigError> {
        if self.max_flows == 0 || self.max_flows > MAX_FLOWS_LIMIT {
            return Err(ConfigError::new(
                "max_flows",
                format!("{} is outside 1 ..= {MAX_FLOWS_LIMIT}", self.max_flows),
            ));
        }
        let mut rules = self
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| r.to_rule(&format!("rules[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(f) = &self.rules_file {
            rules.extend(load_rules_file(f, files)?);
        }
        if rules.len() > MAX_RULES {
            return Err(ConfigError::new(
                "rules",
                format!("{} rules, more than the {MAX_RULES} accepted", rules.len()),
            ));
        }
        let acl = Acl::new(rules, self.default == Action::Allow);
        let timeouts = self.timeouts.to_timeouts()?;
        Ok(Firewall::new(
            name,
            acl,
            self.max_flows,
            timeouts,
            self.loose,
            self.reverse_new == ReverseNew::Acl,
        )
        .with_source_limit(self.max_flows_per_source))
    }
}
