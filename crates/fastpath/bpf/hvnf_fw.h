// SPDX-License-Identifier: GPL-2.0
// nfx H-VNF: the stateful firewall. The same semantics as the software firewall
// (crates/vnf/src/firewall): an ordered ACL consulted for packets that create state,
// connection tracking keyed by the canonical 5-tuple, the TCP state machine of
// `firewall::tcp::step` and the entry flags of `firewall::track::segment` (opened from
// the Reverse side, reply seen, assured; a RST before any reply ends the tracking),
// UDP / ICMP echo / other pseudo-states, per-state timeouts, related ICMP errors
// checked for their addresses and direction, the `unacknowledged` cap for connections
// not assured yet. Without TCP window tracking (the software
// checks sequence and acknowledgement numbers, RSTs against the peer's last ack and
// the sequence number an ICMP error quotes; this tier does not), and a full table
// refuses new flows (`table_full`) instead of evicting. docs/dataplane.md lists the
// differences.
#ifndef NFX_HVNF_FW_H
#define NFX_HVNF_FW_H

#include "hvnf_common.h"

#define ST_NONE 0
#define ST_SYN_SENT 1
#define ST_SYN_RECV 2
#define ST_ESTABLISHED 3
#define ST_FIN_WAIT 4
#define ST_CLOSE_WAIT 5
#define ST_LAST_ACK 6
#define ST_TIME_WAIT 7
#define ST_CLOSE 8
#define ST_NEW 9
#define ST_REPLIED 10

#define FW_SWAPPED 0x80
#define FW_REV_OPEN 0x40
#define FW_SEEN_REPLY 0x08
#define FW_ASSURED 0x04
#define FIN_ORIG 1
#define FIN_REPLY 2
#define FW_FINS (FIN_ORIG | FIN_REPLY)

#define SEG_SYN 0
#define SEG_SYNACK 1
#define SEG_FIN 2
#define SEG_ACK 3
#define SEG_RST 4
#define SEG_BARE 5

// Outcome of a segment: a new state and FIN bits (>= 0), ignore, or invalid.
#define STEP_IGNORE -1
#define STEP_INVALID -2
#define GO(s, f) ((int)((s) | ((f) << 8)))

static __always_inline int classify(__u8 flags)
{
	if (flags & TCP_RST)
		return SEG_RST;
	if (flags & TCP_SYN)
		return (flags & TCP_ACK) ? SEG_SYNACK : SEG_SYN;
	if (flags & TCP_FIN)
		return SEG_FIN;
	if (flags & TCP_ACK)
		return SEG_ACK;
	return SEG_BARE;
}

static __always_inline int tcp_step(__u32 st, __u32 fins, __u8 flags, int orig)
{
	int seg = classify(flags);
	__u32 me = orig ? FIN_ORIG : FIN_REPLY;
	if (seg == SEG_BARE)
		return STEP_INVALID;
	if (seg == SEG_RST)
		return st == ST_NONE ? STEP_INVALID : GO(ST_CLOSE, fins);
	switch (st) {
	case ST_NONE:
		return (seg == SEG_SYN && orig) ? GO(ST_SYN_SENT, fins) : STEP_INVALID;
	case ST_SYN_SENT:
		if (seg == SEG_SYN && orig)
			return GO(ST_SYN_SENT, fins);
		if ((seg == SEG_SYNACK || seg == SEG_SYN) && !orig)
			return GO(ST_SYN_RECV, fins);
		return STEP_INVALID;
	case ST_SYN_RECV:
		if (seg == SEG_ACK && orig)
			return GO(ST_ESTABLISHED, fins);
		if (seg == SEG_FIN)
			return orig ? GO(ST_FIN_WAIT, fins | me) : STEP_INVALID;
		return STEP_IGNORE; // SYN-ACK, SYN, the responder's ACK
	case ST_ESTABLISHED:
		if (seg == SEG_FIN)
			return GO(ST_FIN_WAIT, fins | me);
		if (seg == SEG_ACK)
			return GO(ST_ESTABLISHED, fins);
		return STEP_IGNORE;
	case ST_FIN_WAIT:
	case ST_CLOSE_WAIT:
		if (seg == SEG_SYN || seg == SEG_SYNACK)
			return STEP_IGNORE;
		if (seg == SEG_FIN) {
			__u32 f = fins | me;
			return f == FW_FINS ? GO(ST_LAST_ACK, f) : GO(st, f);
		}
		if (st == ST_FIN_WAIT)
			return (fins & me) ? GO(ST_FIN_WAIT, fins) : GO(ST_CLOSE_WAIT, fins);
		return GO(ST_CLOSE_WAIT, fins);
	case ST_LAST_ACK:
		if (seg == SEG_SYN || seg == SEG_SYNACK)
			return STEP_IGNORE;
		if (seg == SEG_ACK)
			return GO(ST_TIME_WAIT, fins);
		return GO(ST_LAST_ACK, fins); // FIN
	case ST_TIME_WAIT:
	case ST_CLOSE:
		if (seg == SEG_SYN && orig)
			return GO(ST_SYN_SENT, 0);
		if (seg == SEG_ACK || seg == SEG_FIN)
			return GO(st, fins);
		return STEP_INVALID;
	}
	return STEP_INVALID;
}

