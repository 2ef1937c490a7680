// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu engine: the sender's per-burst state in C, the first pieces of a
 * compiled sender whose pacing decisions run in C (docs/design.md).
 *
 * struct tx_gbn holds traffic/gbn.py's GbnSender fields and struct tx_sched
 * traffic/pacing.py's Schedule fields (engine/tx.py: the ctypes views, which lend
 * the Python classes' own methods to these structs for every other event). What
 * runs per burst is here: GbnSender.take, Schedule.restart and Schedule.sent,
 * checked against the Python ones event for event by tests/unit/test_tx_gbn.py,
 * and selective repeat's SrSender.take (struct tx_sr, engine/tx.py's TxSr; a QP
 * whose `sr` is set uses it instead of its go-back-N state), checked by
 * tests/unit/test_tx_sr.py.
 * Indices are 0..total-1; the wire PSN is (start_psn + index) mod 2^24.
 * A NaN timer start means the retransmission timer is not armed (Python: None).
 */
#include "roce_tx.h"

#include <math.h>
#include <stdint.h>

/* GbnSender.take: up to max_count consecutive packets to send now; their count
 * (0: window full or everything sent), the first one's PSN in *psn. */
int64_t tx_gbn_take(struct tx_gbn *g, double now_s, int64_t max_count, uint32_t *psn)
{
	gbn_advance(g, now_s);
	int64_t nxt = g->nxt;
	int64_t n = max_count;
	if (g->total_packets - nxt < n)
		n = g->total_packets - nxt;
	if (g->window - (nxt - g->una) < n)
		n = g->window - (nxt - g->una);
	if (n <= 0)
		return 0;
	if (nxt < g->max_sent)
		g->retransmitted += g->max_sent - nxt < n ? g->max_sent - nxt : n;
	if (nxt + n > g->max_sent)
		g->max_sent = nxt + n;
	if (isnan(g->timer_start_s))
		g->timer_start_s = now_s;
	g->nxt = nxt + n;
	g->packets_sent += n;
	*psn = (uint32_t)((g->start_psn + nxt) & PSN_MASK);
	return n;
}

/* ---- selective repeat: traffic/sr_sender.py's SrSender ---- */

static int sr_lost(const struct tx_sr *s, int64_t i)
{
	int64_t k = i % SR_WINDOW;

	return (int)(s->lost[k >> 6] >> (k & 63) & 1);
}

/* SrSender._mark */
static void sr_mark(struct tx_sr *s, int64_t i)
{
	int64_t k = i % SR_WINDOW;

	if (i == s->una)            /* lost already: nothing more for the detector */
		s->rack_due_s = NAN;
	if (sr_lost(s, i))
		return;
	s->lost[k >> 6] |= 1ull << (k & 63);
	s->lost_count++;
	if (i < s->rtx)
		s->rtx = i;
}

/* SrSender._rack_lost: the time-based detector declares the oldest unacknowledged
 * index lost. */
static void sr_rack_lost(struct tx_sr *s)
{
	s->rack_due_s = NAN;
	if (s->una < s->nxt && !sr_lost(s, s->una)) {
		s->rack_losses++;
		sr_mark(s, s->una);
	}
}

/* SrSender._probe: the tail-loss probe sends again the frames past the highest one
 * the responder holds, unless something is due anyway or it holds the last frame. */
static void sr_probe(struct tx_sr *s)
{
	s->probe_due_s = NAN;
	if (s->una < s->nxt && !s->lost_count && s->heard < s->nxt) {
		s->probes++;
		for (int64_t i = s->heard > s->una ? s->heard : s->una; i < s->nxt; i++)
			sr_mark(s, i);
	}
}

/* SrSender.advance: the time-based detector and the tail-loss probe if due; the
 * timer marks lost the oldest
 * unacknowledged index and those past what the responder holds that were sent
 * before the timer started. */
