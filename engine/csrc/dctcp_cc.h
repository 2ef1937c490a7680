// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu engine: DCTCP's window control in C, the twin of
 * traffic/ccalgos/dctcp.py's Dctcp (engine/ccview.py: TxDctcp, the ctypes view,
 * which lends the Python class's own methods to this struct for every other event).
 *
 * What the compiled loop does without Python is here: an ACK without an ECN echo
 * (the additive increase, the end of a cut and of an observation window), the
 * start of a QP whose algorithm was built before its start time, and the rate
 * trace's values. An echoing ACK or a CNP, which cut the window, is Python's
 * (Dctcp.on_ack / on_cnp on the same struct). Every operation is the Python one in
 * the same order (tests/unit/test_ccview.py drives both on random events).
 */
#ifndef DCTCP_CC_H
#define DCTCP_CC_H

#include <math.h>
#include <stdint.h>

struct dctcp {                  /* engine/ccview.py: TxDctcp, Dctcp's attributes */
	uint8_t from_cnps;
	double line_rate_bps, g, alpha, mtu_bytes, base_rtt_s, min_window_bytes;
	double window_bytes;
	int64_t cnps_received;
	double last_rtt_s, window_start_s, acked_bytes, marked_bytes;
	double cut_at_s;            /* NaN: no cut waiting for an ACK to pass it */
};

/* Dctcp.__init__'s start: the first observation window opens at `start_s`. */
static inline void dctcp_start(struct dctcp *d, double start_s)
{
	d->window_start_s = start_s;
}

/* common.sent_after */
static inline int dctcp_sent_after(double mark_s, double rtt_s, double now_s)
{
	return now_s - rtt_s >= mark_s;
}

/* Dctcp.on_ack for an ACK without an ECN echo (an echo is Python's). */
static inline void dctcp_on_ack(struct dctcp *d, double bytes_acked, double rtt_s, double now_s)
{
	d->acked_bytes += bytes_acked;
	if (!isnan(d->cut_at_s) && dctcp_sent_after(d->cut_at_s, rtt_s, now_s))
		d->cut_at_s = NAN;
	if (isnan(d->cut_at_s))
		d->window_bytes += d->mtu_bytes * bytes_acked / d->window_bytes;
	if (rtt_s > 0)
		d->last_rtt_s = rtt_s;
	if (!dctcp_sent_after(d->window_start_s, rtt_s, now_s))
		return;
	double acked = d->acked_bytes, f = 0.0;

	if (acked > 0) {
		f = d->marked_bytes / acked;
		f = f < 1.0 ? f : 1.0;      /* Python's min(1.0, f) */
	}
	d->alpha = (1 - d->g) * d->alpha + d->g * f;
	d->window_start_s = now_s;
	d->acked_bytes = 0.0;
	d->marked_bytes = 0.0;
}

/* Dctcp.trace: (window / last RTT, window / base RTT, alpha), capped at line rate. */
static inline void dctcp_trace(const struct dctcp *d, double out[3])
{
	double w_bits = d->window_bytes * 8;
	double now = w_bits / d->last_rtt_s, base = w_bits / d->base_rtt_s;

	out[0] = now < d->line_rate_bps ? now : d->line_rate_bps;  /* min(line, x) */
	out[1] = base < d->line_rate_bps ? base : d->line_rate_bps;
	out[2] = d->alpha;
}

#endif /* DCTCP_CC_H */
