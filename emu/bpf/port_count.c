// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu port counter: every frame offered to a port, counted on the port's clsact
 * egress hook, i.e. BEFORE its qdisc. What the port neither sent nor dropped from its
 * queue nor still holds was lost there without a counter: the frames its queue held
 * when its link went down (the kernel flushes them), a frame sent into a dead port.
 * emu/lossledger.py reads offered[0]; the frame always goes on (TC_ACT_OK).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} offered SEC(".maps");

SEC("tc")
int port_count(struct __sk_buff *skb)
{
	__u32 key = 0;
	__u64 *count = bpf_map_lookup_elem(&offered, &key);

	if (count)
		__sync_fetch_and_add(count, 1);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
