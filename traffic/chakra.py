"""Chakra execution traces (one ``.et`` file per rank) converted to a message DAG in the
``fabricemu-dag/1`` format (docs/workloads.md, "From Chakra execution traces").

What maps to what:
* COMP_NODE on the GPU: ``duration_micros`` of compute on its rank (a compute segment,
  and the gap of the messages that wait for it); a CPU operator (``is_cpu_op``) passes
  its dependencies on in no time: in a PyTorch trace its time overlaps the kernels it
  launches.
* COMM_SEND_NODE / COMM_RECV_NODE: one message from the sender's rank to ``comm_dst``,
  of ``comm_size`` bytes; the k-th send from s to d with tag t (``comm_tag``, node-id
  order) is the k-th receive on d from s (``comm_src``) with tag t. A message is an
  RDMA write: it leaves when the send's dependencies are met, and the receive node
  completes when both it and the receive's own dependencies have.
* COMM_COLL_NODE with a ``comm_type``: the k-th collective of process group ``pg_name``
  on every rank of the group (node-id order) is one collective of ``comm_size`` bytes
  (NCCL-tests' size), expanded with ``traffic.collectives`` (ring all-reduce, ring
  all-gather and reduce-scatter, all-to-all, a chain broadcast from the group's first
  rank) and recorded as an op, so busbw is reported per kind. The group's ranks come
  from ``groups`` (pg_name -> ranks, ASTRA-sim's comm-group file); without it, or for
  an empty ``pg_name``, every rank.
* ``ctrl_deps`` and ``data_deps`` alike: a node waits for all of them. A rank state is
  (the messages waited for, the compute since): a compute node adds its duration, so
  a message's gap is the compute chain since its last messages.
* Passed through in no time, and counted in ``meta['notes']``: other node types
  (memory, metadata, storage, ...), collective nodes without a ``comm_type`` (a
  PyTorch trace's CPU-side wrappers), the collective kinds the project has no
  algorithm for (REDUCE, GATHER, SCATTER, BARRIER), empty collectives; dependencies on
  a node the trace lacks, or on the node itself, are dropped and counted.
* Refused with a one-line ParameterError naming the node: a receive without its send,
  a collective some rank of its group never calls or calls with another kind or size,
  a dependency cycle, a group that waits forever across ranks.

Where a node waits for states with different compute tails, one gap per message
cannot say it exactly: it then waits for every message and the longest tail (a later
start by at most that tail), counted in ``meta['inexact_waits']``. Ranks start at
time zero together (``start_time_micros`` is not used); independent nodes overlap.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ParameterError
from core.messages import Workload
from core.safefile import read_regular
from traffic.chakra_et import COMM_TYPES, EtNode, EtTrace, read_et
from traffic.dagfile import dump_dag, read_dag
from traffic.iteration import DagBuilder

#: Chakra collective kinds -> traffic.collectives algorithms.
COLLECTIVES = {"ALL_REDUCE": "allreduce-ring", "ALL_GATHER": "allgather",
               "REDUCE_SCATTER": "reducescatter", "REDUCE_SCATTER_BLOCK": "reducescatter",
               "ALL_TO_ALL": "alltoall", "BROADCAST": "broadcast"}
COMP, SEND, RECV, COLL = 4, 5, 6, 7
_RANK_FILE = re.compile(r"\.(\d+)\.et$")
MAX_GROUPS_BYTES = 16 << 20


@dataclass(frozen=True)
class _State:
    """Where a rank is: after the last of ``deps`` (messages) completed, plus
    ``offset_us`` of compute (from time zero without deps); whole microseconds, as the
    trace gives them, so that chains add without rounding."""

    deps: frozenset[int] = frozenset()
    offset_us: int = 0


@dataclass
class _Collective:
    """One collective call across its group: the node on each rank, once ready."""

    kind: str
    members: list[int]
    size_bytes: int
    label: str
    nodes: dict[int, EtNode]
    inputs: dict[int, _State]


def _where(rank: int, node: EtNode) -> str:
    return f"rank {rank} node {node.node_id}"


class _Converter:
    """The DAG of a set of traces (module doc): matching, then an event loop that
    resolves each node once its dependencies (and its partners) are resolved."""

    def __init__(self, traces: Sequence[EtTrace], size_scale: float,
                 groups: Mapping[str, Sequence[int]] | None) -> None:
        self.n = len(traces)
        self.groups = groups
        self.g = DagBuilder([str(r) for r in range(self.n)], size_scale)
        self.notes: Counter[str] = Counter()
        self.inexact_waits = 0
        self.nodes = [{node.node_id: node for node in t.nodes} for t in traces]
        self.deps: list[dict[int, list[int]]] = [{} for _ in traces]
        self.children: list[dict[int, list[int]]] = [{} for _ in traces]
        self.state: dict[tuple[int, int], _State] = {}
        self.waiting: dict[tuple[int, int], int] = {}           # node -> unresolved deps
        self.peer: dict[tuple[int, int], tuple[int, int]] = {}    # send <-> its receive
        self.sent: dict[tuple[int, int], int] = {}                # send -> message id
        self.parked: dict[tuple[int, int], _State] = {}           # receive -> its input
        self.coll: dict[tuple[int, int], _Collective] = {}
        for r in range(self.n):
            self._link(r)
        self._match_p2p()
        self._match_collectives()

    def _link(self, r: int) -> None:
        """Rank r's dependencies, cleaned (module doc); a cycle is refused."""
        nodes = self.nodes[r]
        for node in nodes.values():
            kept = []
            for d in dict.fromkeys(node.deps):
                if d == node.node_id:
                    self.notes["self-dependencies dropped"] += 1
                elif d not in nodes:
                    self.notes["dependencies on absent nodes dropped"] += 1
                else:
                    kept.append(d)
                    self.children[r].setdefault(d, []).append(node.node_id)
            self.deps[r][node.node_id] = kept
            self.waiting[(r, node.node_id)] = len(kept)
        indeg = {i: len(d) for i, d in self.deps[r].items()}
        ready = [i for i, k in indeg.items() if k == 0]
        while ready:
            for c in self.children[r].get(ready.pop(), ()):
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
        stuck = [i for i, k in indeg.items() if k > 0]
        if stuck:
            node = nodes[min(stuck)]
            raise ParameterError(_where(r, node), node.name[:60],
                                 "the dependencies have a cycle through this node")

    def _int_attr(self, r: int, node: EtNode, name: str) -> int:
        value = node.attrs.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParameterError(f"{_where(r, node)}.{name}", value,
                                 f"a {node.type_name} needs an integer {name}")
        return value

    def _peer_rank(self, r: int, node: EtNode, name: str) -> int:
        peer = self._int_attr(r, node, name)
        if not 0 <= peer < self.n or peer == r:
            raise ParameterError(f"{_where(r, node)}.{name}", peer,
                                 f"expected another rank of the {self.n}")
        return peer

    def _match_p2p(self) -> None:
        sends: dict[tuple[int, int, int], deque[int]] = {}
        for r in range(self.n):
            for i in sorted(self.nodes[r]):
                node = self.nodes[r][i]
                if node.type == SEND:
                    key = (r, self._peer_rank(r, node, "comm_dst"), node.attrs.get("comm_tag", 0))
                    if self._int_attr(r, node, "comm_size") < 0:
                        raise ParameterError(f"{_where(r, node)}.comm_size",
                                             node.attrs["comm_size"], "a negative size")
                    sends.setdefault(key, deque()).append(i)
        for r in range(self.n):
            for i in sorted(self.nodes[r]):
                node = self.nodes[r][i]
                if node.type == RECV:
                    src = self._peer_rank(r, node, "comm_src")
                    queue = sends.get((src, r, node.attrs.get("comm_tag", 0)))
                    if not queue:
                        raise ParameterError(_where(r, node), node.name[:60],
                                             f"a receive from rank {src} with no matching send")
                    send = (src, queue.popleft())
                    self.peer[send], self.peer[(r, i)] = (r, i), send
        self.notes["sends without a receive"] += sum(len(q) for q in sends.values())

    def _members(self, r: int, node: EtNode) -> tuple[str, list[int]]:
        pg = str(node.attrs.get("pg_name", ""))
        if not pg or self.groups is None:
            return pg, list(range(self.n))
        if pg not in self.groups:
            raise ParameterError(f"{_where(r, node)}.pg_name", pg, "not a group of the groups file")
        members = sorted(self.groups[pg])
        if r not in members:
            raise ParameterError(f"{_where(r, node)}.pg_name", pg, f"rank {r} is not in it")
        return pg, members

    def _collective_kind(self, r: int, node: EtNode) -> str | None:
        """The algorithm for a collective node, or None if it passes through (counted)."""
        if "comm_type" not in node.attrs:
            self.notes["collective nodes without comm_type"] += 1
            return None
        code = self._int_attr(r, node, "comm_type")
        chakra = COMM_TYPES.get(code, f"comm_type {code}")
        if chakra not in COLLECTIVES:
            self.notes[f"{chakra} collectives skipped"] += 1
            return None
        if self._int_attr(r, node, "comm_size") <= 0:
            self.notes["empty collectives skipped"] += 1
            return None
        return COLLECTIVES[chakra]

    def _match_collectives(self) -> None:
        calls: dict[str, list[list[_Collective]]] = {}     # pg -> per rank, its calls
        for r in range(self.n):
            for i in sorted(self.nodes[r]):
                node = self.nodes[r][i]
                kind = self._collective_kind(r, node) if node.type == COLL else None
                if kind is None:
                    continue
                pg, members = self._members(r, node)
                if len(members) < 2:
                    self.notes["one-rank collectives skipped"] += 1
                    continue
                per_rank = calls.setdefault(pg, [[] for _ in range(self.n)])
                k = len(per_rank[r])
                rows = [c for c in per_rank if len(c) > k]
                call = rows[0][k] if rows else _Collective(
                    kind, members, node.attrs["comm_size"], f"pg {pg}" if pg else "world", {}, {})
                if (call.kind, call.size_bytes, call.members) != (
                        kind, node.attrs["comm_size"], members):
                    raise ParameterError(_where(r, node), node.name[:60],
                                         f"collective {k} of group {pg or 'world'} is "
                                         f"{call.kind} of {call.size_bytes} B on ranks "
                                         f"{call.members} elsewhere")
                call.nodes[r] = node
                per_rank[r].append(call)
                self.coll[(r, i)] = call
        for pg, per_rank in calls.items():
            for call in (c for row in per_rank for c in row):
                missing = [m for m in call.members if m not in call.nodes]
                if missing:
                    r, node = next(iter(call.nodes.items()))
                    raise ParameterError(_where(r, node), node.name[:60],
                                         f"its {call.kind} on group {pg or 'world'} is never "
                                         f"called by rank {missing[0]}")

    def _merge(self, states: Sequence[_State]) -> _State:
        distinct = set(states)
        if len(distinct) <= 1:
            return distinct.pop() if distinct else _State()
        for s in distinct:
            if all(s.deps >= o.deps and s.offset_us >= o.offset_us for o in distinct):
                return s
        offsets = {s.offset_us for s in distinct}
        if len(offsets) > 1:
            self.inexact_waits += 1
        return _State(frozenset().union(*(s.deps for s in distinct)), max(offsets))

    def _at(self, r: int, state: _State) -> None:
        """Put rank r's DagBuilder cursor at ``state``."""
        self.g.joined(r, sorted(state.deps))
        self.g.cursor(r).offset_s = state.offset_us / 1e6

    def _resolve(self, r: int, i: int, state: _State, queue: deque[tuple[int, int]]) -> None:
        self.state[(r, i)] = state
        for c in self.children[r].get(i, ()):
            self.waiting[(r, c)] -= 1
            if not self.waiting[(r, c)]:
                queue.append((r, c))

    def _ready(self, r: int, node: EtNode, queue: deque[tuple[int, int]]) -> None:
        """Node's dependencies are resolved: resolve it (or wait for its partners)."""
        key = (r, node.node_id)
        state = self._merge([self.state[(r, d)] for d in self.deps[r][node.node_id]])
        if node.type == COMP and node.attrs.get("is_cpu_op") is not True:
            self._at(r, state)
            self.g.work(r, node.duration_micros / 1e6, node.name[:80])
            self._resolve(r, node.node_id,
                          _State(state.deps, state.offset_us + node.duration_micros), queue)
        elif node.type == SEND:
            self._at(r, state)
            dst = node.attrs["comm_dst"]
            msg = self.g.send(r, dst, node.attrs["comm_size"], "p2p", f"p2p {r}.{node.node_id}")
            self.sent[key] = msg
            self._resolve(r, node.node_id, _State(frozenset({msg})), queue)
            recv = self.peer.get(key)
            if recv in self.parked:
                self._receive(recv, self.parked.pop(recv), queue)
        elif node.type == RECV:
            if self.peer[key] in self.sent:
                self._receive(key, state, queue)
            else:
                self.parked[key] = state
        elif key in self.coll:
            call = self.coll[key]
            call.inputs[r] = state
            if len(call.inputs) == len(call.members):
                self._collective(call, queue)
        else:
            if node.type == COMP:
                self.notes["CPU operators passed through"] += 1
            elif node.type != COLL:
                self.notes[f"{node.type_name}s passed through"] += 1
            self._resolve(r, node.node_id, state, queue)

    def _receive(self, key: tuple[int, int], state: _State, queue: deque[tuple[int, int]]
                 ) -> None:
        msg = _State(frozenset({self.sent[self.peer[key]]}))
        self._resolve(*key, self._merge([state, msg]), queue)

    def _collective(self, call: _Collective, queue: deque[tuple[int, int]]) -> None:
        for r in call.members:
            self._at(r, call.inputs[r])
        op = f"{call.label} #{len(self.g.ops)}"
        self.g.collective(call.kind, call.members, call.size_bytes, call.label[:40], op)
        for r in call.members:
            self._resolve(r, call.nodes[r].node_id, _State(frozenset(self.g.cursor(r).deps)),
                          queue)

    def run(self) -> None:
        queue = deque((r, i) for r in range(self.n) for i in sorted(self.nodes[r])
                      if not self.deps[r][i])
        while queue:
            r, i = queue.popleft()
            self._ready(r, self.nodes[r][i], queue)
        for r in range(self.n):
            for i in sorted(self.nodes[r]):
                if (r, i) not in self.state and not self.waiting[(r, i)]:
                    node = self.nodes[r][i]
                    raise ParameterError(_where(r, node), node.name[:60],
                                         f"its {node.type_name} never completes: a partner "
                                         "on another rank waits for it in turn")


