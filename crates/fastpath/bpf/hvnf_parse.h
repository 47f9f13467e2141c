// SPDX-License-Identifier: GPL-2.0
// nfx H-VNFs: the parser. For IPv4 it accepts and refuses exactly what
// nfx_packet::parse does, with the same drop reasons (the differential tests compare
// them); IPv6 follows the same rules where they apply.
#ifndef NFX_HVNF_PARSE_H
#define NFX_HVNF_PARSE_H

#include "hvnf_common.h"

// Extension headers are walked only this far into the frame (and at most four).
#define V6_L4_LIMIT 200

struct opt_walk {
	__u32 at;
	__u32 len;
	__u32 i;
	__u32 done; // 1: the walk ended cleanly; 2: an option is malformed
};

static long opt_step(__u32 k, struct opt_walk *w)
{
	struct meta *m = get_meta();
	if (!m) {
		w->done = 2;
		return 1;
	}
	__u32 i = w->i, len = w->len;
	if (i >= len) {
		w->done = 1;
		return 1;
	}
	__u32 t = rd8(m, w->at + i);
	if (t == 0) {
		w->done = 1;
		return 1;
	}
	if (t == 1) {
		w->i = i + 1;
		return 0;
	}
	if (i + 1 >= len) {
		w->done = 2;
		return 1;
	}
	__u32 ol = rd8(m, w->at + i + 1);
	if (ol < 2 || i + ol > len) {
		w->done = 2;
		return 1;
	}
	w->i = i + ol;
	return 0;
}

// RFC 791 options: every option but End-of-List and NOP carries a length ≥ 2 that
// stays inside the header. `at` is the first option byte, `len` the options' length.
static __always_inline int options_ok(__u32 at, __u32 len)
{
	struct opt_walk w = { .at = at, .len = len, .i = 0, .done = 0 };
	bpf_loop(40, opt_step, &w, 0);
	return w.done == 1 || (w.done == 0 && w.i >= w.len);
}

static __always_inline int ipv4_csum_ok(struct meta *m, __u32 l3, __u32 ihl)
{
	__u32 s = 0;
	for (int k = 0; k < 30; k++) {
		if ((__u32)k * 2 >= ihl)
			break;
		s += rd16(m, l3 + k * 2);
	}
	return fold(s) == 0xffff;
}

// Ports (or the echo identifier) of an L4 header at `l4` for protocol `proto`.
static __always_inline void l4_ports(struct meta *m, struct hv_key *k, __u32 l4)
{
	if (k->proto == IPPROTO_TCP || k->proto == IPPROTO_UDP) {
		k->sport = rd8(m, l4) | (rd8(m, l4 + 1) << 8);
		k->dport = rd8(m, l4 + 2) | (rd8(m, l4 + 3) << 8);
	} else if (is_icmp(k) && icmp_is_echo(k->family, rd8(m, l4))) {
		k->sport = rd8(m, l4 + 4) | (rd8(m, l4 + 5) << 8);
		k->dport = k->sport;
	}
}

// The IPv4 packet quoted by an ICMP error at `at`, `avail` bytes long; a malformed one
// leaves `has_inner` 0 (the error is then unrelated to any flow).
__attribute__((noinline)) int hv_inner4(CTX *ctx, __u32 at, __u32 avail)
{
	struct meta *m = get_meta();
	if (!ctx || !m)
		return 0;
	at &= 0xff;
	if (avail < 20 || rd8(m, at) >> 4 != 4)
		return 0;
	__u32 ihl = (rd8(m, at) & 15) * 4;
	if (ihl < 20 || avail < ihl + 8 || !options_ok(at + 20, ihl - 20))
		return 0;
	struct hv_key *k = &m->inner;
	__builtin_memset(k, 0, sizeof(*k));
	k->family = 4;
	k->src[0] = rdw(m, at + 12);
	k->dst[0] = rdw(m, at + 16);
	k->proto = rd8(m, at + 9);
	l4_ports(m, k, at + ihl);
	m->inner_l3 = at;
	m->inner_l4 = at + ihl;
	m->has_inner = 1;
	return 0;
}

