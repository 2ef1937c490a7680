/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The ECN marker's virtual queue of one port (marker.c keeps it, router.c reads it
 * for adaptive routing through an array of the markers' maps): one layout for both.
 * Quantities in "scaled bytes" (bytes * 8e9), see marker.c.
 */
#ifndef FABRICEMU_VQ_STATE_H
#define FABRICEMU_VQ_STATE_H

#include <linux/bpf.h>

struct vq_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 vq_scaled;
	__u64 t_last_ns;
	__u64 tokens_scaled;
	__u64 accepted_bytes;   /* every byte the port queued (INT's transmitted bytes) */
};

#endif
