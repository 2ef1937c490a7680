// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu engine hot path: receive a batch of RoCEv2 frames from a TPACKET_V2
 * ring and run the responder's go-back-N for data frames.
 *
 * Per data frame the state machine is traffic/gbn.py's GbnReceiver (the
 * reference; tests/unit/test_rx.py checks this file against it frame by frame),
 * or for a QP with `selective` set traffic/selective_repeat.py's SrReceiver
 * (sr_packet: a bitmap of the frames held past the expected one; its ACKs and
 * selective NAKs carry an MSN of their own, EV_SR; tests/unit/test_rx_sr.py):
 * in-order frames are delivered and ACKed every `coalesce` frames, at the
 * last one and at one carrying AckReq; the first frame past a gap is NAKed
 * once; anything else is a duplicate, re-ACKed with the latest delivered PSN.
 * Every ACK and NAK carries the ECN echo of the frames it newly acknowledges;
 * with `ce_ack` a delivered frame whose CE state differs from that of the
 * frames awaiting their ACK first ACKs those (DCTCP's receiver); with
 * `ack_timer` the first delivered frame left waiting for its ACK is reported
 * (EV_PENDING: Python arms the delayed-ACK timer). Only what
 * Python must act on comes back, as events in arrival order: an ACK, NAK or CNP
 * C could not send (ACK/NAK arg: bit 0 complete, bit 1 ECN echo), a completed message, and the ACK
 * (arg: AETH syndrome, bit 8 the BECN echo) and CNP frames that belong to the
 * host's senders. Latency samples go to their own buffer.
 *
 * In-band telemetry (HPCC, core/frame.py): a reply to a data frame carries that
 * frame's INT block, and an ACK arriving for one of the host's senders hands its
 * echoed block over; either is copied to `intbuf` at the event's index (a block
 * of INT_BLOCK_BYTES per event; hop count 0: none). `intbuf` may be NULL.
 *
 * ACKs and NAKs are written and sent here (ack_send) on the QP's `ack_fd`, byte
 * for byte what traffic/roce.py's ResponderTemplate.write_ack and
 * traffic/int_telemetry.py's ack_with_int write; a reply goes back to Python as an
 * event instead while its NIC has a backlog (`blocked`: so do all of that NIC's)
 * or when the socket refuses it (so does every control frame after it in the
 * batch): each NIC's control frames leave in the order the Python path sends them.
 *
 * CNPs are decided here too, as traffic/dcqcn.py's NotificationPoint decides
 * (the first CE-marked frame of a QP, then at most one per `cnp_interval_s` of
 * real time; forgotten when the message completes), and sent from the QP's
 * prototype `cnp_tmpl` or handed to Python (EV_CNP) on the same terms as a reply.
 *
 * Frames are the ring's header-only snaps (engine/rawsock.py, INT blocks
 * included); the payload length comes from the IPv4 total length.
 */
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "crc32.h"
#include "roce_rx.h"

#define TP_STATUS_USER 1u
#define PSN_MASK 0xFFFFFFu
#define PSN_HALF 0x800000u
#define IP_OVERHEAD 44          /* IPv4 20 + UDP 8 + BTH 12 + ICRC 4 */
#define ACK_IP_BYTES 48         /* an ACK's IPv4 total length without INT: + AETH 4 */
#define TS_BYTES 8
#define OFF_IP 14
#define OFF_BECN 46             /* BTH byte 4: FECN, BECN */
#define BECN_BIT 0x40
#define OFF_PSN_WORD 50
#define OFF_AETH 54
#define AETH_ACK 0x00
#define AETH_SR_NAK 0x40        /* selective repeat's NAK: | run - 1 */
#define SR_WINDOW 1024          /* selective_repeat.WINDOW_PACKETS */
#define SR_MAX_RUN 32

