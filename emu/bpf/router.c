// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu load-balancing router: a switch's forwarding decision for RoCEv2 frames
 * under the routing modes beyond ECMP (spray, flowlet, adaptive).
 *
 * Attached to the clsact ingress hook of every port of one switch (one object per
 * switch: its maps are the switch's tables). For an IPv4 RoCEv2 frame (UDP 4791,
 * no IP options, TTL > 1) whose destination is in `dests`, it picks one member of
 * the destination's equal-cost set (`ports` slots, filled from the fabric's routes
 * and address plan by emu/lbrouter.py), rewrites the Ethernet addresses to that
 * link's, decrements the TTL (IP checksum updated) and bpf_redirect()s the frame to
 * the port's egress, where the ECN marker and the shaper see it as any forwarded
 * frame. Everything else (other protocols, unknown destinations, TTL expiry)
 * continues to the kernel's FIB.
 *
 * The choice, per mode (topologies/loadbalance.py says the same in Python):
 *   SPRAY     a uniformly random member per frame (oblivious);
 *   SPRAY_RR  the destination's members in turn (one counter per destination);
 *   FLOWLET   a flow (5-tuple) keeps its member while its frames come closer than
 *             `flowlet_gap_ns`; after a longer gap it draws a random member;
 *   ADAPTIVE  per frame, the member whose egress queue is shortest now: the ECN
 *             marker's virtual queue of that port (`port_vq` holds each port's
 *             marker map), drained to now as the marker drains it; ties go to the
 *             first from a random starting member.
 *   ADAPTIVE_FLOWLET  as FLOWLET, a new flowlet taking ADAPTIVE's member.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "vq_state.h"

#ifndef ROCE_UDP_PORT
#error "ROCE_UDP_PORT comes from core/frame.py: build through emu.cbuild"
#endif

#define MAX_PORTS 64   /* emu/lbrouter.py: MAX_PORTS */
#define MAX_NH 16      /* emu/lbrouter.py: MAX_NEXT_HOPS */
#define FLOWLETS 16384  /* per switch (preallocated); beyond, the least recent flow starts anew */

enum mode { MODE_SPRAY = 1, MODE_SPRAY_RR = 2, MODE_FLOWLET = 3, MODE_ADAPTIVE = 4,
	    MODE_ADAPTIVE_FLOWLET = 5 };

struct cfg {
	__u32 mode;
	__u32 pad;
	__u64 flowlet_gap_ns;   /* emulated ns: the real gap times S */
};

struct port {
	__u32 ifindex;
	__u32 pad;
	__u64 rate_emu_bps;     /* the marker's drain rate (adaptive) */
	__u64 max_delta_ns;     /* idle time beyond which its queue is surely empty */
	__u8 mac[ETH_ALEN];     /* this port's address: the new source */
	__u8 peer_mac[ETH_ALEN];/* the next hop's: the new destination */
	__u32 pad2;
};

struct dest {
	__u32 n;                /* members of the equal-cost set, 1..MAX_NH */
	__u32 rr;               /* SPRAY_RR's turn */
	__u32 slot[MAX_NH];     /* each member's index into `ports` */
};

struct flow_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u32 proto;
};

struct flowlet {
	__u64 last_ns;
	__u32 member;
	__u32 pad;
};

struct stats {
	__u64 routed;           /* frames this program forwarded */
	__u64 passed;           /* frames left to the kernel's FIB */
	__u64 flowlets;         /* FLOWLET: new flowlets (a path drawn) */
	__u64 per_port[MAX_PORTS]; /* frames sent to each port slot */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cfg);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);  /* every host address of topologies.addressing */
	__uint(map_flags, BPF_F_NO_PREALLOC);  /* memory for the fabric's hosts only */
	__type(key, __u32);     /* destination IPv4 address, network order */
	__type(value, struct dest);
} dests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FLOWLETS);
	__type(key, struct flow_key);
	__type(value, struct flowlet);
} flowlets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stats);
} stats SEC(".maps");

/* Each port slot's ECN marker `vq` map (marker.c), for ADAPTIVE. Its entries'
 * layout (struct vq_state) comes from the loader (emu/lbrouter.py), which gives
 * libbpf a marker's map as the template: clang emits no BTF for a struct reached
 * only through the pointers of an inner map's definition. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} port_vq SEC(".maps");

/* Bytes (scaled) queued at port `slot` now: the marker's last state drained since. */
static __always_inline __u64 queue_now(__u32 slot, __u64 now)
{
	__u32 zero = 0;
	struct port *p = bpf_map_lookup_elem(&ports, &slot);
	void *inner = bpf_map_lookup_elem(&port_vq, &slot);
	if (!p || !inner)
		return 0;
	struct vq_state *s = bpf_map_lookup_elem(inner, &zero);
	if (!s)
		return 0;
	/* Read without the lock: an estimate, as a switch's queue-depth sampling is. */
	__u64 q = s->vq_scaled, t = s->t_last_ns, tokens = s->tokens_scaled;
	__u64 delta = now > t ? now - t : 0;
	if (delta > p->max_delta_ns)
		return 0;
	__u64 avail = tokens + delta * p->rate_emu_bps;
	return q > avail ? q - avail : 0;
}

