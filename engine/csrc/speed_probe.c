// SPDX-License-Identifier: GPL-2.0
/*
 * The CPU speed probe (engine/speedprobe.py): a fixed piece of arithmetic, timed
 * every period on one CPU. The machine's own accounting misses a hypervisor that
 * slows its virtual CPUs without counting steal (a host's CPU quota, for one); a
 * piece of work that takes many times its best time shows it.
 *
 * probe_best(iters) is the work's best time over some runs (the CPU at full speed);
 * probe_run() times the work once a period until `stop` is set, and keeps, up to
 * `cap` of them, each spell the CPU was not ours: a run slower than `slow_ns` (from
 * its start), or a wake-up a period or more late (from when it was due: a CPU held
 * whole between two runs), to the run's end.
 */
#include <stdint.h>
#include <time.h>

struct probe {
	int64_t period_ns;
	int64_t iters;
	int64_t slow_ns;        /* a run at least this long is kept */
	volatile int64_t stop;
	int64_t runs;           /* runs timed */
	int64_t n_slow;         /* runs kept (at most cap) */
	int64_t cap;
	int64_t *start_ns;      /* CLOCK_MONOTONIC */
	int64_t *took_ns;
};

static int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* A dependent chain of multiplications: its time is the CPU's, not the memory's. */
static uint64_t work(int64_t iters)
{
	volatile uint64_t x = 1;

	for (int64_t i = 0; i < iters; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}

int64_t probe_best(int64_t iters, int64_t tries)
{
	int64_t best = INT64_MAX;

	for (int64_t i = 0; i < tries; i++) {
		int64_t t = now_ns();

		work(iters);
		t = now_ns() - t;
		if (t < best)
			best = t;
	}
	return best;
}

void probe_run(struct probe *p)
{
	struct timespec next;

	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!p->stop) {
		next.tv_nsec += p->period_ns;
		while (next.tv_nsec >= 1000000000) {
			next.tv_nsec -= 1000000000;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, 0);
		int64_t due = (int64_t)next.tv_sec * 1000000000 + next.tv_nsec;
		int64_t t = now_ns();

		work(p->iters);
		int64_t end = now_ns();
		int64_t from = t - due >= p->period_ns ? due : t;

		p->runs++;
		if ((end - t >= p->slow_ns || from == due) && p->n_slow < p->cap) {
			p->start_ns[p->n_slow] = from;
			p->took_ns[p->n_slow] = end - from;
			p->n_slow++;
		}
		if (end - due > p->period_ns) /* after a long stall: no burst of catch-up runs */
			clock_gettime(CLOCK_MONOTONIC, &next);
	}
}
