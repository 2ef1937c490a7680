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
 *   ADAPTIVE  per frame, the member whose egress queue is shortest now, read in
 *             whole frames (`queue_quantum_scaled`); among equally short ones, the
 *             first after the member the destination took last (kept in `rr`), so
 *             that at equal queues a destination's frames alternate over its
 *             members (a random tie-break splits each flow unevenly, and the
 *             splits meet downstream, where this switch cannot see). The queue is the backlog of a port draining at its emulated
 *             rate: the ECN marker's virtual queue (`vq` is the switch's marker
 *             map, each port at its vq_slot) plus what its HTB bucket has lent
 *             (burst - tokens), drained to now.
 *   ADAPTIVE_FLOWLET  as FLOWLET, a new flowlet taking ADAPTIVE's member (ties
 *             from a random member).
 *   VALIANT   (dragonfly) at the source switch (the frame came in from a host port,
 *             `host_ifs`), toward another group: through a random intermediate
 *             group I, tagged I + 1 in the reserved bits of BTH byte 4 (TAG_*);
 *             elsewhere a tagged frame follows `to_group[I]` until group I, where
 *             the tag is cleared, then `dests`. Members drawn at random per frame.
 *   UGAL      as VALIANT, but the source switch takes the intermediate group only
 *             when its shortest queue times the Valiant path's hops is below the
 *             minimal next hops' shortest queue times the minimal path's (UGAL-L).
 * topologies/valiant.py says why this neither loops nor black-holes.
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
#define MAX_GROUPS 64   /* table sizes; topologies/valiant.py: at most 62 groups */
#define TAG_OFFSET 46   /* topologies/valiant.py: BTH byte 4 (FECN, BECN, resv6) */
#define TAG_MASK 0x3f
#define TAG_UNDECIDED 0 /* as hosts send it */
#define TAG_MINIMAL 0x3f /* minimal from here on; 1..62: through group tag - 1 */

enum mode { MODE_SPRAY = 1, MODE_SPRAY_RR = 2, MODE_FLOWLET = 3, MODE_ADAPTIVE = 4,
	    MODE_ADAPTIVE_FLOWLET = 5, MODE_VALIANT = 6, MODE_UGAL = 7 };

struct cfg {
	__u32 mode;
	__u32 pad;
	__u64 flowlet_gap_ns;   /* emulated ns: the real gap times S */
	__u32 group;            /* VALIANT, UGAL: this switch's group */
	__u32 groups;           /* and the fabric's number of groups */
	__u64 queue_quantum_scaled; /* ADAPTIVE, UGAL: queues are compared in these units */
};

struct port {
	__u32 ifindex;
	__u32 vq_slot;          /* its entry in the switch's marker `vq` map (adaptive) */
	__u64 rate_emu_bps;     /* the marker's drain rate (adaptive) */
	__u64 max_delta_ns;     /* idle time beyond which its queue is surely empty */
	__u64 burst_scaled;     /* its HTB bucket's depth (the marker's) */
	__u8 mac[ETH_ALEN];     /* this port's address: the new source */
	__u8 peer_mac[ETH_ALEN];/* the next hop's: the new destination */
	__u32 pad2;
};

struct dest {
	__u32 n;                /* members of the equal-cost set, 1..MAX_NH */
	__u32 rr;               /* SPRAY_RR's turn; ADAPTIVE: its last member + 1 */
	__u32 slot[MAX_NH];     /* each member's index into `ports` */
	__u32 group;            /* VALIANT, UGAL: the destination's group */
	__u32 hops;             /* UGAL: links to it on the minimal routes */
	__u8 via_hops[MAX_GROUPS]; /* UGAL: links to it through each group */
};

