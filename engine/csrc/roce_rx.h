// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu engine: the compiled receive loop's interface (roce_rx.c reads a ring
 * with it; roce_loop.c drains rings through it). engine/rx.py mirrors both structs.
 */
#ifndef ROCE_RX_H
#define ROCE_RX_H
#include <stdint.h>

struct rx_qp;

/* An event's kind (engine/rx.py: EV_*). */
enum { EV_ACK = 1, EV_NAK = 2, EV_CNP = 3, EV_DONE = 4, EV_ACK_IN = 5, EV_CNP_IN = 6,
       EV_UNKNOWN = 7, EV_PENDING = 8, EV_SR = 9 };

/* An EV_ACK_IN's `arg`: the AETH syndrome, and the ACK's BECN (ECN echo) here. */
#define ARG_BECN 0x100
#define AETH_NAK_PSN_SEQ 0x60   /* the syndrome of go-back-N's NAK (traffic/gbn.py: _NAK_TYPE) */

/* An event's INT block in `intbuf` (hop count 0: none). */
#define INT_BLOCK_BYTES (INT_HEADER_BYTES + INT_MAX_HOPS * INT_RECORD_BYTES)

struct rx_event {               /* mirrors engine/rx.py: _RxEvent */
	int64_t rx_ns;
	uint32_t kind, qpn, psn, arg;
	uint32_t msn;               /* EV_SR and EV_ACK_IN: the AETH MSN */
};

/* roce_rx's arguments in one block: the engine builds it once per ring and run,
 * so a call through ctypes converts one pointer instead of seventeen values. */
struct rx_call {                /* mirrors engine/rx.py: _RxCall */
	uint8_t *ring;
	const uint32_t *offsets;
	uint32_t n_slots, budget, host, sample_every;
	uint32_t *idx;
	int64_t rt_offset_ns, t0_ns;
	uint64_t *rx_count;
	struct rx_qp *qps;
	uint32_t n_qps, pad;
	struct rx_event *ev;
	uint32_t *n_ev;
	int64_t *lat;
	uint32_t *n_lat;
	uint8_t *intbuf;
	const uint8_t *blocked;
	const uint8_t *ack_tmpl;
	const uint8_t *cnp_tmpl;
	uint64_t *ctrl_sent;
	double scale_ns, cnp_interval_s;
	int64_t *oldest_ns;
};

int roce_rx_call(const struct rx_call *c);

#endif /* ROCE_RX_H */
