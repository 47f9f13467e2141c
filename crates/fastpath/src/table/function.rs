//! What the table tier can run, from the software VNFs' own configuration types
//! (`nfx_vnf::NodeSpec`): validation (the software's, plus what only the table tier
//! accepts: IPv6 prefixes and addresses), the plan-time check against a device's
//! capacity in entries, and the translation into the program's rows.

use super::raw::{addr_words, prefix_words, RawDnatKey, RawDnatVal, RawRule};
use nfx_io::FileScope;
use nfx_vnf::dpi::DpiConfig;
use nfx_vnf::elephant::ElephantConfig;
use nfx_vnf::firewall::config::{read_rules_file, Action, ReverseNew, RuleConfig, TimeoutConfig};
use nfx_vnf::firewall::FirewallConfig;
use nfx_vnf::nat::config::{DnatConfig, NatTimeoutConfig, SnatConfig};
use nfx_vnf::nat::NatConfig;
use nfx_vnf::{ConfigError, NodeSpec};
use std::net::{IpAddr, Ipv6Addr};

const NS: u64 = 1_000_000_000;

/// Why a function cannot be placed on the table tier (or on this device).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The tier cannot run this function or one of its features.
    #[error("`{function}` cannot run on the table tier: {why}")]
    Unsupported {
        /// Function kind.
        function: &'static str,
        /// What it would need.
        why: String,
    },
    /// Its tables do not fit the device.
    #[error("`{function}` needs {need} table entries ({detail}); the device has {capacity}")]
    TooLarge {
        /// Function kind.
        function: &'static str,
        /// Entries the configuration needs.
        need: u64,
        /// Entries available.
        capacity: u64,
        /// Where the entries go.
        detail: String,
    },
    /// The configuration is invalid (for either tier).
    #[error("{function}: {error}")]
    Config {
        /// Function kind.
        function: &'static str,
        /// The field and what is wrong with it.
        error: ConfigError,
    },
}

/// What a function takes on the table tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// Table entries (HYPER's TCAM entries): rules + flow rows.
    pub entries: u64,
}

/// A validated table-tier firewall.
#[derive(Debug, Clone, PartialEq)]
pub struct FirewallPlan {
    /// ACL in order.
    pub rules: Vec<RawRule>,
    /// Default action.
    pub default_allow: bool,
    /// Mid-stream pick-up.
    pub loose: bool,
    /// Outside may open flows (ACL-checked).
    pub reverse_acl: bool,
    /// TCP states 0..=8, udp, udp_stream, icmp, generic, in ns.
    pub timeouts: [u64; 13],
    /// Cap for a TCP connection not assured yet, in ns.
    pub unacknowledged: u64,
    /// Connection-tracking entries.
    pub max_flows: u32,
}

/// A validated table-tier NAT.
#[derive(Debug, Clone, PartialEq)]
pub struct NatPlan {
    /// Source NAT: public address (words, family) and port range (host order).
    pub snat: Option<([u32; 4], u8, u16, u16)>,
    /// Port forwards (bank 0; the loader sets the bank).
    pub dnat: Vec<(RawDnatKey, RawDnatVal)>,
    /// Public addresses (snat's and the port forwards').
    pub publics: Vec<RawDnatKey>,
    /// tcp, tcp_syn, tcp_close, udp, udp_stream, icmp, generic, in ns.
    pub timeouts: [u64; 7],
    /// Mappings (two entries each).
    pub max_flows: u32,
}

/// A validated table-tier elephant detector.
#[derive(Debug, Clone, PartialEq)]
pub struct ElephantPlan {
    /// The configuration as given (events report its thresholds).
    pub config: ElephantConfig,
    /// Window bytes at which the rate threshold is reached.
    pub min_window_bytes: u64,
    /// Flow entries.
    pub max_flows: u32,
}

/// A function the table tier runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Function {
    /// Stateful firewall.
    Firewall(FirewallPlan),
    /// NAT.
    Nat(NatPlan),
    /// Elephant-flow detection.
    Elephant(ElephantPlan),
}

