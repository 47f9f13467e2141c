//! Owned packet buffers with room for GSO super-packets and their virtio-net header.

use std::ptr::NonNull;

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
///
/// A buffer can also *lend* its frame from memory it does not own
/// ([`Self::attach_external`]): a receive ring slot that the port keeps for userspace
/// until the packet has been sent ([`Self::detach`]). Every accessor then works on that
/// memory, so the graph parses and rewrites the frame in place and the send reads it
/// from the slot. Cloning such a buffer copies the frame into owned storage, so no
/// clone ever points into a slot.
#[derive(Debug)]
pub struct PacketBuf {
    data: Box<[u8]>,
    len: usize,
    /// The lent memory and its size while the frame lives outside `data`.
    external: Option<(NonNull<u8>, usize)>,
    /// Bytes of lent memory right before the frame that the loan covers too (room for
    /// the virtio-net header, [`Self::vnet_and_frame`]); 0 for owned storage.
    head: usize,
    /// Offload metadata (GSO, partial checksum) that travels with the frame.
    pub vnet: VnetHdr,
}

// SAFETY: owned storage is a Box; lent memory is, by the contract of `attach_external`,
// used by the one thread that owns this buffer and the port that lent it, until `detach`.
unsafe impl Send for PacketBuf {}

impl Clone for PacketBuf {
    fn clone(&self) -> Self {
        let mut data = self.data.clone();
        if self.external.is_some() {
            let frame = self.frame();
            if frame.len() > data.len() {
                data = vec![0u8; frame.len()].into_boxed_slice();
            }
            data[..frame.len()].copy_from_slice(frame);
        }
        Self {
            data,
            len: self.len,
            external: None,
            head: 0,
            vnet: self.vnet,
        }
    }
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
            external: None,
            head: 0,
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

