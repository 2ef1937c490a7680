/* model.fluid's event loop (_FluidRun.run) in C, float for float the same.
 *
 * Every arithmetic step is the Python loop's, in the same order of operands
 * (no contraction into fused multiply-adds): a job's ready time, its start, the
 * drain of the active jobs between events, the relative windows that group
 * completions and due events. Max-min rates come from Python (`solve`, through a
 * callback) for any component of more than one job and for the first time a
 * class is seen alone on its links; a class alone is then reused from here (the
 * Python cache would answer the same). The order in which jobs that are done at
 * the same instant are handled may differ from Python's set order; their times
 * do not depend on it. Results are written per job, with the order of events. */

#pragma STDC FP_CONTRACT OFF

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DONE_REL 1e-9

typedef int (*solve_fn)(const int64_t *component, int64_t n);

struct fluid {
    int64_t n, n_cls, n_links;
    /* per job */
    const int64_t *job_class;
    const double *size, *gap, *release, *pre, *post;
    const uint8_t *instant;
    double *remaining, *rate;          /* the run's numpy arrays: solve writes rate */
    int64_t *waiting;
    const int64_t *dep_ptr, *dep_idx;  /* dependents, CSR */
    /* per class */
    const int64_t *cls_ptr, *cls_link; /* links, CSR */
    const double *cls_cap;
    solve_fn solve;
    /* out: per job, and the jobs in the order of each kind of event */
    double *ready, *start, *drained, *finish;
    int64_t *ready_order, *start_order, *drained_order, *finish_order;
    int64_t n_ready, n_start, n_drained, n_finish;
};

enum { FLUID_OK = 0, FLUID_STALLED = 1, FLUID_SOLVE_FAILED = 2, FLUID_NO_MEMORY = 3 };

struct event { double t; int64_t seq, kind, job; };

struct state {
    struct fluid *f;
    struct event *heap; int64_t n_heap, cap_heap, seq;
    int64_t **lj; int64_t *lj_n, *lj_cap;      /* active jobs per link */
    int64_t *active, *active_pos, n_active;
    int64_t *touched, n_touched; uint8_t *is_touched;
    int64_t *seen_link, *seen_job, gen;         /* generation marks */
    int64_t *stack, *component;
    double *single; uint8_t *single_known;      /* a class alone on its links */
};

static int before(const struct event *a, const struct event *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int push(struct state *s, double t, int64_t kind, int64_t job)
{
    if (s->n_heap == s->cap_heap) {
        int64_t cap = s->cap_heap ? 2 * s->cap_heap : 1024;
        struct event *h = realloc(s->heap, (size_t)cap * sizeof *h);
        if (!h) return -1;
        s->heap = h; s->cap_heap = cap;
    }
    struct event e = { t, s->seq++, kind, job };
    int64_t i = s->n_heap++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!before(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p]; i = p;
    }
    s->heap[i] = e;
    return 0;
}

static struct event pop(struct state *s)
{
    struct event top = s->heap[0], last = s->heap[--s->n_heap];
    int64_t i = 0, n = s->n_heap;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c]; i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static int make_ready(struct state *s, int64_t i, double t)
{
    struct fluid *f = s->f;
    double a = t + f->gap[i], b = f->release[i];
    double ready = b > a ? b : a;                 /* Python's max(a, b) */
    f->ready[i] = ready;
    f->ready_order[f->n_ready++] = i;
    return push(s, ready + f->pre[i], 0, i);
}

static void touch(struct state *s, int64_t k)
{
    if (!s->is_touched[k]) { s->is_touched[k] = 1; s->touched[s->n_touched++] = k; }
}

static int activate(struct state *s, int64_t i)
{
    struct fluid *f = s->f;
    int64_t c = f->job_class[i];
    s->active_pos[i] = s->n_active;
    s->active[s->n_active++] = i;
    for (int64_t p = f->cls_ptr[c]; p < f->cls_ptr[c + 1]; p++) {
        int64_t k = f->cls_link[p];
        if (s->lj_n[k] == s->lj_cap[k]) {
            int64_t cap = s->lj_cap[k] ? 2 * s->lj_cap[k] : 4;
            int64_t *a = realloc(s->lj[k], (size_t)cap * sizeof *a);
            if (!a) return -1;
            s->lj[k] = a; s->lj_cap[k] = cap;
        }
        s->lj[k][s->lj_n[k]++] = i;
        touch(s, k);
    }
    if (f->cls_ptr[c] == f->cls_ptr[c + 1]) f->rate[i] = f->cls_cap[c];
    return 0;
}

