// SPDX-License-Identifier: GPL-2.0
// nfx H-VNF: NAT, with the semantics of the software NAT (crates/vnf/src/nat): source
// NAT of Forward flows to a public address with endpoint-dependent port (and ICMP echo
// id) allocation — the original port when free, else the next free one from a
// per-protocol cursor, at most 1024 tries —, port forwards (dnat) for Reverse new flows,
// reverse translation of replies and of ICMP errors, per-state timeouts.
//
// A mapping is two entries of `nat_map`, one per direction, keyed by the flow as it
// arrives; each holds the rewrite, the other's key and the shared flags. A mapping is
// alive while either entry is (a packet refreshes its own entry; a flag change refreshes
// both), which is the software's single expiry time. Differences of the table: a full
// table refuses new mappings (`table_full`) instead of evicting unanswered ones; only
// flows of the public address's family are translated (the other passes untouched).
#ifndef NFX_HVNF_NAT_H
#define NFX_HVNF_NAT_H

#include "hvnf_common.h"
#include "hvnf_rewrite.h"

#define NAT_FWD 1
#define NAT_DNAT 2
#define NAT_REPLIED 4
#define NAT_FIN_FWD 8
#define NAT_FIN_REV 16
#define NAT_CLOSING 32
#define NAT_SHARED (NAT_DNAT | NAT_REPLIED | NAT_FIN_FWD | NAT_FIN_REV | NAT_CLOSING)
#define NAT_MAX_TRIES 1024

static __always_inline __u64 nat_timeout(struct hv_cfg *c, struct hv_key *k, __u32 f)
{
	int replied = (f & NAT_REPLIED) != 0;
	if (f & NAT_CLOSING)
		return c->nat_timeouts[2];
	if (k->proto == IPPROTO_TCP)
		return c->nat_timeouts[replied ? 0 : 1];
	if (k->proto == IPPROTO_UDP)
		return c->nat_timeouts[replied ? 4 : 3];
	if (is_icmp(k))
		return c->nat_timeouts[5];
	return c->nat_timeouts[6];
}

static __always_inline int has_ports(struct hv_key *k)
{
	return k->proto == IPPROTO_TCP || k->proto == IPPROTO_UDP || is_icmp(k);
}

// The live entry for `k` (the mapping is alive through either entry), or NULL after
// removing an expired mapping.
static __always_inline struct nat_val *nat_lookup(struct meta *m, struct hv_key *k)
{
	struct nat_val *v = bpf_map_lookup_elem(&nat_map, k);
	if (!v)
		return 0;
	if (v->expires_ns > m->now)
		return v;
	struct nat_val *tw = bpf_map_lookup_elem(&nat_map, &v->twin);
	if (tw && tw->expires_ns > m->now)
		return v;
	key_copy(&m->tk2, &v->twin);
	long a = bpf_map_delete_elem(&nat_map, k);
	long b = bpf_map_delete_elem(&nat_map, &m->tk2);
	occupancy_add(1, -(__s64)((a == 0) + (b == 0)));
	if (a == 0) {
		struct hv_gauges *g = get_gauges();
		if (g)
			g->nat_expired++;
	}
	return 0;
}

static __always_inline int is_public(struct hv_cfg *c, struct hv_key *k, __u32 *addr)
{
	struct dnat_key q = {};
	addr_copy(q.addr, addr);
	q.bank = c->nat_bank;
	q.family = k->family;
	return bpf_map_lookup_elem(&nat_public, &q) != 0;
}

// Builds the Reverse key of a mapping in `out`: remote -> public (ICMP: both ids the
// public id), from the Forward key `f` and the public endpoint.
static __always_inline void rev_key(struct hv_key *out, struct hv_key *f, __u32 *pub, __u16 pport)
{
	__builtin_memset(out, 0, sizeof(*out));
	out->proto = f->proto;
	out->family = f->family;
	addr_copy(out->src, f->dst);
	out->sport = is_icmp(f) ? pport : f->dport;
	addr_copy(out->dst, pub);
	out->dport = pport;
}

