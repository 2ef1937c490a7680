// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu engine: a worker's loop per wake-up in C (engine/cloop.py drives it;
 * engine/worker.py's Worker._loop and _fire_due are the Python twin, step for step).
 *
 * A pass of the loop, as the Python one runs it:
 *
 *   1. the rings and the eventfd that are ready (epoll on `ep_io`, no sleep); if
 *      none is and no deadline is due within a turn (or the earliest is one that
 *      fired early and waits for its time, `wait_ns`), sleep: until the earliest
 *      deadline on the clock alone if it is due within `batch_ns` (what reaches
 *      the rings meanwhile waits for that wake-up instead of costing one of its
 *      own), else in epoll on `ep` with the timerfd armed at the earliest deadline
 *      (at most `idle_ns` away).
 *      A ready ring is read here (roce_rx.c through `read`): its replies are
 *      written and sent there, its latency samples and receive lag are kept here;
 *   2. the deadlines due within a turn, earliest first, each fired at the time it
 *      is fired, for at most a turn of wall time. NICs' pacing slots (`due`, by
 *      NIC slot) are served here through roce_tx.c's tx_service (`service`), and
 *      their delay lines' bursts (due at the NIC's `line_due`) handed over through
 *      tx_release (`release`), and the control line's ACKs and CNPs (below)
 *      handed to Python when due; Python keeps every other deadline (QP timers,
 *      congestion-control timers, delayed ACKs, the delay lines of what C does not
 *      hold) and tells the earliest in `py_due`.
 *
 * The control line: an ACK or CNP a ring read leaves for one of this worker's
 * senders whose replies have a path delay (`ctrl_delay_ns` by message, wall ns,
 * > 0; engine/requester.py's Requester.ctrl_in on the Python loop) is taken out
 * of the read's events and held here, in a heap by release time (its arrival
 * plus that delay; arrival order among equal times), instead of going to Python
 * once to be held and once when due. An ACK that echoes an INT block stays
 * Python's, and so does any when the heap cannot grow.
 *
 * Posting (`posts`, NULL: Python posts every message): the dependency counters
 * of this worker's senders, by sender slot. A message fully received here (a
 * ring read's EV_DONE) counts down its local dependants; one whose last
 * dependency it was is posted then plus its compute gap (not before its own start
 * time) and waits in the control line until its post time on its NIC's clock
 * (`KIND_POST`), as Python's Requester.completed arms it. When due, C starts it
 * itself where its congestion control is off (`by_c`: line rate, no event to
 * act on) or has a C twin: DCQCN's (dcqcn_rp.h), which tx_service feeds the
 * bytes sent, or DCTCP's or TIMELY's (dctcp_cc.h, timely_cc.h), which act on the
 * ACKs C takes below: its
 * algorithm started, off idle, its
 * schedule from the post time plus the NIC's per-message overhead, onto its
 * NIC's busy QPs, the NIC armed, and (slot, NIC time) and the algorithm's state
 * kept in `started` for Python's books. Python starts the others (LOOP_START). The EV_DONE
 * stays in the read's events, as EV_ANNOUNCE, only where another worker waits for
 * the message too. Completions of other workers reach the counters through
 * `post_done`, messages without dependencies through `post_at`.
 *
 * For the same QPs C acts on the rest of the message's life, as Requester does:
 * a cumulative ACK without an ECN echo (a ring read's, or the control line's when
 * its delay is up: `ack_here`), its retransmission timer in the control line
 * (`KIND_RTO`, armed when tx_service finds the QP out of frames or an ACK leaves it
 * so; one armed at a time, `rto_ns`: a replaced one is dropped when it comes up),
 * and the worker's count of wholly acknowledged messages in shared memory, with
 * every worker's eventfd written when it is all of them. NAKs, echoes and INT
 * blocks stay Python's; both act on the same go-back-N state.
 *
 * The pass returns to Python only for what Python must do, and Python calls it
 * again to go on where it stopped (`phase`, `at_ready`, `fired`):
 *
 *   LOOP_DONE    a pass ended (`now`: when) at or after `house_ns`: Python's
 *                housekeeping, then the next pass (before it, the next pass
 *                follows here at once);
 *   LOOP_EVENTS  ring `slot`'s read left events (ACKs for its senders, completions,
 *                replies C could not send): engine/recvpath.py acts on them;
 *   LOOP_FD      file descriptor `slot` (not a ring: the completion eventfd) is ready;
 *   LOOP_PY      Python's earliest deadline (`py_due`) is due: fire it at `now`;
 *   LOOP_TX      NIC `slot`'s tx_service answered `tx_event` (not TX_ARM): Python
 *                goes on serving it from there (engine/csend.py);
 *   LOOP_NIC     NIC `slot` is due but Python serves it (it holds a backlog, or no
 *                QP of this worker sends on it);
 *   LOOP_LINE    NIC `slot`'s delay lines are due and tx_release answered
 *                `tx_event` (not TX_ARM), or, `tx_event` -1, not called because
 *                Python holds a backlog for the NIC: Python goes on (engine/csend.py);
 *   LOOP_CTRL    the control line's earliest ACK or CNP is due: message `slot`'s,
 *                `ctrl` its fields, released at `ctrl.release_ns`;
 *   LOOP_START   message `slot` is due to start and Python starts it, at `now`;
 *   LOOP_DRAIN   the latency, receive-lag or `started` buffer is full, or the
 *                loop would sleep with starts in `started`: Python empties them;
 *   LOOP_ERROR   epoll or the timerfd failed (`err`: errno).
 */
