// SPDX-License-Identifier: GPL-2.0
// nfx H-VNFs: maps, per-packet scratch, the hook abstraction and checksum arithmetic
// shared by the parser and the functions.
#ifndef NFX_HVNF_COMMON_H
#define NFX_HVNF_COMMON_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "hvnf.h"

// The hook: tc (sk_buff) programs. Packet bytes are read into the scratch copy and
// written with helpers at offsets, so the functions never hold packet pointers, and the
// kernel's checksum helpers handle CHECKSUM_PARTIAL (GSO) packets as nfx_packet does.
#define CTX struct __sk_buff
#define LOAD(c, off, to, n) bpf_skb_load_bytes(c, off, to, n)
#define STORE(c, off, from, n) bpf_skb_store_bytes(c, off, from, n, 0)
#define L3CSUM(c, off, from, to, sz) bpf_l3_csum_replace(c, off, from, to, sz)
#define L4CSUM(c, off, from, to, fl) bpf_l4_csum_replace(c, off, from, to, fl)

#define READ_ONCE_U32(x) (*(volatile __u32 *)&(x))

#define HDR_MAX 256
#define PARSE_KERNEL 100 // hv_parse: hand the frame on untouched

#define IPPROTO_ICMP 1
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_ICMPV6 58
#define E2BIG 7
#define EEXIST 17
#define ENOMEM 12

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

// The frame being processed: offsets, keys and a copy of its first bytes. Per CPU: a
// program run is never interrupted by another on the same CPU (softirq, or BH off on
// transmit).
struct meta {
	struct hv_key key;
	struct hv_key inner; // the flow an ICMP error quotes
	struct hv_key tk;    // scratch keys (NAT)
	struct hv_key tk2;
	struct nat_val tv; // scratch values (NAT)
	struct nat_val tv2;
	__u64 now;
	__u32 len;
	__u32 gso_size;
	__u32 hdr_len;
	__u16 l3;
	__u16 l4;
	__u16 payload;
	__u16 ip_end;
	__u16 inner_l3;
	__u16 inner_l4;
	__u8 tcp_flags;
	__u8 icmp_type;
	__u8 ttl;
	__u8 dir;
	__u8 first_frag;
	__u8 has_inner;
	__u8 cfg_slot;
	__u8 pad;
	__u8 hdr[HDR_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct meta);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cfg_sel SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct hv_cfg);
} cfg SEC(".maps");

// The frames this chain takes, per direction (DIR_FWD, DIR_REV), when several chains
// share a device's ports (one per service): a row with `allow` 0 takes every frame; one
// with `allow` 1 takes the frames it matches, and every other frame goes on untouched
// and uncounted to the next program on the hook (the next service's chain), then to
// the kernel.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct hv_rule);
} svc_sel SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, struct hv_port_key);
	__type(value, struct hv_port);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_NODES);
	__type(key, __u32);
	__type(value, struct hv_counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hv_gauges);
} gauges SEC(".maps");

// Entries in each table (0 firewall, 1 NAT, 2 elephant), kept exact with atomics by
// the program and by userspace (imports, sweeps).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} occupancy SEC(".maps");

// Table sizes below are placeholders: userspace sets each at load from the function's
// configuration (capacity = entries).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct hv_rule);
} fw_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct hv_key);
	__type(value, struct fw_val);
} fw_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2);
	__type(key, struct hv_key);
	__type(value, struct nat_val);
} nat_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2);
	__type(key, struct dnat_key);
	__type(value, struct dnat_val);
} nat_dnat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2);
	__type(key, struct dnat_key);
	__type(value, __u32);
} nat_public SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u32);
} nat_cursor SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct hv_key);
	__type(value, struct ele_val);
} ele_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} events SEC(".maps");

static __always_inline struct meta *get_meta(void)
{
	__u32 z = 0;
	return bpf_map_lookup_elem(&scratch, &z);
}

static __always_inline struct hv_cfg *get_cfg(struct meta *m)
{
	__u32 slot = m->cfg_slot & 1;
	return bpf_map_lookup_elem(&cfg, &slot);
}

static __always_inline struct hv_gauges *get_gauges(void)
{
	__u32 z = 0;
	return bpf_map_lookup_elem(&gauges, &z);
}

static __always_inline void occupancy_add(__u32 table, __s64 d)
{
	__u64 *o = bpf_map_lookup_elem(&occupancy, &table);
	if (o)
		__sync_fetch_and_add(o, d);
}

