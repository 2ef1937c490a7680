"""Message DAGs as JSON files (docs/workloads.md): a strict pure reader and the writer.

``read_dag(text)`` checks everything a file can get wrong (types, ids, dependencies,
cycles, sizes, times) and raises a one-line ParameterError naming the field and the
message; ``DagFile.bind(hosts)`` places its ranks on a fabric's hosts and returns a
``core.messages.Workload``; ``dump_dag(workload)`` writes a Workload in the same
format (``emu run training --emit F``), so a generated iteration can be edited and run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import ParameterError
from core.messages import Message, Workload

FORMAT = "fabricemu-dag/1"
#: Limits that keep a hostile file from exhausting memory before it is refused.
MAX_FILE_BYTES = 256 << 20
MAX_MESSAGES = 1_000_000
MAX_RANKS = 65_536
MAX_SIZE_BYTES = 1 << 40
MAX_TIME_S = 3600.0

_TOP = {"format", "name", "ranks", "messages", "ops", "compute", "meta"}
_MESSAGE = {"id", "src", "dst", "size_bytes", "deps", "gap_s", "start_s", "tag", "op", "step"}
_OP = {"collective", "size_bytes", "ranks", "tag"}
_COMPUTE = {"rank", "deps", "offset_s", "duration_s", "what"}
#: Collective kinds an op may name (NCCL-tests' busbw factors, model.busbw).
OP_KINDS = ("allreduce", "reducescatter", "allgather", "alltoall", "sendrecv", "broadcast")


@dataclass(frozen=True)
class ComputeSegment:
    """A rank computing for ``duration_s``, starting ``offset_s`` after the last of
    ``deps`` completed (after time zero without deps): the rank timelines' compute."""

    rank: int
    deps: tuple[int, ...]
    offset_s: float
    duration_s: float
    what: str = ""


@dataclass
class DagFile:
    """A read DAG: ranks as host names or a count, messages between rank indices."""

    name: str
    ranks: list[str] | int
    messages: list[Message]            # src/dst are str(rank index) until bound
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    op_of: dict[int, str] = field(default_factory=dict)
    compute: list[ComputeSegment] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_ranks(self) -> int:
        return self.ranks if isinstance(self.ranks, int) else len(self.ranks)

    def bind(self, hosts: Sequence[str]) -> Workload:
        """The Workload on a fabric whose hosts are ``hosts`` (host order): named ranks
        must be hosts of it; a rank count takes its first that many hosts."""
        if isinstance(self.ranks, int):
            if self.ranks > len(hosts):
                raise ParameterError("ranks", self.ranks,
                                     f"more ranks than the fabric's {len(hosts)} hosts")
            placed = list(hosts[:self.ranks])
        else:
            known = set(hosts)
            for host in self.ranks:
                if host not in known:
                    raise ParameterError("ranks", host, "not a host of this fabric")
            placed = list(self.ranks)
        messages = [Message(m.msg_id, placed[int(m.src)], placed[int(m.dst)], m.size_bytes,
                            m.deps, m.start_s, m.gap_s, m.step, tag=m.tag)
                    for m in self.messages]
        return Workload(self.name, messages, placed,
                        max((m.size_bytes for m in messages), default=0),
                        meta={**self.meta, "ops": self.ops, "op_of": self.op_of,
                              "compute": self.compute})


def _fail(where: str, value: object, why: str) -> ParameterError:
    return ParameterError(where, value, why)