static void sr_advance(struct tx_sr *s, double now_s)
{
	if (!isnan(s->rack_due_s) && now_s >= s->rack_due_s)
		sr_rack_lost(s);
	if (!isnan(s->probe_due_s) && now_s >= s->probe_due_s)
		sr_probe(s);
	if (isnan(s->timer_start_s) || now_s - s->timer_start_s < s->timeout_s)
		return;
	s->timeouts++;
	if (s->una < s->nxt)
		sr_mark(s, s->una);
	for (int64_t i = s->heard > s->una + 1 ? s->heard : s->una + 1; i < s->timer_nxt; i++)
		sr_mark(s, i);
	s->timer_start_s = now_s;
	s->timer_nxt = s->nxt;
}

/* SrSender.next_index */
int64_t tx_sr_next_index(const struct tx_sr *s)
{
	int64_t i = s->rtx;

	if (!s->lost_count)
		return s->nxt;
	while (!sr_lost(s, i))
		i++;
	return i;
}

/* SrSender.take: the oldest run of lost indices, else new ones in the window. */
/* SrSender._arm_probe */
static void sr_arm_probe(struct tx_sr *s, double now_s)
{
	s->probe_due_s = s->srtt_s > 0.0 ? now_s + SR_PROBE_RTTS * s->srtt_s + s->reorder_s : NAN;
}

int64_t tx_sr_take(struct tx_sr *s, double now_s, int64_t max_count, uint32_t *psn)
{
	int64_t i, n = 0;

	sr_advance(s, now_s);
	if (s->lost_count) {
		i = tx_sr_next_index(s);
		while (n < max_count && i + n < s->nxt && sr_lost(s, i + n)) {
			int64_t k = (i + n) % SR_WINDOW;

			s->lost[k >> 6] &= ~(1ull << (k & 63));
			s->resent[k >> 6] |= 1ull << (k & 63);
			n++;
		}
		s->lost_count -= n;
		s->rtx = i + n;
		s->retransmitted += n;
		if (!isnan(s->probe_due_s))  /* SrSender.take: re-armed by a retransmission */
			sr_arm_probe(s, now_s);
	} else {
		i = s->nxt;
		n = max_count;
		if (s->total_packets - i < n)
			n = s->total_packets - i;
		if (s->window - (i - s->una) < n)
			n = s->window - (i - s->una);
		if (n <= 0)
			return 0;
		for (int64_t j = i; j < i + n; j++)
			s->resent[j % SR_WINDOW >> 6] &= ~(1ull << (j % SR_WINDOW & 63));
		s->nxt = i + n;
		if (s->nxt == s->total_packets)
			sr_arm_probe(s, now_s);
	}
	if (isnan(s->timer_start_s)) {
		s->timer_start_s = now_s;
		s->timer_nxt = s->nxt;
	}
	s->packets_sent += n;
	for (int64_t k = i; k < i + n; k++)
		s->sent_s[k % SR_WINDOW] = now_s;
	*psn = (uint32_t)((s->start_psn + i) & PSN_MASK);
	return n;
}

/* GbnSender.on_ack with a time (roce_tx.h's gbn_on_ack), for the twin tests */
int64_t tx_gbn_ack(struct tx_gbn *g, uint32_t psn, double now_s)
{
	return gbn_on_ack(g, psn, now_s);
}

/* the C twins' functions the compiled code runs (dcqcn_rp.h, dctcp_cc.h, timely_cc.h),
 * for the twin tests */
void tx_rp_on_bytes_sent(struct rp *r, int64_t n_bytes, double now_s)
{
	rp_on_bytes_sent(r, n_bytes, now_s);
}

void tx_dctcp_on_ack(struct dctcp *d, double bytes_acked, double rtt_s, double now_s)
{
	dctcp_on_ack(d, bytes_acked, rtt_s, now_s);
}

void tx_timely_on_ack(struct timely *t, double rtt_s)
{
	timely_on_ack(t, rtt_s);
}

void tx_cc_start(struct tx_qp *q, double start_s, double *trace)
{
	cc_start(q, start_s, trace);
}