// The IPv6 packet quoted by an ICMPv6 error: its L4 header must follow the fixed
// header directly.
__attribute__((noinline)) int hv_inner6(CTX *ctx, __u32 at, __u32 avail)
{
	struct meta *m = get_meta();
	if (!ctx || !m)
		return 0;
	at &= 0xff;
	if (avail < 48 || rd8(m, at) >> 4 != 6)
		return 0;
	struct hv_key *k = &m->inner;
	__builtin_memset(k, 0, sizeof(*k));
	k->family = 6;
	k->proto = rd8(m, at + 6);
	for (int w = 0; w < 4; w++) {
		k->src[w] = rdw(m, at + 8 + w * 4);
		k->dst[w] = rdw(m, at + 24 + w * 4);
	}
	l4_ports(m, k, at + 40);
	m->inner_l3 = at;
	m->inner_l4 = at + 40;
	m->has_inner = 1;
	return 0;
}

// TCP, UDP and ICMP headers after the IP header: `l4len` bytes up to the packet's end.
__attribute__((noinline)) int hv_parse_l4(CTX *ctx, __u32 l4, __u32 l4len)
{
	struct meta *m = get_meta();
	if (!ctx || !m)
		return 0;
	l4 &= 0xff;
	struct hv_key *k = &m->key;
	__u32 short_reason = m->first_frag ? R_FRAGMENT : R_BAD_L4_HEADER;
	m->l4 = l4;
	if (k->proto == IPPROTO_TCP) {
		if (l4len < 20)
			return short_reason + 1;
		__u32 doff = (rd8(m, l4 + 12) >> 4) * 4;
		if (doff < 20)
			return R_BAD_L4_HEADER + 1;
		if (doff > l4len)
			return short_reason + 1;
		l4_ports(m, k, l4);
		m->tcp_flags = rd8(m, l4 + 13);
		m->payload = l4 + doff;
	} else if (k->proto == IPPROTO_UDP) {
		if (l4len < 8)
			return short_reason + 1;
		__u32 ulen = rd16(m, l4 + 4);
		if (ulen < 8 || (!m->first_frag && ulen > l4len))
			return R_BAD_L4_HEADER + 1;
		l4_ports(m, k, l4);
		m->payload = l4 + 8;
	} else if (is_icmp(k)) {
		if (l4len < 8)
			return short_reason + 1;
		__u8 t = rd8(m, l4);
		m->icmp_type = t;
		// Neighbour discovery and multicast listeners belong to the host's kernel.
		if (k->family == 6 && ((t >= 130 && t <= 137) || t == 143))
			return PARSE_KERNEL;
		l4_ports(m, k, l4);
		if (icmp_is_error(k->family, t) && !m->first_frag) {
			if (k->family == 4)
				hv_inner4(ctx, l4 + 8, l4len - 8);
			else
				hv_inner6(ctx, l4 + 8, l4len - 8);
		}
		m->payload = l4 + 8;
	} else {
		m->payload = l4;
	}
	return 0;
}

__attribute__((noinline)) int hv_parse4(CTX *ctx, __u32 l3)
{
	struct meta *m = get_meta();
	if (!ctx || !m)
		return 0;
	l3 &= 0x1f;
	__u32 len = m->len;
	if (len < l3 + 20)
		return R_TRUNCATED + 1;
	__u32 b0 = rd8(m, l3);
	if (b0 >> 4 != 4)
		return R_BAD_IP_HEADER + 1;
	__u32 ihl = (b0 & 15) * 4;
	__u32 total = rd16(m, l3 + 2);
	if (ihl < 20 || total < ihl)
		return R_BAD_IP_HEADER + 1;
	if (len - l3 < total)
		return R_TRUNCATED + 1;
	if (!options_ok(l3 + 20, ihl - 20))
		return R_BAD_IP_HEADER + 1;
	if (!ipv4_csum_ok(m, l3, ihl))
		return R_BAD_IP_CHECKSUM + 1;
	m->ttl = rd8(m, l3 + 8);
	if (m->ttl == 0)
		return R_TTL_EXPIRED + 1;
	__u32 frag = rd16(m, l3 + 6);
	if (frag & 0x1fff)
		return R_FRAGMENT + 1;
	m->first_frag = (frag & 0x2000) != 0;
	m->l3 = l3;
	m->ip_end = l3 + total;
	struct hv_key *k = &m->key;
	k->family = 4;
	k->src[0] = rdw(m, l3 + 12);
	k->dst[0] = rdw(m, l3 + 16);
	k->proto = rd8(m, l3 + 9);
	return hv_parse_l4(ctx, l3 + ihl, total - ihl);
}

