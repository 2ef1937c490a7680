// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu RoCEv2 sink: the receive half of an emulated RoCE NIC.
 *
 * Attached to a host interface's clsact ingress hook. On a RoCE NIC the adapter
 * consumes RoCEv2 (UDP 4791) itself and the host's IP stack never sees it. Here
 * the engine's packet socket (an ETH_P_ALL tap, which the kernel serves before
 * tc ingress) has already copied the frame, so the program drops it: the host's
 * IP/UDP receive path, about a third of the kernel's per-packet work on a veth,
 * is not run, and no ICMP port-unreachable goes back. Everything else passes.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef ROCE_UDP_PORT
#error "ROCE_UDP_PORT comes from core/frame.py: build through emu.cbuild"
#endif

SEC("tc")
int roce_sink(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);

	/* The engine only reads IHL-5 frames (its socket filter says the same). */
	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return TC_ACT_OK;
	return udp->dest == bpf_htons(ROCE_UDP_PORT) ? TC_ACT_SHOT : TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
