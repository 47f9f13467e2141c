// SPDX-License-Identifier: GPL-2.0
// nfx table tier: the established-flow fast path of a firewall/NAT chain.
//
// A tc (tcx) ingress program on each of the chain's two interfaces. For a frame whose flow
// the userspace chain has installed (map `flows`: arrival interface + 5-tuple -> slot)
// and armed (slot `ctl` has ACTIVE set), it applies the chain's verdict itself: rewrite
// the MAC addresses, the IPv4 addresses and ports (with incremental checksum updates,
// correct for GSO super-packets with partial checksums), decrement the TTL, count the
// frame in the slot, and redirect it to the output interface. Every other frame passes
// on to the kernel's protocol handlers, where the userspace port's ETH_P_IP packet
// socket receives it (after this program) and the kernel's own IP stack drops it.
//
// One decision per frame, here: a frame is either redirected or handed to userspace,
// never both, never neither. While a slot is pending (installed, not yet armed) each
// frame handed up is counted in `ctl`; userspace arms the slot with a compare-and-swap
// only when every frame counted so far has reached it and been sent, so no fast frame
// overtakes one still on its way to userspace. TCP SYN/FIN/RST disarm the slot and go
// up: connection state changes are always seen by the userspace firewall.
//
// "Reached userspace" is counted, not guessed from an empty socket: a frame handed up
// here is still travelling (through the rest of the receive path, into the packet
// socket's ring, whose slots another CPU may fill out of order) when userspace looks.
// Per registered port (`port_of`: ifindex -> index into `ports`), this program counts
// the IPv4 frames it hands up and marks them (NFX_MARK in skb->mark); the socket filter
// `nfx_port_count`, attached to the port's packet socket before it binds, counts the
// marked frames that arrive and every frame the socket is offered. Userspace arms only
// when arrived == handed up, and every frame the socket was offered has been received
// or counted as a socket drop.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ACTIVE (1ULL << 63)
#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04

struct fp_key {
	__u32 ifindex;
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct fp_slot {
	__u64 ctl;
	__u64 packets;
	__u64 bytes;
	__u64 last_ns;
	__u32 out_ifindex;
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 macs[12];
	__u8 pad[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct fp_key);
	__type(value, __u32);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fp_slot);
} slots SEC(".maps");

// Per-port delivery counters, read by userspace through a mapping.
struct port_count {
	__u64 handed_up;
	__u64 arrived;
	__u64 offered;
	__u64 pad;
};

#define MAX_PORTS 8
#define NFX_MARK (1U << 31)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} port_of SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct port_count);
} ports SEC(".maps");

static __always_inline struct port_count *port_count_of(__u32 ifindex)
{
	__u32 *idx = bpf_map_lookup_elem(&port_of, &ifindex);
	if (!idx)
		return 0;
	return bpf_map_lookup_elem(&ports, idx);
}

#define ETH_LEN 14
#define IP_CSUM_OFF (ETH_LEN + 10)
#define IP_TTL_OFF (ETH_LEN + 8)
#define IP_SADDR_OFF (ETH_LEN + 12)
#define IP_DADDR_OFF (ETH_LEN + 16)
#define L4_OFF (ETH_LEN + 20)
#define TCP_CSUM_OFF (L4_OFF + 16)
#define UDP_CSUM_OFF (L4_OFF + 6)

