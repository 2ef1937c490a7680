"""Collectives compiled to DAGs of point-to-point messages, NCCL-style.

Data model.  The buffer of the collective is cut into equal *units*: n blocks of
S/n (one per rank; p = 2^floor(log2 n) blocks for halving-doubling), each cut into k units so that a unit fits ``chunk_bytes``
(k = 1 without chunking).  Sizes are rounded up so that every unit has the same
size: ``unit_bytes = ceil(S / (n*k))`` (for incast, permutation and broadcast the
buffer is S itself, cut into k units).  ``meta`` records ``unit_bytes`` and the
padded size.  A message carries the contiguous units ``chunk .. chunk +
size_bytes // unit_bytes - 1``.

An algorithm is written as *transfers* (src rank, dst rank, units, reduce?).
Dependencies are derived from data flow: a message depends on every message that
delivered one of its units to its sender since that unit was last overwritten.
With chunking every unit is its own message, so consecutive steps pipeline
(a rank forwards unit j as soon as unit j has arrived).

Algorithms:
* ring all-reduce = ring reduce-scatter then ring all-gather, 2(n-1) steps of S/n;
* halving-doubling all-reduce (Rabenseifner): recursive-halving reduce-scatter then
  recursive-doubling all-gather; for n not a power of two, p = 2^floor(log2 n):
  rank p+i first sends its whole buffer to rank i (reduce), ranks 0..p-1 run
  halving-doubling, and rank i sends the result back to rank p+i;
* hierarchical all-reduce: intra-server ring reduce-scatter, inter-server ring
  all-reduce among GPUs of the same local rank on their 1/L share, intra-server
  ring all-gather (``server_of`` or ``gpus_per_server`` give the placement);
* all-to-all: every rank sends S/n to every other rank at once (no dependencies);
  ``step`` = the shift (dst - src) mod n, and messages are ordered by shift, so an
  engine starting them in id order uses the usual shifted pattern;
* broadcast: a pipelined chain root -> root+1 -> ... (pipelines with chunking);
* incast: every rank except ``root`` sends S to ``root`` at once;
* permutation: every rank sends S to ``perm[rank]``, a seeded random derangement.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence

from core.errors import ParameterError
from core.messages import Message, Workload

NAMES = ("allreduce-ring", "allreduce-hd", "allreduce-hier", "allgather", "reducescatter",
         "alltoall", "broadcast", "incast", "permutation")

_FACTORS = {"allreduce": lambda n: 2 * (n - 1) / n, "reducescatter": lambda n: (n - 1) / n,
            "allgather": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n}


def busbw_factor(name: str, n: int) -> float:
    """NCCL-tests bus-bandwidth factor: busbw = algbw * factor."""
    _check_name(name)
    return _FACTORS.get(name.split("-")[0], lambda n: 1.0)(n)


def _check_name(name: str) -> None:
    if name not in NAMES:
        raise ParameterError("collective", name, f"known collectives: {', '.join(NAMES)}")


class _Dag:
    """Emits messages for transfers and derives dependencies from data flow."""

    def __init__(self, ranks: list[str], n_units: int, unit_bytes: int, chunked: bool):
        self.ranks = ranks
        self.unit_bytes = unit_bytes
        self.chunked = chunked
        self.messages: list[Message] = []
        # holders[rank][unit]: ids of the messages whose data the rank's copy contains
        self.holders: list[list[frozenset[int]]] = [[frozenset()] * n_units for _ in ranks]

    def send(self, src: int, dst: int, units: range, *, reduce: bool, step: int,
             tag: str, track: bool = True) -> None:
        """Transfer ``units`` from rank ``src`` to rank ``dst`` (reduce or overwrite)."""
        pieces = [range(u, u + 1) for u in units] if self.chunked else [units]
        for piece in pieces:
            deps = frozenset().union(*(self.holders[src][u] for u in piece))
            msg_id = len(self.messages)
            self.messages.append(Message(
                msg_id=msg_id, src=self.ranks[src], dst=self.ranks[dst],
                size_bytes=len(piece) * self.unit_bytes, deps=tuple(sorted(deps)), step=step,
                chunk=piece.start, reduce=reduce, tag=tag))
            if track:
                for u in piece:
                    self.holders[dst][u] = (self.holders[dst][u] | {msg_id} if reduce
                                            else frozenset({msg_id}))


def _blocks(units: range, parts: int) -> list[range]:
    """Split a range of units into ``parts`` contiguous near-equal ranges."""
    n = len(units)
    return [units[i * n // parts:(i + 1) * n // parts] for i in range(parts)]


def _ring_reduce_scatter(dag: _Dag, order: list[int], segs: list[range], step0: int,
                         tag: str) -> int:
    """Ring over ranks ``order``; afterwards order[p] holds segs[(p+1) % m] reduced."""
    m = len(order)
    for s in range(m - 1):
        for p in range(m):
            dag.send(order[p], order[(p + 1) % m], segs[(p - s) % m], reduce=True,
                     step=step0 + s, tag=tag)
    return step0 + m - 1


def _ring_all_gather(dag: _Dag, order: list[int], segs: list[range], owned: int, step0: int,
                     tag: str) -> int:
    """Ring over ranks ``order`` where order[p] starts with segs[(p + owned) % m]."""
    m = len(order)
    for s in range(m - 1):
        for p in range(m):
            dag.send(order[p], order[(p + 1) % m], segs[(p + owned - s) % m], reduce=False,
                     step=step0 + s, tag=tag)
    return step0 + m - 1


def _ring_all_reduce(dag: _Dag, order: list[int], units: range, step0: int, tag: str) -> int:
    segs = _blocks(units, len(order))
    step = _ring_reduce_scatter(dag, order, segs, step0, tag + "rs")
    return _ring_all_gather(dag, order, segs, 1, step, tag + "ag")


def _allreduce_ring(dag: _Dag, n: int, units: range) -> str:
    _ring_all_reduce(dag, list(range(n)), units, 0, "")
    return "ring"


def _allreduce_hd(dag: _Dag, n: int, units: range) -> str:
    p = 1 << (n.bit_length() - 1)
    step = 0
    if p < n:
        for r in range(p, n):
            dag.send(r, r - p, units, reduce=True, step=0, tag="fold")
        step = 1
    owned = [units] * p
    dists = [p >> (i + 1) for i in range(p.bit_length() - 1)]
    for d in dists:  # recursive halving: keep one half, send the other (reduce)
        for r in range(p):
            lo, hi = _blocks(owned[r], 2)
            keep, give = (lo, hi) if r & d == 0 else (hi, lo)
            dag.send(r, r ^ d, give, reduce=True, step=step, tag="rs")
            owned[r] = keep
        step += 1
    for d in reversed(dists):  # recursive doubling: exchange what each side owns
        for r in range(p):
            dag.send(r, r ^ d, owned[r], reduce=False, step=step, tag="ag")
        owned = [range(min(owned[r].start, owned[r ^ d].start),
                       max(owned[r].stop, owned[r ^ d].stop)) for r in range(p)]
        step += 1
    for r in range(p, n):
        dag.send(r - p, r, units, reduce=False, step=step, tag="unfold")
    return "halving-doubling" if p == n else f"halving-doubling with fold of {n - p} ranks"


def _allreduce_hier(dag: _Dag, n: int, units: range, servers: list[list[int]]) -> str:
    local = len(servers[0])
    segs = _blocks(units, local)
    step = 0
    if local > 1:
        for srv in servers:
            _ring_reduce_scatter(dag, srv, segs, 0, "intra-rs")
        step = local - 1
    if len(servers) > 1:
        for lr in range(local):  # local rank lr holds segs[(lr + 1) % local]
            peers = [srv[lr] for srv in servers]
            _ring_all_reduce(dag, peers, segs[(lr + 1) % local], step, "inter-")
        step += 2 * (len(servers) - 1)
    if local > 1:
        for srv in servers:
            _ring_all_gather(dag, srv, segs, 1, step, "intra-ag")
    return f"hierarchical ({len(servers)} servers x {local} GPUs)"


def _allgather(dag: _Dag, n: int, units: range) -> str:
    _ring_all_gather(dag, list(range(n)), _blocks(units, n), 0, 0, "ag")
    return "ring"


def _reducescatter(dag: _Dag, n: int, units: range) -> str:
    # Rotate so that rank r ends up holding block r (the reduce-scatter contract).
    segs = _blocks(units, n)
    _ring_reduce_scatter(dag, list(range(n)), segs[-1:] + segs[:-1], 0, "rs")
    return "ring"


def _alltoall(dag: _Dag, n: int, units: range) -> str:
    blocks = _blocks(units, n)
    for shift in range(1, n):
        for r in range(n):
            dst = (r + shift) % n
            dag.send(r, dst, blocks[dst], reduce=False, step=shift, tag="a2a", track=False)
    return "all at once, shifted order"


def _broadcast(dag: _Dag, n: int, units: range, root: int) -> str:
    for hop in range(n - 1):
        dag.send((root + hop) % n, (root + hop + 1) % n, units, reduce=False, step=hop,
                 tag="bcast")
    return "pipelined chain"


def _incast(dag: _Dag, n: int, units: range, root: int) -> str:
    for r in range(n):
        if r != root:
            dag.send(r, root, units, reduce=False, step=0, tag="incast", track=False)
    return f"{n - 1} -> 1"


def _permutation(dag: _Dag, n: int, units: range, seed: int) -> str:
    rng = random.Random(seed)
    perm = list(range(n))
    while any(perm[r] == r for r in range(n)):  # rejection sampling: ~e tries
        rng.shuffle(perm)
    for r in range(n):
        dag.send(r, perm[r], units, reduce=False, step=0, tag="perm", track=False)
    return "random derangement " + ",".join(map(str, perm))


def _servers(ranks: list[str], server_of: Callable[[int], Hashable] | Sequence[Hashable] | None,
             gpus_per_server: int | None) -> list[list[int]]:
    n = len(ranks)
    if (server_of is None) == (gpus_per_server is None):
        raise ParameterError("server_of", server_of,
                             "allreduce-hier needs exactly one of server_of or gpus_per_server")
    if gpus_per_server is not None:
        if gpus_per_server < 1 or n % gpus_per_server:
            raise ParameterError("gpus_per_server", gpus_per_server,
                                 f"must be >= 1 and divide the number of ranks {n}")
        keys: list[Hashable] = [r // gpus_per_server for r in range(n)]
    else:
        keys = [server_of(r) for r in range(n)] if callable(server_of) else list(server_of)
        if len(keys) != n:
            raise ParameterError("server_of", server_of, f"must give a server for {n} ranks")
    groups: dict[Hashable, list[int]] = {}
    for r, key in enumerate(keys):
        groups.setdefault(key, []).append(r)
    servers = list(groups.values())
    if len({len(g) for g in servers}) != 1:
        raise ParameterError("server_of", server_of,
                             "every server must hold the same number of ranks")
    return servers


def build(name: str, ranks: list[str], size_bytes: int, *, chunk_bytes: int | None = None,
          root: int = 0, seed: int = 0,
          server_of: Callable[[int], Hashable] | Sequence[Hashable] | None = None,
          gpus_per_server: int | None = None) -> Workload:
    """Compile collective ``name`` over ``ranks`` (rank -> host) for a buffer of S bytes.

    ``chunk_bytes`` splits transfers into pipelined messages of at most that size;
    ``root`` is the broadcast root or the incast receiver; ``seed`` picks the
    permutation; ``server_of``/``gpus_per_server`` place ranks for allreduce-hier.
    """
    _check_name(name)
    n = len(ranks)
    if n < 2:
        raise ParameterError("ranks", n, "a collective needs at least 2 ranks")
    if len(set(ranks)) != n:
        raise ParameterError("ranks", ranks, "every rank needs its own host")
    if not size_bytes > 0 or int(size_bytes) != size_bytes:
        raise ParameterError("size_bytes", size_bytes, "must be a positive integer")
    size_bytes = int(size_bytes)
    if chunk_bytes is not None and chunk_bytes <= 0:
        raise ParameterError("chunk_bytes", chunk_bytes, "must be positive (or None)")
    if not 0 <= root < n:
        raise ParameterError("root", root, f"expected a rank 0..{n - 1}")
    if name in ("broadcast", "incast", "permutation"):
        blocks = 1
    elif name == "allreduce-hd":
        blocks = 1 << (n.bit_length() - 1)  # the ranks that take part in halving-doubling
    else:
        blocks = n
    block_bytes = -(-size_bytes // blocks)
    k = 1 if chunk_bytes is None else -(-block_bytes // chunk_bytes)
    unit_bytes = -(-size_bytes // (blocks * k))
    units = range(blocks * k)
    dag = _Dag(list(ranks), len(units), unit_bytes, chunk_bytes is not None)
    algorithms: dict[str, Callable[[], str]] = {
        "allreduce-ring": lambda: _allreduce_ring(dag, n, units),
        "allreduce-hd": lambda: _allreduce_hd(dag, n, units),
        "allreduce-hier": lambda: _allreduce_hier(
            dag, n, units, _servers(list(ranks), server_of, gpus_per_server)),
        "allgather": lambda: _allgather(dag, n, units),
        "reducescatter": lambda: _reducescatter(dag, n, units),
        "alltoall": lambda: _alltoall(dag, n, units),
        "broadcast": lambda: _broadcast(dag, n, units, root),
        "incast": lambda: _incast(dag, n, units, root),
        "permutation": lambda: _permutation(dag, n, units, seed),
    }
    algorithm = algorithms[name]()
    return Workload(name=name, messages=dag.messages, ranks=list(ranks), size_bytes=size_bytes,
                    meta={"algorithm": algorithm, "unit_bytes": unit_bytes,
                          "padded_size_bytes": unit_bytes * len(units), "chunk_bytes": chunk_bytes,
                          "busbw_factor": busbw_factor(name, n)})
