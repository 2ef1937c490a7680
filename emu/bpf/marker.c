// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu ECN marker: DCQCN/WRED marking on the instantaneous egress queue.
 *
 * Attached to a switch port's clsact egress hook, i.e. BEFORE the port's qdisc
 * (HTB at the emulated rate over a byte FIFO). The program cannot see the qdisc
 * backlog, so it keeps a virtual queue that mirrors HTB: a token bucket of `burst`
 * bytes refilled at the emulated rate serves a FIFO of at most `buffer` bytes
 * (fluid model, exact integer arithmetic):
 *
 *     avail = tokens + (now - t_last) * rate_emu; sent = min(vq, avail)
 *     vq -= sent; tokens = min(burst, avail - sent)
 *     q  = vq as the packet joins the queue (bytes in front of it)
 *     q <= Kmin: never mark; Kmin < q <= Kmax: mark with Pmax*(q-Kmin)/(Kmax-Kmin);
 *     q > Kmax: always mark (only ECT packets; non-ECT packets are never touched)
 *     q + len > buffer: drop (mirrors the byte FIFO), else vq += len and the
 *     bucket's tokens send what they can at once (HTB dequeues on enqueue)
 *
 * Without the bucket the virtual queue would run `burst` bytes above the real one
 * for as long as the port stays busy (HTB sends its initial tokens at once).
 * Quantities are held in "scaled bytes" (bytes * 8e9) so that refilling is one
 * multiplication, delta_ns * rate_emu_bps, with no rounding that would accumulate.
 * A bpf_spin_lock serialises the update because a veth's egress can run on any CPU.
 *
 * In-band telemetry (HPCC): with `int_rate_mbps` set, a RoCEv2 data frame that has
 * room for one more record in its payload's INT block (core/frame.py: after the
 * send timestamp, a hop count and 24-byte records) gets this port's record: the
 * bytes in front of it, the port's real line rate, the bytes the port has sent
 * (accepted minus queued) and the time in real ps (the clock divided by S,
 * `int_scale`). The frame's ICRC is left as the sender computed it (nothing here
 * checks it; a capture shows such frames with a stale ICRC).
 *
 * One object (program + maps) is loaded per switch and attached to each of its
 * marked ports: the verifier runs once per switch, not once per port (2 ms each,
 * 640 ports on a fattree,8). Each port has its own slot of `cfg`, `vq` and `stats`,
 * found by the egress ifindex in `slot_of`; the loader sizes the maps to the
 * switch's ports. State is isolated between ports by slot and between switches
 * and fabrics by object. Python writes `cfg` and `slot_of` and reads `vq` and
 * `stats` (see emu/ecn/bpf.py, which mirrors these layouts).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "vq_state.h"

#define HIST_BUCKETS 32
#define SCALE 8000000000ULL /* scaled bytes per byte: bits per byte * ns per s */
#define ECN_MASK 3
#define ECN_CE 3
#define FLAG_TRACE 1
#define IPPROTO_UDP_ 17

struct int_record {             /* core/frame.py: INT_RECORD_BYTES, big-endian */
	__u32 qlen_bytes;
	__u32 rate_mbps;
	__u64 tx_bytes;
	__u64 ts_ps;
};

struct cfg {
	__u64 rate_emu_bps;     /* drain rate of the virtual queue */
	__u64 max_delta_ns;     /* beyond this idle time the queue is surely empty (overflow guard) */
	__u64 buffer_scaled;    /* port buffer, scaled bytes */
	__u64 burst_scaled;     /* HTB bucket depth, scaled bytes */
	__u64 kmin_scaled;      /* thresholds, scaled bytes */
	__u64 kmax_scaled;
	__u64 kmin_bytes;       /* thresholds in bytes for the probability */
	__u64 kmax_bytes;
	__u64 pmax_q32;         /* Pmax * 2^32 (1.0 -> 2^32) */
	__u64 hist_bucket_bytes;
	__u64 flags;            /* FLAG_TRACE: record q per IPv4 id into `trace` */
	__u64 int_rate_mbps;    /* INT: the port's real line rate in Mb/s; 0: no INT */
	__u64 int_scale;        /* INT: S, an integer (real ps = clock ns * 1000 / S) */
	__u64 overhead_bytes;   /* Ethernet's preamble, FCS and gap: charged per packet */
};