def convert(traces: Sequence[EtTrace], *, size_scale: float = 1.0,
            groups: Mapping[str, Sequence[int]] | None = None, name: str = "chakra"
            ) -> dict[str, Any]:
    """The ``fabricemu-dag/1`` object of ``traces`` (rank i = traces[i]; module doc),
    checked by ``traffic.dagfile.read_dag``. ``size_scale`` multiplies every message's
    bytes (compute is not scaled), as the training generator's does."""
    if not (math.isfinite(size_scale) and 0 < size_scale <= 1):
        raise ParameterError("size_scale", size_scale, "expected 0 < scale <= 1")
    if len(traces) < 2:
        raise ParameterError("chakra trace", f"{len(traces)} rank", "needs at least 2 ranks")
    conv = _Converter(traces, size_scale, groups)
    conv.run()
    g = conv.g
    if not g.messages:
        raise ParameterError("chakra trace", name, "no communication between ranks to run")
    doc = dump_dag(Workload(name, g.messages, g.hosts, max(m.size_bytes for m in g.messages),
                            meta={"ops": g.ops, "op_of": g.op_of, "compute": g.compute}))
    doc["ranks"] = conv.n
    doc["meta"] = {"source": "chakra", "size_scale": size_scale,
                   "chakra_schema": str(traces[0].attrs.get("schema", traces[0].version)),
                   "groups": "from the groups file" if groups is not None else "every rank",
                   "inexact_waits": conv.inexact_waits,
                   "notes": {k: v for k, v in sorted(conv.notes.items()) if v}}
    read_dag(json.dumps(doc))
    return doc


