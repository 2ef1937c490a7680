// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu link loss: random frame loss on one direction of a link (a bit-error
 * rate), where the kernel has no netem. Attached to the receiving end's clsact
 * ingress hook; drops each frame with probability cfg[0] / 2^32 and counts what it
 * drops in cfg[1]. The loader sets cfg[0]; 0 lets everything through. It runs before
 * the port's own filter (an eBPF router, a RoCE sink): a frame it keeps goes on to that
 * filter (TC_ACT_UNSPEC), which TC_ACT_OK would skip.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} loss_cfg SEC(".maps");

SEC("tc")
int link_loss(struct __sk_buff *skb)
{
	__u32 threshold_key = 0, drops_key = 1;
	__u64 *threshold = bpf_map_lookup_elem(&loss_cfg, &threshold_key);
	__u64 *drops;

	if (!threshold || (__u64)bpf_get_prandom_u32() >= *threshold)
		return TC_ACT_UNSPEC;
	drops = bpf_map_lookup_elem(&loss_cfg, &drops_key);
	if (drops)
		__sync_fetch_and_add(drops, 1);
	return TC_ACT_SHOT;
}

char _license[] SEC("license") = "GPL";
