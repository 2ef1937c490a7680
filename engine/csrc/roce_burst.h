// SPDX-License-Identifier: GPL-2.0
/*
 * fabricemu engine hot path: a burst of RoCEv2 data frames of one QP shape
 * (roce_burst.c exports it to Python, roce_tx.c calls it from its pacing loop).
 *
 * The same patching as traffic/roce.py's Shape.write (the reference, checked
 * byte for byte by tests/unit/test_burst.py), done for `count` consecutive PSNs
 * and handed to the kernel with one sendmmsg(2): per frame, copy the prototype,
 * write AckReq|PSN and the send timestamp (big-endian), and finish the ICRC
 * from precomputed state:
 *
 *     c    = crc32(window, prefix_crc)            -- the bytes that vary, 4-28
 *     icrc = A(c) ^ rest_crc                      -- A: run the CRC over the
 *                                                    constant rest (4 tables)
 *
 * stored little-endian, as Scapy encodes it. The decisions (which PSNs, when,
 * how many) are roce_tx.c's or Python's; this file only moves bytes.
 */
#ifndef ROCE_BURST_H
#define ROCE_BURST_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "crc32.h"

#define OFF_PSN_WORD 50
#define MAX_BURST 64

struct roce_shape {             /* mirrors engine/burst.py: _CShape */
	const uint8_t *frame;       /* prototype frame */
	uint32_t len;
	uint32_t ts_off;            /* send timestamp, u64 big-endian */
	uint32_t window_end;        /* the CRC window is [OFF_PSN_WORD, window_end) */
	uint32_t icrc_off;
	uint32_t prefix_crc;        /* zlib crc32 of the masked bytes before the window */
	uint32_t rest_crc;          /* zlib crc32(rest, 0) */
	uint32_t ackreq;            /* 0 or 1 */
	const uint32_t *advance;    /* 4 x 256 tables of the linear map A */
};

static inline void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static inline void put_be64(uint8_t *p, uint64_t v)
{
	put_be32(p, v >> 32);
	put_be32(p + 4, (uint32_t)v);
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24;
}

/*
 * Write frames for PSNs psn, psn+1, ... (24-bit wrap) into buf (count * len
 * bytes) and, if fd >= 0, send them; `ackreq_last` sets AckReq on the last
 * frame (the sender solicits an ACK). Returns the number of frames the kernel
 * took (count when fd < 0), or -errno if it took none.
 */
static inline int roce_burst_send(int fd, const struct roce_shape *s, uint8_t *buf, uint32_t psn,
				  uint32_t count, uint64_t ts_ns, uint32_t ackreq_last)
{
	struct mmsghdr msgs[MAX_BURST];
	struct iovec iov[MAX_BURST];
	const uint32_t *a = s->advance;

	if (count > MAX_BURST)
		count = MAX_BURST;
	for (uint32_t i = 0; i < count; i++) {
		uint8_t *f = buf + (size_t)i * s->len;
		uint32_t c;

		memcpy(f, s->frame, s->len);
		uint32_t ackreq = s->ackreq | (ackreq_last && i + 1 == count);

		put_be32(f + OFF_PSN_WORD, ackreq << 31 | ((psn + i) & 0xFFFFFF));
		put_be64(f + s->ts_off, ts_ns);
		c = crc32_update(s->prefix_crc, f + OFF_PSN_WORD, s->window_end - OFF_PSN_WORD);
		put_le32(f + s->icrc_off, a[c & 0xFF] ^ a[256 + (c >> 8 & 0xFF)] ^
			 a[512 + (c >> 16 & 0xFF)] ^ a[768 + (c >> 24)] ^ s->rest_crc);
		iov[i].iov_base = f;
		iov[i].iov_len = s->len;
		memset(&msgs[i], 0, sizeof(msgs[i]));
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	if (fd < 0)
		return (int)count;
	int sent = sendmmsg(fd, msgs, count, MSG_DONTWAIT);
	return sent < 0 ? -errno : sent;
}

#endif /* ROCE_BURST_H */