struct rx_qp {                  /* mirrors engine/rx.py: _RxQp */
	uint32_t host;              /* owning host + 1; 0: not a QP this worker receives */
	uint32_t total;
	uint32_t coalesce;
	uint32_t expected;
	uint32_t since_ack;
	uint32_t nak_out;
	uint32_t ce_ack;            /* DCTCP's ACK on a CE state change */
	uint32_t unreported;        /* delivered since the last ACK or NAK */
	uint32_t echo;              /* one of those was CE-marked */
	uint32_t ack_timer;         /* report the first frame left waiting (EV_PENDING) */
	uint64_t delivered, duplicates, out_of_order, bytes, ce, seen;
	int64_t first_rx_ns, done_ns;
	int32_t ack_fd;             /* socket of the reply NIC */
	uint32_t nic;               /* the reply NIC's index in `blocked` */
	uint32_t has_cnp;           /* last_cnp_s holds this message's latest CNP */
	uint32_t cnps;              /* CNPs decided */
	double last_cnp_s;          /* real seconds after t0 */
	uint32_t selective;         /* selective repeat instead of go-back-N */
	uint32_t reorder;           /* PSNs beyond a hole that make it lost */
	uint32_t high;              /* one past the highest index received */
	uint32_t nak_scan;          /* holes below it were NAKed */
	uint32_t acked;             /* `expected` as the last ACK reported it */
	uint64_t beyond;            /* frames past the bitmap, dropped */
	uint64_t got[SR_WINDOW / 64];  /* ring: received indices above `expected` */
};

struct tp2 {                    /* struct tpacket2_hdr */
	uint32_t status, len, snaplen;
	uint16_t mac, net;
	uint32_t sec, nsec;
};

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const uint8_t *p)
{
	return (uint64_t)be32(p) << 32 | be32(p + 4);
}

#define ARG_COMPLETE 1u
#define ARG_ECHO 2u

/* RoCEv2's ICRC of `frame` (`len` bytes, ICRC last): CRC-32 over a pseudo-LRH of
 * ones and the frame from IPv4 on, with the fields routers change masked to ones
 * (traffic/roce.py: _masked). */
static uint32_t icrc(const uint8_t *frame, size_t len)
{
	static const uint8_t ones[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
	uint8_t hdr[64];
	size_t udp = OFF_IP + (size_t)(frame[OFF_IP] & 0x0F) * 4;
	size_t n = udp + 8 + 12;    /* masked bytes end after the BTH */

	if (n > sizeof(hdr) || n > len - 4)
		return 0;
	memcpy(hdr, frame, n);
	hdr[OFF_IP + 1] = hdr[OFF_IP + 8] = hdr[OFF_IP + 10] = hdr[OFF_IP + 11] = 0xFF;
	hdr[udp + 6] = hdr[udp + 7] = 0xFF;
	hdr[udp + 8 + 4] = 0xFF;
	uint32_t c = crc32_update(0, ones, 8);

	c = crc32_update(c, hdr + OFF_IP, n - OFF_IP);
	return crc32_update(c, frame + n, len - 4 - n);
}

static void put_be16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	put_be16(p, v >> 16);
	put_be16(p + 2, v);
}

/*
 * Write into `out` the ACK (syndrome AETH_ACK) or NAK (AETH_NAK_PSN_SEQ) of PSN
 * `psn` from prototype `tmpl` (ACK_FRAME_BYTES): MSN, BECN for the ECN echo, and the INT
 * block `block` (hop count first; NULL or 0 hops: none) after the AETH with the IPv4
 * and UDP lengths and the IPv4 checksum that follow. Returns the frame's length.
 */
static size_t ack_write(uint8_t *out, const uint8_t *tmpl, uint32_t psn, uint32_t syndrome,
			uint32_t msn, int echo, const uint8_t *block)
{
	size_t len = ACK_FRAME_BYTES;

	memcpy(out, tmpl, OFF_ACK_INT);
	if (echo)
		out[OFF_BECN] |= BECN_BIT;
	put_be32(out + OFF_PSN_WORD, psn & PSN_MASK);
	put_be32(out + OFF_AETH, syndrome << 24 | (msn & PSN_MASK));
	if (block && block[0]) {
		size_t n = INT_HEADER_BYTES + (size_t)block[0] * INT_RECORD_BYTES;
		uint32_t sum = 0;

		memcpy(out + OFF_ACK_INT, block, n);
		len = OFF_ACK_INT + n + 4;
		put_be16(out + OFF_IP + 2, (uint32_t)(len - OFF_IP));
		put_be16(out + OFF_IP + 20 + 4, (uint32_t)(len - OFF_IP - 20));
		put_be16(out + OFF_IP + 10, 0);
		for (int k = 0; k < 20; k += 2)
			sum += (uint32_t)out[OFF_IP + k] << 8 | out[OFF_IP + k + 1];
		while (sum >> 16)
			sum = (sum & 0xFFFF) + (sum >> 16);
		put_be16(out + OFF_IP + 10, ~sum & 0xFFFF);
	}
	uint32_t c = icrc(out, len);

	out[len - 4] = (uint8_t)c;
	out[len - 3] = (uint8_t)(c >> 8);
	out[len - 2] = (uint8_t)(c >> 16);
	out[len - 1] = (uint8_t)(c >> 24);
	return len;
}