struct stats {
	__u64 packets;       /* every packet that reached the marker */
	__u64 bytes;
	__u64 ect_packets;   /* ECT(0), ECT(1) or CE on arrival */
	__u64 ce_marked;     /* packets this marker changed to CE */
	__u64 ce_in;         /* packets that arrived already CE */
	__u64 drops;         /* packets dropped because the buffer was full */
	__u64 hist[HIST_BUCKETS]; /* queue depth seen by each packet */
};

/* A port's slot by its ifindex; a port without one is passed untouched. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} slot_of SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cfg);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct vq_state);
} vq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stats);
} stats SEC(".maps");

/* Debug: queue depth + 1 seen by the packet with IPv4 id = index (0 = none), for
 * every port of the object (tests trace one). Sized to 1 entry unless a test asks
 * for tracing (set before load). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} trace SEC(".maps");

static __always_inline int ecn_of(void *data, void *data_end, __u16 proto, __u8 **tos_byte,
				  __u16 *ip_id, int *is_v4)
{
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + sizeof(struct ethhdr);
		if ((void *)(ip + 1) > data_end)
			return -1;
		*tos_byte = (__u8 *)&ip->tos;
		*ip_id = bpf_ntohs(ip->id);
		*is_v4 = 1;
		return ip->tos & ECN_MASK;
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		__u8 *h = data + sizeof(struct ethhdr);
		if ((void *)(h + sizeof(struct ipv6hdr)) > data_end)
			return -1;
		*tos_byte = h + 1; /* ECN = bits 4-5 of the second byte */
		*is_v4 = 0;
		return (h[1] >> 4) & ECN_MASK;
	}
	return -1;
}

