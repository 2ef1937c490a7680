// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu engine: the compiled sender's state (roce_tx.c runs it; roce_loop.c
 * serves NICs through it). engine/tx.py mirrors every struct with ctypes.
 */
#ifndef ROCE_TX_H
#define ROCE_TX_H
#include "roce_burst.h"  /* first: it defines _GNU_SOURCE */
#include "dcqcn_rp.h"
#include "dctcp_cc.h"
#include "timely_cc.h"

#include <math.h>
#include <stdint.h>

#define PSN_MASK 0xFFFFFFu

struct tx_gbn {                 /* engine/tx.py: TxGbn */
	int64_t total_packets;
	int64_t window;             /* packets in flight at most */
	double timeout_s;
	int64_t start_psn;
	int64_t una;                /* oldest unacknowledged index */
	int64_t nxt;                /* next index to (re)send */
	int64_t max_sent;           /* one past the highest index ever sent */
	double timer_start_s;       /* NaN: not armed */
	int64_t packets_sent, retransmitted, naks, timeouts, acks, stale_acks;
};

struct tx_sched {               /* engine/tx.py: TxSched */
	int64_t next_ns;
	int64_t max_catchup_ns;
	int64_t resets;
	int64_t dropped_ns;
};

#define SR_WINDOW 1024          /* selective_repeat.WINDOW_PACKETS */
#define SR_PROBE_RTTS 2.0       /* sr_sender.PROBE_RTTS (test_tx_sr checks the twins) */

struct tx_sr {                  /* engine/tx.py: TxSr */
	int64_t total_packets;
	int64_t window;
	double timeout_s;
	int64_t start_psn;
	int64_t una;                /* oldest unacknowledged index */
	int64_t nxt;                /* next new index */
	int64_t lost_count;         /* indices marked lost, not yet retransmitted */
	int64_t rtx;                /* no index below it is marked lost */
	int64_t heard;              /* one past the highest index the responder holds */
	int64_t timer_nxt;          /* indices below it were sent when the timer started */
	double timer_start_s;       /* NaN: not armed */
	int64_t packets_sent, retransmitted, naks, timeouts, acks, stale_acks;
	uint64_t lost[SR_WINDOW / 64];  /* ring: bit index mod SR_WINDOW */
	double reorder_s;           /* the reordering window in time */
	double rack_s;              /* latest send time of a frame reported held */
	double rack_due_s;          /* NaN: the oldest unacknowledged index is not due */
	int64_t rack_losses;
	double sent_s[SR_WINDOW];   /* ring: latest send time of index mod SR_WINDOW */
	uint64_t resent[SR_WINDOW / 64];  /* ring: indices sent more than once */
	double srtt_s;              /* smoothed round trip; 0: none measured yet */
	double probe_due_s;         /* NaN: no tail-loss probe armed */
	int64_t probes;
};

#define WIRE_OVERHEAD_BYTES 24  /* core/frame.py (checked by engine/tx.py) */

enum { TX_EMPTY, TX_ARM, TX_IDLE, TX_AFTER, TX_LAGS, TX_ERROR, TX_GROW };

#define TX_NEVER INT64_MAX

struct tx_held {                /* engine/tx.py: TxHeld: a decided burst in a delay line */
	int64_t release_ns;         /* wall time it is due on the fabric */
	int64_t lag, step;          /* its pacing lag at the decision, frame spacing */
	int32_t qp;
	uint32_t psn;
	int32_t count;
	int16_t which, solicit;
};

/*
 * engine/tx.py: TxLine. The delay line of a NIC's QPs whose path delay is
 * `delay_ns` (longer than the NIC clock's): a ring of bursts in release order.
 * Release = decision time on the NIC clock + `delay_ns`; the NIC decides at
 * non-decreasing times and the delay is the same for every QP of the line, so
 * the head is always the earliest.
 */
struct tx_line {
	int64_t delay_ns;           /* the QPs' whole path delay (their frames' stamp is less it) */
	int64_t cap, head, n;
	struct tx_held *ring;
};

struct tx_qp {                  /* engine/tx.py: TxQp */
	struct tx_gbn gbn;
	struct tx_sched sched;
	double rate_bps;            /* the algorithm's, written after each of its events */
	double window_bytes;        /* <= 0: no window */
	const struct roce_shape *shape[3];  /* first, middle, last frame */
	int64_t bits[3];            /* their wire bits */
	int64_t *tx_ns;             /* latest send time of every packet */
	int64_t bytes_sent, first_tx_ns, last_tx_ns, next_trace_ns;
	int64_t calls_on_send;      /* the algorithm's on_send (Python's) must see every burst */
	int64_t line_ns;            /* > 0: its bursts wait in a delay line first */
	struct tx_sr *sr;           /* selective repeat's state instead of gbn's, or NULL */
	struct tx_line *line;       /* its NIC's line for it; NULL: Python's (TX_AFTER, hold) */
	int64_t idle;               /* nothing to send now: off its NIC's active slots */
	struct rp *rp;              /* its algorithm's C twin: DCQCN's, */
	struct dctcp *dctcp;        /* or DCTCP's, */
	struct timely *timely;      /* or TIMELY's, or none (all NULL) */
	int64_t size_bytes;         /* its message's payload bytes */
};