/* What a batch's control frames need: where they may be sent from C, what it sent. */
struct replies {
	const uint8_t *blocked;     /* per NIC: Python holds frames it must send first */
	const uint8_t *ack_tmpl;    /* ACK_FRAME_BYTES per QP slot */
	const uint8_t *cnp_tmpl;    /* CNP_FRAME_BYTES per QP slot */
	uint64_t *sent;             /* control frames sent from C */
	double scale_ns;            /* emulated ns per real second */
	double cnp_interval_s;      /* real */
	int defer;                  /* from here on this batch's frames go to Python */
};

/* Send control frame `out` of QP `q` now; 0 if it must go to Python as an event. */
static int ctrl_send(struct replies *r, const struct rx_qp *q, const uint8_t *out, size_t len)
{
	if (r->defer || r->blocked[q->nic])
		return 0;
	if (send(q->ack_fd, out, len, MSG_DONTWAIT) != (ssize_t)len) {
		r->defer = 1;       /* Python retries it and keeps it if the qdisc refuses */
		return 0;
	}
	++*r->sent;
	return 1;
}

/* Send reply `kind` (EV_ACK or EV_NAK, `arg` its event argument) for the QP in slot
 * `qi` with the INT `block` now; 0 if it must go to Python as an event instead. */
static int ack_send(struct replies *r, const struct rx_qp *q, uint32_t qi, uint32_t kind,
		    uint32_t psn, uint32_t arg, const uint8_t *block)
{
	uint8_t out[ACK_FRAME_BYTES + INT_BLOCK_BYTES];

	return ctrl_send(r, q, out, ack_write(out, r->ack_tmpl + (size_t)qi * ACK_FRAME_BYTES,
					    psn, kind == EV_ACK ? AETH_ACK : AETH_NAK_PSN_SEQ,
					    arg & ARG_COMPLETE, !!(arg & ARG_ECHO), block));
}

/* Send a selective-repeat reply (EV_SR: `arg` its echo bit | AETH syndrome << 8,
 * `msn` its AETH MSN) now; 0 if it must go to Python as an event instead. */
static int sr_send(struct replies *r, const struct rx_qp *q, uint32_t qi, uint32_t psn,
		     uint32_t arg, uint32_t msn, const uint8_t *block)
{
	uint8_t out[ACK_FRAME_BYTES + INT_BLOCK_BYTES];

	return ctrl_send(r, q, out, ack_write(out, r->ack_tmpl + (size_t)qi * ACK_FRAME_BYTES,
					    psn, arg >> 8, msn, !!(arg & ARG_ECHO), block));
}

/* A CE-marked frame of QP `q` arrived at `rx_ns`: 1 if the notification point
 * decides on a CNP (NotificationPoint.on_packet, in real seconds after t0). */
static int cnp_due(const struct replies *r, struct rx_qp *q, int64_t rx_ns, int64_t t0_ns)
{
	double now_s = (double)(rx_ns - t0_ns) / r->scale_ns;

	if (q->has_cnp && now_s - q->last_cnp_s < r->cnp_interval_s)
		return 0;
	q->has_cnp = 1;
	q->last_cnp_s = now_s;
	q->cnps++;
	return 1;
}

/* The echo of a reply acknowledging everything delivered so far, as its arg bit. */
static uint32_t reported(struct rx_qp *q)
{
	uint32_t echo = q->echo ? ARG_ECHO : 0;

	q->echo = 0;
	q->unreported = 0;
	q->acked = q->expected;
	return echo;
}

static int sr_got(const struct rx_qp *q, uint32_t i)
{
	uint32_t k = i % SR_WINDOW;

	return (int)(q->got[k >> 6] >> (k & 63) & 1);
}

