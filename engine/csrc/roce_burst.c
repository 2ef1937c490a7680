// SPDX-License-Identifier: GPL-2.0
/* fabricemu engine: the burst sender for Python (engine/burst.py); see roce_burst.h. */
#include "roce_burst.h"

int roce_burst_max(void)
{
	return MAX_BURST;
}

int roce_burst(int fd, const struct roce_shape *s, uint8_t *buf, uint32_t psn,
	       uint32_t count, uint64_t ts_ns, uint32_t ackreq_last)
{
	return roce_burst_send(fd, s, buf, psn, count, ts_ns, ackreq_last);
}
