// SPDX-License-Identifier: GPL-2.0
// nfx table tier: VNFs that run entirely in the kernel (HYPER's hardware VNFs).
//
// One program per hook (tcx ingress, tcx egress) runs an ordered chain of up to three
// functions — firewall, NAT, elephant detection — over bounded maps, which are the
// table's memory: each map's size is its function's configured entries. The chain,
// the rules and every parameter live in maps, so configuring is a map update, not a
// reload. Per port (interface + hook) a row of `ports` says which direction frames
// travel and whether the table tier forwards them itself (redirect to the other port,
// TTL − 1, MAC addresses of the next hop) or hands them on after the chain: to a
// software worker's packet socket (the table tier runs first), or out of the interface
// (the software worker ran first and sends through this hook).
//
// Every frame is counted per node, and every drop by its reason, as the software graph
// counts them; frames that are not the chain's (ARP, neighbour discovery, other
// EtherTypes) go to the kernel untouched and are counted as such.
//
// Several chains (one per service) may share a port, each attached as its own tcx
// program: a chain whose `svc_sel` row for the frame's direction is set takes only the
// frames that row matches (the service's traffic selector) and returns TC_ACT_UNSPEC
// (tcx: next program) for every other one, untouched and uncounted. A frame that does not
// parse (truncated, a bad header, a non-first fragment) is no service's: the first chain
// on the port drops it and counts its reason, as a lone chain does, so it never reaches
// the host's stack through a chain that could not check it.
#include "hvnf_common.h"
#include "hvnf_parse.h"
#include "hvnf_fw.h"
#include "hvnf_nat.h"
#include "hvnf_ele.h"

static __always_inline struct hv_counters *node(__u32 n)
{
	return bpf_map_lookup_elem(&counters, &n);
}

// Counts a drop against the node that decided it. At egress the frame is consumed
// (TC_ACT_STOLEN) rather than shot: a shot frame makes the sender's transmit fail with
// ENOBUFS, which a software worker sending through this hook would take for a full
// queue and retry; the drop is the table tier's to count, not the sender's.
static __always_inline int drop(struct hv_counters *cn, int reason1, __u32 hook)
{
	__u32 r = (reason1 - 1) & 31;
	if (cn && r < HV_NREASONS)
		cn->drops[r]++;
	return hook == HOOK_EGRESS ? TC_ACT_STOLEN : TC_ACT_SHOT;
}

static __always_inline int run_node(CTX *ctx, __u32 kind)
{
	if (kind == K_FW)
		return hv_fw(ctx);
	if (kind == K_NAT)
		return hv_nat(ctx);
	return hv_ele(ctx);
}

// The output node of a port that forwards: TTL (hop limit) − 1, next hop's MACs.
static __always_inline int output(CTX *ctx, struct meta *m, struct hv_port *p)
{
	if (m->ttl <= 1)
		return R_TTL_EXPIRED + 1;
	__u32 l3 = m->l3;
	if (m->key.family == 4) {
		__u16 old = bpf_htons(((__u16)m->ttl << 8) | m->key.proto);
		__u16 new = bpf_htons(((__u16)(m->ttl - 1) << 8) | m->key.proto);
		STORE(ctx, l3 + 8, &new, 2);
		L3CSUM(ctx, l3 + 10, old, new, 2);
	} else {
		__u8 hl = m->ttl - 1;
		STORE(ctx, l3 + 7, &hl, 1);
	}
	__u8 macs[12];
	__builtin_memcpy(macs, p->dst_mac, 6);
	__builtin_memcpy(macs + 6, p->src_mac, 6);
	STORE(ctx, 0, macs, 12);
	return 0;
}

static __always_inline int hv_main(CTX *ctx, __u32 ifindex, __u32 hook)
{
	struct hv_port_key pk = { .ifindex = ifindex, .hook = hook };
	struct hv_port *port = bpf_map_lookup_elem(&ports, &pk);
	if (!port)
		return TC_ACT_OK;
	__u32 z = 0;
	__u32 *sel = bpf_map_lookup_elem(&cfg_sel, &z);
	struct meta *m = get_meta();
	if (!sel || !m)
		return TC_ACT_OK;
	m->cfg_slot = *sel & 1;
	struct hv_cfg *c = get_cfg(m);
	if (!c)
		return TC_ACT_OK;
	__u32 dir = port->dir & 1;
	__builtin_memset(&m->key, 0, sizeof(m->key));
	m->now = c->clock_ns ? c->clock_ns : bpf_ktime_get_ns();
	m->len = ctx->len;
	m->gso_size = ctx->gso_size;
	m->dir = dir;
	m->tcp_flags = 0;
	m->icmp_type = 0;
	m->first_frag = 0;
	m->has_inner = 0;
	m->l3 = m->l4 = m->payload = m->ip_end = 0;

	int r = hv_parse(ctx);
	struct hv_rule *sel_row = bpf_map_lookup_elem(&svc_sel, &dir);
	if (sel_row && sel_row->allow && !r && !rule_matches(sel_row, &m->key))
		return TC_ACT_UNSPEC;
	struct hv_counters *cn = node(N_PARSE);
	if (cn) {
		cn->packets++;
		cn->bytes += ctx->len;
	}
	if (r == PARSE_KERNEL) {
		if (cn)
			cn->to_kernel++;
		return TC_ACT_OK;
	}
	if (r)
		return drop(cn, r, hook);
	for (int i = 0; i < HV_MAX_CHAIN; i++) {
		__u32 kind = c->chain[dir][i];
		if (kind == K_END || kind > K_ELE)
			break;
		cn = node(kind);
		if (cn) {
			cn->packets++;
			cn->bytes += ctx->len;
		}
		r = run_node(ctx, kind);
		if (r)
			return drop(cn, r, hook);
	}
	if (port->action != ACT_REDIRECT)
		return TC_ACT_OK;
	cn = node(N_OUT);
	if (cn) {
		cn->packets++;
		cn->bytes += ctx->len;
	}
	r = output(ctx, m, port);
	if (r)
		return drop(cn, r, hook);
	return bpf_redirect(port->out_ifindex, 0);
}

SEC("classifier")
int hvnf_ingress(struct __sk_buff *skb)
{
	return hv_main(skb, skb->ingress_ifindex, HOOK_INGRESS);
}

SEC("classifier")
int hvnf_egress(struct __sk_buff *skb)
{
	return hv_main(skb, skb->ifindex, HOOK_EGRESS);
}

char LICENSE[] SEC("license") = "GPL";
