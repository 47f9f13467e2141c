//! Why a packet was dropped. Every drop in nfx carries one of these and is counted.

/// A drop reason. Counters are arrays indexed by `reason as usize`, so keep the list
/// dense and add new reasons to [`DropReason::ALL`] as well.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Frame shorter than the headers it announces.
    Truncated,
    /// Not IPv4 (ARP, IPv6, ...) where the chain needs IPv4.
    NonIp,
    /// IPv4 header invalid: version, IHL, total length, options.
    BadIpHeader,
    /// IPv4 header checksum wrong.
    BadIpChecksum,
    /// TCP/UDP/ICMP header invalid (data offset, length).
    BadL4Header,
    /// Non-first IP fragment, or a fragment the chain cannot track.
    Fragment,
    /// TTL reached zero.
    TtlExpired,
    /// Firewall ACL says deny.
    AclDeny,
    /// Firewall: packet not valid for the tracked connection state.
    InvalidState,
    /// Firewall or NAT table full and nothing could be evicted.
    TableFull,
    /// NAT: no free port in the range.
    NatNoPort,
    /// NAT: reply packet with no mapping.
    NatNoMapping,
    /// DPI rule with action drop matched.
    DpiDrop,
    /// Tunnel: authentication tag wrong.
    AuthFailed,
    /// Tunnel: sequence number replayed or too old.
    Replay,
    /// Tunnel: malformed ESP/UDP encapsulation.
    BadEncap,
    /// Transmit queue full or send error.
    TxError,
    /// Frame larger than the egress MTU and not GSO.
    TooBig,
    /// The dataplane's classifier found no service for the frame (closed by default).
    NoService,
}

impl DropReason {
    /// Every reason, in discriminant order.
    pub const ALL: [DropReason; 19] = [
        DropReason::Truncated,
        DropReason::NonIp,
        DropReason::BadIpHeader,
        DropReason::BadIpChecksum,
        DropReason::BadL4Header,
        DropReason::Fragment,
        DropReason::TtlExpired,
        DropReason::AclDeny,
        DropReason::InvalidState,
        DropReason::TableFull,
        DropReason::NatNoPort,
        DropReason::NatNoMapping,
        DropReason::DpiDrop,
        DropReason::AuthFailed,
        DropReason::Replay,
        DropReason::BadEncap,
        DropReason::TxError,
        DropReason::TooBig,
        DropReason::NoService,
    ];
    /// Number of reasons (size of a counter array).
    pub const COUNT: usize = Self::ALL.len();

    /// Stable snake_case name used in counters, JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::NonIp => "non_ip",
            DropReason::BadIpHeader => "bad_ip_header",
            DropReason::BadIpChecksum => "bad_ip_checksum",
            DropReason::BadL4Header => "bad_l4_header",
            DropReason::Fragment => "fragment",
            DropReason::TtlExpired => "ttl_expired",
            DropReason::AclDeny => "acl_deny",
            DropReason::InvalidState => "invalid_state",
            DropReason::TableFull => "table_full",
            DropReason::NatNoPort => "nat_no_port",
            DropReason::NatNoMapping => "nat_no_mapping",
            DropReason::DpiDrop => "dpi_drop",
            DropReason::AuthFailed => "auth_failed",
            DropReason::Replay => "replay",
            DropReason::BadEncap => "bad_encap",
            DropReason::TxError => "tx_error",
            DropReason::TooBig => "too_big",
            DropReason::NoService => "no_service",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_dense_and_in_order() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{} out of order", r.as_str());
        }
    }
}