impl Function {
    /// Validates `spec` for the table tier; a file it names (a rules file) is read within
    /// `files` (a directory, or a config directory and the operator's allowed ones, as a
    /// software worker reads them).
    pub fn plan(spec: &NodeSpec, files: impl Into<FileScope>) -> Result<Self, Refusal> {
        match spec {
            NodeSpec::Firewall(c) => plan_firewall(c, &files.into()).map(Function::Firewall),
            NodeSpec::Nat(c) => plan_nat(c).map(Function::Nat),
            NodeSpec::Elephant(c) => plan_elephant(c).map(Function::Elephant),
            NodeSpec::Dpi(c) => Err(dpi_refusal(c)),
        }
    }

    /// The function kind as written in chains.
    pub fn kind(&self) -> &'static str {
        match self {
            Function::Firewall(_) => "firewall",
            Function::Nat(_) => "nat",
            Function::Elephant(_) => "elephant",
        }
    }

    /// Table entries the function takes: firewall rules + tracked flows; NAT port
    /// forwards + two rows per mapping; elephant tracked flows.
    pub fn need(&self) -> Need {
        let entries = match self {
            Function::Firewall(f) => f.rules.len() as u64 + u64::from(f.max_flows),
            Function::Nat(n) => n.dnat.len() as u64 + 2 * u64::from(n.max_flows),
            Function::Elephant(e) => u64::from(e.max_flows),
        };
        Need { entries }
    }
}

/// The plan-time check the control plane calls: can the table tier run `spec` on a
/// device with `capacity` entries free? `Ok` says how many it takes; a refusal says why
/// not (DPI, a table larger than the device, an invalid configuration).
pub fn check(spec: &NodeSpec, capacity: u64, files: impl Into<FileScope>) -> Result<Need, Refusal> {
    let f = Function::plan(spec, files)?;
    let need = f.need();
    if need.entries > capacity {
        let detail = match &f {
            Function::Firewall(p) => format!("{} rules + {} flows", p.rules.len(), p.max_flows),
            Function::Nat(p) => format!(
                "{} port forwards + 2 × {} mappings",
                p.dnat.len(),
                p.max_flows
            ),
            Function::Elephant(p) => format!("{} flows", p.max_flows),
        };
        return Err(Refusal::TooLarge {
            function: f.kind(),
            need: need.entries,
            capacity,
            detail,
        });
    }
    Ok(need)
}

fn dpi_refusal(c: &DpiConfig) -> Refusal {
    Refusal::Unsupported {
        function: "dpi",
        why: format!(
            "it matches patterns from {} over every payload byte, across segments, with \
             regex automata: match-action tables cannot (place it on the software tier)",
            c.patterns.display()
        ),
    }
}

/// Per-source flow limits count flows per address in the software node; the table
/// tier's programs keep no such count, so they are refused rather than ignored.
fn per_source_refusal(function: &'static str) -> Refusal {
    Refusal::Unsupported {
        function,
        why: "`max_flows_per_source` is not in the table tier's programs; use 0 (no limit) \
              or run the function in software"
            .into(),
    }
}

fn config_err(function: &'static str) -> impl Fn(ConfigError) -> Refusal {
    move |error| Refusal::Config { function, error }
}

fn max_flows(function: &'static str, n: usize, limit: usize) -> Result<u32, Refusal> {
    if n == 0 || n > limit {
        return Err(Refusal::Config {
            function,
            error: ConfigError::new("max_flows", format!("{n} is outside 1 ..= {limit}")),
        });
    }
    Ok(n as u32)
}

/// A prefix as the program matches it: network and mask words, network order.
type Words = ([u32; 4], [u32; 4]);

/// An IPv6 prefix or address (`2001:db8::/32`); `None` for text that is not IPv6.
fn prefix6(s: &str) -> Option<Result<Words, String>> {
    let s = s.trim();
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: Ipv6Addr = a.parse().ok()?;
    let len = match len.map(str::parse::<u8>) {
        None => 128,
        Some(Ok(l)) if l <= 128 => l,
        Some(_) => return Some(Err(format!("bad prefix length in '{s}'"))),
    };
    prefix_words(IpAddr::V6(addr), len).map(|(net, mask, _)| Ok((net, mask)))
}