static __always_inline __u32 least_queue(struct dest *d, __u32 n, __u64 now)
{
	__u32 start = bpf_get_prandom_u32() % n;
	__u32 best = start;
	__u64 best_q = ~0ULL;
	for (__u32 i = 0; i < MAX_NH; i++) {
		if (i >= n)
			break;
		__u32 m = start + i;
		if (m >= n)
			m -= n;
		__u64 q = queue_now(d->slot[m & (MAX_NH - 1)], now);
		if (q < best_q) {
			best_q = q;
			best = m;
		}
	}
	return best;
}

static __always_inline __u32 flowlet_member(struct cfg *c, struct stats *st, struct iphdr *ip,
					    struct udphdr *udp, struct dest *d, __u32 n, __u64 now)
{
	struct flow_key k = {.saddr = ip->saddr, .daddr = ip->daddr, .sport = udp->source,
			     .dport = udp->dest, .proto = ip->protocol};
	struct flowlet *f = bpf_map_lookup_elem(&flowlets, &k);
	if (f && now - f->last_ns <= c->flowlet_gap_ns && f->member < n) {
		f->last_ns = now;
		return f->member;
	}
	struct flowlet fresh = {.last_ns = now};
	fresh.member = c->mode == MODE_ADAPTIVE_FLOWLET ? least_queue(d, n, now)
						       : bpf_get_prandom_u32() % n;
	bpf_map_update_elem(&flowlets, &k, &fresh, BPF_ANY);
	st->flowlets++;
	return fresh.member;
}

SEC("tc")
int fabricemu_route(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct cfg *c = bpf_map_lookup_elem(&cfg, &zero);
	struct stats *st = bpf_map_lookup_elem(&stats, &zero);
	if (!c || !st)
		return TC_ACT_OK;
	bpf_skb_pull_data(skb, sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr));
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 ||
	    ip->protocol != IPPROTO_UDP || udp->dest != bpf_htons(ROCE_UDP_PORT) || ip->ttl <= 1)
		return TC_ACT_OK;
	__u32 daddr = ip->daddr;
	struct dest *d = bpf_map_lookup_elem(&dests, &daddr);
	if (!d || d->n == 0 || d->n > MAX_NH) {
		st->passed++;
		return TC_ACT_OK;
	}
	__u32 n = d->n;
	__u64 now = bpf_ktime_get_ns();
	__u32 member = 0;
	if (c->mode == MODE_SPRAY)
		member = bpf_get_prandom_u32() % n;
	else if (c->mode == MODE_SPRAY_RR)
		member = d->rr++ % n;  /* unlocked: two CPUs may rarely take one turn twice */
	else if (c->mode == MODE_FLOWLET || c->mode == MODE_ADAPTIVE_FLOWLET)
		/* a flowlet table only where there is a choice */
		member = n > 1 ? flowlet_member(c, st, ip, udp, d, n, now) : 0;
	else if (c->mode == MODE_ADAPTIVE)
		member = least_queue(d, n, now);
	else
		return TC_ACT_OK;  /* not configured yet */
	/* member < n <= MAX_NH (a power of two): the mask only convinces the verifier */
	__u32 slot = d->slot[member & (MAX_NH - 1)];
	struct port *p = bpf_map_lookup_elem(&ports, &slot);
	if (!p || !p->ifindex) {
		st->passed++;
		return TC_ACT_OK;
	}

	/* TTL - 1, with the checksum delta over the 16-bit word holding TTL and protocol */
	__u8 ttl = ip->ttl - 1;
	__u16 old_w = bpf_htons(((__u16)ip->ttl << 8) | ip->protocol);
	__u16 new_w = bpf_htons(((__u16)ttl << 8) | ip->protocol);
	__u32 ttl_off = sizeof(struct ethhdr) + __builtin_offsetof(struct iphdr, ttl);
	__u32 csum_off = sizeof(struct ethhdr) + __builtin_offsetof(struct iphdr, check);
	__u8 macs[2 * ETH_ALEN];
	__builtin_memcpy(macs, p->peer_mac, ETH_ALEN);
	__builtin_memcpy(macs + ETH_ALEN, p->mac, ETH_ALEN);
	if (bpf_skb_store_bytes(skb, ttl_off, &ttl, 1, 0) < 0 ||
	    bpf_l3_csum_replace(skb, csum_off, old_w, new_w, 2) < 0 ||
	    bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0) < 0)
		return TC_ACT_SHOT;  /* half rewritten: the frame cannot go on */
	st->routed++;
	if (slot < MAX_PORTS)
		st->per_port[slot]++;
	return bpf_redirect(p->ifindex, 0);
}

char _license[] SEC("license") = "GPL";