// A TCP connection not assured yet gets at most `unacknowledged`, as in the software
// (which also caps one with data outstanding or picked up mid-stream: window state this
// tier does not keep).
static __always_inline __u64 fw_timeout(struct hv_cfg *c, __u8 proto, __u8 family, __u32 st,
					__u32 flags)
{
	if (proto == IPPROTO_TCP) {
		__u64 t = c->fw_timeouts[st > 8 ? 8 : st];
		return (flags & FW_ASSURED) || t < c->fw_unack ? t : c->fw_unack;
	}
	if (proto == IPPROTO_UDP)
		return c->fw_timeouts[st == ST_NEW ? 9 : 10];
	if (proto == icmp_proto(family))
		return c->fw_timeouts[11];
	return c->fw_timeouts[12];
}

// Host-order comparison of (address, port), as the software's canonical order.
static __always_inline int endpoint_gt(struct hv_key *k)
{
	for (int w = 0; w < 4; w++) {
		__u32 a = bpf_ntohl(k->src[w]), b = bpf_ntohl(k->dst[w]);
		if (a != b)
			return a > b;
	}
	return bpf_ntohs(k->sport) > bpf_ntohs(k->dport);
}

// The key both directions share (lower endpoint first); returns whether it swapped.
static __always_inline int canonical(struct hv_key *out, struct hv_key *k)
{
	int swap = endpoint_gt(k);
	__builtin_memset(out, 0, sizeof(*out));
	out->proto = k->proto;
	out->family = k->family;
	if (!swap) {
		addr_copy(out->src, k->src);
		addr_copy(out->dst, k->dst);
		out->sport = k->sport;
		out->dport = k->dport;
	} else {
		addr_copy(out->src, k->dst);
		addr_copy(out->dst, k->src);
		out->sport = k->dport;
		out->dport = k->sport;
	}
	return swap;
}

struct acl_scan {
	struct hv_key k;
	__u32 base;
	int verdict; // -1: no rule matched
};

static long acl_rule(__u32 i, struct acl_scan *a)
{
	__u32 idx = a->base + i;
	struct hv_rule *r = bpf_map_lookup_elem(&fw_rules, &idx);
	if (!r)
		return 1;
	if (!rule_matches(r, &a->k))
		return 0;
	a->verdict = r->allow;
	return 1;
}

// First match wins, else the default.
static __always_inline int acl_allows(struct hv_cfg *c, struct hv_key *k)
{
	struct acl_scan a;
	key_copy(&a.k, k);
	a.base = c->fw_rule_base;
	a.verdict = -1;
	bpf_loop(c->fw_nrules, acl_rule, &a, 0);
	return a.verdict < 0 ? c->fw_default_allow : a.verdict;
}

// ICMP other than echo: errors about a tracked flow are related and pass; the rest is
// stateless, filtered by the ACL when it may create state.
static __always_inline int fw_icmp_other(struct meta *m, struct hv_cfg *c)
{
	if (icmp_is_error(m->key.family, m->icmp_type) && m->has_inner) {
		int swapped = canonical(&m->tk, &m->inner);
		struct fw_val *v = bpf_map_lookup_elem(&fw_ct, &m->tk);
		if (v && v->expires_ns > m->now) {
			// As the software: the error travels back towards the quoted packet's
			// sender, against the direction that packet went.
			__u32 flags = (READ_ONCE_U32(v->sf) >> 8) & 0xff;
			int quoted_from_orig = swapped == ((flags & FW_SWAPPED) != 0);
			int opener_forward = !(flags & FW_REV_OPEN);
			int quoted_went_forward = opener_forward == quoted_from_orig;
			int goes_back = (m->dir == DIR_FWD) != quoted_went_forward;
			return goes_back && addr_eq(m->key.dst, m->inner.src) ? 0 : R_INVALID_STATE + 1;
		}
	}
	if (m->dir == DIR_REV && !c->fw_reverse_acl)
		return R_INVALID_STATE + 1;
	return acl_allows(c, &m->key) ? 0 : R_ACL_DENY + 1;
}