/* Schedule.restart */
void tx_sched_restart(struct tx_sched *s, int64_t now_ns)
{
	sched_restart(s, now_ns);
}

/* Schedule.sent */
void tx_sched_sent(struct tx_sched *s, int64_t now_ns, int64_t n, int64_t step_ns)
{
	int64_t behind = now_ns - s->next_ns;
	int64_t limit = 2 * step_ns > s->max_catchup_ns ? 2 * step_ns : s->max_catchup_ns;
	if (behind >= limit) {
		s->resets++;
		s->dropped_ns += behind;
		s->next_ns = now_ns + n * step_ns;
	} else {
		s->next_ns += n * step_ns;
	}
}

/* ---- the pacing loop of one NIC: engine/sendpath.py SendPath._serve, compiled (engine/csend.py) ---- */

int64_t tx_wire_overhead(void)
{
	return WIRE_OVERHEAD_BYTES;
}

/* Python's float floor division a // b for a, b > 0 (Objects/floatobject.c). */
static double floordiv(double a, double b)
{
	double mod = fmod(a, b);
	double div = (a - mod) / b;
	double fl = floor(div);
	if (div - fl > 0.5)
		fl += 1.0;
	return fl;
}

/* GbnSender.in_flight or SrSender.in_flight of `q` */
static int64_t in_flight(const struct tx_qp *q)
{
	const struct tx_sr *s = q->sr;

	return s ? s->nxt - s->una - s->lost_count : q->gbn.nxt - q->gbn.una;
}

static void book_lags(struct tx_call *c, int64_t lag, int64_t n, int64_t step)
{
	for (int64_t i = 0; i < n; i++) {
		int64_t x = lag - i * step;
		c->lags[c->n_lags++] = x;
		if (x > 0)
			c->lag_total_ns += x;
	}
}

/* Queue `h` in line `l` of `nic` (tx_service made room: TX_GROW). */
static void line_hold(struct tx_nic *nic, struct tx_line *l, const struct tx_held *h)
{
	l->ring[(l->head + l->n) % l->cap] = *h;
	if (l->n++ == 0 && h->release_ns < nic->line_due)
		nic->line_due = h->release_ns;
}

/* The earliest head of `nic`'s lines (TX_NEVER: all empty). */
static int64_t line_due(const struct tx_nic *nic)
{
	int64_t due = TX_NEVER;

	for (int64_t i = 0; i < nic->n_lines; i++) {
		const struct tx_line *l = &nic->lines[i];

		if (l->n && l->ring[l->head].release_ns < due)
			due = l->ring[l->head].release_ns;
	}
	return due;
}

/* Hand over the head of `nic`'s line `l` at wall time `c->now`; one of tx_release's answers. */
static int hand_over(struct tx_call *c, struct tx_nic *nic, struct tx_line *l)
{
	const int64_t now = c->now;

	if (c->lags_cap - c->n_lags < MAX_BURST)
		return TX_LAGS;
	const struct tx_held h = l->ring[l->head];
	const struct roce_shape *s = c->qps[h.qp].shape[h.which];

	l->head = (l->head + 1) % l->cap;
	l->n--;
	book_lags(c, h.lag + now - h.release_ns, h.count, h.step);
	int sent = roce_burst_send(c->build_only ? -1 : (int)nic->fd, s, c->buf, h.psn,
				   (uint32_t)h.count, (uint64_t)(now - l->delay_ns), (uint32_t)h.solicit);
	if (c->build_only) {
		sent = 0;
	} else if (sent < 0) {
		if (sent != -EAGAIN && sent != -ENOBUFS) {
			c->err = -sent;
			return TX_ERROR;
		}
		sent = 0;
	}
	c->packets_sent += sent;
	if (sent < h.count) {
		c->qp = h.qp;
		c->count = h.count;
		c->sent = sent;
		c->frame_len = s->len;
		return TX_AFTER;
	}
	return TX_ARM;
}

