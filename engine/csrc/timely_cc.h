// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu engine: TIMELY's rate control in C, the twin of
 * traffic/ccalgos/timely.py's Timely (engine/ccview.py: TxTimely, the ctypes view,
 * which lends the Python class's own methods to this struct for every other event).
 *
 * The compiled loop acts on an ACK without an ECN echo here (TIMELY reads only
 * its RTT); an echoing ACK and a CNP are Python's (Timely.on_ack / on_cnp on the
 * same struct). Every operation is the Python one in the same order
 * (tests/unit/test_ccview.py drives both on random events).
 */
#ifndef TIMELY_CC_H
#define TIMELY_CC_H

#include <math.h>
#include <stdint.h>

struct timely {                 /* engine/ccview.py: TxTimely, Timely's attributes */
	double line_rate_bps, ewma_alpha, beta, t_low_s, t_high_s, additive_step_bps;
	int64_t hai_threshold, hai_factor;
	uint8_t fixed_min_rtt;
	double min_rtt_s, min_rate_bps, rate, rtt_diff_s, gradient;
	int64_t negative_gradients, cnps_received;
	double prev_rtt_s;          /* NaN: no RTT seen yet */
};

/* Timely.on_ack */
static inline void timely_on_ack(struct timely *t, double rtt_s)
{
	if (!(0.0 < rtt_s && rtt_s < INFINITY))
		return;
	if (!t->fixed_min_rtt && rtt_s < t->min_rtt_s)
		t->min_rtt_s = rtt_s;
	double prev = isnan(t->prev_rtt_s) ? rtt_s : t->prev_rtt_s, a = t->ewma_alpha;

	t->prev_rtt_s = rtt_s;
	t->rtt_diff_s = (1 - a) * t->rtt_diff_s + a * (rtt_s - prev);
	t->gradient = t->rtt_diff_s / t->min_rtt_s;
	t->negative_gradients = t->gradient <= 0 ? t->negative_gradients + 1 : 0;
	double rate = t->rate;

	if (rtt_s < t->t_low_s) {
		rate += t->additive_step_bps;
	} else if (rtt_s > t->t_high_s) {
		rate *= 1 - t->beta * (1 - t->t_high_s / rtt_s);
	} else if (t->gradient <= 0) {
		int64_t n = t->negative_gradients >= t->hai_threshold ? t->hai_factor : 1;

		rate += (double)n * t->additive_step_bps;
	} else {
		rate *= 1 - t->beta * t->gradient;
	}
	rate = rate > t->min_rate_bps ? rate : t->min_rate_bps;      /* max(min_rate, rate) */
	t->rate = rate < t->line_rate_bps ? rate : t->line_rate_bps;  /* min(line, rate) */
}

#endif /* TIMELY_CC_H */
