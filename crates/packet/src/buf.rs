//! Owned packet buffers with room for GSO super-packets and their virtio-net header.

/// The kernel's `struct virtio_net_hdr` (10 bytes), carried with every packet so that
/// GSO/GRO super-packets and partial checksums survive a trip through userspace
/// (AF_PACKET with `PACKET_VNET_HDR`, TUN with `IFF_VNET_HDR`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_*` flags.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*` type.
    pub gso_type: u8,
    /// Length of the headers to copy into each segment.
    pub hdr_len: u16,
    /// Segment payload size for GSO.
    pub gso_size: u16,
    /// Where the partial checksum starts (from the start of the frame).
    pub csum_start: u16,
    /// Where, after `csum_start`, the checksum is stored.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Size of the header on the wire between the kernel and userspace.
    pub const LEN: usize = 10;
    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: checksum is partial (pseudo-header only).
    pub const F_NEEDS_CSUM: u8 = 1;
    /// `VIRTIO_NET_HDR_F_DATA_VALID`: checksum already verified.
    pub const F_DATA_VALID: u8 = 2;
    /// `VIRTIO_NET_HDR_GSO_NONE`.
    pub const GSO_NONE: u8 = 0;
    /// `VIRTIO_NET_HDR_GSO_TCPV4`.
    pub const GSO_TCPV4: u8 = 1;
    /// `VIRTIO_NET_HDR_GSO_UDP`.
    pub const GSO_UDP: u8 = 3;
    /// `VIRTIO_NET_HDR_GSO_TCPV6`.
    pub const GSO_TCPV6: u8 = 4;
    /// `VIRTIO_NET_HDR_GSO_UDP_L4`.
    pub const GSO_UDP_L4: u8 = 5;
    /// `VIRTIO_NET_HDR_GSO_ECN`.
    pub const GSO_ECN: u8 = 0x80;

    /// Decodes the header from its 10 little-endian bytes.
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Self {
        Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16::from_le_bytes([b[2], b[3]]),
            gso_size: u16::from_le_bytes([b[4], b[5]]),
            csum_start: u16::from_le_bytes([b[6], b[7]]),
            csum_offset: u16::from_le_bytes([b[8], b[9]]),
        }
    }

    /// Encodes the header into its 10 little-endian bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    /// True when the checksum field holds only the pseudo-header sum.
    pub fn needs_csum(&self) -> bool {
        self.flags & Self::F_NEEDS_CSUM != 0
    }
}

/// One packet's storage: a fixed-capacity byte buffer, the frame length in it, and the
/// virtio-net header that came with it. Buffers are allocated once and reused.
#[derive(Debug, Clone)]
pub struct PacketBuf {
    data: Box<[u8]>,
    len: usize,
    /// Offload metadata (GSO, partial checksum) that travels with the frame.
    pub vnet: VnetHdr,
}

impl PacketBuf {
    /// Room for a 64 KiB GSO super-packet plus link header.
    pub const GSO_CAPACITY: usize = 65536 + 256;
    /// Room for one MTU-sized frame with a VLAN tag.
    pub const MTU_CAPACITY: usize = 2048;

    /// Allocates a zeroed buffer of `cap` bytes holding an empty frame.
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            data: vec![0u8; cap].into_boxed_slice(),
            len: 0,
            vnet: VnetHdr::default(),
        }
    }

    /// Builds a buffer holding a copy of `frame` (tests, generators).
    pub fn from_frame(frame: &[u8]) -> Self {
        let mut b = Self::with_capacity(frame.len().max(Self::MTU_CAPACITY));
        b.data[..frame.len()].copy_from_slice(frame);
        b.len = frame.len();
        b
    }

    /// The frame bytes.
    pub fn frame(&self) -> &[u8] {
        &self.data[..self.len]
    }

    /// The frame bytes, writable (header rewriting).
    pub fn frame_mut(&mut self) -> &mut [u8] {
        &mut self.data[..self.len]
    }

    /// The whole storage, for a receive call to fill; follow with [`Self::set_len`].
    pub fn storage_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Frame length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty frame.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Storage capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.data.len()
    }

    /// Sets the frame length after a receive; clamped to the capacity.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.data.len());
    }
}