def _keys(obj: object, allowed: set[str], required: set[str], where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _fail(where, obj, "expected a JSON object")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise _fail(where, unknown[0], f"unknown key (known: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(obj))
    if missing:
        raise _fail(where, missing[0], "missing key")
    return obj


def _int(value: object, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(where, value, f"expected an integer {lo}..{hi}")
    return value


def _time(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not (math.isfinite(value) and 0 <= value <= MAX_TIME_S):
        raise _fail(where, value, f"expected seconds 0..{MAX_TIME_S:g}")
    return float(value)


def _text(value: object, where: str, limit: int = 200) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise _fail(where, value, f"expected a string of at most {limit} characters")
    return value


def _ids(value: object, where: str, known: Mapping[int, int]) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise _fail(where, value, "expected a list of message ids")
    out = []
    for d in value:
        d = _int(d, where, 0, 2**62)
        if d not in known:
            raise _fail(where, d, "no message has this id")
        out.append(d)
    if len(set(out)) != len(out):
        raise _fail(where, value, "an id is listed twice")
    return tuple(out)


def _rank(value: object, where: str, names: dict[str, int], n: int) -> int:
    if isinstance(value, str) and names:
        if value not in names:
            raise _fail(where, value, "not one of the file's ranks")
        return names[value]
    return _int(value, where, 0, n - 1)


def _check_acyclic(messages: list[Message]) -> None:
    indeg = {m.msg_id: len(m.deps) for m in messages}
    children: dict[int, list[int]] = {}
    for m in messages:
        for d in m.deps:
            children.setdefault(d, []).append(m.msg_id)
    ready = [k for k, v in indeg.items() if v == 0]
    seen = 0
    while ready:
        k = ready.pop()
        seen += 1
        for c in children.get(k, ()):
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    if seen != len(messages):
        stuck = min(k for k, v in indeg.items() if v > 0)
        raise _fail("deps", stuck, "the dependencies have a cycle through this message")


def _read_ranks(value: object) -> tuple[list[str] | int, dict[str, int]]:
    """``ranks``: host names (and name -> index) or a count (and no names)."""
    names: dict[str, int] = {}
    if not isinstance(value, list):
        return _int(value, "ranks", 2, MAX_RANKS), names
    if not 2 <= len(value) <= MAX_RANKS:
        raise _fail("ranks", len(value), f"expected 2..{MAX_RANKS} ranks")
    for i, host in enumerate(value):
        host = _text(host, f"ranks[{i}]", 64)
        if not host or host in names:
            raise _fail(f"ranks[{i}]", host, "empty, or a host listed twice")
        names[host] = i
    return list(value), names


def _read_ops(value: object, n: int) -> dict[str, dict[str, Any]]:
    if not isinstance(value, dict):
        raise _fail("ops", value, "expected an object: op id -> its collective")
    ops: dict[str, dict[str, Any]] = {}
    for op_id, op in value.items():
        where = f"ops[{op_id[:40]}]"
        op = _keys(op, _OP, {"collective", "size_bytes", "ranks"}, where)
        kind = op["collective"]
        if kind not in OP_KINDS:
            raise _fail(f"{where}.collective", kind, f"expected one of {', '.join(OP_KINDS)}")
        ops[op_id] = {"collective": kind,
                      "size_bytes": _int(op["size_bytes"], f"{where}.size_bytes", 1,
                                         MAX_SIZE_BYTES),
                      "ranks": _int(op["ranks"], f"{where}.ranks", 2, n),
                      "tag": _text(op.get("tag", ""), f"{where}.tag", 40)}
    return ops


def _read_messages(raw: object, names: dict[str, int], n: int, ops: dict[str, dict[str, Any]]
                   ) -> tuple[list[Message], dict[int, str], dict[int, int]]:
    """The messages, their ops, and id -> position; dependencies checked, no cycle."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_MESSAGES:
        raise _fail("messages", type(raw).__name__ if not isinstance(raw, list) else len(raw),
                    f"expected a list of 1..{MAX_MESSAGES} messages")
    index: dict[int, int] = {}
    for i, m in enumerate(raw):
        if isinstance(m, dict) and "id" in m:
            msg_id = _int(m["id"], f"messages[{i}].id", 0, 2**62)
            if msg_id in index:
                raise _fail(f"messages[{i}].id", msg_id, "message ids must be unique")
            index[msg_id] = i
    messages: list[Message] = []
    op_of: dict[int, str] = {}
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        m = _keys(m, _MESSAGE, {"id", "src", "dst", "size_bytes"}, where)
        msg_id = m["id"]
        src = _rank(m["src"], f"{where}.src", names, n)
        dst = _rank(m["dst"], f"{where}.dst", names, n)
        if src == dst:
            raise _fail(f"{where}.dst", m["dst"], "a message to its own source")
        deps = _ids(m.get("deps", []), f"{where}.deps", index)
        if msg_id in deps:
            raise _fail(f"{where}.deps", msg_id, "a message cannot depend on itself")
        op = m.get("op")
        if op is not None:
            if not isinstance(op, str) or op not in ops:
                raise _fail(f"{where}.op", op, "not an id of the file's ops")
            op_of[msg_id] = op
        messages.append(Message(
            msg_id, str(src), str(dst),
            _int(m["size_bytes"], f"{where}.size_bytes", 1, MAX_SIZE_BYTES), deps,
            start_s=_time(m.get("start_s", 0.0), f"{where}.start_s"),
            gap_s=_time(m.get("gap_s", 0.0), f"{where}.gap_s"),
            step=_int(m.get("step", 0), f"{where}.step", 0, 2**31),
            tag=_text(m.get("tag", ops[op]["tag"] if op else ""), f"{where}.tag", 40)))
    _check_acyclic(messages)
    return messages, op_of, index


def _read_compute(raw: object, n: int, index: dict[int, int]) -> list[ComputeSegment]:
    if not isinstance(raw, list):
        raise _fail("compute", raw, "expected a list of compute segments")
    compute = []
    for i, c in enumerate(raw):
        where = f"compute[{i}]"
        c = _keys(c, _COMPUTE, {"rank", "duration_s"}, where)
        compute.append(ComputeSegment(
            _int(c["rank"], f"{where}.rank", 0, n - 1),
            _ids(c.get("deps", []), f"{where}.deps", index),
            _time(c.get("offset_s", 0.0), f"{where}.offset_s"),
            _time(c["duration_s"], f"{where}.duration_s"),
            _text(c.get("what", ""), f"{where}.what", 80)))
    return compute


def read_dag(text: str | bytes) -> DagFile:
    """Parse and check a DAG file's text (docs/workloads.md); one-line ParameterError."""
    if len(text) > MAX_FILE_BYTES:
        raise _fail("workload file", f"{len(text)} bytes", f"larger than {MAX_FILE_BYTES} bytes")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise _fail("workload file", str(e)[:60], "not JSON") from None
    top = _keys(data, _TOP, {"ranks", "messages"}, "workload file")
    if "format" in top and top["format"] != FORMAT:
        raise _fail("format", top["format"], f"expected {FORMAT!r}")
    name = _text(top.get("name", "workload"), "name")
    ranks, names = _read_ranks(top["ranks"])
    n = ranks if isinstance(ranks, int) else len(ranks)
    ops = _read_ops(top.get("ops", {}), n)
    messages, op_of, index = _read_messages(top["messages"], names, n, ops)
    compute = _read_compute(top.get("compute", []), n, index)
    meta = top.get("meta", {})
    if not isinstance(meta, dict):
        raise _fail("meta", meta, "expected an object")
    return DagFile(name, ranks, messages, ops, op_of, compute, meta)


def dump_dag(workload: Workload) -> dict[str, Any]:
    """``workload`` in the file format (ranks named by their hosts): its messages, and
    the ops, compute segments and JSON-safe meta a generator recorded."""
    rank = {h: i for i, h in enumerate(workload.ranks)}
    meta = workload.meta
    op_of: Mapping[int, str] = meta.get("op_of", {})
    messages = []
    for m in workload.messages:
        row: dict[str, Any] = {"id": m.msg_id, "src": rank[m.src], "dst": rank[m.dst],
                               "size_bytes": int(m.size_bytes)}
        if m.deps:
            row["deps"] = list(m.deps)
        if m.gap_s:
            row["gap_s"] = m.gap_s
        if m.start_s:
            row["start_s"] = m.start_s
        if m.tag:
            row["tag"] = m.tag
        if m.step:
            row["step"] = m.step
        if m.msg_id in op_of:
            row["op"] = op_of[m.msg_id]
        messages.append(row)
    extra = {k: v for k, v in meta.items() if k not in ("ops", "op_of", "compute")}
    return {"format": FORMAT, "name": workload.name, "ranks": list(workload.ranks),
            "messages": messages, "ops": dict(meta.get("ops", {})),
            "compute": [{"rank": c.rank, "deps": list(c.deps), "offset_s": c.offset_s,
                         "duration_s": c.duration_s, "what": c.what}
                        for c in meta.get("compute", ())],
            "meta": json.loads(json.dumps(extra, default=str))}
