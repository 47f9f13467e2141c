//! The 5-tuple that identifies a flow in every stateful node.

use std::net::Ipv4Addr;

/// An IPv4 5-tuple. Ports are 0 for protocols without ports; for ICMP echo the
/// identifier is carried in both port fields so that echo flows are tracked too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Source address (host order).
    pub src: u32,
    /// Destination address (host order).
    pub dst: u32,
    /// Source port (host order).
    pub sport: u16,
    /// Destination port (host order).
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
}

impl FlowKey {
    /// The key of the same flow seen in the other direction.
    pub fn reversed(&self) -> Self {
        Self {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
        }
    }
}

impl std::fmt::Display for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} -> {}:{} proto {}",
            Ipv4Addr::from(self.src),
            self.sport,
            Ipv4Addr::from(self.dst),
            self.dport,
            self.proto
        )
    }
}

impl serde::Serialize for FlowKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("FlowKey", 5)?;
        st.serialize_field("src", &Ipv4Addr::from(self.src).to_string())?;
        st.serialize_field("dst", &Ipv4Addr::from(self.dst).to_string())?;
        st.serialize_field("sport", &self.sport)?;
        st.serialize_field("dport", &self.dport)?;
        st.serialize_field("proto", &self.proto)?;
        st.end()
    }
}