def rank_files(spec: Sequence[str]) -> list[Path]:
    """The per-rank files: ``PREFIX`` (every ``PREFIX.<rank>.et``) or the files
    themselves, each named ``*.<rank>.et``; ranks 0..n-1, none missing."""
    if len(spec) == 1 and not Path(spec[0]).is_file():
        prefix = Path(spec[0])
        parent = prefix.parent if prefix.parent.is_dir() else None
        names = [p for p in parent.iterdir() if p.name.startswith(prefix.name + ".")] \
            if parent else []
        files = [p for p in names if _RANK_FILE.fullmatch(p.name[len(prefix.name):])]
        if not files:
            raise ParameterError("chakra trace", spec[0], "no file PREFIX.<rank>.et")
    else:
        files = [Path(s) for s in spec]
    by_rank: dict[int, Path] = {}
    for path in files:
        match = _RANK_FILE.search(path.name)
        if not match or not path.is_file():
            raise ParameterError("chakra trace", str(path), "expected a file NAME.<rank>.et")
        rank = int(match.group(1))
        if rank in by_rank:
            raise ParameterError("chakra trace", str(path), f"a second file for rank {rank}")
        by_rank[rank] = path
    for rank in range(len(by_rank)):
        if rank not in by_rank:
            raise ParameterError("chakra trace", f"rank {rank}",
                                 f"missing rank file (found ranks {sorted(by_rank)[:8]})")
    return [by_rank[r] for r in range(len(by_rank))]


