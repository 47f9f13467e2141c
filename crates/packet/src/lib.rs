//! Packet buffers, vectors of packets, header parsing and rewriting, checksums.
//!
//! This is the lowest crate of nfx: every other crate moves packets as
//! [`Packet`]s grouped in a [`PacketVector`], parsed once into a [`Meta`].

pub mod buf;
pub mod checksum;
pub mod drop;
pub mod flow;
pub mod ip_tuple;
pub mod parse;
pub mod rewrite;
pub mod tcp;
pub mod vector;

pub use buf::{PacketBuf, VnetHdr};
pub use drop::DropReason;
pub use flow::FlowKey;
pub use ip_tuple::{ip_tuple, IpTuple};
pub use parse::{parse, Meta};
pub use vector::{Direction, Packet, PacketVector, Replay, MAX_VECTOR};