static __always_inline int port_reserved(struct hv_cfg *c, struct hv_key *k, __u32 *pub, __u16 port)
{
	struct dnat_key q = {};
	addr_copy(q.addr, pub);
	q.port = port;
	q.proto = k->proto;
	q.bank = c->nat_bank;
	q.family = k->family;
	return bpf_map_lookup_elem(&nat_dnat, &q) != 0;
}

// Free: not a port forward's, and no mapping uses it towards this remote endpoint
// (expired entries still count until they are removed, as in the software table).
static __always_inline int port_free(struct meta *m, struct hv_cfg *c, __u16 port)
{
	if (port_reserved(c, &m->key, c->nat_public, port))
		return 0;
	rev_key(&m->tk2, &m->key, c->nat_public, port);
	return bpf_map_lookup_elem(&nat_map, &m->tk2) == 0;
}

struct port_scan {
	__u32 p; // candidate, host order
	__u32 lo;
	__u32 hi;
	int found;
};

static long port_try(__u32 i, struct port_scan *s)
{
	struct meta *m = get_meta();
	if (!m)
		return 1;
	struct hv_cfg *c = get_cfg(m);
	if (!c)
		return 1;
	__u32 p = s->p;
	__u32 next = p >= s->hi ? s->lo : p + 1;
	if (port_free(m, c, bpf_htons(p))) {
		s->found = 1;
		return 1;
	}
	s->p = next;
	return 0;
}

// Picks the public port (host order) for the Forward flow in `m->key`, or -1.
static __always_inline int nat_allocate(struct meta *m, struct hv_cfg *c)
{
	struct hv_key *k = &m->key;
	if (!has_ports(k))
		return port_free(m, c, 0) ? 0 : -1;
	__u32 lo = c->nat_lo, hi = c->nat_hi;
	__u32 sp = bpf_ntohs(k->sport);
	if (sp >= lo && sp <= hi && port_free(m, c, k->sport))
		return sp;
	__u32 ci = k->proto == IPPROTO_TCP ? 0 : k->proto == IPPROTO_UDP ? 1 : 2;
	__u32 *cur = bpf_map_lookup_elem(&nat_cursor, &ci);
	if (!cur)
		return -1;
	struct port_scan s = { .lo = lo, .hi = hi, .found = 0 };
	s.p = *cur < lo ? lo : *cur > hi ? hi : *cur;
	__u32 span = hi - lo + 1;
	bpf_loop(span < NAT_MAX_TRIES ? span : NAT_MAX_TRIES, port_try, &s, 0);
	if (!s.found) {
		*cur = s.p;
		return -1;
	}
	*cur = s.p >= hi ? lo : s.p + 1;
	return s.p;
}

// Inserts both entries of the mapping whose Forward key is `m->tk` and Reverse key
// `m->tk2`, with values `m->tv` (Forward) and `m->tv2` (Reverse). 0, a drop reason + 1,
// or -1 when another CPU created the same Forward flow's mapping meanwhile.
static __always_inline int nat_insert(struct meta *m, struct hv_cfg *c)
{
	if (!occupancy_reserve(1, 2, c->limits[1]))
		return R_TABLE_FULL + 1;
	long rc = bpf_map_update_elem(&nat_map, &m->tk2, &m->tv2, BPF_NOEXIST);
	if (rc) {
		occupancy_add(1, -2);
		return rc == -EEXIST ? R_NAT_NO_PORT + 1 : R_TABLE_FULL + 1;
	}
	rc = bpf_map_update_elem(&nat_map, &m->tk, &m->tv, BPF_NOEXIST);
	if (rc) {
		bpf_map_delete_elem(&nat_map, &m->tk2);
		occupancy_add(1, -2);
		return rc == -EEXIST ? -1 : R_TABLE_FULL + 1;
	}
	return 0;
}

