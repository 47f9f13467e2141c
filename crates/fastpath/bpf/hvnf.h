// SPDX-License-Identifier: GPL-2.0
// nfx table-tier VNFs (H-VNFs): the layouts shared with userspace
// (crates/fastpath/src/table/raw.rs mirrors every struct here, byte for byte; a unit
// test there checks sizes and offsets).
#ifndef NFX_HVNF_H
#define NFX_HVNF_H

#include <linux/types.h>

// Functions a chain position can hold (`hv_cfg.chain`).
#define K_END 0
#define K_FW 1
#define K_NAT 2
#define K_ELE 3
#define HV_MAX_CHAIN 3

// Counter rows (`counters` map): one per node, as the software graph has them.
#define N_PARSE 0
#define N_FW 1
#define N_NAT 2
#define N_ELE 3
#define N_OUT 4
#define N_NODES 5

// Drop reasons: the indexes of nfx_packet::DropReason (same order, same meaning).
#define R_TRUNCATED 0
#define R_NON_IP 1
#define R_BAD_IP_HEADER 2
#define R_BAD_IP_CHECKSUM 3
#define R_BAD_L4_HEADER 4
#define R_FRAGMENT 5
#define R_TTL_EXPIRED 6
#define R_ACL_DENY 7
#define R_INVALID_STATE 8
#define R_TABLE_FULL 9
#define R_NAT_NO_PORT 10
#define R_NAT_NO_MAPPING 11
#define HV_NREASONS 20

// Hooks a port is attached at, and what the program does with a frame that passes.
#define HOOK_INGRESS 0
#define HOOK_EGRESS 1
#define DIR_FWD 0
#define DIR_REV 1
#define ACT_PASS 0     // hand on: to the kernel (the worker's socket) or out of the port
#define ACT_REDIRECT 1 // the table tier forwards it: TTL, MACs, redirect to out_ifindex

// A flow. Addresses and ports in network order as in the frame; an IPv4 address is
// word 0 of its array (the others 0). 40 bytes.
struct hv_key {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family; // 4 or 6
	__u8 pad[2];
};

struct hv_port_key {
	__u32 ifindex;
	__u32 hook;
};

struct hv_port {
	__u32 dir;
	__u32 action;
	__u32 out_ifindex;
	__u8 dst_mac[6];
	__u8 src_mac[6];
};

// Per node, per CPU.
struct hv_counters {
	__u64 packets;
	__u64 bytes;
	__u64 to_kernel; // frames handed on untouched (ARP, neighbour discovery, non-IP)
	__u64 drops[HV_NREASONS];
};

// Node gauges the software nodes report in `stats()`, per CPU.
struct hv_gauges {
	__u64 fw_created;
	__u64 fw_expired;
	__u64 nat_snat_created;
	__u64 nat_dnat_created;
	__u64 nat_expired;
	__u64 ele_elephants;
	__u64 ele_untracked; // flows not tracked: the table was full
	__u64 ele_packets;
	__u64 ele_bytes;
	__u64 events_lost;
};

// One ACL rule; prefixes already masked; ports in host order.
struct hv_rule {
	__u32 src[4];
	__u32 src_mask[4];
	__u32 dst[4];
	__u32 dst_mask[4];
	__u16 sport_lo;
	__u16 sport_hi;
	__u16 dport_lo;
	__u16 dport_hi;
	__u8 allow;
	__u8 proto;  // 0: any
	__u8 family; // 0: both (no address given), 4 or 6
	__u8 pad;
};

// The configuration one packet sees (two slots, `cfg_sel` picks one).
struct hv_cfg {
	__u8 chain[2][4]; // per direction, K_END terminated
	__u64 clock_ns;   // 0: CLOCK_MONOTONIC; else this time (test runs)
	__u32 fw_rule_base;
	__u32 fw_nrules;
	__u8 fw_default_allow;
	__u8 fw_loose;
	__u8 fw_reverse_acl;
	__u8 nat_snat;
	__u8 nat_family;
	__u8 nat_bank;
	__u16 nat_lo; // host order
	__u16 nat_hi;
	__u8 pad[2];
	__u32 nat_public[4];
	__u64 fw_timeouts[13]; // tcp state 0..8, udp, udp_stream, icmp, generic (ns)
	__u64 nat_timeouts[7]; // tcp, tcp_syn, tcp_close, udp, udp_stream, icmp, generic
	__u64 ele_min_bytes;
	__u64 ele_min_window_bytes;
	__u64 ele_window_ns;
	__u64 limits[3]; // entries each table may hold: firewall, NAT (2 per mapping), elephant
	__u64 fw_unack; // cap for a TCP connection not assured yet (ns)
};

// Connection tracking: canonical key -> this. `sf` = state | flags << 8.
struct fw_val {
	__u64 expires_ns;
	__u32 sf;
	__u32 pad;
};

// NAT: one entry per direction of a mapping.
struct nat_val {
	struct hv_key twin;
	__u32 addr[4]; // address written: source (forward entry) or destination
	__u64 expires_ns;
	__u32 flags; // NAT_* bits (a word, for atomic updates)
	__u16 port;  // port / ICMP id written, network order
	__u16 pad;
};

// A port forward (dnat) and the public addresses, keyed with the bank they belong to.
struct dnat_key {
	__u32 addr[4];
	__u16 port; // network order; 0 in `nat_public` keys
	__u8 proto; // 0 in `nat_public` keys
	__u8 bank;
	__u8 family;
	__u8 pad[3];
};

struct dnat_val {
	__u32 to_addr[4];
	__u16 to_port;
	__u8 pad[6];
};

struct ele_val {
	__u64 bytes;
	__u64 packets;
	__u64 window_start_ns;
	__u64 window_bytes;
	__u64 last_ns;
	__u32 elephant;
	__u32 pad;
};

struct hv_event {
	__u64 ts_ns;
	struct hv_key key;
	__u64 bytes;
	__u64 packets;
	__u64 window_bytes;
	__u64 window_start_ns;
};

#endif