    /// The storage in use: the lent memory while attached, else the own buffer.
    fn store(&self) -> &[u8] {
        match self.external {
            // SAFETY: `attach_external`'s contract: `cap` bytes at `ptr` stay valid and
            // reserved for this buffer until `detach`.
            Some((ptr, cap)) => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), cap) },
            None => &self.data,
        }
    }

    fn store_mut(&mut self) -> &mut [u8] {
        match self.external {
            // SAFETY: as in `store`; `&mut self` makes this the only access.
            Some((ptr, cap)) => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), cap) },
            None => &mut self.data,
        }
    }

    /// The frame bytes.
    pub fn frame(&self) -> &[u8] {
        &self.store()[..self.len]
    }

    /// The frame bytes, writable (header rewriting).
    pub fn frame_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.store_mut()[..len]
    }

    /// The whole storage, for a receive call to fill; follow with [`Self::set_len`].
    /// Detaches lent memory first, so a receive always fills the own buffer.
    pub fn storage_mut(&mut self) -> &mut [u8] {
        self.detach();
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

    /// Storage capacity in bytes (of the lent memory while attached).
    pub fn capacity(&self) -> usize {
        self.store().len()
    }

    /// Sets the frame length after a receive; clamped to the capacity.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity());
    }

    /// Lends the buffer `cap` bytes at `ptr` that hold a frame of `len` bytes (clamped
    /// to `cap`), and the `head` bytes before `ptr`: from now until [`Self::detach`]
    /// the frame is read and written there.
    ///
    /// # Safety
    ///
    /// The `head + cap` bytes from `ptr - head` must stay mapped, writable and touched
    /// by nobody else (no other buffer, not the kernel) until this buffer is detached,
    /// attached again, or dropped. A port that lends ring slots keeps each slot from
    /// the kernel until it has detached the packet ([`Self::detach`]).
    pub unsafe fn attach_external(
        &mut self,
        ptr: NonNull<u8>,
        head: usize,
        cap: usize,
        len: usize,
    ) {
        self.external = Some((ptr, cap));
        self.head = head;
        self.len = len.min(cap);
    }

    /// The virtio-net header ([`Self::vnet`], written into the [`VnetHdr::LEN`] lent
    /// bytes before the frame) and the frame as one slice, when the loan has that room:
    /// a send then passes the kernel one buffer per frame instead of two, which the
    /// kernel imports on a shorter path. `None` for owned storage.
    pub fn vnet_and_frame(&mut self) -> Option<&[u8]> {
        let (ptr, _) = self.external?;
        if self.head < VnetHdr::LEN {
            return None;
        }
        // SAFETY: `attach_external`'s contract: the `head` bytes before `ptr` and the
        // frame after it are lent to this buffer; `&mut self` makes this the only access.
        let whole = unsafe {
            std::slice::from_raw_parts_mut(ptr.as_ptr().sub(VnetHdr::LEN), VnetHdr::LEN + self.len)
        };
        whole[..VnetHdr::LEN].copy_from_slice(&self.vnet.to_bytes());
        Some(whole)
    }

    /// True while the frame lives in lent memory.
    pub fn is_external(&self) -> bool {
        self.external.is_some()
    }

    /// Ends a loan: the buffer forgets the lent memory and holds an empty frame in its
    /// own storage. No effect on a buffer that owns its frame.
    pub fn detach(&mut self) {
        if self.external.take().is_some() {
            self.len = 0;
            self.head = 0;
        }
    }

    /// Copies a lent frame into the own storage and ends the loan, keeping the frame
    /// (for a packet that must outlive the slot). False, and the loan ended with an
    /// empty frame, when the own storage is too small for it.
    pub fn make_owned(&mut self) -> bool {
        let Some((ptr, cap)) = self.external.take() else {
            return true;
        };
        self.head = 0;
        let len = self.len;
        if len > self.data.len() {
            self.len = 0;
            return false;
        }
        // SAFETY: the loan was still valid (see `attach_external`); it ends here.
        let lent = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), cap) };
        self.data[..len].copy_from_slice(&lent[..len]);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lent_frame_is_read_and_written_in_place_and_cloned_into_owned_storage() {
        let mut slot = [0u8; 100];
        slot[10..14].copy_from_slice(&[1, 2, 3, 4]);
        let mut b = PacketBuf::with_capacity(16);
        let ptr = NonNull::new(slot[10..].as_mut_ptr()).unwrap();
        // SAFETY: `slot` outlives every use of `b`'s loan below and nothing else touches it.
        unsafe { b.attach_external(ptr, 0, 90, 4) };
        assert!(b.is_external());
        assert_eq!(b.frame(), &[1, 2, 3, 4]);
        assert_eq!(b.capacity(), 90);
        b.frame_mut()[0] = 9;
        let c = b.clone();
        assert!(!c.is_external());
        assert_eq!(c.frame(), &[9, 2, 3, 4]);
        b.set_len(200);
        assert_eq!(b.len(), 90, "clamped to the lent memory");
        b.set_len(4);
        b.detach();
        assert!(!b.is_external() && b.is_empty());
        assert_eq!(slot[10], 9, "rewritten in the slot");
        assert_eq!(c.frame(), &[9, 2, 3, 4], "the clone owns its bytes");
    }

    #[test]
    fn make_owned_keeps_the_frame_or_reports_no_room() {
        let mut slot = [5u8; 40];
        let mut b = PacketBuf::with_capacity(16);
        // SAFETY: `slot` outlives the loan.
        unsafe { b.attach_external(NonNull::new(slot.as_mut_ptr()).unwrap(), 0, 40, 8) };
        assert!(b.make_owned());
        slot[0] = 0;
        assert!(!b.is_external());
        assert_eq!(b.frame(), &[5u8; 8]);
        // SAFETY: as above.
        unsafe { b.attach_external(NonNull::new(slot.as_mut_ptr()).unwrap(), 0, 40, 30) };
        assert!(!b.make_owned());
        assert!(!b.is_external() && b.is_empty());
    }

    #[test]
    fn storage_mut_ends_a_loan() {
        let mut slot = [7u8; 20];
        let mut b = PacketBuf::with_capacity(16);
        // SAFETY: `slot` outlives the loan.
        unsafe { b.attach_external(NonNull::new(slot.as_mut_ptr()).unwrap(), 0, 20, 20) };
        assert_eq!(b.storage_mut().len(), 16);
        assert!(!b.is_external());
    }

    #[test]
    fn vnet_header_is_written_before_a_lent_frame_with_room() {
        let mut slot = [0u8; 64];
        slot[20..24].copy_from_slice(&[1, 2, 3, 4]);
        let mut b = PacketBuf::with_capacity(16);
        b.vnet = VnetHdr {
            flags: VnetHdr::F_NEEDS_CSUM,
            gso_type: VnetHdr::GSO_TCPV4,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        assert_eq!(b.vnet_and_frame(), None, "owned storage has no room");
        let frame = NonNull::new(slot[20..].as_mut_ptr()).unwrap();
        // SAFETY: `slot` outlives the loan; bytes 10..64 are lent.
        unsafe { b.attach_external(frame, VnetHdr::LEN, 44, 4) };
        let vnet = b.vnet;
        let whole = b.vnet_and_frame().unwrap().to_vec();
        assert_eq!(whole.len(), VnetHdr::LEN + 4);
        assert_eq!(&whole[..VnetHdr::LEN], &vnet.to_bytes());
        assert_eq!(&whole[VnetHdr::LEN..], &[1, 2, 3, 4]);
        b.detach();
        assert_eq!(
            &slot[10..20],
            &vnet.to_bytes(),
            "written into the lent bytes"
        );
        // SAFETY: as above, but no bytes before the frame are lent.
        unsafe { b.attach_external(frame, 4, 44, 4) };
        assert_eq!(b.vnet_and_frame(), None, "too little room");
    }
}
