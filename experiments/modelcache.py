"""The model's hashed-ECMP pricing of a case, kept across runs per topology and seed.

`model.alphabeta.predict_workload_hashed` prices a fattree,8 ring all-reduce in
0.13-0.19 s per hash draw (one CPU), and a collective case asks for 16 draws on the
real-fabric graph, 16 on the graph without the fixed delays the emulator lacks and
16 per point of the model's curve. The answer is in real-fabric units: it does not
depend on S, so a rerun of the same case at another S (finding the smallest valid
S) would price it all again. `hashed_draws` keeps what the experiments read of the
draws (each draw's completion time, rates, recomputations and per-link bits; not the
per-message times) in a file named by a hash of everything the answer depends on:
the messages, the graph's nodes and links with their attributes, the routes of the
host pairs the messages use, the seed, the number of draws, the options, and the
source of the model package. A cached answer is the computed one, float for float
(JSON keeps a float's shortest repr, which reads back exactly).

The files live in the C build cache's directory (`emu.cbuild.cache_dir`)/model,
under the same rule: the directory and every directory above it writable by no one
but root (or us), else nothing is cached. Set FABRICEMU_MODEL_CACHE=off to price
every time. At most MAX_FILES are kept, the oldest removed first.

`spread_prediction` keeps `predict_workload`'s prediction with ECMP spread evenly
(a collective case's ideal beside its draws) the same way, as zero draws.

`PricedAhead` prices in a forked process while the parent builds a fabric (the
collective experiment: the model's curve, which holds the measured sizes' draws, and
their spread predictions; the
incast experiment: DCQCN's fluid realisations), joined before anything is measured.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import multiprocessing
import os
import signal
from collections.abc import Callable
from functools import cache
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

import networkx as nx

import model
from core import safefile
from core.forkmap import forked_map
from core.gcpause import collector_paused
from emu import cbuild
from engine.cfluid import compiled_event_loop
from model.alphabeta import (
    PathsLike,
    Workload,
    WorkloadPrediction,
    hash_draws,
    hashed_pricer,
    memo_paths,
    predict_workload,
    predict_workload_hashed,
    roce_wire_factor,
)
from model.fluid import use_event_loop

#: Files kept; a case's pricing is one file of a few hundred kB at most.
MAX_FILES = 256
#: Larger files are not read (a draw's per-link bits: a few thousand links).
MAX_FILE_BYTES = 64 << 20


@cache
def _model_source_sha256() -> str:
    """Hash of the model package's source: a changed model prices anew."""
    h = hashlib.sha256()
    for path in sorted(Path(model.__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def case_key(workload: Workload, graph: nx.Graph, paths: PathsLike, samples: int, seed: int,
             options: dict[str, Any]) -> str:
    """Hash of everything `predict_workload_hashed` reads for this call."""
    h = hashlib.sha256(_model_source_sha256().encode())
    h.update(repr((workload.name, workload.size_bytes, tuple(workload.ranks),
                   sorted((str(k), repr(v)) for k, v in workload.meta.items()))).encode())
    for m in workload.messages:
        h.update(repr((m.msg_id, m.src, m.dst, m.size_bytes, m.start_s, tuple(m.deps),
                       getattr(m, "gap_s", 0.0))).encode())
    h.update(repr(sorted((repr(n), sorted(d.items())) for n, d in graph.nodes(data=True)))
             .encode())
    h.update(repr(sorted((repr(u), repr(v), sorted(d.items()))
                         for u, v, d in graph.edges(data=True))).encode())
    route = memo_paths(paths)
    for src, dst in sorted({(m.src, m.dst) for m in workload.messages if m.src != m.dst}):
        h.update(repr((src, dst, route(src, dst))).encode())
    h.update(repr((samples, seed, sorted(_explicit(options).items()))).encode())
    return h.hexdigest()


def _explicit(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without those that equal `predict_workload`'s defaults: a call that
    spells a default out (the collective's emulable pricing where the run emulates
    every fixed delay) is the same call, read from the same file."""
    return {k: v for k, v in options.items() if k not in _DEFAULTS or _DEFAULTS[k] != v}


#: `predict_workload`'s defaults, its wire factor as the value it stands for.
_DEFAULTS: dict[str, Any] = {
    **{name: par.default for name, par in inspect.signature(predict_workload).parameters.items()
       if par.default is not inspect.Parameter.empty},
    "wire_factor": roce_wire_factor(),
}


def _directory() -> Path | None:
    """The cache directory, or None when caching is off or the directory is unsafe."""
    if os.environ.get("FABRICEMU_MODEL_CACHE", "on") == "off":
        return None
    directory = cbuild.cache_dir() / "model"
    try:
        safefile.make_dir(directory, mode=0o700)
        return cbuild.check_dir_chain(directory)
    except (cbuild.UnsafePathError, OSError):
        return None


def _compact(p: WorkloadPrediction) -> dict[str, Any]:
    return {"completion_s": p.completion_s, "algbw_bps": p.algbw_bps, "busbw_bps": p.busbw_bps,
            "recomputations": p.recomputations,
            "link_bits": [[u, v, bits] for (u, v), bits in p.link_bits.items()]}


def _prediction(d: dict[str, Any]) -> WorkloadPrediction:
    return WorkloadPrediction(
        completion_s=float(d["completion_s"]), algbw_bps=d["algbw_bps"], busbw_bps=d["busbw_bps"],
        recomputations=int(d["recomputations"]),
        link_bits={(u, v): float(bits) for u, v, bits in d["link_bits"]})


def _read(path: Path, key: str) -> list[WorkloadPrediction] | None:
    try:
        cbuild.check_trusted_file(path)
        record = json.loads(safefile.read_regular(path, MAX_FILE_BYTES))
        if record["key"] != key:
            return None
        return [_prediction(d) for d in record["draws"]]
    except (OSError, ValueError, KeyError, TypeError, cbuild.UnsafePathError):
        return None


def _prune(directory: Path) -> None:
    files = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    for old in files[:-MAX_FILES]:
        with contextlib.suppress(OSError):
            old.unlink()


#: What the forked pricers read: set before the fork, never pickled.
_job: tuple[Callable[[Any], WorkloadPrediction], list[dict]] | None = None


def _price_draw(k: int) -> dict[str, Any]:
    assert _job is not None
    price, choices = _job
    return _compact(price(choices[k]))


def _price(workload: Workload, graph: nx.Graph, paths: PathsLike, samples: int, seed: int,
           options: dict[str, Any]) -> list[dict[str, Any]]:
    """`predict_workload_hashed`'s draws, compacted; the draws' paths are drawn here, in
    order, and the draws priced in forked processes, one per CPU (`core.forkmap`; the
    model runs outside the measured window: the machine is ours)."""
    global _job
    # The compiled event loop when it builds (same floats), inherited by the pricers.
    use_event_loop(compiled_event_loop())
    route = memo_paths(paths)
    choices = hash_draws(workload, route, samples=samples, seed=seed)
    if choices is None:
        return [_compact(p) for p in predict_workload_hashed(workload, graph, route,
                                                              samples=samples, seed=seed,
                                                              **options)]
    # Laid out once, before the fork: every pricer prices its draws from it.
    _job = (hashed_pricer(workload, graph, route, **options), choices)
    try:
        return forked_map(_price_draw, range(samples))
    finally:
        _job = None


@collector_paused()
def hashed_draws(workload: Workload, graph: nx.Graph, paths: PathsLike, *, samples: int,
                 seed: int, **options: Any) -> list[WorkloadPrediction]:
    """`predict_workload_hashed`'s draws, from the cache when this call was priced
    before: each with its completion time, algbw, busbw, recomputations and link bits
    (its per-message times left empty, whether cached or not)."""
    return _cached(workload, graph, paths, samples, seed, options,
                   lambda: _price(workload, graph, paths, samples, seed, options))


@collector_paused()
def spread_prediction(workload: Workload, graph: nx.Graph, paths: PathsLike,
                      **options: Any) -> WorkloadPrediction:
    """`predict_workload`'s prediction with ECMP spread evenly (its ``mode="spread"``,
    no draws: kept as zero samples), from the cache when priced before; its per-message
    times left empty."""
    def price() -> list[dict[str, Any]]:
        return [_compact(predict_workload(workload, graph, paths, mode="spread", **options))]
    return _cached(workload, graph, paths, 0, 0, options, price)[0]


def _cached(workload: Workload, graph: nx.Graph, paths: PathsLike, samples: int, seed: int,
            options: dict[str, Any], price: Callable[[], list[dict[str, Any]]]
            ) -> list[WorkloadPrediction]:
    """What ``price`` returns (compacted predictions) for this call, read from its file
    when it was priced before, else priced and written there."""
    directory = _directory()
    key = case_key(workload, graph, paths, samples, seed, options)
    path = None if directory is None else directory / f"{key[:32]}.json"
    if path is not None and (found := _read(path, key)) is not None:
        return found
    draws = price()
    if path is not None:
        with contextlib.suppress(OSError):
            safefile.write_json(path, {"key": key, "draws": draws}, indent=None)
            _prune(directory)
    return [_prediction(d) for d in draws]


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)   # unwinds: a pricing pool is terminated on its way out


def _price_ahead(work: Callable[[], object], answer: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, _stop)
    result = None
    with contextlib.suppress(Exception):   # whatever fails is priced again by the parent
        result = work()
    with contextlib.suppress(Exception):   # unpicklable: the parent reads the cache
        answer.send(result)
    answer.close()


class PricedAhead:
    """``work`` (the model's pricing) run in a forked process while the parent does
    something else, such as building a fabric: what it prices through `hashed_draws`
    lands in the cache, where the parent finds it, and what it returns in `result`
    (None if it failed), after `wait`. The parent calls `wait` before it measures anything
    (the fidelity gate wants the machine to itself); leaving the block ends the
    process if it is still running. Nothing is forked when caching is off."""

    def __init__(self, work: Callable[[], object]) -> None:
        self.process: multiprocessing.process.BaseProcess | None = None
        self.result: Any = None
        self._answer: Connection | None = None
        if _directory() is not None:
            self._answer, answer = multiprocessing.Pipe(duplex=False)
            # Not daemonic: it may fork a pool of pricers of its own (`_price`).
            self.process = multiprocessing.get_context("fork").Process(
                target=_price_ahead, args=(work, answer), name="fabricemu-model-ahead",
                daemon=False)
            self.process.start()
            answer.close()

    def wait(self) -> None:
        if self.process is not None:
            assert self._answer is not None
            # Read before joining: a large answer fills the pipe until it is read.
            with contextlib.suppress(EOFError, OSError):   # ended without answering
                self.result = self._answer.recv()
            self.process.join()
            self.process = None
            self._answer.close()

    def __enter__(self) -> PricedAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.join()
            self.process = None
        if self._answer is not None:
            self._answer.close()
