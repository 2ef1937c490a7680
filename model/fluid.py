"""Event-driven fluid simulation of jobs sharing links max-min fairly.

A job (a flow, or one message of a DAG) goes through:

    ready   = max(release_s, completion of its last dependency + gap_s)
              (no dependency: max(release_s, gap_s), the gap counted from time zero)
    ready + pre_s            -> bandwidth phase starts (e.g. software/NIC overhead)
    bits drained at the max-min rate of the moment
    drain end + post_s       -> completion (e.g. propagation of the last byte)

Between events every active job drains at its max-min fair rate
(`model.maxmin.fill_classes`). Rates are recomputed only when the set of
active jobs changes, and only in the connected components (jobs coupled by
shared links) that the change touches: max-min allocations decompose over
components. Jobs that finish within a relative 1e-9 of each other complete
together, so symmetric collective steps cost one recomputation, and component
allocations are cached by their multiset of job classes (steps repeat).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import NamedTuple

import networkx as nx
import numpy as np

from core.gcpause import collector_paused
from model.maxmin import Flow, Link, as_capacities, as_flow, fill_classes, fill_sparse

_DONE_REL = 1e-9
_FRACTIONS, _CAP = attrgetter("fractions"), attrgetter("cap_bps")
#: Components with at most this many job classes are solved in plain Python.
_SMALL_COMPONENT = 64
#: Components of more jobs than this are grouped into classes with numpy.
_LARGE_COMPONENT = 256


class FluidJob(NamedTuple):
    """One unit of fluid work; ``fractions[link]`` is the share of its rate on a link.

    (A tuple: a DAG prices tens of thousands of them per prediction.)"""

    job_id: Hashable
    fractions: Mapping[Link, float]
    size_bits: float
    cap_bps: float = math.inf
    release_s: float = 0.0
    deps: tuple[Hashable, ...] = ()
    pre_s: float = 0.0
    post_s: float = 0.0
    gap_s: float = 0.0


@dataclass
class FluidResult:
    """Per job: ready, bandwidth-phase start and end, completion (real seconds)."""

    ready_s: dict[Hashable, float] = field(default_factory=dict)
    start_s: dict[Hashable, float] = field(default_factory=dict)
    drained_s: dict[Hashable, float] = field(default_factory=dict)
    finish_s: dict[Hashable, float] = field(default_factory=dict)
    recomputations: int = 0

    @property
    def makespan_s(self) -> float:
        return max(self.finish_s.values(), default=0.0)


#: The event loop `simulate` runs on a prepared `_FluidRun`: None for its Python
#: `run`; an upper floor may install a compiled twin that returns the same floats
#: (`use_event_loop`; the model cannot build C itself).
_event_loop: Callable[[_FluidRun], FluidResult] | None = None


def use_event_loop(loop: Callable[[_FluidRun], FluidResult] | None) -> None:
    """Run `simulate`'s event loop through ``loop`` (None: the Python one)."""
    global _event_loop
    _event_loop = loop


@collector_paused()
def simulate(jobs: Iterable[FluidJob], capacities: Mapping[Link, float],
             dag: FluidDag | None = None) -> FluidResult:
    """Run the fluid model; raises ValueError on unknown deps or a dependency cycle.
    ``dag``: the jobs' `FluidDag`, when the caller runs the same DAG many times."""
    run = _FluidRun(jobs, capacities, dag)
    return run.run() if _event_loop is None else _event_loop(run)


class FluidDag:
    """What runs of the same jobs under other paths share: their ids, dependency
    graph, sizes, releases, gaps and pre_s (as arrays too, for the compiled loop);
    everything of a `FluidJob` but its fractions, cap and post_s. Hashed ECMP prices
    one DAG under many path draws (`model.jobs.WorkloadJobs`): laid out once, a
    fattree,8 ring's 32,512 jobs cost a draw a third less."""

    def __init__(self, jobs: Sequence[FluidJob]) -> None:
        self.ids = [j.job_id for j in jobs]
        pos = {job_id: i for i, job_id in enumerate(self.ids)}
        if len(pos) != len(self.ids):
            raise ValueError("job ids must be unique")
        self.dependents: list[list[int]] = [[] for _ in jobs]
        waiting = [0] * len(jobs)
        for i, job in enumerate(jobs):
            for d in job.deps:
                if d not in pos:
                    raise ValueError(f"job {job.job_id!r} depends on unknown job {d!r}")
                self.dependents[pos[d]].append(i)
                waiting[i] += 1
        #: Read only: a run counts down its own copy.
        self.waiting = np.array(waiting, dtype=np.int64)
        self.size = np.array([max(0.0, float(j.size_bits)) for j in jobs])
        self.gap_s, self.release_s, self.pre_s = (
            np.array([getattr(j, name) for j in jobs], dtype=float)
            for name in ("gap_s", "release_s", "pre_s"))
        #: The dependents in CSR form: job i's at dep_index[dep_start[i]:dep_start[i+1]].
        self.dep_start, self.dep_index = csr(self.dependents)