#include "roce_tx.h"    /* first: it defines _GNU_SOURCE */
#include "roce_rx.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>

#define NEVER INT64_MAX
#define MAX_READY 256
#define LAT_PER_FRAME 4         /* roce_rx.c: int64 per latency sample */

enum { LOOP_DONE, LOOP_EVENTS, LOOP_FD, LOOP_PY, LOOP_TX, LOOP_NIC, LOOP_DRAIN, LOOP_ERROR,
       LOOP_LINE, LOOP_CTRL, LOOP_START };

#define KIND_POST 0x100         /* a message's post time in the control line (no rx event) */
#define EV_ANNOUNCE 0x101       /* an EV_DONE C acted on; Python tells the other workers */
#define KIND_RTO 0x102          /* a sender's retransmission timer in the control line */
#define DRAIN_FIRST 1           /* gather: LOOP_DRAIN before the sleep */

struct post_qp {                /* engine/cpost.py: _PostQp: one of this worker's senders */
	int64_t post_ns;            /* when it is posted (NIC time); -1: not yet */
	int64_t earliest_ns;        /* its own start time (NIC time) */
	int64_t gap_ns;             /* its compute gap after its last dependency */
	int64_t deps;               /* its dependencies not complete yet */
	int64_t msg;                /* its message */
	int64_t nic;                /* its NIC's slot */
	int64_t fwd_ns;             /* its NIC's clock behind the wall clock */
	int64_t by_c;               /* C starts it, and acts on its ACKs and timer */
	int64_t started;            /* it started (C or Python) */
	int64_t acked_ns;           /* when C saw it wholly acknowledged (NIC time); -1: not */
	int64_t rto_ns;             /* its retransmission timer C armed (wall); NEVER: none */
};

struct posts {                  /* engine/cpost.py: _Posts */
	struct post_qp *qp;         /* by sender slot */
	const int32_t *sender;      /* by message: its sender slot here, or -1 */
	const int64_t *kids_at;     /* by message: its local dependants' sender slots are */
	const int32_t *kids;        /* kids[kids_at[m]] up to kids[kids_at[m + 1]] */
	const uint8_t *remote;      /* by message: another worker waits for it too */
	int8_t *received;           /* by message: Shared.received */
	uint8_t *done;              /* by message: its completion counted (a second is not) */
	int64_t overhead_ns;        /* a NIC's per-message overhead before the first frame */
	int64_t trace_ns;           /* the rate trace's interval */
	int64_t *started;           /* (sender slot, NIC time) of each start C made */
	int64_t started_cap, n_started;
	double scale_ns;            /* emulated ns per real second: what go-back-N's clock reads */
	int64_t *acked;             /* Shared.acked: messages wholly acknowledged, by worker */
	int64_t worker, acked_here, n_senders;
	const int32_t *wake_fds;    /* every worker's eventfd: "all acknowledged" */
	int64_t n_workers;
	double *started_trace;      /* the algorithm's (rate, target, alpha) at each start:
				       its C twin's, or NaN (none: Python reads it) */
};