/* SrReceiver._hole: the next run of missing indices reordering cannot explain; 0 if none. */
static int sr_hole(struct rx_qp *q, uint32_t *first, uint32_t *run)
{
	int64_t limit = (int64_t)q->high - q->reorder;
	uint32_t i = q->nak_scan > q->expected ? q->nak_scan : q->expected;
	uint32_t n = 1;

	while ((int64_t)i < limit && i != q->expected && sr_got(q, i))
		i++;
	if ((int64_t)i >= limit) {
		if (limit > (int64_t)q->nak_scan)
			q->nak_scan = (uint32_t)limit;
		return 0;
	}
	while (n < SR_MAX_RUN && (int64_t)(i + n) < limit && !sr_got(q, i + n))
		n++;
	q->nak_scan = i + n;
	*first = i;
	*run = n;
	return 1;
}

/*
 * SrReceiver.on_packet for the frame `psn` (`d` past the expected index) of `q`, the
 * CE-change flush already done: place it if it is new, then the reply (0 or EV_SR)
 * with its PSN, event argument and MSN (the highest PSN received). *deliver: the
 * frame was placed.
 */
static int sr_packet(struct rx_qp *q, uint32_t d, uint32_t payload, int ce, int ackreq,
		     uint32_t *psn_out, uint32_t *arg, uint32_t *msn, int *deliver)
{
	uint32_t exp = q->expected, index = exp + d, first, run;

	*deliver = 0;
	if (d >= PSN_HALF || exp + d >= q->total) {
		q->duplicates++;
	} else if (d >= SR_WINDOW) {
		q->beyond++;
	} else if (d && sr_got(q, index)) {
		q->duplicates++;
	} else {
		*deliver = 1;
		if (d == 0) {
			exp++;
			while (exp < q->high && sr_got(q, exp)) {
				q->got[exp % SR_WINDOW >> 6] &= ~(1ull << (exp % SR_WINDOW & 63));
				exp++;
			}
			q->since_ack += exp - index;  /* it and the frames it released */
			q->expected = exp;
		} else {
			q->got[index % SR_WINDOW >> 6] |= 1ull << (index % SR_WINDOW & 63);
			q->out_of_order++;
		}
		if (index + 1 > q->high)
			q->high = index + 1;
		q->delivered++;
		q->bytes += payload;
		q->unreported++;
		q->echo |= ce;
	}
	/* only a frame that is not the next in order can reveal a loss; a NAK reports
	 * the loss only, the ACK's duties stay pending */
	if (!(*deliver && d == 0) && sr_hole(q, &first, &run)) {
		if (q->acked == exp)
			q->unreported = 0;  /* it reports every arrival */
		*psn_out = first & PSN_MASK;
		*arg = (AETH_SR_NAK | (run - 1)) << 8;
		*msn = (q->high - 1) & PSN_MASK;
		return EV_SR;
	}
	if (!*deliver || exp >= q->total || ackreq || q->since_ack >= q->coalesce) {
		q->since_ack = 0;
		*psn_out = (exp - 1) & PSN_MASK;
		*arg = reported(q) | AETH_ACK << 8;
		*msn = (q->high - 1) & PSN_MASK;
		return EV_SR;
	}
	return 0;
}

static int is_data(uint8_t op)
{
	return op == 0x06 || op == 0x07 || op == 0x08 || op == 0x0A;
}

/* Copy the INT block at `at` of a frame (snapped `snap` bytes, `room` bytes of it
 * meant for INT) into event slot `k` of `intbuf`; hop count 0 if there is none. */
static void int_copy(uint8_t *intbuf, uint32_t k, const uint8_t *f, uint32_t at,
		     uint32_t snap, int64_t room)
{
	uint8_t *dst;
	uint32_t hops, n;

	if (!intbuf)
		return;
	dst = intbuf + (size_t)k * INT_BLOCK_BYTES;
	dst[0] = 0;
	if (room < INT_HEADER_BYTES || snap < at + INT_HEADER_BYTES)
		return;
	hops = f[at] > INT_MAX_HOPS ? INT_MAX_HOPS : f[at];
	n = INT_HEADER_BYTES + hops * INT_RECORD_BYTES;
	if (hops == 0 || n > room || at + n > snap)
		return;
	memcpy(dst, f + at, n);
	dst[0] = (uint8_t)hops;
}