def csr(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Row pointers and the concatenated rows of a list of int sequences (int64), as the
    compiled loop reads a ragged table."""
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    flat = np.fromiter((x for r in rows for x in r), dtype=np.int64, count=int(ptr[-1]))
    return ptr, flat


class _FluidRun:
    """One `simulate` call: job classes, per-class link coefficients and dependency
    counters built once, then an event loop that drains the jobs (`run`)."""

    def __init__(self, jobs: Iterable[FluidJob], capacities: Mapping[Link, float],
                 dag: FluidDag | None = None) -> None:
        self.job_list = job_list = list(jobs)
        n = len(job_list)
        self.dag = dag = FluidDag(job_list) if dag is None else dag
        if len(dag.ids) != n:
            raise ValueError(f"the DAG has {len(dag.ids)} jobs, the run {n}")

        # Classes: identical link fractions + cap => identical max-min rate.
        class_key: dict[tuple, int] = {}
        cls_fracs: list[Mapping[Link, float]] = []
        cls_cap: list[float] = []
        # Jobs often share one fractions mapping (one per path): its class is looked up
        # once per mapping (by id: every mapping lives as long as job_list) and cap,
        # the mappings in the order jobs first use them (classes numbered in that order).
        fractions = list(map(_FRACTIONS, job_list))
        caps = list(map(_CAP, job_list))
        keys = list(zip(map(id, fractions), caps, strict=True))
        first = dict(zip(reversed(keys), range(n - 1, -1, -1), strict=True))
        class_of: dict[tuple[int, float], int] = {}
        for mapping_key, i in sorted(first.items(), key=itemgetter(1)):
            key = (tuple(sorted(fractions[i].items())), caps[i])
            c = class_key.get(key)
            if c is None:
                c = class_key[key] = len(cls_fracs)
                cls_fracs.append(fractions[i])
                cls_cap.append(caps[i])
            class_of[mapping_key] = c
        job_class_list = list(map(class_of.__getitem__, keys))
        self.job_class = np.array(job_class_list, dtype=np.int64)
        links = sorted({link for fr in cls_fracs for link in fr})
        missing = [link for link in links if link not in capacities]
        if missing:
            raise ValueError(f"paths use links that are not in the topology: {missing[:3]}")
        lidx = {link: k for k, link in enumerate(links)}
        self.coef_all = coef_all = np.zeros((len(cls_fracs), len(links)))
        for c, fr in enumerate(cls_fracs):
            for link, frac in fr.items():
                coef_all[c, lidx[link]] = frac
        self.cap_all = np.array(cls_cap, dtype=float)
        self.cap_list = self.cap_all.tolist()
        self.job_class_list = job_class_list
        self.link_cap_all = np.array([capacities[link] for link in links], dtype=float)
        self.has_link = (coef_all > 0).any(axis=1)

        self.dependents = dag.dependents
        self.waiting = dag.waiting.copy()
        self.size = dag.size
        self.remaining = self.size.copy()
        self.res = FluidResult()
        # (time, seq, kind, job); kind 0 start, 1 finish
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = itertools.count()

        # Max-min allocations decompose over connected components of the job-link
        # graph, so a change only needs the components of the links it touches.
        self.cls_links = [tuple(np.flatnonzero(coef_all[c] > 0).tolist())
                          for c in range(len(cls_fracs))]
        self.cls_rows = [[(k, float(coef_all[c, k])) for k in ks]
                         for c, ks in enumerate(self.cls_links)]
        self.link_cap_list = self.link_cap_all.tolist()
        self.link_jobs: list[set[int]] = [set() for _ in links]
        self.rate = np.zeros(n)
        self.cache: dict[tuple, list[float]] = {}
        self.active: set[int] = set()
        self.touched: set[int] = set()     # links whose component must be recomputed

    def push(self, t: float, kind: int, i: int) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, i))

    def make_ready(self, i: int, t: float) -> None:
        job = self.job_list[i]
        ready = max(t + job.gap_s, float(job.release_s))
        self.res.ready_s[job.job_id] = ready
        self.push(ready + job.pre_s, 0, i)

    def solve(self, component: list[int]) -> None:
        """Max-min rates of one component's jobs, cached by its multiset of classes."""
        if len(component) == 1:  # the commonest: a job alone on its links
            classes, counts = [self.job_class_list[component[0]]], [1]
        elif len(component) > _LARGE_COMPONENT:
            comp = np.array(component, dtype=np.int64)
            np_classes, np_counts = np.unique(self.job_class[comp], return_counts=True)
            classes, counts = np_classes.tolist(), np_counts.tolist()
        else:  # a few jobs: numpy's per-call cost would dominate
            job_class = self.job_class_list
            per_class: dict[int, int] = {}
            for j in component:
                c = job_class[j]
                per_class[c] = per_class.get(c, 0) + 1
            classes = sorted(per_class)
            counts = [per_class[c] for c in classes]
        key = (tuple(classes), tuple(counts))
        cls_rate = self.cache.get(key)
        if cls_rate is None:
            if len(classes) <= _SMALL_COMPONENT:
                cls_rows, cap = self.cls_rows, self.cap_list
                cls_rate = fill_sparse([cls_rows[c] for c in classes], counts,
                                       self.link_cap_list, [cap[c] for c in classes])
            else:
                index = np.array(classes, dtype=np.int64)
                coef = self.coef_all[index]
                cols = coef.any(axis=0)
                rates, _ = fill_classes(coef[:, cols], np.array(counts, dtype=float),
                                        self.link_cap_all[cols], self.cap_all[index],
                                        want_bottleneck=False)
                cls_rate = rates.tolist()
            self.cache[key] = cls_rate
            self.res.recomputations += 1
        if len(component) == 1:
            self.rate[component[0]] = cls_rate[0]
        elif len(component) > _LARGE_COMPONENT:
            self.rate[comp] = np.array(cls_rate)[np.searchsorted(np_classes, self.job_class[comp])]
        else:
            rate, job_class = self.rate, self.job_class_list
            of_class = dict(zip(classes, cls_rate, strict=True))
            for j in component:
                rate[j] = of_class[job_class[j]]

    def recompute(self, seeds: set[int]) -> None:
        link_jobs, cls_links, job_class = self.link_jobs, self.cls_links, self.job_class_list
        seen_links: set[int] = set()
        for seed in seeds:
            if seed in seen_links:
                continue
            seen_links.add(seed)
            jobs = link_jobs[seed]
            if len(jobs) == 1:  # a job alone on all of its links is a component
                (j,) = jobs
                ks = cls_links[job_class[j]]
                if all(len(link_jobs[k]) == 1 for k in ks):
                    seen_links.update(ks)
                    self.solve([j])
                    continue
            stack, component, seen_jobs = [seed], [], set()
            while stack:
                for j in link_jobs[stack.pop()]:
                    if j not in seen_jobs:
                        seen_jobs.add(j)
                        component.append(j)
                        for k in cls_links[job_class[j]]:
                            if k not in seen_links:
                                seen_links.add(k)
                                stack.append(k)
            if component:
                self.solve(component)

    def activate(self, i: int) -> None:
        self.active.add(i)
        ks = self.cls_links[self.job_class_list[i]]
        link_jobs = self.link_jobs
        for k in ks:
            link_jobs[k].add(i)
        self.touched.update(ks)
        if not ks:                     # no link: only its cap limits it
            self.rate[i] = self.cap_list[self.job_class_list[i]]

    def deactivate(self, i: int) -> None:
        self.active.discard(i)
        ks = self.cls_links[self.job_class_list[i]]
        link_jobs = self.link_jobs
        for k in ks:
            link_jobs[k].discard(i)
        self.touched.update(ks)

    def instant(self) -> list[bool]:
        """Per job: drained at once when started (no bits, or neither a link nor a cap
        to limit it)."""
        has_link, cap = self.has_link.tolist(), self.cap_list
        return [s == 0 or (not has_link[c] and math.isinf(cap[c]))
                for s, c in zip(self.size.tolist(), self.job_class_list, strict=True)]

    def check_complete(self) -> FluidResult:
        """The result, or ValueError if a dependency cycle kept jobs from ever starting."""
        res = self.res
        if len(res.finish_s) != len(self.job_list):
            stuck = [j.job_id for j in self.job_list if j.job_id not in res.finish_s][:5]
            raise ValueError(f"dependency cycle: jobs never became ready, e.g. {stuck}")
        return res

    def run(self) -> FluidResult:
        """Drain every job, event by event; ValueError if a dependency cycle stalls some."""
        # The loop runs once per event: attributes bound to locals.
        job_list, res, heap, active, touched = (self.job_list, self.res, self.heap,
                                                self.active, self.touched)
        size, remaining, rate = self.size, self.remaining, self.rate
        dependents, waiting = self.dependents, self.waiting.tolist()
        push, make_ready = self.push, self.make_ready
        activate, deactivate = self.activate, self.deactivate
        instant = self.instant()

        for i in range(len(job_list)):
            if waiting[i] == 0:
                make_ready(i, 0.0)

        act = np.empty(0, dtype=np.int64)
        act_rate = np.empty(0)
        dirty = False
        now = 0.0
        while heap or active:
            if dirty:
                self.recompute(touched)
                touched.clear()
                act = np.fromiter(active, dtype=np.int64, count=len(active))
                act_rate = rate[act]
                dirty = False

            t_drain = math.inf
            if active:
                t_drain = now + float(np.min(remaining[act] / act_rate))
            t_event = heap[0][0] if heap else math.inf
            t_next = min(t_drain, t_event)
            if math.isinf(t_next):
                raise RuntimeError("fluid simulation stalled (a job has no rate)")
            if active:
                remaining[act] -= act_rate * (t_next - now)
                now = t_next
                done = remaining[act] <= _DONE_REL * size[act]
                if t_drain <= t_event:
                    done[np.argmin(remaining[act] / act_rate)] = True
                if done.any():
                    for i in act[done].tolist():
                        remaining[i] = 0.0
                        res.drained_s[job_list[i].job_id] = now
                        push(now + job_list[i].post_s, 1, i)
                        deactivate(i)
                    dirty = True
            else:
                now = t_next

            # Events due now (a relative 1e-12 window absorbs float noise in sums of times).
            while heap and heap[0][0] <= now + 1e-12 * max(now, 1e-9):
                t, _, kind, i = heapq.heappop(heap)
                job = job_list[i]
                if kind == 0:
                    res.start_s[job.job_id] = t
                    if instant[i]:
                        res.drained_s[job.job_id] = t
                        push(t + job.post_s, 1, i)
                    else:
                        activate(i)
                        dirty = True
                else:
                    res.finish_s[job.job_id] = t
                    for k in dependents[i]:
                        waiting[k] -= 1
                        if waiting[k] == 0:
                            make_ready(k, t)
                now = max(now, t)
        return self.check_complete()


def flow_completion_times(capacities: Mapping[Link, float] | nx.Graph,
                          flows: Iterable[Flow | tuple],
                          sizes_bytes: Mapping[Hashable, float],
                          start_s: Mapping[Hashable, float] | None = None,
                          caps_bps: Mapping[Hashable, float] | None = None) -> dict[Hashable, float]:
    """Fluid max-min model: each flow's completion time (finish − start, real s).

    Flows start at ``start_s`` (default 0) and share links max-min fairly; the
    allocation is recomputed at every start and finish. No latency term: this is
    the pure bandwidth model (`model.alphabeta` adds alpha).
    """
    starts = start_s or {}
    extra = caps_bps or {}
    jobs = []
    for item in flows:
        f = as_flow(item)
        jobs.append(FluidJob(
            job_id=f.flow_id, fractions=f.fractions,
            size_bits=8.0 * float(sizes_bytes[f.flow_id]),
            cap_bps=min(f.cap_bps, float(extra.get(f.flow_id, math.inf))),
            release_s=float(starts.get(f.flow_id, 0.0)),
        ))
    result = simulate(jobs, as_capacities(capacities))
    return {j: result.finish_s[j] - result.ready_s[j] for j in result.finish_s}