struct ctrl_held {              /* engine/cloop.py: _CtrlHeld: an ACK or CNP in the line */
	int64_t release_ns;         /* wall time Python acts on it */
	int64_t seq;                /* arrival order: ties keep it */
	int64_t msg;                /* the message (QPN - FIRST_QPN) */
	uint32_t kind, psn, arg, msn;  /* the ring's event (roce_rx.h) */
};

struct loop {                   /* engine/cloop.py: _Loop */
	int (*service)(struct tx_call *);
	int (*read)(const struct rx_call *);
	int (*release)(struct tx_call *);
	struct tx_call *tx;
	struct tx_nic **nics;       /* by NIC slot; NULL: no QP of this worker sends on it */
	const uint8_t *blocked;     /* by NIC slot: Python holds frames pushed back */
	int64_t *due;               /* by NIC slot: its pacing slot (wall ns); NEVER: none */
	int64_t n_nics;
	struct rx_call **rings;     /* by host */
	int64_t *ring_fd;           /* by host */
	int64_t n_rings;
	int64_t ep, ep_io, timer_fd;
	int64_t turn_ns, t0_ns, idle_ns, batch_ns;
	int64_t *rx_lags;           /* (lag ns, frames) per ring read */
	int64_t rx_lags_cap, n_rx_lags;
	int64_t *lat;               /* the reads' latency samples, one after the other */
	int64_t lat_cap, n_lat;
	int64_t packets_received, wakeups, timer_armed;
	int64_t py_due;             /* in: Python's earliest deadline; NEVER: none */
	const int64_t *ctrl_delay_ns;  /* by message: > 0: its replies wait that long here */
	const int64_t *ctrl_host;   /* by message: the ring its replies arrive on */
	int64_t n_msgs;
	struct ctrl_held *heap;     /* the control line (malloc'd here; loop_free) */
	int64_t heap_n, heap_cap, ctrl_seq;
	struct ctrl_held ctrl;      /* out, LOOP_CTRL */
	struct posts *posts;        /* NULL: Python posts every message */
	int64_t house_ns;           /* in: Python's next housekeeping */
	/* where the pass is */
	int64_t phase, n_ready, at_ready, fired, now, end, wait_ns;
	/* out */
	int64_t slot, tx_event, err;
	int32_t ready[MAX_READY];
};

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int held_before(const struct ctrl_held *a, const struct ctrl_held *b)
{
	return a->release_ns < b->release_ns || (a->release_ns == b->release_ns && a->seq < b->seq);
}