// A packet of a tracked flow: the state moves with a compare-and-swap, so that two
// CPUs never lose each other's transition.
static __always_inline int fw_update(struct meta *m, struct hv_cfg *c, struct fw_val *v, int swapped)
{
	__u8 proto = m->key.proto;
	for (int t = 0; t < 4; t++) {
		__u32 sf = READ_ONCE_U32(v->sf);
		__u32 st = sf & 0xff, flags = (sf >> 8) & 0xff;
		int orig = swapped == ((flags & FW_SWAPPED) != 0);
		__u32 ns, nflags = flags;
		int refresh = 1;
		if (proto == IPPROTO_TCP) {
			if (st > ST_CLOSE)
				return R_INVALID_STATE + 1;
			int r = tcp_step(st, flags & FW_FINS, m->tcp_flags, orig);
			if (r == STEP_IGNORE)
				return 0;
			if (r == STEP_INVALID)
				return R_INVALID_STATE + 1;
			ns = r & 0xff;
			int rst = m->tcp_flags & TCP_RST;
			// In SYN_SENT the responder's RST must acknowledge the SYN (its ack
			// number is the software's to check).
			if (rst && st == ST_SYN_SENT && !orig && !(m->tcp_flags & TCP_ACK))
				return R_INVALID_STATE + 1;
			if (rst && !(flags & FW_SEEN_REPLY)) {
				// Nothing was established: the tracking ends.
				if (bpf_map_delete_elem(&fw_ct, &m->tk) == 0)
					occupancy_add(0, -1);
				return 0;
			}
			nflags = (flags & ~FW_FINS) | ((r >> 8) & FW_FINS);
			if ((st == ST_TIME_WAIT || st == ST_CLOSE) && ns == ST_SYN_SENT)
				nflags &= ~(FW_ASSURED | FW_SEEN_REPLY); // a new connection
			else if (!orig)
				nflags |= FW_SEEN_REPLY;
			if (ns == ST_ESTABLISHED && (st == ST_SYN_RECV || st == ST_ESTABLISHED) &&
			    (nflags & FW_SEEN_REPLY))
				nflags |= FW_ASSURED;
			// A retransmitted SYN does not keep a half-open connection alive.
			refresh = !(st == ST_SYN_SENT && ns == ST_SYN_SENT && orig);
		} else {
			ns = orig ? st : ST_REPLIED;
			if (!orig)
				nflags |= FW_SEEN_REPLY | (is_icmp(&m->key) ? 0 : FW_ASSURED);
		}
		__u32 nsf = ns | (nflags << 8);
		if (nsf == sf || __sync_val_compare_and_swap(&v->sf, sf, nsf) == sf) {
			if (refresh)
				v->expires_ns = m->now + fw_timeout(c, proto, m->key.family, ns, nflags);
			return 0;
		}
	}
	return 0;
}

static __always_inline int fw_create(struct meta *m, struct hv_cfg *c, int swapped)
{
	struct hv_key *k = &m->key;
	if (m->dir == DIR_REV && !c->fw_reverse_acl)
		return R_INVALID_STATE + 1;
	__u32 st = ST_NEW;
	if (k->proto == IPPROTO_TCP) {
		__u8 f = m->tcp_flags;
		if (classify(f) == SEG_SYN)
			st = ST_SYN_SENT;
		else if (c->fw_loose && classify(f) == SEG_ACK)
			st = ST_ESTABLISHED;
		else
			return R_INVALID_STATE + 1;
	} else if (is_icmp(k) && !icmp_is_echo_request(k->family, m->icmp_type)) {
		return R_INVALID_STATE + 1;
	}
	if (!acl_allows(c, k))
		return R_ACL_DENY + 1;
	struct fw_val v = {
		.expires_ns = m->now + fw_timeout(c, k->proto, k->family, st, 0),
		.sf = st | (((swapped ? FW_SWAPPED : 0) | (m->dir == DIR_REV ? FW_REV_OPEN : 0)) << 8),
	};
	if (!occupancy_reserve(0, 1, c->limits[0]))
		return R_TABLE_FULL + 1;
	long rc = bpf_map_update_elem(&fw_ct, &m->tk, &v, BPF_NOEXIST);
	if (rc) {
		occupancy_add(0, -1);
		if (rc != -EEXIST)
			return R_TABLE_FULL + 1;
		// Another CPU created it meanwhile: this packet updates it.
		struct fw_val *cur = bpf_map_lookup_elem(&fw_ct, &m->tk);
		return cur ? fw_update(m, c, cur, swapped) : 0;
	}
	struct hv_gauges *g = get_gauges();
	if (g)
		g->fw_created++;
	return 0;
}

// The firewall node: 0 to pass, a drop reason + 1.
__attribute__((noinline)) int hv_fw(CTX *ctx)
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
	if (is_icmp(&m->key) && !icmp_is_echo(m->key.family, m->icmp_type))
		return fw_icmp_other(m, c);
	int swapped = canonical(&m->tk, &m->key);
	struct fw_val *v = bpf_map_lookup_elem(&fw_ct, &m->tk);
	if (v) {
		if (v->expires_ns > m->now)
			return fw_update(m, c, v, swapped);
		if (bpf_map_delete_elem(&fw_ct, &m->tk) == 0) {
			occupancy_add(0, -1);
			struct hv_gauges *g = get_gauges();
			if (g)
				g->fw_expired++;
		}
	}
	return fw_create(m, c, swapped);
}

#endif