static void deactivate(struct state *s, int64_t i)
{
    struct fluid *f = s->f;
    int64_t c = f->job_class[i], at = s->active_pos[i], last = s->active[--s->n_active];
    s->active[at] = last; s->active_pos[last] = at;
    for (int64_t p = f->cls_ptr[c]; p < f->cls_ptr[c + 1]; p++) {
        int64_t k = f->cls_link[p];
        for (int64_t q = 0; q < s->lj_n[k]; q++)
            if (s->lj[k][q] == i) { s->lj[k][q] = s->lj[k][--s->lj_n[k]]; break; }
        touch(s, k);
    }
}

static int solve(struct state *s, int64_t n)
{
    struct fluid *f = s->f;
    if (n == 1) {
        int64_t j = s->component[0], c = f->job_class[j];
        if (s->single_known[c]) { f->rate[j] = s->single[c]; return 0; }
        if (f->solve(s->component, 1)) return -1;
        s->single[c] = f->rate[j]; s->single_known[c] = 1;
        return 0;
    }
    return f->solve(s->component, n) ? -1 : 0;
}

/* The components of the touched links, each solved once (_FluidRun.recompute). */
static int recompute(struct state *s)
{
    struct fluid *f = s->f;
    int64_t gen = ++s->gen;
    for (int64_t t = 0; t < s->n_touched; t++) {
        int64_t seed = s->touched[t];
        s->is_touched[seed] = 0;
        if (s->seen_link[seed] == gen) continue;
        s->seen_link[seed] = gen;
        if (s->lj_n[seed] == 1) {
            int64_t j = s->lj[seed][0], c = f->job_class[j], alone = 1;
            for (int64_t p = f->cls_ptr[c]; p < f->cls_ptr[c + 1] && alone; p++)
                alone = s->lj_n[f->cls_link[p]] == 1;
            if (alone) {
                for (int64_t p = f->cls_ptr[c]; p < f->cls_ptr[c + 1]; p++)
                    s->seen_link[f->cls_link[p]] = gen;
                s->component[0] = j;
                if (solve(s, 1)) return -1;
                continue;
            }
        }
        int64_t n_stack = 0, n_comp = 0;
        s->stack[n_stack++] = seed;
        while (n_stack) {
            int64_t k = s->stack[--n_stack];
            for (int64_t q = 0; q < s->lj_n[k]; q++) {
                int64_t j = s->lj[k][q];
                if (s->seen_job[j] == gen) continue;
                s->seen_job[j] = gen;
                s->component[n_comp++] = j;
                int64_t c = f->job_class[j];
                for (int64_t p = f->cls_ptr[c]; p < f->cls_ptr[c + 1]; p++) {
                    int64_t k2 = f->cls_link[p];
                    if (s->seen_link[k2] != gen) { s->seen_link[k2] = gen; s->stack[n_stack++] = k2; }
                }
            }
        }
        if (n_comp && solve(s, n_comp)) return -1;
    }
    s->n_touched = 0;
    return 0;
}

/* Jobs drained by `now` (advanced to the next event): completed, their finish queued. */
static int drain(struct state *s, double *now, double t_next, int forced)
{
    struct fluid *f = s->f;
    double dt = t_next - *now, best = INFINITY;
    int64_t n = s->n_active, at_best = -1, n_done = 0;
    for (int64_t a = 0; a < n; a++) {
        int64_t j = s->active[a];
        f->remaining[j] -= f->rate[j] * dt;
    }
    *now = t_next;
    for (int64_t a = 0; a < n; a++) {           /* numpy's argmin: the first smallest */
        int64_t j = s->active[a];
        double r = f->remaining[j] / f->rate[j];
        if (at_best < 0 || r < best) { best = r; at_best = a; }
    }
    for (int64_t a = 0; a < n; a++) {
        int64_t j = s->active[a];
        if (f->remaining[j] <= DONE_REL * f->size[j] || (forced && a == at_best))
            s->stack[n_done++] = j;
    }
    for (int64_t d = 0; d < n_done; d++) {
        int64_t i = s->stack[d];
        f->remaining[i] = 0.0;
        f->drained[i] = *now;
        f->drained_order[f->n_drained++] = i;
        if (push(s, *now + f->post[i], 1, i)) return -1;
        deactivate(s, i);
    }
    return n_done > 0;
}