struct tx_nic {                 /* engine/tx.py: TxNic */
	struct tx_sched sched;
	int64_t fd;
	int64_t fwd_ns;
	double ns_per_bit;
	int64_t period_start, period_first_out, period_dropped, ideal_end, actual_end;
	int64_t bits_sent;
	int64_t n_active;
	int32_t *active;            /* indices of its busy QPs, in nic.qps order */
	int64_t n_lines;
	struct tx_line *lines;
	int64_t line_due;           /* wall time its lines' earliest burst is due; TX_NEVER: none */
	double rate_period_ns;      /* a busy period this long (ideal) counts for its rate */
	int64_t busy_ns, ideal_ns, dropped_ns;  /* its closed busy periods, summed */
};

struct tx_call {                /* engine/tx.py: TxCall */
	struct tx_nic *nic;
	struct tx_qp *qps;
	uint8_t *buf;               /* the Burst's buffer: frames a short send left */
	int64_t *lags;
	int64_t lags_cap, n_lags, lag_total_ns;
	int64_t now, horizon, t0;
	double scale_ns;
	int64_t payload_bytes, max_catchup_ns;
	int64_t data_sent, packets_sent;
	/* out */
	int64_t qp, arm_ns, count, sent, sent_bytes, frame_len, err;
	double t_real;
	int64_t hold, which, psn, lag, step, solicit;  /* a burst for the delay line */
	int64_t build_only;         /* in, tx_release: Python holds a backlog, frames wait behind it */
};

/* GbnSender.advance: fire the retransmission timer if due (go back to una). */
static inline void gbn_advance(struct tx_gbn *g, double now_s)
{
	if (!isnan(g->timer_start_s) && now_s - g->timer_start_s >= g->timeout_s) {
		g->timeouts++;          /* _go_back_on_timeout */
		g->nxt = g->una;
		g->timer_start_s = now_s;
	}
}

/* GbnSender.on_ack (at `now_s`): a cumulative ACK of everything up to `psn`; 1 if
 * it made progress, 0 for a stale one (counted). */
static inline int gbn_on_ack(struct tx_gbn *g, uint32_t psn, double now_s)
{
	int64_t d = ((int64_t)psn - g->start_psn - g->una) & PSN_MASK;

	if (d >= g->max_sent - g->una) {
		g->stale_acks++;
		return 0;
	}
	g->acks++;
	g->una += d + 1;            /* _progress */
	if (g->nxt < g->una)
		g->nxt = g->una;
	g->timer_start_s = g->una >= g->max_sent ? NAN : now_s;
	return 1;
}

/* The QP in `nic`'s busy slot `k` leaves them (the others keep their order). */
static inline void remove_active(struct tx_nic *nic, int64_t k)
{
	for (int64_t i = k; i + 1 < nic->n_active; i++)
		nic->active[i] = nic->active[i + 1];
	nic->n_active--;
}

/* Schedule.restart: a schedule idle until `now_ns` starts from there */
static inline void sched_restart(struct tx_sched *s, int64_t now_ns)
{
	if (s->next_ns < now_ns)
		s->next_ns = now_ns;
}

/* A QP whose algorithm has a C twin starts at `start_s` (the constructor's timers
 * and windows; the compiled loop's starts): `trace` gets the twin's trace(), or
 * NaN first if it has none (Python reads its algorithm). */
static inline void cc_start(struct tx_qp *q, double start_s, double trace[3])
{
	if (q->rp) {
		rp_start(q->rp, start_s);
		trace[0] = q->rp->rc;
		trace[1] = q->rp->rt;
		trace[2] = q->rp->alpha;
	} else if (q->dctcp) {
		dctcp_start(q->dctcp, start_s);
		dctcp_trace(q->dctcp, trace);
	} else if (q->timely) {     /* no clock of its own: (rate, rate, gradient) */
		trace[0] = trace[1] = q->timely->rate;
		trace[2] = q->timely->gradient;
	} else {
		trace[0] = NAN;
	}
}

int tx_service(struct tx_call *c);
void tx_close_period(struct tx_nic *nic);
int tx_release(struct tx_call *c);

#endif /* ROCE_TX_H */