/* Put `h` in the control line; -1 if it cannot grow. */
static int ctrl_push(struct loop *l, struct ctrl_held h)
{
	if (l->heap_n == l->heap_cap) {
		int64_t cap = l->heap_cap ? 2 * l->heap_cap : 256;
		struct ctrl_held *grown = realloc(l->heap, (size_t)cap * sizeof(*grown));

		if (!grown)
			return -1;
		l->heap = grown;
		l->heap_cap = cap;
	}
	h.seq = l->ctrl_seq++;
	int64_t i = l->heap_n++;

	while (i > 0 && held_before(&h, &l->heap[(i - 1) / 2])) {
		l->heap[i] = l->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	l->heap[i] = h;
	return 0;
}

/* The control line's earliest, taken out. */
static struct ctrl_held ctrl_pop(struct loop *l)
{
	struct ctrl_held top = l->heap[0], last = l->heap[--l->heap_n];
	int64_t i = 0, n = l->heap_n;

	for (;;) {
		int64_t k = 2 * i + 1;

		if (k >= n)
			break;
		if (k + 1 < n && held_before(&l->heap[k + 1], &l->heap[k]))
			k++;
		if (!held_before(&l->heap[k], &last))
			break;
		l->heap[i] = l->heap[k];
		i = k;
	}
	if (n)
		l->heap[i] = last;
	return top;
}

static int64_t ctrl_due(const struct loop *l)
{
	return l->heap_n ? l->heap[0].release_ns : NEVER;
}

/* Sender slot `s` is posted at `post_ns` (NIC time): into the control line until
 * then on its NIC's clock. 0, or -1 if the line cannot grow. */
int post_at(struct loop *l, int64_t s, int64_t post_ns)
{
	struct post_qp *q = &l->posts->qp[s];

	q->post_ns = post_ns;
	return ctrl_push(l, (struct ctrl_held){post_ns + q->fwd_ns, 0, q->msg, KIND_POST, 0, 0, 0});
}

/* Message `msg` was fully received at `done_ns` (wall): post the local dependants
 * whose last dependency it was (Requester.completed). 0, or -1 as post_at. */
int post_done(struct loop *l, int64_t msg, int64_t done_ns)
{
	const struct posts *p = l->posts;

	if (p->done[msg])
		return 0;
	p->done[msg] = 1;
	for (int64_t k = p->kids_at[msg]; k < p->kids_at[msg + 1]; k++) {
		struct post_qp *q = &p->qp[p->kids[k]];

		if (--q->deps > 0)
			continue;
		int64_t post = done_ns + q->gap_ns;

		if (post_at(l, p->kids[k], post > q->earliest_ns ? post : q->earliest_ns))
			return -1;
	}
	return 0;
}

/* Requester.wake: idle sender slot `s` has frames to send from `due`; onto its
 * NIC's busy QPs, the NIC served from `now` (NIC times). */
static void wake(struct loop *l, int64_t s, int64_t now, int64_t due)
{
	struct post_qp *m = &l->posts->qp[s];
	struct tx_qp *q = &l->tx->qps[s];
	struct tx_nic *nic = l->nics[m->nic];

	if (!q->idle)
		return;
	q->idle = 0;
	m->rto_ns = NEVER;
	sched_restart(&q->sched, due);
	if (nic->n_active == 0)
		sched_restart(&nic->sched, due);
	nic->active[nic->n_active++] = (int32_t)s;
	if (l->due[m->nic] > now + nic->fwd_ns)
		l->due[m->nic] = now + nic->fwd_ns;
}

static double real_s(const struct loop *l, int64_t t_ns)
{
	return (double)(t_ns - l->t0_ns) / l->posts->scale_ns;
}

/* Start sender slot `s` at `now` (its NIC's time): Requester.start for a QP whose
 * congestion control is off or has a C twin (its timers start now), the rest
 * left to Python's books. */
static void post_start(struct loop *l, int64_t s, int64_t now)
{
	struct posts *p = l->posts;
	struct post_qp *m = &p->qp[s];
	cc_start(&l->tx->qps[s], real_s(l, now), &p->started_trace[p->n_started / 2 * 3]);
	p->started[p->n_started++] = s;
	p->started[p->n_started++] = now;
	m->started = 1;
	l->tx->qps[s].next_trace_ns = now + p->trace_ns;
	wake(l, s, now, m->post_ns + p->overhead_ns);  /* the NIC's per-message overhead */
}

/* Books.arm_rto: sender slot `s`'s retransmission timer, if running, into the
 * control line at its deadline (wall), replacing the one armed before. 0, or -1 if
 * the line cannot grow. */
static int rto_arm(struct loop *l, int64_t s)
{
	const struct tx_gbn *g = &l->tx->qps[s].gbn;
	struct post_qp *m = &l->posts->qp[s];

	if (isnan(g->timer_start_s))
		return 0;
	m->rto_ns = l->t0_ns + (int64_t)((g->timer_start_s + g->timeout_s) * l->posts->scale_ns)
		+ m->fwd_ns;
	return ctrl_push(l, (struct ctrl_held){m->rto_ns, 0, m->msg, KIND_RTO, 0, 0, 0});
}

/* Requester._acked: sender slot `s`'s message is wholly acknowledged at `t_ns`. */
static void acked(struct loop *l, int64_t s, int64_t t_ns)
{
	struct posts *p = l->posts;
	struct post_qp *m = &p->qp[s];
	struct tx_qp *q = &l->tx->qps[s];

	m->acked_ns = t_ns;
	m->rto_ns = NEVER;
	if (!q->idle) {
		struct tx_nic *nic = l->nics[m->nic];
		int64_t k = 0;

		q->idle = 1;
		while (nic->active[k] != s)
			k++;
		remove_active(nic, k);
	}
	p->acked[p->worker] = ++p->acked_here;
	if (p->acked_here == p->n_senders)  /* everyone re-checks "all acknowledged" */
		for (int64_t w = 0; w < p->n_workers; w++)
			eventfd_write(p->wake_fds[w], 1);
}

/* Requester.on_ack for a QP C acts for: a cumulative ACK (not a NAK, no ECN echo)
 * of message `msg` at `t_ns` (NIC time); 1 if C took it, 0 if it is Python's, -1 if
 * the control line cannot grow. Neither congestion control off nor DCQCN (whose
 * on_ack is the base's no-op) has anything to learn from it; the C twins of DCTCP
 * (dctcp_cc.h: its additive increase, its windows of observation) and TIMELY
 * (timely_cc.h: its rate from the RTT) do. */
static int ack_here(struct loop *l, int64_t msg, uint32_t psn, uint32_t arg, int64_t t_ns)
{
	const struct posts *p = l->posts;

	if (!p || msg < 0 || msg >= l->n_msgs || (arg & AETH_NAK_PSN_SEQ) == AETH_NAK_PSN_SEQ
	    || (arg & ARG_BECN))
		return 0;
	int64_t s = p->sender[msg];

	if (s < 0 || !p->qp[s].by_c || !p->qp[s].started)
		return 0;
	struct tx_qp *q = &l->tx->qps[s];
	struct tx_gbn *g = &q->gbn;
	int64_t una = g->una;

	if (!gbn_on_ack(g, psn, real_s(l, t_ns)))
		return 1;
	if (q->dctcp || q->timely) {  /* CongestionControl.on_ack, where it does something */
		double rtt_s = (double)(t_ns - q->tx_ns[g->una - 1]) / p->scale_ns;

		if (q->dctcp) {     /* with the payload bytes newly acknowledged */
			int64_t pay = l->tx->payload_bytes, size = q->size_bytes;
			int64_t now_b = g->una * pay < size ? g->una * pay : size;
			int64_t before_b = una * pay < size ? una * pay : size;

			dctcp_on_ack(q->dctcp, (double)(now_b - before_b), rtt_s, real_s(l, t_ns));
			q->window_bytes = q->dctcp->window_bytes;
		} else {
			timely_on_ack(q->timely, rtt_s);
			q->rate_bps = q->timely->rate;
		}
	}
	if (g->una >= g->total_packets) {
		if (p->qp[s].acked_ns < 0)
			acked(l, s, t_ns);
		return 1;
	}
	if (q->idle) {
		int64_t now = mono_ns() - p->qp[s].fwd_ns;

		if (g->nxt < g->total_packets)
			wake(l, s, now, now);
		else if (rto_arm(l, s))
			return -1;
	}
	return 1;
}

/* Requester.on_due for a QP C acts for: its retransmission timer `h` is due at `now`
 * (wall). 0, or -1 if the control line cannot grow. */
static int rto_fire(struct loop *l, const struct ctrl_held *h, int64_t now)
{
	int64_t s = l->posts->sender[h->msg];
	struct post_qp *m = &l->posts->qp[s];
	struct tx_gbn *g = &l->tx->qps[s].gbn;

	if (h->release_ns != m->rto_ns)
		return 0;           /* replaced or disarmed since */
	m->rto_ns = NEVER;
	if (g->una >= g->total_packets)
		return 0;
	now -= m->fwd_ns;
	gbn_advance(g, real_s(l, now));
	if (g->nxt < g->total_packets) {
		wake(l, s, now, now);
		return 0;
	}
	return rto_arm(l, s);
}

/* An EV_DONE of a read: its local dependants posted; whether the event stays for
 * Python (as EV_ANNOUNCE: another worker waits for the message too). -1: the
 * control line cannot grow. */
static int done_here(struct loop *l, struct rx_event *e)
{
	const struct posts *p = l->posts;
	int64_t msg = (int64_t)e->qpn - FIRST_QPN;

	if (msg < 0 || msg >= l->n_msgs)
		return 1;
	p->received[msg] = 1;
	if (post_done(l, msg, e->rx_ns))
		return -1;
	e->kind = EV_ANNOUNCE;
	return p->remote[msg];
}

/*
 * Take the ACKs and CNPs of ring `h`'s last read (`c`) that the control line
 * holds out of its events, and the completions C posts from (`posts`), keeping
 * the others, with their INT blocks, in order. 0, or -1 if the line cannot grow
 * for a completion (an ACK or CNP it cannot hold stays Python's).
 */
int ctrl_hold(struct loop *l, int64_t h, const struct rx_call *c)
{
	struct rx_event *ev = c->ev;
	uint32_t n = *c->n_ev, kept = 0;

	for (uint32_t k = 0; k < n; k++) {
		struct rx_event e = ev[k];
		int64_t msg = (int64_t)e.qpn - FIRST_QPN;
		int held = (e.kind == EV_CNP_IN ||
			    (e.kind == EV_ACK_IN && !(c->intbuf && c->intbuf[(size_t)k * INT_BLOCK_BYTES])))
			&& msg >= 0 && msg < l->n_msgs && l->ctrl_delay_ns[msg] > 0
			&& l->ctrl_host[msg] == h
			&& ctrl_push(l, (struct ctrl_held){e.rx_ns + l->ctrl_delay_ns[msg], 0, msg,
							   e.kind, e.psn, e.arg, e.msn}) == 0;

		if (e.kind == EV_DONE && l->posts) {
			int stays = done_here(l, &e);

			if (stays < 0)
				return -1;
			held = !stays;
		} else if (!held && e.kind == EV_ACK_IN && msg >= 0 && msg < l->n_msgs
			   && l->ctrl_delay_ns[msg] == 0 && l->ctrl_host[msg] == h
			   && !(c->intbuf && c->intbuf[(size_t)k * INT_BLOCK_BYTES])) {
			int took = ack_here(l, msg, e.psn, e.arg, e.rx_ns);  /* NIC time: no delay */

			if (took < 0)
				return -1;
			held = took;
		}
		if (held)
			continue;
		ev[kept] = e;  /* an EV_DONE's kind may have changed */
		if (kept != k && c->intbuf)
			memcpy(c->intbuf + (size_t)kept * INT_BLOCK_BYTES,
			       c->intbuf + (size_t)k * INT_BLOCK_BYTES, INT_BLOCK_BYTES);
		kept++;
	}
	*c->n_ev = kept;
	return 0;
}

void loop_free(struct loop *l)
{
	free(l->heap);
	l->heap = NULL;
	l->heap_n = l->heap_cap = 0;
}

/* The NIC slot due first, for its pacing slot or (`*line`) its delay lines (-1:
 * none); when in `*at`. */
static int64_t first_nic(const struct loop *l, int64_t *at, int *line)
{
	int64_t k = -1, best = NEVER;

	*line = 0;
	for (int64_t i = 0; i < l->n_nics; i++) {
		if (l->due[i] < best) {
			best = l->due[i];
			k = i;
			*line = 0;
		}
		if (l->nics[i] && l->nics[i]->line_due < best) {
			best = l->nics[i]->line_due;
			k = i;
			*line = 1;
		}
	}
	*at = best;
	return k;
}

static int64_t next_due(const struct loop *l)
{
	int64_t at;
	int line;

	first_nic(l, &at, &line);
	if (l->py_due < at)
		at = l->py_due;
	return ctrl_due(l) < at ? ctrl_due(l) : at;
}

static int arm_timer(struct loop *l, int64_t at_ns)
{
	struct itimerspec spec = {0};

	if (at_ns == l->timer_armed)
		return 0;
	if (at_ns < 1)
		at_ns = 1;
	spec.it_value.tv_sec = at_ns / 1000000000;
	spec.it_value.tv_nsec = at_ns % 1000000000;
	if (timerfd_settime((int)l->timer_fd, TFD_TIMER_ABSTIME, &spec, 0) != 0)
		return -errno;
	l->timer_armed = at_ns;
	return 0;
}

/* Sleep until `due` (wall ns) on the clock alone, then the fds that got ready
 * meanwhile into `evs`; their count, or -1 with errno set. */
static int sleep_until(struct loop *l, int64_t due, struct epoll_event *evs)
{
	struct timespec ts = {due / 1000000000, due % 1000000000};
	int err = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, 0);

	if (err) {
		errno = err;
		return -1;
	}
	return epoll_wait((int)l->ep_io, evs, MAX_READY, 0);
}

