// SPDX-License-Identifier: GPL-2.0
// nfx H-VNFs: header rewrites with incremental checksum updates, as nfx_packet::rewrite
// does them (the kernel's csum helpers apply the same RFC 1624 update and handle
// CHECKSUM_PARTIAL the same way), for IPv4 and IPv6.
#ifndef NFX_HVNF_REWRITE_H
#define NFX_HVNF_REWRITE_H

#include "hvnf_common.h"

#define END_SRC 0
#define END_DST 1

// Offset of the L4 checksum that covers the pseudo-header, or 0.
static __always_inline __u32 pseudo_csum_off(__u8 proto, __u8 family, __u32 l4)
{
	if (proto == IPPROTO_TCP)
		return l4 + 16;
	if (proto == IPPROTO_UDP)
		return l4 + 6;
	if (family == 6 && proto == IPPROTO_ICMPV6)
		return l4 + 2;
	return 0;
}

static __always_inline __u64 mangled(__u8 proto)
{
	return proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
}

// Sets the source or destination address (network-order words), with the IPv4 header
// checksum and the L4 pseudo-header checksum.
static __always_inline void set_addr(CTX *c, struct meta *m, int end, __u32 *addr)
{
	struct hv_key *k = &m->key;
	__u32 *cur = end == END_SRC ? k->src : k->dst;
	__u32 l4c = pseudo_csum_off(k->proto, k->family, m->l4);
	__u64 fl = BPF_F_PSEUDO_HDR | mangled(k->proto) | 4;
	if (k->family == 4) {
		__u32 old = cur[0], new = addr[0];
		if (old == new)
			return;
		__u32 off = m->l3 + (end == END_SRC ? 12 : 16);
		STORE(c, off, &new, 4);
		L3CSUM(c, m->l3 + 10, old, new, 4);
		if (l4c)
			L4CSUM(c, l4c, old, new, fl);
		cur[0] = new;
		return;
	}
	__u32 base = m->l3 + (end == END_SRC ? 8 : 24);
	for (int w = 0; w < 4; w++) {
		__u32 old = cur[w], new = addr[w];
		if (old == new)
			continue;
		STORE(c, base + w * 4, &new, 4);
		if (l4c)
			L4CSUM(c, l4c, old, new, fl);
		cur[w] = new;
	}
}

// Sets the TCP/UDP port or the ICMP echo identifier (network order).
static __always_inline void set_port(CTX *c, struct meta *m, int end, __u16 port)
{
	struct hv_key *k = &m->key;
	if (k->proto == IPPROTO_TCP || k->proto == IPPROTO_UDP) {
		__u16 *cur = end == END_SRC ? &k->sport : &k->dport;
		__u16 old = *cur;
		if (old == port)
			return;
		__u32 off = m->l4 + (end == END_SRC ? 0 : 2);
		STORE(c, off, &port, 2);
		L4CSUM(c, pseudo_csum_off(k->proto, k->family, m->l4), old, port,
		       mangled(k->proto) | 2);
		*cur = port;
	} else if (is_icmp(k) && icmp_is_echo(k->family, m->icmp_type)) {
		__u16 old = k->sport;
		if (old == port)
			return;
		STORE(c, m->l4 + 4, &port, 2);
		L4CSUM(c, m->l4 + 2, old, port, 2);
		k->sport = port;
		k->dport = port;
	}
}

// One 16-bit word inside an ICMP error's quoted packet, with the ICMP checksum.
static __always_inline void inner_word(CTX *c, struct meta *m, __u32 off, __u16 new)
{
	__u16 old = load16(c, off);
	if (old == new)
		return;
	store16(c, off, new);
	L4CSUM(c, m->l4 + 2, bpf_htons(old), bpf_htons(new), 2);
}

// The quoted packet's L4 checksum after a covered 32-bit word changed.
static __always_inline void inner_l4_csum32(CTX *c, struct meta *m, __u32 l4c, __u8 udp, __u32 old,
					    __u32 new)
{
	__u16 cur = load16(c, l4c);
	if (udp && cur == 0)
		return;
	__u16 v = csum_update32(cur, old, new);
	inner_word(c, m, l4c, udp && v == 0 ? 0xffff : v);
}

// Rewrites one end (address, port) of the packet quoted in an ICMP error, as
// nfx_packet::rewrite::set_inner: its IP checksum (IPv4), its L4 checksum when quoted,
// and the outer ICMP checksum follow.
static __always_inline void set_inner(CTX *c, struct meta *m, int end, __u32 *addr, __u16 port)
{
	if (!m->has_inner)
		return;
	struct hv_key *k = &m->inner;
	__u8 proto = k->proto;
	__u8 udp = proto == IPPROTO_UDP;
	__u32 l4c = pseudo_csum_off(proto, k->family, m->inner_l4);
	if (!l4c && is_icmp(k))
		l4c = m->inner_l4 + 2;
	if (l4c + 2 > m->ip_end)
		l4c = 0;
	__u32 *cur = end == END_SRC ? k->src : k->dst;
	if (k->family == 4) {
		__u32 aoff = m->inner_l3 + (end == END_SRC ? 12 : 16);
		__u32 old = bpf_ntohl(cur[0]), new = bpf_ntohl(addr[0]);
		inner_word(c, m, aoff, new >> 16);
		inner_word(c, m, aoff + 2, new & 0xffff);
		__u32 ipc = m->inner_l3 + 10;
		inner_word(c, m, ipc, csum_update32(load16(c, ipc), old, new));
		if (l4c && proto != IPPROTO_ICMP)
			inner_l4_csum32(c, m, l4c, udp, old, new);
		cur[0] = addr[0];
	} else {
		__u32 aoff = m->inner_l3 + (end == END_SRC ? 8 : 24);
		for (int w = 0; w < 4; w++) {
			__u32 old = bpf_ntohl(cur[w]), new = bpf_ntohl(addr[w]);
			if (old == new)
				continue;
			inner_word(c, m, aoff + w * 4, new >> 16);
			inner_word(c, m, aoff + w * 4 + 2, new & 0xffff);
			if (l4c)
				inner_l4_csum32(c, m, l4c, udp, old, new);
			cur[w] = addr[w];
		}
	}
	__u32 poff = 0;
	if (proto == IPPROTO_TCP || proto == IPPROTO_UDP)
		poff = m->inner_l4 + (end == END_SRC ? 0 : 2);
	else if (is_icmp(k) && m->inner_l4 + 1 <= m->ip_end &&
		 icmp_is_echo(k->family, rd8(m, m->inner_l4)))
		poff = m->inner_l4 + 4;
	if (!poff)
		return;
	__u16 old_port = load16(c, poff);
	__u16 new_port = bpf_ntohs(port);
	inner_word(c, m, poff, new_port);
	if (l4c) {
		__u16 cs = load16(c, l4c);
		if (!(udp && cs == 0)) {
			__u16 v = csum_update16(cs, old_port, new_port);
			inner_word(c, m, l4c, udp && v == 0 ? 0xffff : v);
		}
	}
}

#endif
