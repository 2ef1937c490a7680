// SPDX-License-Identifier: GPL-2.0
/*
 * zlib's CRC-32 (reflected, polynomial 0xEDB88320, pre- and post-inverted), table
 * driven: the ICRC arithmetic of the engine's C paths (roce_burst.c, roce_rx.c).
 * emu/cbuild.py hashes the headers beside a source into its build inputs.
 */
#ifndef FABRICEMU_CRC32_H
#define FABRICEMU_CRC32_H

#include <stddef.h>
#include <stdint.h>

static uint32_t crc_table[256];

__attribute__((constructor)) static void crc_table_init(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		crc_table[n] = c;
	}
}

/* zlib's crc32(crc, p, n): chained calls equal one over the joined bytes. */
static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	while (n--)
		crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
	return ~crc;
}

#endif