/// One rule: IPv4 rules are validated by the software's own code; a rule with IPv6
/// prefixes has its ports and protocol validated there and its prefixes here.
fn rule(r: &RuleConfig, at: &str) -> Result<RawRule, ConfigError> {
    let v6 = |p: &Option<String>| p.as_deref().and_then(prefix6);
    let (s6, d6) = (v6(&r.src), v6(&r.dst));
    let ported = if s6.is_some() || d6.is_some() {
        RuleConfig {
            src: None,
            dst: None,
            ..r.clone()
        }
        .to_rule(at)?
    } else {
        r.to_rule(at)?
    };
    let mut raw = RawRule {
        sport_lo: ported.sport.lo,
        sport_hi: ported.sport.hi,
        dport_lo: ported.dport.lo,
        dport_hi: ported.dport.hi,
        allow: u8::from(ported.allow),
        proto: ported.proto.unwrap_or(0),
        ..RawRule::default()
    };
    let v4 = |p: &nfx_vnf::firewall::acl::Prefix, given: bool| {
        given.then_some(([p.addr.to_be(), 0, 0, 0], [p.mask.to_be(), 0, 0, 0]))
    };
    let src = match s6 {
        Some(p) => Some((p.map_err(|m| ConfigError::new(format!("{at}.src"), m))?, 6)),
        None => v4(&ported.src, r.src.is_some()).map(|p| (p, 4)),
    };
    let dst = match d6 {
        Some(p) => Some((p.map_err(|m| ConfigError::new(format!("{at}.dst"), m))?, 6)),
        None => v4(&ported.dst, r.dst.is_some()).map(|p| (p, 4)),
    };
    if let (Some((_, a)), Some((_, b))) = (&src, &dst) {
        if a != b {
            return Err(ConfigError::new(
                format!("{at}.dst"),
                "an IPv4 and an IPv6 prefix in one rule",
            ));
        }
    }
    if let Some(((net, mask), fam)) = src {
        (raw.src, raw.src_mask, raw.family) = (net, mask, fam);
    }
    if let Some(((net, mask), fam)) = dst {
        (raw.dst, raw.dst_mask, raw.family) = (net, mask, fam);
    }
    Ok(raw)
}

fn secs(s: u64) -> u64 {
    s.saturating_mul(NS)
}