// Fills the scratch keys and values of a new mapping: inside `in`:`inp`, public
// `pub`:`pubp`, remote = the other end of `m->tk` (already the Forward key).
static __always_inline void nat_prepare(struct meta *m, struct hv_cfg *c, __u32 *pub, __u16 pubp,
					__u32 shared)
{
	struct hv_key *fk = &m->tk;
	rev_key(&m->tk2, fk, pub, pubp);
	__u64 exp = m->now + nat_timeout(c, fk, shared);
	key_copy(&m->tv.twin, &m->tk2);
	addr_copy(m->tv.addr, pub);
	m->tv.port = pubp;
	m->tv.flags = NAT_FWD | shared;
	m->tv.expires_ns = exp;
	m->tv.pad = 0;
	key_copy(&m->tv2.twin, fk);
	addr_copy(m->tv2.addr, fk->src);
	m->tv2.port = fk->sport;
	m->tv2.flags = shared;
	m->tv2.expires_ns = exp;
	m->tv2.pad = 0;
}

// A packet in direction `fwd` hit entry `v`: shared flags, timeouts of both entries.
static __always_inline void nat_touch(struct meta *m, struct hv_cfg *c, struct nat_val *v, int fwd)
{
	__u32 old = v->flags & NAT_SHARED;
	__u32 f = old;
	if (fwd != !(f & NAT_DNAT))
		f |= NAT_REPLIED;
	if (m->key.proto == IPPROTO_TCP) {
		if (m->tcp_flags & TCP_FIN)
			f |= fwd ? NAT_FIN_FWD : NAT_FIN_REV;
		if ((m->tcp_flags & TCP_RST) ||
		    (f & (NAT_FIN_FWD | NAT_FIN_REV)) == (NAT_FIN_FWD | NAT_FIN_REV))
			f |= NAT_CLOSING;
	}
	__u64 exp = m->now + nat_timeout(c, &m->key, f);
	if (f != old) {
		__sync_fetch_and_or(&v->flags, f);
		struct nat_val *tw = bpf_map_lookup_elem(&nat_map, &v->twin);
		if (tw) {
			__sync_fetch_and_or(&tw->flags, f);
			tw->expires_ns = exp;
		}
	}
	v->expires_ns = exp;
}

static __always_inline int nat_forward(CTX *ctx, struct meta *m, struct hv_cfg *c)
{
	struct hv_key *k = &m->key;
	struct nat_val *v = nat_lookup(m, k);
	if (v) {
		if (!(v->flags & NAT_FWD))
			return R_NAT_NO_MAPPING + 1;
	} else {
		if (!c->nat_snat || k->family != c->nat_family)
			return 0;
		int port = nat_allocate(m, c);
		if (port < 0)
			return R_NAT_NO_PORT + 1;
		key_copy(&m->tk, k);
		nat_prepare(m, c, c->nat_public, bpf_htons(port), 0);
		int rc = nat_insert(m, c);
		if (rc > 0)
			return rc;
		if (rc == 0) {
			struct hv_gauges *g = get_gauges();
			if (g)
				g->nat_snat_created++;
		}
		v = bpf_map_lookup_elem(&nat_map, k);
		if (!v || !(v->flags & NAT_FWD))
			return R_NAT_NO_MAPPING + 1;
	}
	nat_touch(m, c, v, 1);
	__u32 addr[4];
	addr_copy(addr, v->addr);
	__u16 port = v->port;
	set_addr(ctx, m, END_SRC, addr);
	set_port(ctx, m, END_SRC, port);
	return 0;
}