/*
 * Read up to `budget` frames from the ring of host `host` (slot offsets
 * `offsets`, next slot *idx). Returns the number of frames read; events go to
 * `ev` (at most 4 per frame), latency samples (index, rx_ns - t0, one-way ns,
 * ce) to `lat` (at most 4 int64 per frame), counted in *n_ev and *n_lat; the
 * arrival of the first (oldest) frame read to *oldest_ns.
 */
static int roce_rx(uint8_t *ring, const uint32_t *offsets, uint32_t n_slots, uint32_t *idx,
	    uint32_t budget, uint32_t host, int64_t rt_offset_ns, int64_t t0_ns,
	    uint32_t sample_every, uint64_t *rx_count, struct rx_qp *qps, uint32_t n_qps,
	    struct rx_event *ev, uint32_t *n_ev, int64_t *lat, uint32_t *n_lat,
	    uint8_t *intbuf, struct replies *r, int64_t *oldest_ns)
{
	uint32_t i = *idx, got = 0, ne = 0, nl = 0;

	for (; got < budget; got++) {
		uint8_t *slot = ring + offsets[i];
		struct tp2 h;

		memcpy(&h, slot, sizeof(h));
		if (!(__atomic_load_n((uint32_t *)slot, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
			break;
		const uint8_t *f = slot + h.mac;
		int64_t rx_ns = (int64_t)h.sec * 1000000000 + h.nsec - rt_offset_ns;
		uint8_t op = f[42];
		uint32_t qpn = be32(f + 46) & PSN_MASK;
		uint32_t psn = be32(f + 50) & PSN_MASK;

		if (got == 0)
			*oldest_ns = rx_ns;

		if (is_data(op)) {
			/* QPN FIRST_QPN + i is slot i (one below FIRST_QPN wraps to no slot) */
			uint32_t qi = qpn - FIRST_QPN;
			struct rx_qp *q = qi < n_qps ? &qps[qi] : 0;

			if (!q || q->host != host + 1) {
				ev[ne++] = (struct rx_event){rx_ns, EV_UNKNOWN, qpn, psn, op};
				goto next;
			}
			int reth = op == 0x06 || op == 0x0A;
			uint32_t ip_len = (uint32_t)f[16] << 8 | f[17];
			uint32_t payload = ip_len - IP_OVERHEAD - (reth ? 16 : 0) - (f[43] >> 4 & 3);
			uint64_t ts = be64(f + (reth ? 70 : 54));
			int ce = (f[15] & 3) == 3;
			int ackreq = f[50] >> 7;
			uint32_t exp = q->expected;
			uint32_t d = (psn - exp) & PSN_MASK;
			int reply = 0, deliver = d == 0 && exp < q->total;
			uint32_t reply_psn = 0, reply_arg = 0, reply_msn = 0;

			if (q->first_rx_ns < 0)
				q->first_rx_ns = rx_ns;
			if (deliver && q->ce_ack && q->unreported && ce != (int)q->echo) {
				/* the CE state changed: ACK the earlier frames with theirs (selective
				 * repeat: with the highest PSN held before this frame as its MSN) */
				uint32_t arg = reported(q);
				uint32_t kind = q->selective ? EV_SR : EV_ACK;
				uint32_t msn = q->selective ? (q->high - 1) & PSN_MASK : 0;

				q->since_ack = 0;
				/* no INT: those frames' blocks were not kept */
				if (!(q->selective
				      ? sr_send(r, q, qi, (psn - 1) & PSN_MASK, arg, msn, 0)
				      : ack_send(r, q, qi, EV_ACK, (psn - 1) & PSN_MASK, arg, 0))) {
					if (intbuf)
						intbuf[(size_t)ne * INT_BLOCK_BYTES] = 0;
					ev[ne++] = (struct rx_event){rx_ns, kind, qpn,
								     (psn - 1) & PSN_MASK, arg, msn};
				}
			}
			if (q->selective) {
				reply = sr_packet(q, d, payload, ce, ackreq, &reply_psn, &reply_arg,
						  &reply_msn, &deliver);
			} else if (deliver) {
				q->expected = exp + 1;
				q->delivered++;
				q->bytes += payload;
				q->nak_out = 0;
				q->unreported++;
				q->echo |= ce;
				if (++q->since_ack >= q->coalesce || exp + 1 == q->total || ackreq) {
					q->since_ack = 0;
					reply = EV_ACK;
					reply_psn = psn;
					reply_arg = reported(q);
				}
			} else if (d > 0 && d < PSN_HALF && exp + d < q->total) {
				q->out_of_order++;
				if (!q->nak_out) {
					q->nak_out = 1;
					reply = EV_NAK;
					reply_psn = exp & PSN_MASK;
					reply_arg = reported(q);
				}
			} else {
				q->duplicates++;
				q->since_ack = 0;
				reply = EV_ACK;
				reply_psn = (exp - 1) & PSN_MASK;
				reply_arg = reported(q);
			}
			q->seen++;
			if (ce) {
				q->ce++;
				if (cnp_due(r, q, rx_ns, t0_ns) &&
				    !ctrl_send(r, q, r->cnp_tmpl + (size_t)qi * CNP_FRAME_BYTES,
					       CNP_FRAME_BYTES))
					ev[ne++] = (struct rx_event){rx_ns, EV_CNP, qpn, psn, 0};
			}
			if (++*rx_count % sample_every == 0) {
				lat[nl++] = qi;
				lat[nl++] = rx_ns - t0_ns;
				lat[nl++] = rx_ns - (int64_t)ts;
				lat[nl++] = ce;
			}
			int complete = q->expected >= q->total;
			if (reply) {
				uint32_t at = reth ? OFF_INT_RETH : OFF_INT;
				uint32_t arg = reply_arg | (uint32_t)complete;

				const uint8_t *block = intbuf ? intbuf + (size_t)ne * INT_BLOCK_BYTES : 0;

				int_copy(intbuf, ne, f, at, h.snaplen, (int64_t)payload - TS_BYTES);
				if (!(reply == EV_SR
				      ? sr_send(r, q, qi, reply_psn, arg, reply_msn, block)
				      : ack_send(r, q, qi, reply, reply_psn, arg, block)))
					ev[ne++] = (struct rx_event){rx_ns, reply, qpn, reply_psn, arg,
								     reply_msn};
			}
			else if (q->ack_timer && q->unreported == 1 && deliver)
				ev[ne++] = (struct rx_event){rx_ns, EV_PENDING, qpn, psn, 0};
			if (complete && q->done_ns < 0) {
				q->done_ns = rx_ns;
				q->has_cnp = 0;     /* NotificationPoint.forget */
				ev[ne++] = (struct rx_event){rx_ns, EV_DONE, qpn, psn, 0};
			}
		} else if (op == 0x11) {
			uint32_t ip_len = (uint32_t)f[16] << 8 | f[17];

			int_copy(intbuf, ne, f, OFF_ACK_INT, h.snaplen, (int64_t)ip_len - ACK_IP_BYTES);
			ev[ne++] = (struct rx_event){rx_ns, EV_ACK_IN, qpn, psn,
						     f[OFF_AETH] | (f[OFF_BECN] & BECN_BIT ? ARG_BECN : 0),
						     be32(f + 54) & PSN_MASK};
		} else if (op == 0x81) {
			ev[ne++] = (struct rx_event){rx_ns, EV_CNP_IN, qpn, psn, 0};
		} else {
			ev[ne++] = (struct rx_event){rx_ns, EV_UNKNOWN, qpn, psn, op};
		}
next:
		__atomic_store_n((uint32_t *)slot, 0, __ATOMIC_RELEASE);
		if (++i == n_slots)
			i = 0;
	}
	*idx = i;
	*n_ev = ne;
	*n_lat = nl;
	return (int)got;
}

int roce_rx_call(const struct rx_call *c)
{
	struct replies r = {c->blocked, c->ack_tmpl, c->cnp_tmpl, c->ctrl_sent, c->scale_ns,
			    c->cnp_interval_s, 0};

	return roce_rx(c->ring, c->offsets, c->n_slots, c->idx, c->budget, c->host,
		       c->rt_offset_ns, c->t0_ns, c->sample_every, c->rx_count, c->qps,
		       c->n_qps, c->ev, c->n_ev, c->lat, c->n_lat, c->intbuf, &r, c->oldest_ns);
}

/* One reply frame as ack_send writes it (for tests against the Python writers). */
size_t roce_ack_write(uint8_t *out, const uint8_t *tmpl, uint32_t psn, uint32_t syndrome,
		      uint32_t msn, int echo, const uint8_t *block)
{
	return ack_write(out, tmpl, psn, syndrome, msn, echo, block);
}