/* Events due at `now`, within a relative 1e-12 (float noise in sums of times). */
static int due_events(struct state *s, double *now, int *dirty)
{
    struct fluid *f = s->f;
    for (;;) {
        if (!s->n_heap) return 0;
        double window = *now > 1e-9 ? *now : 1e-9;
        if (!(s->heap[0].t <= *now + 1e-12 * window)) return 0;
        struct event e = pop(s);
        int64_t i = e.job;
        if (e.kind == 0) {
            f->start[i] = e.t;
            f->start_order[f->n_start++] = i;
            if (f->instant[i]) {
                f->drained[i] = e.t;
                f->drained_order[f->n_drained++] = i;
                if (push(s, e.t + f->post[i], 1, i)) return -1;
            } else {
                if (activate(s, i)) return -1;
                *dirty = 1;
            }
        } else {
            f->finish[i] = e.t;
            f->finish_order[f->n_finish++] = i;
            for (int64_t p = f->dep_ptr[i]; p < f->dep_ptr[i + 1]; p++) {
                int64_t k = f->dep_idx[p];
                if (--f->waiting[k] == 0 && make_ready(s, k, e.t)) return -1;
            }
        }
        if (e.t > *now) *now = e.t;
    }
}

static int loop(struct state *s)
{
    struct fluid *f = s->f;
    for (int64_t i = 0; i < f->n; i++)
        if (f->waiting[i] == 0 && make_ready(s, i, 0.0)) return FLUID_NO_MEMORY;
    int dirty = 0;
    double now = 0.0;
    while (s->n_heap || s->n_active) {
        if (dirty) {
            if (recompute(s)) return FLUID_SOLVE_FAILED;
            dirty = 0;
        }
        double t_drain = INFINITY;
        if (s->n_active) {
            double m = INFINITY;
            for (int64_t a = 0; a < s->n_active; a++) {
                int64_t j = s->active[a];
                double r = f->remaining[j] / f->rate[j];
                if (a == 0 || r < m) m = r;
            }
            t_drain = now + m;
        }
        double t_event = s->n_heap ? s->heap[0].t : INFINITY;
        double t_next = t_event < t_drain ? t_event : t_drain;   /* Python's min */
        if (isinf(t_next)) return FLUID_STALLED;
        if (s->n_active) {
            int done = drain(s, &now, t_next, t_drain <= t_event);
            if (done < 0) return FLUID_NO_MEMORY;
            if (done) dirty = 1;
        } else {
            now = t_next;
        }
        if (due_events(s, &now, &dirty)) return FLUID_NO_MEMORY;
    }
    return FLUID_OK;
}

int fluid_run(struct fluid *f)
{
    struct state s = { .f = f };
    int64_t n = f->n, links = f->n_links, stack = (n > links ? n : links) + 1;
    s.lj = calloc((size_t)links + 1, sizeof *s.lj);
    s.lj_n = calloc((size_t)links + 1, sizeof *s.lj_n);
    s.lj_cap = calloc((size_t)links + 1, sizeof *s.lj_cap);
    s.touched = malloc(((size_t)links + 1) * sizeof *s.touched);
    s.is_touched = calloc((size_t)links + 1, 1);
    s.seen_link = calloc((size_t)links + 1, sizeof *s.seen_link);
    s.active = malloc(((size_t)n + 1) * sizeof *s.active);
    s.active_pos = malloc(((size_t)n + 1) * sizeof *s.active_pos);
    s.seen_job = calloc((size_t)n + 1, sizeof *s.seen_job);
    s.component = malloc(((size_t)n + 1) * sizeof *s.component);
    /* The DFS stack holds each link at most once; a drain's done jobs use it too. */
    s.stack = malloc((size_t)stack * sizeof *s.stack);
    s.single = malloc(((size_t)f->n_cls + 1) * sizeof *s.single);
    s.single_known = calloc((size_t)f->n_cls + 1, 1);
    int rc = FLUID_NO_MEMORY;
    if (s.lj && s.lj_n && s.lj_cap && s.touched && s.is_touched && s.seen_link && s.active
        && s.active_pos && s.seen_job && s.component && s.stack && s.single && s.single_known)
        rc = loop(&s);
    for (int64_t k = 0; s.lj && k < links; k++) free(s.lj[k]);
    free(s.lj); free(s.lj_n); free(s.lj_cap); free(s.touched); free(s.is_touched);
    free(s.seen_link); free(s.active); free(s.active_pos); free(s.seen_job);
    free(s.component); free(s.stack); free(s.single); free(s.single_known); free(s.heap);
    return rc;
}