static __always_inline int nat_reverse(CTX *ctx, struct meta *m, struct hv_cfg *c)
{
	struct hv_key *k = &m->key;
	struct nat_val *v = nat_lookup(m, k);
	if (v) {
		if (v->flags & NAT_FWD)
			return R_NAT_NO_MAPPING + 1;
	} else {
		struct dnat_key q = {};
		addr_copy(q.addr, k->dst);
		q.port = k->dport;
		q.proto = k->proto;
		q.bank = c->nat_bank;
		q.family = k->family;
		struct dnat_val *d = bpf_map_lookup_elem(&nat_dnat, &q);
		if (!d)
			return is_public(c, k, k->dst) ? R_NAT_NO_MAPPING + 1 : 0;
		// The mapping's Forward key: inside -> remote.
		struct hv_key *fk = &m->tk;
		__builtin_memset(fk, 0, sizeof(*fk));
		fk->proto = k->proto;
		fk->family = k->family;
		addr_copy(fk->src, d->to_addr);
		fk->sport = d->to_port;
		addr_copy(fk->dst, k->src);
		fk->dport = k->sport;
		if (bpf_map_lookup_elem(&nat_map, fk))
			return R_NAT_NO_PORT + 1;
		nat_prepare(m, c, k->dst, k->dport, NAT_DNAT);
		int rc = nat_insert(m, c);
		if (rc > 0)
			return rc;
		if (rc < 0)
			return R_NAT_NO_PORT + 1;
		struct hv_gauges *g = get_gauges();
		if (g)
			g->nat_dnat_created++;
		v = bpf_map_lookup_elem(&nat_map, k);
		if (!v)
			return R_NAT_NO_MAPPING + 1;
	}
	nat_touch(m, c, v, 0);
	__u32 addr[4];
	addr_copy(addr, v->addr);
	__u16 port = v->port;
	set_addr(ctx, m, END_DST, addr);
	set_port(ctx, m, END_DST, port);
	return 0;
}

// An ICMP error about a mapped flow: the quoted packet is the reverse of that flow.
static __always_inline int nat_icmp_error(CTX *ctx, struct meta *m, struct hv_cfg *c)
{
	int fwd = m->dir == DIR_FWD;
	struct nat_val *v = 0;
	if (m->has_inner) {
		struct hv_key *q = &m->tk;
		__builtin_memset(q, 0, sizeof(*q));
		q->proto = m->inner.proto;
		q->family = m->inner.family;
		addr_copy(q->src, m->inner.dst);
		addr_copy(q->dst, m->inner.src);
		q->sport = m->inner.dport;
		q->dport = m->inner.sport;
		v = nat_lookup(m, q);
	}
	if (!v || ((v->flags & NAT_FWD) != 0) != fwd)
		return (!fwd && is_public(c, &m->key, m->key.dst)) ? R_NAT_NO_MAPPING + 1 : 0;
	__u32 addr[4];
	addr_copy(addr, v->addr);
	__u16 port = v->port;
	if (fwd) {
		set_addr(ctx, m, END_SRC, addr);
		set_inner(ctx, m, END_DST, addr, port);
	} else {
		set_addr(ctx, m, END_DST, addr);
		set_inner(ctx, m, END_SRC, addr, port);
	}
	return 0;
}

// The NAT node: 0 to pass, a drop reason + 1.
__attribute__((noinline)) int hv_nat(CTX *ctx)
{
	// Global functions are verified on their own with `ctx` as a context pointer:
	// using it keeps the compiler from passing anything else.
	if (!ctx)
		return 0;
	struct meta *m = get_meta();
	if (!m)
		return 0;
	struct hv_cfg *c = get_cfg(m);
	if (!c)
		return 0;
	struct hv_key *k = &m->key;
	if (is_icmp(k) && !icmp_is_echo(k->family, m->icmp_type))
		return icmp_is_error(k->family, m->icmp_type) ? nat_icmp_error(ctx, m, c) : 0;
	if (m->dir == DIR_FWD)
		return nat_forward(ctx, m, c);
	return nat_reverse(ctx, m, c);
}

#endif