static __always_inline int is_v6_ext(__u32 nh)
{
	return nh == 0 || nh == 43 || nh == 60 || nh == 44;
}

__attribute__((noinline)) int hv_parse6(CTX *ctx, __u32 l3)
{
	struct meta *m = get_meta();
	if (!ctx || !m)
		return 0;
	l3 &= 0x1f;
	__u32 len = m->len;
	if (len < l3 + 40)
		return R_TRUNCATED + 1;
	if (rd8(m, l3) >> 4 != 6)
		return R_BAD_IP_HEADER + 1;
	__u32 plen = rd16(m, l3 + 4);
	if (plen == 0)
		return R_BAD_IP_HEADER + 1;
	__u32 total = 40 + plen;
	if (len - l3 < total)
		return R_TRUNCATED + 1;
	m->ttl = rd8(m, l3 + 7);
	if (m->ttl == 0)
		return R_TTL_EXPIRED + 1;
	m->l3 = l3;
	__u32 end = l3 + total;
	m->ip_end = end;
	struct hv_key *k = &m->key;
	k->family = 6;
	for (int w = 0; w < 4; w++) {
		k->src[w] = rdw(m, l3 + 8 + w * 4);
		k->dst[w] = rdw(m, l3 + 24 + w * 4);
	}
	__u32 nh = rd8(m, l3 + 6);
	__u32 off = l3 + 40;
	for (int i = 0; i < 4; i++) {
		if (!is_v6_ext(nh))
			break;
		if (off + 8 > end || off + 8 > V6_L4_LIMIT)
			return R_BAD_IP_HEADER + 1;
		__u32 next = rd8(m, off);
		if (nh == 44) {
			__u32 fo = rd16(m, off + 2);
			off += 8;
			if (fo & 0xfff8)
				return R_FRAGMENT + 1;
			m->first_frag = fo & 1;
		} else {
			off += (rd8(m, off + 1) + 1) * 8;
		}
		nh = next;
	}
	if (is_v6_ext(nh) || off > end || off > V6_L4_LIMIT)
		return R_BAD_IP_HEADER + 1;
	k->proto = nh;
	return hv_parse_l4(ctx, off, end - off);
}

// Fills the scratch meta from the frame: 0 when the chain runs, a drop reason + 1, or
// PARSE_KERNEL for frames that are not the chain's (ARP, neighbour discovery, other
// EtherTypes, more than two VLAN tags).
__attribute__((noinline)) int hv_parse(CTX *ctx)
{
	// Global functions are verified on their own with `ctx` as a context pointer:
	// using it keeps the compiler from passing anything else.
	if (!ctx)
		return 0;
	struct meta *m = get_meta();
	if (!m)
		return PARSE_KERNEL;
	__u32 len = m->len;
	if (len < 14)
		return R_TRUNCATED + 1;
	__u32 n = len < HDR_MAX ? len : HDR_MAX;
	if (LOAD(ctx, 0, m->hdr, n) < 0)
		return R_TRUNCATED + 1;
	m->hdr_len = n;
	__u32 et = rd16(m, 12);
	__u32 off = 14;
	for (int i = 0; i < 2; i++) {
		if (et != 0x8100 && et != 0x88a8)
			break;
		if (len < off + 4)
			return R_TRUNCATED + 1;
		et = rd16(m, off + 2);
		off += 4;
	}
	if (et == 0x0800)
		return hv_parse4(ctx, off);
	if (et == 0x86dd)
		return hv_parse6(ctx, off);
	return PARSE_KERNEL;
}

#endif