/* Phase 1's wait: the ready fds into `ready`, sleeping first if nothing is ready
 * and nothing is due within a turn. 0, -errno, or DRAIN_FIRST: it would sleep, and
 * Python has the books of C's starts to keep first (in time it would sleep away). */
static int gather(struct loop *l)
{
	struct epoll_event evs[MAX_READY];
	int n = epoll_wait((int)l->ep_io, evs, MAX_READY, 0);

	l->n_ready = l->at_ready = 0;

	if (n == 0) {
		int64_t now = mono_ns(), due = next_due(l);

		if (due == NEVER || due - now > l->turn_ns || (due == l->wait_ns && due > now)) {
			if (l->posts && l->posts->n_started)
				return DRAIN_FIRST;
			l->wakeups++;
			if (due - now <= l->batch_ns) {
				n = sleep_until(l, due, evs);
			} else {
				int err = arm_timer(l, due - now > l->idle_ns ? now + l->idle_ns : due);

				if (err)
					return err;
				n = epoll_wait((int)l->ep, evs, MAX_READY, -1);
			}
		}
	}
	if (n < 0)
		return errno == EINTR ? 0 : -errno;  /* a signal: Python's handler runs next */
	for (int i = 0; i < n; i++)
		l->ready[i] = evs[i].data.fd;
	l->n_ready = n;
	return 0;
}