fn plan_firewall(c: &FirewallConfig, files: &FileScope) -> Result<FirewallPlan, Refusal> {
    let err = config_err("firewall");
    // Every field is named, so that a field added to the software firewall must be
    // decided on here (supported, or refused) before this compiles.
    let FirewallConfig {
        default,
        rules,
        rules_file,
        max_flows: flows,
        loose,
        reverse_new,
        max_flows_per_source,
        timeouts,
    } = c;
    if *max_flows_per_source != 0 {
        return Err(per_source_refusal("firewall"));
    }
    // The software's validation of everything but the rules and the table size.
    FirewallConfig {
        default: *default,
        rules: Vec::new(),
        rules_file: None,
        max_flows: 1,
        max_flows_per_source: 0,
        loose: *loose,
        reverse_new: *reverse_new,
        timeouts: timeouts.clone(),
    }
    .build("probe", files)
    .map_err(&err)?;
    let mut raw = rules
        .iter()
        .enumerate()
        .map(|(i, r)| rule(r, &format!("rules[{i}]")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(&err)?;
    if let Some(f) = rules_file {
        let more = read_rules_file(f, files).map_err(&err)?;
        for (i, r) in more.iter().enumerate() {
            raw.push(
                rule(r, &format!("rules[{i}]"))
                    .map_err(|e| e.within(&format!("rules_file({f})")))
                    .map_err(&err)?,
            );
        }
    }
    let TimeoutConfig {
        syn_sent,
        syn_recv,
        established,
        fin_wait,
        close_wait,
        last_ack,
        time_wait,
        close,
        unacknowledged,
        udp,
        udp_stream,
        icmp,
        generic,
    } = timeouts;
    let t = [
        *syn_sent,
        *syn_sent,
        *syn_recv,
        *established,
        *fin_wait,
        *close_wait,
        *last_ack,
        *time_wait,
        *close,
        *udp,
        *udp_stream,
        *icmp,
        *generic,
    ];
    Ok(FirewallPlan {
        rules: raw,
        default_allow: *default == Action::Allow,
        loose: *loose,
        reverse_acl: *reverse_new == ReverseNew::Acl,
        timeouts: t.map(secs),
        unacknowledged: secs(*unacknowledged),
        max_flows: max_flows(
            "firewall",
            *flows,
            nfx_vnf::firewall::config::MAX_FLOWS_LIMIT,
        )?,
    })
}

/// An address field of the NAT: IPv4 (also valid for the software NAT) or IPv6.
fn nat_addr(field: &str, s: &str) -> Result<IpAddr, ConfigError> {
    s.trim()
        .parse::<IpAddr>()
        .map_err(|_| ConfigError::new(field, format!("'{s}' is not an IP address")))
}

fn plan_nat(c: &NatConfig) -> Result<NatPlan, Refusal> {
    let err = config_err("nat");
    let NatConfig {
        snat,
        dnat,
        max_flows: flows,
        inside_networks,
        max_flows_per_source,
        timeouts,
    } = c;
    if *max_flows_per_source != 0 {
        return Err(per_source_refusal("nat"));
    }
    if !inside_networks.is_empty() {
        return Err(Refusal::Unsupported {
            function: "nat",
            why: "`inside_networks` (source NAT for listed networks only) is not in the \
                  table tier's NAT program; leave it empty or run the NAT in software"
                .into(),
        });
    }
    // Addresses: parsed here (IPv6 is the table tier's); the rest is validated by the
    // software NAT on a copy whose addresses are distinct IPv4 placeholders.
    let mut addrs: Vec<IpAddr> = Vec::new();
    let mut placeholder = |a: IpAddr| -> String {
        let i = addrs.iter().position(|x| *x == a).unwrap_or_else(|| {
            addrs.push(a);
            addrs.len() - 1
        });
        std::net::Ipv4Addr::from(0x0a00_0001 + i as u32).to_string()
    };
    let snat_ip = snat
        .as_ref()
        .map(|s| nat_addr("snat.public_ip", &s.public_ip))
        .transpose()
        .map_err(&err)?;
    let mut probe_dnat = Vec::with_capacity(dnat.len());
    let mut dnat_ips = Vec::with_capacity(dnat.len());
    for (i, d) in dnat.iter().enumerate() {
        let at = format!("dnat[{i}]");
        let public = match (&d.public_ip, snat_ip) {
            (Some(ip), _) => nat_addr(&format!("{at}.public_ip"), ip).map_err(&err)?,
            (None, Some(ip)) => ip,
            (None, None) => {
                return Err(err(ConfigError::new(
                    format!("{at}.public_ip"),
                    "missing, and there is no `snat.public_ip` to default to",
                )))
            }
        };
        let to = nat_addr(&format!("{at}.to_ip"), &d.to_ip).map_err(&err)?;
        if public.is_ipv4() != to.is_ipv4() {
            return Err(err(ConfigError::new(
                format!("{at}.to_ip"),
                "an IPv4 and an IPv6 address in one port forward",
            )));
        }
        let DnatConfig {
            proto,
            public_port,
            to_port,
            ..
        } = d;
        probe_dnat.push(DnatConfig {
            proto: *proto,
            public_ip: Some(placeholder(public)),
            public_port: *public_port,
            to_ip: placeholder(to),
            to_port: *to_port,
        });
        dnat_ips.push((public, to));
    }
    let family_of = |a: &IpAddr| if a.is_ipv4() { 4u8 } else { 6 };
    let families: Vec<u8> = snat_ip
        .iter()
        .chain(dnat_ips.iter().map(|(p, _)| p))
        .map(family_of)
        .collect();
    if families.windows(2).any(|w| w[0] != w[1]) {
        return Err(err(ConfigError::new(
            "dnat",
            "one NAT translates one address family: snat and every port forward must be \
             all IPv4 or all IPv6",
        )));
    }
    let probe = NatConfig {
        snat: snat.as_ref().map(|s| SnatConfig {
            public_ip: placeholder(snat_ip.expect("parsed above")),
            port_range: s.port_range,
        }),
        dnat: probe_dnat,
        max_flows: 1,
        inside_networks: Vec::new(),
        max_flows_per_source: 0,
        timeouts: timeouts.clone(),
    };
    probe.build("probe").map_err(&err)?;
    let NatTimeoutConfig {
        tcp,
        tcp_syn,
        tcp_close,
        udp,
        udp_stream,
        icmp,
        generic,
    } = timeouts;
    let (rows, publics) = dnat_rows(snat_ip, dnat, &dnat_ips);
    let snat = match (snat, snat_ip) {
        (Some(s), Some(ip)) => {
            let (w, fam) = addr_words(ip);
            Some((w, fam, s.port_range[0] as u16, s.port_range[1] as u16))
        }
        _ => None,
    };
    Ok(NatPlan {
        snat,
        dnat: rows,
        publics,
        timeouts: [
            *tcp,
            *tcp_syn,
            *tcp_close,
            *udp,
            *udp_stream,
            *icmp,
            *generic,
        ]
        .map(secs),
        max_flows: max_flows("nat", *flows, nfx_vnf::nat::config::MAX_FLOWS_LIMIT)?,
    })
}

/// The table NAT's port-forward rows (public address, port and protocol → target) and
/// the public addresses it answers for (the source NAT's and every forward's, once each).
fn dnat_rows(
    snat_ip: Option<IpAddr>,
    dnat: &[DnatConfig],
    dnat_ips: &[(IpAddr, IpAddr)],
) -> (Vec<(RawDnatKey, RawDnatVal)>, Vec<RawDnatKey>) {
    let public_key = |a: IpAddr| {
        let (addr, family) = addr_words(a);
        RawDnatKey {
            addr,
            family,
            ..Default::default()
        }
    };
    let mut publics: Vec<RawDnatKey> = Vec::new();
    let mut add_public = |k: RawDnatKey| {
        if !publics.contains(&k) {
            publics.push(k);
        }
    };
    if let Some(ip) = snat_ip {
        add_public(public_key(ip));
    }
    let mut rows = Vec::with_capacity(dnat.len());
    for (d, (public, to)) in dnat.iter().zip(dnat_ips) {
        add_public(public_key(*public));
        let (addr, family) = addr_words(*public);
        let (to_addr, _) = addr_words(*to);
        let public_port = d.public_port as u16;
        let to_port = d.to_port.unwrap_or(d.public_port) as u16;
        rows.push((
            RawDnatKey {
                addr,
                port: public_port.to_be(),
                proto: d.proto.number().unwrap_or(6),
                family,
                ..Default::default()
            },
            RawDnatVal {
                to_addr,
                to_port: to_port.to_be(),
                pad: [0; 6],
            },
        ));
    }
    (rows, publics)
}

fn plan_elephant(c: &ElephantConfig) -> Result<ElephantPlan, Refusal> {
    c.validate().map_err(|e| Refusal::Config {
        function: "elephant",
        error: ConfigError::new(e.field, e.problem),
    })?;
    // bytes × 8 × 1000 ≥ rate × window_ms  ⇔  bytes ≥ ⌈rate × window_ms / 8000⌉.
    let need = (u128::from(c.min_rate_bps) * u128::from(c.window_ms)).div_ceil(8000);
    Ok(ElephantPlan {
        config: c.clone(),
        min_window_bytes: u64::try_from(need).unwrap_or(u64::MAX),
        max_flows: max_flows(
            "elephant",
            c.max_flows,
            nfx_vnf::elephant::config::MAX_FLOWS,
        )?,
    })
}

#[cfg(test)]
mod tests;