def read_groups(path: Path) -> dict[str, list[int]]:
    """A comm-group file: a JSON object, process-group name -> list of ranks."""
    try:
        data = json.loads(read_regular(path, MAX_GROUPS_BYTES))
    except (ValueError, UnicodeDecodeError) as e:
        raise ParameterError(str(path), str(e)[:60], "not JSON") from None
    if not isinstance(data, dict):
        raise ParameterError(str(path), type(data).__name__, "expected an object: group -> ranks")
    for pg, ranks in data.items():
        if not isinstance(ranks, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks) \
                or len(set(ranks)) != len(ranks):
            raise ParameterError(f"{path}[{pg}]", ranks, "expected a list of distinct ranks")
    return data


def convert_files(spec: Sequence[str], *, size_scale: float = 1.0,
                  groups_file: Path | None = None) -> dict[str, Any]:
    """Read a Chakra prefix (or its files) and convert it (``convert``)."""
    paths = rank_files(spec)
    groups = read_groups(groups_file) if groups_file is not None else None
    if groups is not None:
        for pg, ranks in groups.items():
            if any(r >= len(paths) for r in ranks):
                raise ParameterError(f"groups[{pg}]", ranks, f"a rank beyond the {len(paths)}")
    name = re.sub(r"\.0\.et$", "", paths[0].name)[:200]
    return convert([read_et(p) for p in paths], size_scale=size_scale, groups=groups,
                   name=name)