SEC("tc")
int fabricemu_mark(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	__u32 *slot = bpf_map_lookup_elem(&slot_of, &ifindex);
	if (!slot)
		return TC_ACT_OK;
	__u32 port = *slot;
	struct cfg *c = bpf_map_lookup_elem(&cfg, &port);
	struct vq_state *s = bpf_map_lookup_elem(&vq, &port);
	struct stats *st = bpf_map_lookup_elem(&stats, &port);
	if (!c || !s || !st)
		return TC_ACT_OK;

	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u16 proto = 0;
	__u8 *tos = 0;
	__u16 ip_id = 0;
	int is_v4 = 0;
	int ecn = -1;
	int udp_v4 = 0;        /* IPv4 without options carrying UDP: INT may apply */
	if (data + sizeof(struct ethhdr) <= data_end) {
		proto = ((struct ethhdr *)data)->h_proto;
		ecn = ecn_of(data, data_end, proto, &tos, &ip_id, &is_v4);
	}
	if (is_v4) {
		struct iphdr *ip = data + sizeof(struct ethhdr);
		udp_v4 = (void *)(ip + 1) <= data_end && ip->ihl == 5 && ip->protocol == IPPROTO_UDP_;
	}

	__u64 len = skb->len;
	/* The queue is counted in wire bytes, as the port's shaper charges them, so
	 * that it drains at the shaper's rate in frames. */
	__u64 wire = len + c->overhead_bytes;
	__u64 len_scaled = wire * SCALE;
	__u32 rnd = bpf_get_prandom_u32(); /* no helper calls under the lock */
	__u64 now = bpf_ktime_get_ns();
	__u64 q_scaled;
	__u64 accepted = 0;
	int drop = 0;

	bpf_spin_lock(&s->lock);
	__u64 delta = now > s->t_last_ns ? now - s->t_last_ns : 0;
	__u64 q = s->vq_scaled;
	__u64 tokens = s->tokens_scaled;
	if (delta > c->max_delta_ns) {
		q = 0;
		tokens = c->burst_scaled;
	} else {
		__u64 avail = tokens + delta * c->rate_emu_bps;
		__u64 sent = q < avail ? q : avail;
		q -= sent;
		tokens = avail - sent;
		if (tokens > c->burst_scaled)
			tokens = c->burst_scaled;
	}
	q_scaled = q;
	accepted = s->accepted_bytes;
	if (q + len_scaled > c->buffer_scaled) {
		drop = 1;
	} else {
		s->accepted_bytes = accepted + wire;
		q += len_scaled;
		__u64 now_sent = q < tokens ? q : tokens;
		q -= now_sent;
		tokens -= now_sent;
	}
	s->vq_scaled = q;
	s->tokens_scaled = tokens;
	s->t_last_ns = now;
	bpf_spin_unlock(&s->lock);

	__u64 q_bytes = q_scaled / SCALE;
	__u64 bucket = c->hist_bucket_bytes ? q_bytes / c->hist_bucket_bytes : 0;
	if (bucket >= HIST_BUCKETS)
		bucket = HIST_BUCKETS - 1;
	st->packets++;
	st->bytes += len;
	st->hist[bucket & (HIST_BUCKETS - 1)]++;
	if (ecn > 0)
		st->ect_packets++;
	if (ecn == ECN_CE)
		st->ce_in++;
	if (drop) {
		st->drops++;
		return TC_ACT_SHOT;
	}

	if ((c->flags & FLAG_TRACE) && is_v4) {
		__u32 key = ip_id;
		__u32 *slot = bpf_map_lookup_elem(&trace, &key);
		if (slot)
			*slot = (__u32)(q_bytes + 1);
	}

	int mark = ecn > 0 && ecn != ECN_CE && q_scaled > c->kmin_scaled;
	if (mark && q_scaled <= c->kmax_scaled) {
		/* Pmax * (q - Kmin) / (Kmax - Kmin) in units of 2^-32; Kmax > Kmin here */
		__u64 span = c->kmax_bytes - c->kmin_bytes;
		__u64 thr = span ? c->pmax_q32 * (q_bytes - c->kmin_bytes) / span : 0;
		mark = (__u64)rnd < thr;
	}

	/* Set CE; tos still points into the bounds-checked data (no helper call since). */
	if (mark && is_v4) {
		__u32 off = sizeof(struct ethhdr) + 1;
		__u8 old_tos = *tos;
		__u8 new_tos = old_tos | ECN_CE;
		/* checksum delta over the 16-bit word holding version/IHL and TOS */
		__u8 vihl = *(tos - 1);
		__u16 old_w = bpf_htons(((__u16)vihl << 8) | old_tos);
		__u16 new_w = bpf_htons(((__u16)vihl << 8) | new_tos);
		if (bpf_skb_store_bytes(skb, off, &new_tos, 1, 0) == 0) {
			bpf_l3_csum_replace(skb, sizeof(struct ethhdr) +
					    __builtin_offsetof(struct iphdr, check), old_w, new_w, 2);
			st->ce_marked++;
		}
	} else if (mark) {
		__u8 b1 = *tos | (ECN_CE << 4);
		if (bpf_skb_store_bytes(skb, sizeof(struct ethhdr) + 1, &b1, 1, 0) == 0)
			st->ce_marked++;
	}

	/* INT: one more record into a RoCEv2 data frame whose payload has room for it.
	 * Read with helpers: past the IP header the frame may not be linear. */
	__u8 h[8];             /* UDP destination port .. BTH opcode and flags (36..43) */
	if (!c->int_rate_mbps || !c->int_scale || !udp_v4 ||
	    bpf_skb_load_bytes(skb, 36, h, sizeof(h)) < 0 ||
	    (((__u16)h[0] << 8) | h[1]) != ROCE_UDP_PORT)
		return TC_ACT_OK;
	__u8 op = h[6];
	if (op != 0x06 && op != 0x07 && op != 0x08 && op != 0x0A)
		return TC_ACT_OK;
	__u32 int_off = (op == 0x06 || op == 0x0A) ? OFF_INT_RETH : OFF_INT;
	__u8 hops = 0;
	if (bpf_skb_load_bytes(skb, int_off, &hops, 1) < 0 || hops >= INT_MAX_HOPS)
		return TC_ACT_OK;
	__u32 rec_off = int_off + INT_HEADER_BYTES + (__u32)hops * INT_RECORD_BYTES;
	if (rec_off + INT_RECORD_BYTES + 4 > skb->len)
		return TC_ACT_OK;
	__u64 scale = c->int_scale;
	struct int_record r = {
		.qlen_bytes = bpf_htonl(q_bytes > 0xFFFFFFFFULL ? 0xFFFFFFFFU : (__u32)q_bytes),
		.rate_mbps = bpf_htonl((__u32)c->int_rate_mbps),
		.tx_bytes = bpf_cpu_to_be64(accepted > q_bytes ? accepted - q_bytes : 0),
		.ts_ps = bpf_cpu_to_be64(now / scale * 1000 + now % scale * 1000 / scale),
	};
	if (bpf_skb_store_bytes(skb, rec_off, &r, sizeof(r), 0) < 0)
		return TC_ACT_OK;
	hops++;
	bpf_skb_store_bytes(skb, int_off, &hops, 1, 0);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
