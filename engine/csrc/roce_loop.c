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
 *   LOOP_DRAIN   the latency or receive-lag buffer is full: Python empties it;
 *   LOOP_ERROR   epoll or the timerfd failed (`err`: errno).
 */
#include "roce_tx.h"    /* first: it defines _GNU_SOURCE */
#include "roce_rx.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>

#define NEVER INT64_MAX
#define MAX_READY 256
#define LAT_PER_FRAME 4         /* roce_rx.c: int64 per latency sample */

enum { LOOP_DONE, LOOP_EVENTS, LOOP_FD, LOOP_PY, LOOP_TX, LOOP_NIC, LOOP_DRAIN, LOOP_ERROR,
       LOOP_LINE, LOOP_CTRL };

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

/*
 * Take the ACKs and CNPs of ring `h`'s last read (`c`) that the control line
 * holds out of its events, keeping the others, with their INT blocks, in order.
 */
void ctrl_hold(struct loop *l, int64_t h, const struct rx_call *c)
{
	struct rx_event *ev = c->ev;
	uint32_t n = *c->n_ev, kept = 0;

	for (uint32_t k = 0; k < n; k++) {
		const struct rx_event e = ev[k];
		int64_t msg = (int64_t)e.qpn - FIRST_QPN;
		int held = (e.kind == EV_CNP_IN ||
			    (e.kind == EV_ACK_IN && !(c->intbuf && c->intbuf[(size_t)k * INT_BLOCK_BYTES])))
			&& msg >= 0 && msg < l->n_msgs && l->ctrl_delay_ns[msg] > 0
			&& l->ctrl_host[msg] == h
			&& ctrl_push(l, (struct ctrl_held){e.rx_ns + l->ctrl_delay_ns[msg], 0, msg,
							   e.kind, e.psn, e.arg, e.msn}) == 0;

		if (held)
			continue;
		if (kept != k) {
			ev[kept] = e;
			if (c->intbuf)
				memcpy(c->intbuf + (size_t)kept * INT_BLOCK_BYTES,
				       c->intbuf + (size_t)k * INT_BLOCK_BYTES, INT_BLOCK_BYTES);
		}
		kept++;
	}
	*c->n_ev = kept;
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
 * and nothing is due within a turn. 0, or -errno. */
static int gather(struct loop *l)
{
	struct epoll_event evs[MAX_READY];
	int n = epoll_wait((int)l->ep_io, evs, MAX_READY, 0);

	l->n_ready = l->at_ready = 0;

	if (n == 0) {
		int64_t now = mono_ns(), due = next_due(l);

		if (due == NEVER || due - now > l->turn_ns || (due == l->wait_ns && due > now)) {
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
	if (l->n_msgs && *c->n_ev)
		ctrl_hold(l, h, c);
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
		l->now = now;
		l->fired = 1;
		if (held == due) {
			l->ctrl = ctrl_pop(l);
			l->slot = l->ctrl.msg;
			return LOOP_CTRL;
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
