// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu engine: DCQCN's reaction point in C, the twin of traffic/dcqcn.py's
 * ReactionPoint (engine/ccview.py: the ctypes view, which lends the Python class's
 * own methods to this struct for every other event).
 *
 * What runs per burst is here: on_bytes_sent, with the timers it fires first
 * (advance), the rate increases and a deferred reduction; and the start of a QP
 * whose algorithm was built before its start time (the constructor's timers).
 * A CNP, rarer, is Python's (ReactionPoint.on_cnp on the same struct). Every
 * operation is the Python one in the same order, so both give the same doubles
 * (tests/unit/test_ccview.py drives them side by side on random events; the
 * build turns floating-point contraction off).
 */
#ifndef DCQCN_RP_H
#define DCQCN_RP_H

#include <math.h>
#include <stdint.h>

struct rp_params {              /* engine/ccview.py: RpParams, DcqcnParams' fields it reads */
	double g;
	double alpha_timer_s;
	double rate_increase_timer_s;
	int64_t byte_counter_bytes;
	int64_t fast_recovery_steps;
	double rate_reduce_monitor_period_s;
	double rate_on_first_cnp_bps;
	uint8_t clamp_target_rate;
	uint8_t clamp_target_rate_after_time_inc;
};

struct rp {                     /* engine/ccview.py: TxRp, ReactionPoint's slots */
	struct rp_params params;
	double line_rate_bps, rate_ai_bps, rate_hai_bps, min_rate_bps;
	double rc, rt, alpha;
	int64_t t_stage, bc_stage, bytes;
	double alpha_due_s, rate_due_s, next_due_s, decay;
	uint8_t reduce_pending;
	double reduce_due_s, last_reduce_s;
	uint8_t reduced_once;
	int64_t cnps_received, rate_reductions, rate_increases;
};

static inline double rp_min(double a, double b)
{
	return b < a ? b : a;       /* Python's min(a, b) */
}

/* ReactionPoint.__init__'s timers, for a QP that starts at `start_s`. */
static inline void rp_start(struct rp *r, double start_s)
{
	r->alpha_due_s = start_s + r->params.alpha_timer_s;
	r->rate_due_s = start_s + r->params.rate_increase_timer_s;
	r->next_due_s = rp_min(r->alpha_due_s, r->rate_due_s);
}

/* ReactionPoint._increase */
static inline void rp_increase(struct rp *r, int by_timer)
{
	int64_t f = r->params.fast_recovery_steps, t = r->t_stage, bc = r->bc_stage;
	int64_t lo = t < bc ? t : bc, hi = t < bc ? bc : t;
	double rt = r->rt;

	if (hi >= f) {
		rt += lo < f ? r->rate_ai_bps : (double)(lo - f + 1) * r->rate_hai_bps;
		if (rt > r->line_rate_bps)
			rt = r->line_rate_bps;
		r->rt = rt;
	}
	double rc = (rt + r->rc) * 0.5;

	r->rc = rc < r->line_rate_bps ? rc : r->line_rate_bps;
	if (by_timer)
		r->t_stage = t + 1;
	else
		r->bc_stage = bc + 1;
	r->rate_increases++;
}

/* ReactionPoint._reduce */
static inline void rp_reduce(struct rp *r, double now_s)
{
	const struct rp_params *p = &r->params;
	double rc;

	if (p->clamp_target_rate || !r->reduced_once || r->bc_stage > 0
	    || (p->clamp_target_rate_after_time_inc && r->t_stage > 0))
		r->rt = r->rc;
	if (!r->reduced_once && p->rate_on_first_cnp_bps > 0.0)
		rc = rp_min(p->rate_on_first_cnp_bps, r->rc);
	else
		rc = r->rc * (1.0 - r->alpha * 0.5);
	r->rc = rc > r->min_rate_bps ? rc : r->min_rate_bps;
	r->alpha = r->decay * r->alpha + p->g;
	r->reduced_once = 1;
	r->last_reduce_s = now_s;
	r->rate_reductions++;
	r->t_stage = 0;
	r->bc_stage = 0;
	r->bytes = 0;
	r->alpha_due_s = now_s + p->alpha_timer_s;
	r->rate_due_s = now_s + p->rate_increase_timer_s;
	double due = r->alpha_due_s < r->rate_due_s ? r->alpha_due_s : r->rate_due_s;

	if (r->reduce_pending && r->reduce_due_s < due)
		due = r->reduce_due_s;
	r->next_due_s = due;
}

/* ReactionPoint._fire_timers */
static inline void rp_fire_timers(struct rp *r, double now_s)
{
	const struct rp_params *p = &r->params;

	if (r->alpha_due_s <= now_s) {
		/* Alpha decay does not interact with rate events: closed form. */
		double k = p->alpha_timer_s;
		int64_t n = (int64_t)((now_s - r->alpha_due_s) / k) + 1;
		double due = r->alpha_due_s + (double)n * k;

		while (due <= now_s) {  /* float rounding of the division */
			n++;
			due += k;
		}
		r->alpha *= pow(r->decay, (double)n);
		r->alpha_due_s = due;
	}
	if (r->rate_due_s <= now_s) {
		double period = p->rate_increase_timer_s;

		while (r->rate_due_s <= now_s) {
			if (r->rc >= r->line_rate_bps && r->rt >= r->line_rate_bps) {
				/* Saturated: increases change nothing but the stage count. */
				int64_t n = (int64_t)((now_s - r->rate_due_s) / period) + 1;

				r->t_stage += n;
				r->rate_due_s += (double)n * period;
				continue;
			}
			r->rate_due_s += period;
			rp_increase(r, 1);
		}
	}
	double due = r->alpha_due_s < r->rate_due_s ? r->alpha_due_s : r->rate_due_s;

	if (r->reduce_pending && r->reduce_due_s < due)
		due = r->reduce_due_s;
	r->next_due_s = due;
}

/* ReactionPoint.advance */
static inline void rp_advance(struct rp *r, double now_s)
{
	if (r->reduce_pending && r->reduce_due_s <= now_s) {
		double due = r->reduce_due_s;

		rp_fire_timers(r, due);
		r->reduce_pending = 0;
		r->reduce_due_s = INFINITY;
		rp_reduce(r, due);
	}
	rp_fire_timers(r, now_s);
}

/* ReactionPoint.on_bytes_sent */
static inline void rp_on_bytes_sent(struct rp *r, int64_t n_bytes, double now_s)
{
	if (now_s >= r->next_due_s)
		rp_advance(r, now_s);
	int64_t b = r->bytes + n_bytes, limit = r->params.byte_counter_bytes;

	while (b >= limit) {
		b -= limit;
		rp_increase(r, 0);
	}
	r->bytes = b;
}

#endif /* DCQCN_RP_H */