/*
 * Hand over the earliest burst of `c->nic`'s delay lines if it is due by
 * `c->horizon` (wall ns), at wall time `c->now`: engine/requester.py's
 * Requester.release with engine/handover.py's hand_over, compiled, one burst per
 * call so that the loop (roce_loop.c) reads the clock between bursts, and the
 * rings once a turn has passed, as between any two deadlines. The burst is
 * stamped with its hand-over less its whole path delay, its lags booked from when
 * it was due. TX_ARM: done (`nic->line_due` says when the next burst is due);
 * TX_AFTER: the kernel took `sent` of burst `qp`'s `count` frames (`build_only`:
 * none), the rest are in the buffer for Python to keep; TX_LAGS, TX_ERROR as
 * tx_service.
 */
int tx_release(struct tx_call *c)
{
	struct tx_nic *nic = c->nic;
	struct tx_line *first = NULL;
	int ev = TX_ARM;

	for (int64_t i = 0; i < nic->n_lines; i++) {
		struct tx_line *l = &nic->lines[i];

		if (l->n && (!first || l->ring[l->head].release_ns < first->ring[first->head].release_ns))
			first = l;
	}
	if (first && first->ring[first->head].release_ns <= c->horizon)
		ev = hand_over(c, nic, first);
	nic->line_due = line_due(nic);
	return ev;
}

/* SendPath._close_period: `nic` has nothing left to send; its busy period joins
 * the totals if it lasted a rate period (shorter ones are wake-up lag). */
void tx_close_period(struct tx_nic *nic)
{
	if (nic->period_start < 0)
		return;
	int64_t ideal = nic->ideal_end - nic->period_dropped - nic->period_start;

	if ((double)ideal >= nic->rate_period_ns) {
		nic->busy_ns += nic->actual_end - nic->period_first_out;
		nic->ideal_ns += ideal;
	}
	nic->dropped_ns += nic->period_dropped;
	nic->period_start = -1;
}

