// SPDX-License-Identifier: GPL-2.0
// nfx H-VNF: elephant-flow detection, with the software detector's semantics
// (crates/vnf/src/elephant): per directional flow, IP bytes on the wire (a GSO
// super-packet counts as the segments it becomes), a window restarted at the first
// packet after `window`; a flow turns elephant when its total bytes reach `min_bytes`
// and its window bytes the rate threshold, and raises exactly one event (ring buffer).
// Differences of the table: a full table leaves new flows untracked (counted) instead of
// evicting the least recently seen one; idle flows are freed by userspace sweeps.
#ifndef NFX_HVNF_ELE_H
#define NFX_HVNF_ELE_H

#include "hvnf_common.h"

// IP bytes and packets the frame stands for on the wire.
static __always_inline void wire_size(struct meta *m, __u64 *bytes, __u64 *segs)
{
	__u64 ip_bytes = m->ip_end - m->l3;
	__u64 gso = m->gso_size;
	if (!gso) {
		*bytes = ip_bytes;
		*segs = 1;
		return;
	}
	__u64 headers = m->payload - m->l3;
	__u64 payload = ip_bytes > headers ? ip_bytes - headers : 0;
	__u64 n = (payload + gso - 1) / gso;
	if (n == 0)
		n = 1;
	*bytes = payload + n * headers;
	*segs = n;
}

// The elephant node: never drops; 0.
__attribute__((noinline)) int hv_ele(CTX *ctx)
{
	// Global functions are verified on their own with `ctx` as a context pointer:
	// using it keeps the compiler from passing anything else.
	if (!ctx)
		return 0;
	struct meta *m = get_meta();
	if (!m)
		return 0;
	struct hv_cfg *c = get_cfg(m);
	struct hv_gauges *g = get_gauges();
	if (!c || !g)
		return 0;
	__u64 bytes, segs;
	wire_size(m, &bytes, &segs);
	g->ele_packets += segs;
	g->ele_bytes += bytes;
	__u64 now = m->now;
	struct ele_val *v = bpf_map_lookup_elem(&ele_flows, &m->key);
	if (!v) {
		struct ele_val nv = { .window_start_ns = now, .last_ns = now };
		if (!occupancy_reserve(2, 1, c->limits[2])) {
			g->ele_untracked++;
			return 0;
		}
		long rc = bpf_map_update_elem(&ele_flows, &m->key, &nv, BPF_NOEXIST);
		if (rc) {
			occupancy_add(2, -1);
			if (rc != -EEXIST) {
				g->ele_untracked++;
				return 0;
			}
		}
		v = bpf_map_lookup_elem(&ele_flows, &m->key);
		if (!v)
			return 0;
	} else if (now - v->window_start_ns >= c->ele_window_ns && now >= v->window_start_ns) {
		v->window_start_ns = now;
		v->window_bytes = 0;
	}
	__sync_fetch_and_add(&v->bytes, bytes);
	__sync_fetch_and_add(&v->packets, segs);
	__sync_fetch_and_add(&v->window_bytes, bytes);
	v->last_ns = now;
	if (v->elephant)
		return 0;
	if (v->bytes < c->ele_min_bytes || v->window_bytes < c->ele_min_window_bytes)
		return 0;
	if (__sync_val_compare_and_swap(&v->elephant, 0, 1) != 0)
		return 0;
	g->ele_elephants++;
	struct hv_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		g->events_lost++;
		return 0;
	}
	e->ts_ns = now;
	key_copy(&e->key, &m->key);
	e->bytes = v->bytes;
	e->packets = v->packets;
	e->window_bytes = v->window_bytes;
	e->window_start_ns = v->window_start_ns;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

#endif