/* Read ring `h` at `now`; LOOP_EVENTS if the read left events, else -1. */
static int read_ring(struct loop *l, int64_t h, int64_t now)
{
	struct rx_call *c = l->rings[h];

	c->lat = l->lat + l->n_lat;
	int got = l->read(c);

	l->n_lat += *c->n_lat;
	if (l->n_msgs && *c->n_ev && ctrl_hold(l, h, c)) {
		l->err = ENOMEM;
		return LOOP_ERROR;
	}
	if (got) {
		int64_t oldest = *c->oldest_ns > l->t0_ns ? *c->oldest_ns : l->t0_ns;

		l->packets_received += got;
		/* what arrived before the run's start waited for the start, not for a read */
		l->rx_lags[l->n_rx_lags++] = now - oldest;
		l->rx_lags[l->n_rx_lags++] = got;
	}
	if (*c->n_ev) {
		l->slot = h;
		return LOOP_EVENTS;
	}
	return -1;
}

/* Phase 1: the ready fds, in epoll's order. */
static int serve_ready(struct loop *l)
{
	while (l->at_ready < l->n_ready) {
		int fd = l->ready[l->at_ready];
		int64_t h = 0;

		if (fd == l->timer_fd) {  /* re-armed before the next sleep resets it */
			l->timer_armed = 0;
			l->at_ready++;
			continue;
		}
		while (h < l->n_rings && l->ring_fd[h] != fd)
			h++;
		if (h == l->n_rings) {
			l->at_ready++;
			l->slot = fd;
			return LOOP_FD;
		}
		if (l->lat_cap - l->n_lat < (int64_t)l->rings[h]->budget * LAT_PER_FRAME ||
		    l->rx_lags_cap - l->n_rx_lags < 2)
			return LOOP_DRAIN;
		l->at_ready++;
		int r = read_ring(l, h, mono_ns());

		if (r >= 0)
			return r;
	}
	return -1;
}