int tx_service(struct tx_call *c)
{
	struct tx_nic *nic = c->nic;
	const int64_t now = c->now, fwd = nic->fwd_ns;

	while (nic->n_active > 0) {
		int64_t k = 0;
		struct tx_qp *best = &c->qps[nic->active[0]];
		for (int64_t i = 1; i < nic->n_active; i++) {
			struct tx_qp *q = &c->qps[nic->active[i]];
			if (q->sched.next_ns < best->sched.next_ns) {
				best = q;
				k = i;
			}
		}
		int64_t sched = best->sched.next_ns > nic->sched.next_ns ?
			best->sched.next_ns : nic->sched.next_ns;
		if (sched > c->horizon) {
			c->arm_ns = sched + fwd;
			return TX_ARM;
		}
		if (c->lags_cap - c->n_lags < MAX_BURST)
			return TX_LAGS;
		if (best->line && best->line->n == best->line->cap) {
			c->qp = best - c->qps;
			return TX_GROW;
		}
		int64_t lag = now - sched;
		struct tx_gbn *g = &best->gbn;
		struct tx_sr *sr = best->sr;
		double t_real = (double)(now - c->t0) / c->scale_ns;
		/* The timer first: a timeout goes back to una (selective repeat: marks it
		 * lost), and the frame's shape (first, middle, last) and send-time slot
		 * follow the index sent. */
		if (sr)
			sr_advance(sr, t_real);
		else
			gbn_advance(g, t_real);
		int64_t index = sr ? tx_sr_next_index(sr) : g->nxt;
		int64_t last_index = (sr ? sr->total_packets : g->total_packets) - 1;
		int which, limit;
		if (0 < index && index < last_index) {
			which = 1;
			limit = last_index - index > MAX_BURST ? MAX_BURST : (int)(last_index - index);
		} else {
			which = index == 0 ? 0 : 2;
			limit = 1;
		}
		int64_t bits = best->bits[which];
		int64_t interval = (int64_t)((double)bits * c->scale_ns / best->rate_bps);
		int64_t line = (int64_t)((double)bits * nic->ns_per_bit);
		int64_t step = interval > line ? interval : line;
		int64_t due = nic->n_active == 1 && 0 < lag && lag < c->max_catchup_ns ?
			1 + lag / step : 1;
		int64_t allowed = 0;
		int windowed = best->window_bytes > 0;
		if (windowed) {
			allowed = (int64_t)floordiv(best->window_bytes, (double)c->payload_bytes);
			if (allowed < 1)
				allowed = 1;
			if (allowed - in_flight(best) < due)
				due = allowed - in_flight(best);
		}
		uint32_t psn = 0;
		int64_t n = 0;
		int resend = sr && sr->lost_count > 0;  /* SrSender.resending */
		if (due > 0) {
			int64_t most = due < limit ? due : limit;

			n = sr ? tx_sr_take(sr, t_real, most, &psn) : tx_gbn_take(g, t_real, most, &psn);
		}
		if (n == 0) {
			remove_active(nic, k);
			best->idle = 1;
			c->qp = best - c->qps;
			return TX_IDLE;
		}
		int solicit = (windowed && in_flight(best) >= allowed) || resend;
		/* A delayed burst's lags are booked when its line hands it over. */
		int hold = best->line_ns > 0 && !best->line;  /* Python's line */
		int sent = (int)n;
		if (best->line_ns > 0 && best->line) {
			struct tx_held h = {now + best->line->delay_ns, lag, step, (int32_t)(best - c->qps),
					    psn, (int32_t)n, (int16_t)which, (int16_t)solicit};

			line_hold(nic, best->line, &h);
		} else if (!hold) {
			book_lags(c, lag, n, step);
			sent = roce_burst_send((int)nic->fd, best->shape[which], c->buf, psn,
					       (uint32_t)n, (uint64_t)now, (uint32_t)solicit);
			if (sent < 0) {
				if (sent != -EAGAIN && sent != -ENOBUFS) {
					c->err = -sent;
					return TX_ERROR;
				}
				sent = 0;
			}
			c->packets_sent += sent;
		}
		for (int64_t i = 0; i < n; i++)
			best->tx_ns[index + i] = now;
		int64_t dropped = best->sched.dropped_ns + nic->sched.dropped_ns;
		tx_sched_restart(&best->sched, sched);
		tx_sched_restart(&nic->sched, sched);
		tx_sched_sent(&best->sched, now, n, interval);
		tx_sched_sent(&nic->sched, now, n, line);
		dropped = best->sched.dropped_ns + nic->sched.dropped_ns - dropped;
		if (nic->period_start < 0) {
			nic->period_start = sched;
			nic->period_first_out = now;
			nic->period_dropped = 0;
		} else {
			nic->period_dropped += dropped;
		}
		int64_t end = sched + n * step;
		if (end > nic->ideal_end)
			nic->ideal_end = end;
		if (now + n * line > end)
			end = now + n * line;
		if (end > nic->actual_end)
			nic->actual_end = end;
		int64_t sent_bytes = n * ((bits >> 3) - WIRE_OVERHEAD_BYTES);
		best->bytes_sent += sent_bytes;
		if (best->rp) {         /* CongestionControl.on_send, in C */
			rp_on_bytes_sent(best->rp, sent_bytes, t_real);
			best->rate_bps = best->rp->rc;
		}
		nic->bits_sent += n * bits;
		if (best->first_tx_ns < 0)
			best->first_tx_ns = now;
		best->last_tx_ns = now;
		c->data_sent += n;
		if (hold || best->calls_on_send || now >= best->next_trace_ns || sent < n) {
			c->qp = best - c->qps;
			c->hold = hold;
			c->which = which;
			c->psn = psn;
			c->lag = lag;
			c->step = step;
			c->solicit = solicit;
			c->count = n;
			c->sent = sent;
			c->sent_bytes = sent_bytes;
			c->frame_len = best->shape[which]->len;
			c->t_real = t_real;
			return TX_AFTER;
		}
	}
	tx_close_period(nic);
	return TX_EMPTY;
}