// Takes `n` entries of `table` for a new flow; 0 when the function's table is full (its
// configured size: the map may be larger, prepared for a bigger function). Give them
// back with occupancy_add(table, -n) if the insert fails.
static __always_inline int occupancy_reserve(__u32 table, __u64 n, __u64 limit)
{
	__u64 *o = bpf_map_lookup_elem(&occupancy, &table);
	if (!o)
		return 0;
	__u64 before = __sync_fetch_and_add(o, n);
	if (before + n > limit) {
		__sync_fetch_and_add(o, -n);
		return 0;
	}
	return 1;
}

// Bytes of the scratch copy, masked so that the verifier sees every index in bounds
// (callers check offsets against `hdr_len` first).
static __always_inline __u32 rd8(struct meta *m, __u32 off)
{
	return m->hdr[off & (HDR_MAX - 1)];
}

static __always_inline __u32 rd16(struct meta *m, __u32 off)
{
	return (rd8(m, off) << 8) | rd8(m, off + 1);
}

// Four bytes as they lie in the frame (network order in memory).
static __always_inline __u32 rdw(struct meta *m, __u32 off)
{
	return rd8(m, off) | (rd8(m, off + 1) << 8) | (rd8(m, off + 2) << 16) |
	       (rd8(m, off + 3) << 24);
}

// A 16-bit field of the frame as it is now (after rewrites), host order.
static __always_inline __u16 load16(CTX *c, __u32 off)
{
	__u16 v = 0;
	LOAD(c, off, &v, 2);
	return bpf_ntohs(v);
}

static __always_inline void store16(CTX *c, __u32 off, __u16 host)
{
	__u16 v = bpf_htons(host);
	STORE(c, off, &v, 2);
}

// RFC 1624 eqn. 3 on host-order values, exactly as nfx_packet::checksum does it.
static __always_inline __u16 fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return s;
}

static __always_inline __u16 csum_update16(__u16 check, __u16 old, __u16 new)
{
	return ~fold((__u32)(__u16)~check + (__u16)~old + new);
}

static __always_inline __u16 csum_update32(__u16 check, __u32 old, __u32 new)
{
	__u32 s = (__u32)(__u16)~check + (__u16) ~(old >> 16) + (__u16)~old + (new >> 16) +
		  (new & 0xffff);
	return ~fold(s);
}

static __always_inline __u8 icmp_proto(__u8 family)
{
	return family == 6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP;
}

static __always_inline int is_icmp(struct hv_key *k)
{
	return k->proto == icmp_proto(k->family);
}

// True when flow `k` is one `r` describes (family, protocol, prefixes, port ranges):
// an ACL rule, or the frames a chain sharing its ports takes (`svc_sel`).
static __always_inline int rule_matches(struct hv_rule *r, struct hv_key *k)
{
	if (r->family && r->family != k->family)
		return 0;
	if (r->proto) {
		__u8 p = r->proto == IPPROTO_ICMP ? icmp_proto(k->family) : r->proto;
		if (p != k->proto)
			return 0;
	}
	for (int w = 0; w < 4; w++) {
		if ((k->src[w] & r->src_mask[w]) != r->src[w])
			return 0;
		if ((k->dst[w] & r->dst_mask[w]) != r->dst[w])
			return 0;
	}
	__u16 sp = bpf_ntohs(k->sport), dp = bpf_ntohs(k->dport);
	return sp >= r->sport_lo && sp <= r->sport_hi && dp >= r->dport_lo && dp <= r->dport_hi;
}

static __always_inline int icmp_is_echo(__u8 family, __u8 type)
{
	return family == 6 ? (type == 128 || type == 129) : (type == 0 || type == 8);
}

static __always_inline int icmp_is_echo_request(__u8 family, __u8 type)
{
	return type == (family == 6 ? 128 : 8);
}

static __always_inline int icmp_is_error(__u8 family, __u8 type)
{
	if (family == 6)
		return type >= 1 && type <= 4;
	return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
}

static __always_inline void key_copy(struct hv_key *d, const struct hv_key *s)
{
	__builtin_memcpy(d, s, sizeof(*d));
}

static __always_inline void addr_copy(__u32 *d, const __u32 *s)
{
	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
	d[3] = s[3];
}

static __always_inline int addr_eq(const __u32 *a, const __u32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

#endif