static __always_inline int decide(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (data + L4_OFF + 14 > end)
		return TC_ACT_OK;
	struct ethhdr *eth = data;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	struct iphdr *ip = data + ETH_LEN;
	if (ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)) || ip->ttl <= 1)
		return TC_ACT_OK;
	__u8 proto = ip->protocol;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return TC_ACT_OK;
	__u16 *ports = data + L4_OFF;
	__u8 flags = proto == IPPROTO_TCP ? *((__u8 *)data + L4_OFF + 13) : 0;
	struct fp_key key = {
		.ifindex = skb->ingress_ifindex,
		.saddr = ip->saddr,
		.daddr = ip->daddr,
		.sport = ports[0],
		.dport = ports[1],
		.proto = proto,
	};
	__u32 *idx = bpf_map_lookup_elem(&flows, &key);
	if (!idx)
		return TC_ACT_OK;
	struct fp_slot *s = bpf_map_lookup_elem(&slots, idx);
	if (!s)
		return TC_ACT_OK;
	if (flags & (TCP_SYN | TCP_FIN | TCP_RST)) {
		__sync_fetch_and_and(&s->ctl, ~ACTIVE);
		__sync_fetch_and_add(&s->ctl, 1);
		return TC_ACT_OK;
	}
	__u64 old = __sync_fetch_and_add(&s->ctl, 1);
	if (!(old & ACTIVE))
		return TC_ACT_OK;

	__u32 csum_off = proto == IPPROTO_TCP ? TCP_CSUM_OFF : UDP_CSUM_OFF;
	__u64 l4_flags = proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 osaddr = key.saddr, odaddr = key.daddr;
	__u16 osport = key.sport, odport = key.dport;
	__u16 old_ttl_word = *(__u16 *)((__u8 *)data + IP_TTL_OFF);
	__u32 nsaddr = s->saddr, ndaddr = s->daddr;
	__u16 nsport = s->sport, ndport = s->dport;
	__u32 out = s->out_ifindex;
	__u8 macs[12];
	__builtin_memcpy(macs, s->macs, 12);

	__sync_fetch_and_add(&s->packets, skb->gso_segs ? skb->gso_segs : 1);
	__sync_fetch_and_add(&s->bytes, skb->len);
	s->last_ns = bpf_ktime_get_ns();

	if (nsaddr != osaddr) {
		bpf_l4_csum_replace(skb, csum_off, osaddr, nsaddr, l4_flags | BPF_F_PSEUDO_HDR | 4);
		bpf_l3_csum_replace(skb, IP_CSUM_OFF, osaddr, nsaddr, 4);
		bpf_skb_store_bytes(skb, IP_SADDR_OFF, &nsaddr, 4, 0);
	}
	if (ndaddr != odaddr) {
		bpf_l4_csum_replace(skb, csum_off, odaddr, ndaddr, l4_flags | BPF_F_PSEUDO_HDR | 4);
		bpf_l3_csum_replace(skb, IP_CSUM_OFF, odaddr, ndaddr, 4);
		bpf_skb_store_bytes(skb, IP_DADDR_OFF, &ndaddr, 4, 0);
	}
	if (nsport != osport) {
		bpf_l4_csum_replace(skb, csum_off, osport, nsport, l4_flags | 2);
		bpf_skb_store_bytes(skb, L4_OFF, &nsport, 2, 0);
	}
	if (ndport != odport) {
		bpf_l4_csum_replace(skb, csum_off, odport, ndport, l4_flags | 2);
		bpf_skb_store_bytes(skb, L4_OFF + 2, &ndport, 2, 0);
	}
	// The TTL shares a 16-bit checksum word with the protocol field.
	__u16 new_ttl_word = old_ttl_word;
	((__u8 *)&new_ttl_word)[0] -= 1;
	bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_ttl_word, new_ttl_word, 2);
	bpf_skb_store_bytes(skb, IP_TTL_OFF, &new_ttl_word, 2, 0);
	bpf_skb_store_bytes(skb, 0, macs, 12, 0);
	return bpf_redirect(out, 0);
}

SEC("classifier")
int nfx_fast_path(struct __sk_buff *skb)
{
	// Counted before the flow's `ctl`, so that a frame userspace sees counted there is
	// already counted here.
	struct port_count *pc = 0;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		pc = port_count_of(skb->ingress_ifindex);
		if (pc) {
			__sync_fetch_and_add(&pc->handed_up, 1);
			skb->mark |= NFX_MARK;
		}
	}
	int verdict = decide(skb);
	if (pc && verdict != TC_ACT_OK) {
		__sync_fetch_and_add(&pc->handed_up, -1);
		skb->mark &= ~NFX_MARK;
	}
	return verdict;
}

// The packet socket's filter: counts, never filters.
SEC("socket")
int nfx_port_count(struct __sk_buff *skb)
{
	struct port_count *pc = port_count_of(skb->ifindex);
	if (pc) {
		__sync_fetch_and_add(&pc->offered, 1);
		if (skb->mark & NFX_MARK)
			__sync_fetch_and_add(&pc->arrived, 1);
	}
	return -1;
}

char LICENSE[] SEC("license") = "GPL";