/* Phase 2: the deadlines due within a turn of the pass, earliest first. */
static int fire_due(struct loop *l)
{
	int64_t now = l->now;

	for (;;) {
		if (l->fired) {
			l->fired = 0;
			now = mono_ns();
			if (now > l->end)
				break;
		}
		int64_t nic_due;
		int line;
		int64_t k = first_nic(l, &nic_due, &line);
		int64_t due = nic_due < l->py_due ? nic_due : l->py_due;
		int64_t held = ctrl_due(l);

		if (held < due)
			due = held;
		if (due == NEVER || due > now + l->turn_ns || (due == l->wait_ns && due > now))
			break;
		struct posts *p = l->posts;

		if (held == due && l->heap[0].kind == KIND_POST && p->started_cap - p->n_started < 2)
			return LOOP_DRAIN;
		l->now = now;
		l->fired = 1;
		if (held == due) {
			struct ctrl_held *h = &l->ctrl;
			int took = 0;

			*h = ctrl_pop(l);
			l->slot = h->msg;
			if (h->kind == KIND_RTO) {
				took = rto_fire(l, h, now) ? -1 : 1;
			} else if (h->kind == KIND_POST) {
				int64_t s = p->sender[h->msg];

				if (!p->qp[s].by_c)
					return LOOP_START;
				post_start(l, s, now - p->qp[s].fwd_ns);
				took = 1;
			} else if (h->kind == EV_ACK_IN && p && p->sender[h->msg] >= 0) {
				took = ack_here(l, h->msg, h->psn, h->arg,
						h->release_ns - p->qp[p->sender[h->msg]].fwd_ns);
			}
			if (took < 0) {
				l->err = ENOMEM;
				return LOOP_ERROR;
			}
			if (!took)
				return LOOP_CTRL;
			continue;
		}
		if (l->py_due <= nic_due) {
			l->slot = l->py_due;
			return LOOP_PY;
		}
		l->slot = k;
		struct tx_nic *nic = l->nics[k];
		struct tx_call *c = l->tx;

		if (line) {
			l->tx_event = -1;
			if (l->blocked[k])
				return LOOP_LINE;
			c->nic = nic;
			c->now = now;
			c->horizon = now + l->turn_ns;
			c->build_only = 0;
			int ev = l->release(c);

			if (ev != TX_ARM) {
				l->tx_event = ev;
				return LOOP_LINE;
			}
			continue;
		}
		l->due[k] = NEVER;
		if (!nic || l->blocked[k])
			return LOOP_NIC;

		c->nic = nic;
		c->now = now - nic->fwd_ns;
		c->horizon = c->now + l->turn_ns;
		int ev = l->service(c);

		/* out of frames (window full or all sent): wait for ACKs or the timer */
		while (ev == TX_IDLE && p && p->qp[c->qp].by_c) {
			if (rto_arm(l, c->qp)) {
				l->err = ENOMEM;
				return LOOP_ERROR;
			}
			ev = l->service(c);
		}

		if (ev == TX_EMPTY)  /* nothing left to send: tx_service closed its busy period */
			continue;
		if (ev != TX_ARM) {
			l->tx_event = ev;
			return LOOP_TX;
		}
		l->due[k] = c->arm_ns;
		if (due > now && l->due[k] == due) {  /* fired early, re-armed for then */
			l->wait_ns = due;
			break;
		}
	}
	l->now = now;
	l->phase = 0;
	return LOOP_DONE;
}

/* Go on with the pass from where it stopped; one of LOOP_*. */
static int one_pass(struct loop *l)
{
	if (l->phase == 0) {
		int err = gather(l);

		if (err == DRAIN_FIRST)
			return LOOP_DRAIN;
		if (err) {
			l->err = -err;
			return LOOP_ERROR;
		}
		l->phase = 1;
	}
	if (l->phase == 1) {
		int r = serve_ready(l);

		if (r >= 0)
			return r;
		l->phase = 2;
		l->now = mono_ns();
		l->end = l->now + l->turn_ns;
		l->fired = 0;
	}
	return fire_due(l);
}

/* Go on with the pass from where it stopped, and with the next ones until Python
 * has something to do; one of LOOP_*. */
int loop_pass(struct loop *l)
{
	int r;

	do
		r = one_pass(l);
	while (r == LOOP_DONE && l->now < l->house_ns);
	return r;
}