struct nh_set {
	__u32 n;                /* next hops toward a group, 0..MAX_NH */
	__u32 slot[MAX_NH];
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
	__u64 valiant;          /* VALIANT, UGAL: frames this source switch tagged */
	__u64 minimal;          /* and frames it sent minimally to another group */
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

/* VALIANT, UGAL: next hops toward each group (n = 0 for none, own group). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_GROUPS);
	__type(key, __u32);
	__type(value, struct nh_set);
} to_group SEC(".maps");

/* VALIANT, UGAL: ifindexes of the ports to hosts (a frame from one is at its source). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} host_ifs SEC(".maps");

/* The switch's ECN marker `vq` map itself (marker.c: one object per switch, each
 * port at its vq_slot), for ADAPTIVE and UGAL: the loader (emu/lbrouter.py) has
 * libbpf reuse the marker's map, so no map of maps is needed (Debian 12's 6.1
 * refuses one whose entries hold a bpf_spin_lock). Without markers, an empty one. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct vq_state);
} vq SEC(".maps");

/* Bytes (scaled) a port at its emulated rate would hold now: the marker's queue plus
 * what the HTB bucket sent ahead of that rate (burst - tokens), drained since. The
 * bucket lets a port send a burst at once, so its virtual queue alone reads 0 on a
 * port that has just sent one and on an idle one alike. */
static __always_inline __u64 queue_now(__u32 slot, __u64 now)
{
	struct port *p = bpf_map_lookup_elem(&ports, &slot);
	if (!p)
		return 0;
	__u32 vq_slot = p->vq_slot;  /* NO_VQ_SLOT without a marker: no entry */
	struct vq_state *s = bpf_map_lookup_elem(&vq, &vq_slot);
	if (!s)
		return 0;
	/* Read without the lock: an estimate, as a switch's queue-depth sampling is. */
	__u64 q = s->vq_scaled, t = s->t_last_ns, tokens = s->tokens_scaled;
	__u64 delta = now > t ? now - t : 0;
	if (delta > p->max_delta_ns)
		return 0;
	__u64 backlog = q + (tokens < p->burst_scaled ? p->burst_scaled - tokens : 0);
	__u64 drained = delta * p->rate_emu_bps;
	return backlog > drained ? backlog - drained : 0;
}

/* The member of `slot[0..n)` with the shortest queue in units of `quantum` (ties: the
 * first from `start`, < n); its queue in *q_out. */
static __always_inline __u32 least_queue(const __u32 *slot, __u32 n, __u32 start, __u64 quantum,
					 __u64 now, __u64 *q_out)
{
	__u32 best = start;
	__u64 best_level = ~0ULL, best_q = 0;
	if (quantum == 0)
		quantum = 1;
	for (__u32 i = 0; i < MAX_NH; i++) {
		if (i >= n)
			break;
		__u32 m = start + i;
		if (m >= n)
			m -= n;
		__u64 q = queue_now(slot[m & (MAX_NH - 1)], now);
		if (q / quantum < best_level) {
			best_level = q / quantum;
			best_q = q;
			best = m;
		}
	}
	*q_out = best_q;
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
	__u64 q;
	__u32 rnd = bpf_get_prandom_u32() % n;
	fresh.member = c->mode == MODE_ADAPTIVE_FLOWLET
		? least_queue(d->slot, n, rnd, c->queue_quantum_scaled, now, &q) : rnd;
	bpf_map_update_elem(&flowlets, &k, &fresh, BPF_ANY);
	st->flowlets++;
	return fresh.member;
}

/* A random member of `slot[0..n)`, 0 < n <= MAX_NH (the mask only convinces the verifier). */
static __always_inline __u32 any_member(const __u32 *slot, __u32 n)
{
	__u32 m = bpf_get_prandom_u32() % n;
	asm volatile("" : "+r"(m));  /* keep the mask: clang knows m < n <= MAX_NH, the verifier not */
	return slot[m & (MAX_NH - 1)];
}

/* VALIANT, UGAL: the port slot for a frame from `saddr` to `d` whose tag is `tag`,
 * and in *tag_out the tag it leaves with (topologies/valiant.py: outcomes, next_hops).
 * Its UDP checksum is 0: nothing covers BTH byte 4 but the ICRC, which masks it. */
static __always_inline __u32 group_slot(struct __sk_buff *skb, struct cfg *c, struct stats *st,
					struct dest *d, __u32 saddr, __u32 tag, __u64 now,
					__u32 *tag_out)
{
	__u32 n = d->n, ifx = skb->ingress_ifindex;
	__u32 own = c->group, dg = d->group, g = c->groups;
	int from_host = bpf_map_lookup_elem(&host_ifs, &ifx) != 0, decide = 0;
	*tag_out = TAG_MINIMAL;
	if (from_host) {
		decide = own != dg && g >= 3 && g <= MAX_GROUPS - 2;
	} else if (tag == TAG_UNDECIDED) {
		/* ugal: minimal so far; decide again while in the source group */
		if (c->mode == MODE_UGAL && own != dg && g >= 3 && g <= MAX_GROUPS - 2) {
			struct dest *s = bpf_map_lookup_elem(&dests, &saddr);
			decide = s && s->group == own;
		}
	} else if (tag != TAG_MINIMAL) {
		__u32 grp = tag - 1;
		struct nh_set *v = grp != own && dg != own ? bpf_map_lookup_elem(&to_group, &grp) : 0;
		if (v && v->n && v->n <= MAX_NH) {
			*tag_out = tag;
			return any_member(v->slot, v->n);
		}
		/* in group I or the destination's, or I unreachable: minimal from here */
	}
	if (!decide)
		return any_member(d->slot, n);
	/* uniform over the groups but own (the source's) and dg (topologies/valiant.py) */
	__u32 via = bpf_get_prandom_u32() % (g - 2);
	__u32 lo = own < dg ? own : dg, hi = own < dg ? dg : own;
	if (via >= lo)
		via++;
	if (via >= hi)
		via++;
	/* a frame sent minimally by its source switch under ugal: the next switch decides */
	__u32 minimal_tag = from_host && c->mode == MODE_UGAL ? TAG_UNDECIDED : TAG_MINIMAL;
	struct nh_set *v = bpf_map_lookup_elem(&to_group, &via);
	if (!v || v->n == 0 || v->n > MAX_NH) {
		*tag_out = minimal_tag;
		st->minimal++;
		return any_member(d->slot, n);
	}
	__u32 vm, mm = 0;
	int valiant = 1;
	if (c->mode == MODE_UGAL) {
		__u64 q_min, q_val;
		mm = least_queue(d->slot, n, bpf_get_prandom_u32() % n, c->queue_quantum_scaled,
				 now, &q_min);
		vm = least_queue(v->slot, v->n, bpf_get_prandom_u32() % v->n,
				 c->queue_quantum_scaled, now, &q_val);
		/* in whole frames, as least_queue compares them (topologies/valiant.py) */
		__u64 quantum = c->queue_quantum_scaled ? c->queue_quantum_scaled : 1;
		valiant = q_val / quantum * d->via_hops[via & (MAX_GROUPS - 1)] <
			  q_min / quantum * d->hops;
	} else {
		vm = bpf_get_prandom_u32() % v->n;
	}
	if (!valiant) {
		*tag_out = minimal_tag;
		st->minimal++;
		return d->slot[mm & (MAX_NH - 1)];
	}
	*tag_out = via + 1;
	st->valiant++;
	return v->slot[vm & (MAX_NH - 1)];
}

SEC("tc")
int fabricemu_route(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct cfg *c = bpf_map_lookup_elem(&cfg, &zero);
	struct stats *st = bpf_map_lookup_elem(&stats, &zero);
	if (!c || !st)
		return TC_ACT_OK;
	bpf_skb_pull_data(skb, TAG_OFFSET + 1);
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
	__u32 member = 0, slot;
	int byte4 = -1, old4 = -1;  /* VALIANT, UGAL: BTH byte 4, with the new tag and before */
	__u64 q;
	if ((c->mode == MODE_VALIANT || c->mode == MODE_UGAL) && udp->check) {
		/* a UDP checksum covers BTH byte 4: no tag, minimal */
		slot = any_member(d->slot, n);
	} else if (c->mode == MODE_VALIANT || c->mode == MODE_UGAL) {
		__u8 *b4 = data + TAG_OFFSET;
		if ((void *)(b4 + 1) > end) {
			st->passed++;
			return TC_ACT_OK;  /* shorter than a BTH: not a RoCE frame after all */
		}
		__u32 tag;
		old4 = *b4;
		slot = group_slot(skb, c, st, d, ip->saddr, old4 & TAG_MASK, now, &tag);
		byte4 = (old4 & ~TAG_MASK) | tag;
	} else {
		if (c->mode == MODE_SPRAY)
			member = bpf_get_prandom_u32() % n;
		else if (c->mode == MODE_SPRAY_RR)
			member = d->rr++ % n;  /* unlocked: two CPUs may rarely take one turn twice */
		else if (c->mode == MODE_FLOWLET || c->mode == MODE_ADAPTIVE_FLOWLET)
			/* a flowlet table only where there is a choice */
			member = n > 1 ? flowlet_member(c, st, ip, udp, d, n, now) : 0;
		else if (c->mode == MODE_ADAPTIVE) {
			/* ties from the member after the destination's last (unlocked, as SPRAY_RR's) */
			member = least_queue(d->slot, n, d->rr % n, c->queue_quantum_scaled, now, &q);
			d->rr = member + 1;
		}
		else
			return TC_ACT_OK;  /* not configured yet */
		/* member < n <= MAX_NH (a power of two): the mask only convinces the verifier */
		slot = d->slot[member & (MAX_NH - 1)];
	}
	struct port *p = bpf_map_lookup_elem(&ports, &slot);
	if (!p || !p->ifindex) {
		st->passed++;
		return TC_ACT_OK;
	}
	if (byte4 >= 0) {
		__u32 out = p->ifindex;
		if (bpf_map_lookup_elem(&host_ifs, &out))
			byte4 &= ~TAG_MASK;  /* delivered: hosts see no tag */
	}
	/* Rewritten in place: bpf_skb_pull_data made these bytes writable and no helper
	 * since has moved them; three store helpers and a checksum helper cost 12-25 %
	 * more per run (kernel-timed, fattree,4 permutation). */
	__builtin_memcpy(eth->h_dest, p->peer_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p->mac, ETH_ALEN);
	/* TTL - 1 and RFC 1624's update of the checksum over the word holding TTL, protocol */
	__u16 old_w = ((__u16)ip->ttl << 8) | ip->protocol;
	__u16 new_w = old_w - 0x100;
	__u32 sum = (__u16)~bpf_ntohs(ip->check) + (__u16)~old_w + new_w;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->ttl--;
	ip->check = bpf_htons((__u16)~sum);
	if (byte4 >= 0 && byte4 != old4) {
		__u8 *b4 = data + TAG_OFFSET;
		if ((void *)(b4 + 1) > end)
			return TC_ACT_SHOT;  /* for the verifier: checked where old4 was read */
		*b4 = (__u8)byte4;
	}
	st->routed++;
	if (slot < MAX_PORTS)
		st->per_port[slot]++;
	return bpf_redirect(p->ifindex, 0);
}

char _license[] SEC("license") = "GPL";
