"""Chakra execution traces to DAG files (traffic/chakra.py, traffic/chakra_et.py).

The fixtures are encoded by Google's protobuf runtime from a descriptor built here
from Chakra's published schema (field numbers and enums of et_def.proto), so the
reader is checked against an encoder that is not its own. The expected messages,
gaps and dependencies are worked out by hand in each test.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from core.errors import ParameterError
from model.alphabeta import predict_workload
from model.dag import critical_path, message_time_s
from tests.unit.test_model_alphabeta import star, star_paths
from traffic.chakra import convert, convert_files
from traffic.chakra_et import parse_et
from traffic.dagfile import read_dag

pb = pytest.importorskip("google.protobuf")
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

COMP, SEND, RECV, COLL, MEM_LOAD = 4, 5, 6, 7, 2
ALL_REDUCE, REDUCE, ALL_TO_ALL = 0, 1, 6
REPO = Path(__file__).resolve().parents[2]
F = descriptor_pb2.FieldDescriptorProto


@cache
def _classes() -> dict[str, Any]:
    """GlobalMetadata, Node, AttributeProto and IOInfo of package ChakraProtoMsg."""
    fd = descriptor_pb2.FileDescriptorProto(name="et_def_test.proto", package="ChakraProtoMsg",
                                            syntax="proto3")

    def message(name: str, fields: list[tuple[str, int, int, int, str]]) -> None:
        m = fd.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
            if fname == "ctrl_deps":  # one repeated field unpacked: both encodings read
                f.options.packed = False
    one, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("AttributeProto", [
        ("name", 1, F.TYPE_STRING, one, ""), ("doc_string", 2, F.TYPE_STRING, one, ""),
        ("double_val", 3, F.TYPE_DOUBLE, one, ""), ("int32_val", 7, F.TYPE_INT32, one, ""),
        ("int64_val", 9, F.TYPE_INT64, one, ""), ("uint64_val", 13, F.TYPE_UINT64, one, ""),
        ("sint64_val", 17, F.TYPE_SINT64, one, ""), ("bool_val", 27, F.TYPE_BOOL, one, ""),
        ("string_val", 29, F.TYPE_STRING, one, "")])
    oneof = fd.message_type[0].oneof_decl.add(name="value")
    for f in fd.message_type[0].field[2:]:
        f.oneof_index = 0
    assert oneof.name == "value"
    message("GlobalMetadata", [("version", 1, F.TYPE_STRING, one, ""),
                               ("attr", 2, F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto")])
    message("IOInfo", [("values", 1, F.TYPE_STRING, one, ""), ("shapes", 2, F.TYPE_STRING, one, "")])
    message("Node", [
        ("id", 1, F.TYPE_UINT64, one, ""), ("name", 2, F.TYPE_STRING, one, ""),
        ("type", 3, F.TYPE_UINT32, one, ""), ("ctrl_deps", 4, F.TYPE_UINT64, rep, ""),
        ("data_deps", 5, F.TYPE_UINT64, rep, ""), ("start_time_micros", 6, F.TYPE_UINT64, one, ""),
        ("duration_micros", 7, F.TYPE_UINT64, one, ""),
        ("inputs", 8, F.TYPE_MESSAGE, one, ".ChakraProtoMsg.IOInfo"),
        ("attr", 10, F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}"))
        for name in ("AttributeProto", "GlobalMetadata", "IOInfo", "Node")}


def attr(name: str, value: object) -> Any:
    a = _classes()["AttributeProto"](name=name)
    if isinstance(value, bool):
        a.bool_val = value
    elif isinstance(value, int):
        a.int64_val = value
    elif isinstance(value, float):
        a.double_val = value
    else:
        a.string_val = str(value)
    return a


def node(node_id: int, kind: int, data: tuple[int, ...] = (), ctrl: tuple[int, ...] = (),
         us: int = 0, **attrs: object) -> Any:
    n = _classes()["Node"](id=node_id, name=f"n{node_id}", type=kind, duration_micros=us,
                           data_deps=data, ctrl_deps=ctrl, start_time_micros=12345,
                           inputs=_classes()["IOInfo"](values="[1]", shapes="[[1]]"))
    n.attr.extend(attr(k, v) for k, v in attrs.items())
    return n


def gpu(node_id: int, us: int, data: tuple[int, ...] = (), ctrl: tuple[int, ...] = ()) -> Any:
    return node(node_id, COMP, data, ctrl, us, is_cpu_op=False)


def _delimited(payload: bytes) -> bytes:
    n, head = len(payload), bytearray()
    while True:
        head.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(head) + payload


def et_bytes(nodes: list[Any]) -> bytes:
    meta = _classes()["GlobalMetadata"](version="0.0.4")
    meta.attr.append(attr("schema", "1.0.2-chakra.0.0.4"))
    return b"".join(_delimited(m.SerializeToString()) for m in [meta, *nodes])


def write(tmp_path: Path, ranks: list[list[Any]], prefix: str = "t") -> str:
    for r, nodes in enumerate(ranks):
        (tmp_path / f"{prefix}.{r}.et").write_bytes(et_bytes(nodes))
    return str(tmp_path / prefix)


def rows(doc: dict[str, Any]) -> list[tuple]:
    return [(m["src"], m["dst"], m["size_bytes"], m.get("gap_s", 0.0), tuple(m.get("deps", ())))
            for m in doc["messages"]]


MIB = 1 << 20


def allreduce_ranks() -> list[list[Any]]:
    """Two ranks: 20 us then 5 us of compute, a 1 MiB all-reduce, 7 us, then rank 0 sends
    64 KiB to rank 1."""
    ranks = []
    for r in range(2):
        p2p = node(5, SEND, (4,), comm_dst=1, comm_size=65536, comm_tag=3) if r == 0 else \
            node(5, RECV, (3,), comm_src=0, comm_size=65536, comm_tag=3)
        ranks.append([gpu(1, 20), gpu(2, 5, ctrl=(1,)),
                      node(3, COLL, (2,), comm_type=ALL_REDUCE, comm_size=MIB, pg_name="0"),
                      gpu(4, 7, (3,)), p2p])
    return ranks


def test_a_two_rank_allreduce_after_compute_by_hand(tmp_path):
    doc = convert_files([write(tmp_path, allreduce_ranks())])
    half = MIB // 2
    # Ring on 2 ranks: each sends its half at the cursor (25 us of compute), then
    # forwards the reduced half it received (data flow + its own first message).
    assert rows(doc) == [(0, 1, half, 25e-6, ()), (1, 0, half, 25e-6, ()),
                         (0, 1, half, 0.0, (0, 1)), (1, 0, half, 0.0, (0, 1)),
                         (0, 1, 65536, 7e-6, (0, 1, 2, 3))]
    assert doc["ranks"] == 2 and doc["name"] == "t"
    ar = doc["ops"][doc["messages"][0]["op"]]
    assert ar == {"collective": "allreduce", "size_bytes": MIB, "ranks": 2, "tag": "pg 0"}
    assert doc["ops"][doc["messages"][4]["op"]]["collective"] == "sendrecv"
    assert [(c["rank"], c["deps"], c["offset_s"], c["duration_s"]) for c in doc["compute"]] == [
        (0, [], 0.0, 20e-6), (1, [], 0.0, 20e-6), (0, [], 20e-6, 5e-6), (1, [], 20e-6, 5e-6),
        (0, [0, 1, 2, 3], 0.0, 7e-6), (1, [0, 1, 2, 3], 0.0, 7e-6)]
    assert doc["meta"]["size_scale"] == 1.0 and doc["meta"]["inexact_waits"] == 0
    assert doc["meta"]["chakra_schema"] == "1.0.2-chakra.0.0.4"


def test_the_converted_dag_reads_and_runs_through_the_model(tmp_path):
    doc = convert_files([write(tmp_path, allreduce_ranks())])
    wl = read_dag(json.dumps(doc)).bind(["h0", "h1"])
    g = star(2)
    step_s = message_time_s(g, ("h0", "sw", "h1"), MIB // 2)
    p2p_s = message_time_s(g, ("h0", "sw", "h1"), 65536)
    cp = critical_path(wl, g, star_paths)
    assert cp.completion_s == pytest.approx(25e-6 + 2 * step_s + 7e-6 + p2p_s)
    fluid = predict_workload(wl, g, star_paths)
    assert fluid.completion_s == pytest.approx(cp.completion_s, rel=1e-9)


def test_sends_and_receives_match_by_source_destination_and_tag_in_order(tmp_path):
    # Rank 0 sends tag 1 (100 B), tag 2 (200 B), tag 1 (300 B); rank 1 receives tag 2
    # first, then the tag-1 ones in order, and answers after the second tag-1 receive.
    r0 = [node(1, SEND, comm_dst=1, comm_size=100, comm_tag=1),
          node(2, SEND, comm_dst=1, comm_size=200, comm_tag=2),
          node(3, SEND, comm_dst=1, comm_size=300, comm_tag=1),
          node(4, RECV, comm_src=1, comm_size=50, comm_tag=9)]
    r1 = [node(1, RECV, comm_src=0, comm_size=200, comm_tag=2),
          node(2, RECV, comm_src=0, comm_size=100, comm_tag=1),
          node(3, RECV, (2,), comm_src=0, comm_size=300, comm_tag=1),
          gpu(4, 3, (3,)),
          node(5, SEND, (4,), comm_dst=0, comm_size=50, comm_tag=9)]
    doc = convert_files([write(tmp_path, [r0, r1])])
    assert rows(doc) == [(0, 1, 100, 0.0, ()), (0, 1, 200, 0.0, ()), (0, 1, 300, 0.0, ()),
                         (1, 0, 50, 3e-6, (0, 2))]
    assert doc["meta"]["notes"] == {}


def test_dependencies_carry_through_compute_chains_and_merges(tmp_path):
    # Rank 0: send A; 10 us (ctrl dep on A) then 3 us (data dep): send B waits for A
    # plus 13 us. Node 6 joins two chains with different compute tails (A + 13 us and
    # A + 4 us): exact, the first dominates. Node 8 joins (B, 0) and (A, 13 us): no
    # single gap says it, so it waits for both plus 13 us (counted).
    r0 = [node(1, SEND, comm_dst=1, comm_size=1000), gpu(2, 10, ctrl=(1,)), gpu(3, 3, (2,)),
          node(4, SEND, (3,), comm_dst=1, comm_size=2000), gpu(5, 4, (1,)),
          node(6, SEND, (3, 5), comm_dst=1, comm_size=3000),
          node(8, SEND, (3, 4), comm_dst=1, comm_size=4000)]
    r1 = [node(1, RECV, comm_src=0, comm_size=1000)]
    doc = convert_files([write(tmp_path, [r0, r1])])
    assert rows(doc) == [(0, 1, 1000, 0.0, ()), (0, 1, 2000, 13e-6, (0,)),
                         (0, 1, 3000, 13e-6, (0,)), (0, 1, 4000, 13e-6, (0, 1))]
    assert doc["meta"]["inexact_waits"] == 1
    assert doc["meta"]["notes"] == {"sends without a receive": 3}


def test_the_size_scale_shrinks_messages_not_compute(tmp_path):
    doc = convert_files([write(tmp_path, allreduce_ranks())], size_scale=0.01)
    scaled = math.ceil(MIB * 0.01)
    assert doc["ops"][doc["messages"][0]["op"]]["size_bytes"] == scaled
    assert [m["size_bytes"] for m in doc["messages"]] == [-(-scaled // 2)] * 4 + [656]
    assert doc["messages"][0]["gap_s"] == 25e-6 and doc["meta"]["size_scale"] == 0.01
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ParameterError, match="size_scale"):
            convert_files([write(tmp_path, allreduce_ranks())], size_scale=bad)


def test_process_groups_come_from_the_groups_file(tmp_path):
    ranks = [[node(1, COLL, comm_type=ALL_TO_ALL, comm_size=4000, pg_name="a" if r < 2 else "b")]
             for r in range(4)]
    prefix = write(tmp_path, ranks)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"a": [0, 1], "b": [2, 3]}))
    doc = convert_files([prefix], groups_file=groups)
    assert sorted((m["src"], m["dst"]) for m in doc["messages"]) == [(0, 1), (1, 0), (2, 3),
                                                                    (3, 2)]
    assert sorted(op["tag"] for op in doc["ops"].values()) == ["pg a", "pg b"]
    with pytest.raises(ParameterError, match="group a is never called by rank 2"):
        convert_files([prefix])  # without the file every collective is on every rank


def test_what_cannot_be_expressed_passes_through_and_is_counted(tmp_path):
    r0 = [node(1, MEM_LOAD), node(2, COMP, (1,), us=50, is_cpu_op=True),
          node(3, COLL, (2,), comm_type=REDUCE, comm_size=10),
          node(4, COLL, (3,)),                                    # no comm_type
          node(5, SEND, (4, 4, 5, 77), comm_dst=1, comm_size=10)]  # self, absent, repeated
    r1 = [node(1, RECV, comm_src=0, comm_size=10)]
    doc = convert_files([write(tmp_path, [r0, r1])])
    assert rows(doc) == [(0, 1, 10, 0.0, ())]
    assert doc["meta"]["notes"] == {
        "CPU operators passed through": 1, "MEM_LOAD_NODEs passed through": 1,
        "REDUCE collectives skipped": 1, "collective nodes without comm_type": 1,
        "dependencies on absent nodes dropped": 1, "self-dependencies dropped": 1}


def test_the_reader_decodes_every_attribute_kind():
    a = _classes()["AttributeProto"]
    n = node(7, COMP, (1, 300), (2,), us=9)
    n.attr.extend([a(name="i32", int32_val=-5), a(name="s64", sint64_val=-7),
                   a(name="u64", uint64_val=2**63), a(name="d", double_val=0.25)])
    trace = parse_et(et_bytes([n]), "x")
    got = trace.nodes[0]
    assert (got.node_id, got.type_name, got.deps, got.duration_micros) == (
        7, "COMP_NODE", [2, 1, 300], 9)
    assert got.attrs == {"i32": -5, "s64": -7, "u64": 2**63, "d": 0.25}
    assert trace.version == "0.0.4" and trace.attrs == {"schema": "1.0.2-chakra.0.0.4"}


def _cycle(tmp_path):
    return write(tmp_path, [[gpu(1, 1, (2,)), gpu(2, 1, (1,))], [gpu(1, 1)]])


def _deadlock(tmp_path):
    # Each rank receives before it sends what the other receives.
    return write(tmp_path, [[node(1, RECV, comm_src=1, comm_size=8),
                             node(2, SEND, (1,), comm_dst=1, comm_size=8)],
                            [node(1, RECV, comm_src=0, comm_size=8),
                             node(2, SEND, (1,), comm_dst=0, comm_size=8)]])


def _missing_rank(tmp_path):
    prefix = write(tmp_path, allreduce_ranks() + [[gpu(1, 1)]])
    (tmp_path / "t.1.et").unlink()
    return prefix


def _truncated(tmp_path):
    prefix = write(tmp_path, allreduce_ranks())
    path = tmp_path / "t.1.et"
    path.write_bytes(path.read_bytes()[:-3])
    return prefix


def _not_chakra(tmp_path):
    prefix = write(tmp_path, allreduce_ranks())
    (tmp_path / "t.0.et").write_text(json.dumps({"format": "fabricemu-dag/1"}))
    return prefix


BAD = {
    "cycle": (_cycle, "rank 0 node 1.*cycle"),
    "deadlock": (_deadlock, "rank 0 node 1.*never completes"),
    "missing rank": (_missing_rank, "rank 1.*missing rank file"),
    "truncated": (_truncated, r"t\.1\.et.*truncated"),
    "not chakra": (_not_chakra, r"t\.0\.et.*not a Chakra trace"),
    "recv without send": (lambda p: write(p, [[gpu(1, 1)], [node(1, RECV, comm_src=0,
                                                                  comm_size=8)]]),
                          "rank 1 node 1.*no matching send"),
    "kind mismatch": (lambda p: write(p, [
        [node(1, COLL, comm_type=ALL_REDUCE, comm_size=8)],
        [node(1, COLL, comm_type=ALL_TO_ALL, comm_size=8)]]), "rank 1 node 1.*allreduce"),
    "no communication": (lambda p: write(p, [[gpu(1, 1)], [gpu(1, 1)]]), "no communication"),
    "one rank": (lambda p: write(p, [allreduce_ranks()[0]]), "at least 2 ranks"),
    "no such prefix": (lambda p: str(p / "nothing"), "no file PREFIX"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_traces_are_refused_in_one_line(tmp_path, case):
    make, match = BAD[case]
    with pytest.raises(ParameterError, match=match) as e:
        convert_files([make(tmp_path)])
    assert "\n" not in str(e.value)


def test_the_cli_converts_and_refuses_in_one_line_writing_nothing(tmp_path):
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-c", "from cli.app import main; main()", "convert", "chakra"]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    ok = subprocess.run([*cmd, write(tmp_path, allreduce_ranks()), "--out", str(out),
                         "--size-scale", "0.5"], capture_output=True, text=True, env=env,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert read_dag(out.read_text()).meta["size_scale"] == 0.5
    bad = tmp_path / "bad.json"
    refused = subprocess.run([*cmd, _truncated(tmp_path), "--out", str(bad)],
                             capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "truncated" in refused.stderr
    assert not bad.exists()
    assert convert([parse_et(et_bytes(r), f"r{i}") for i, r in enumerate(allreduce_ranks())],
                   size_scale=0.5) == json.loads(out.read_text()) | {"name": "chakra"}


def test_the_example_trace_converts():
    example = REPO / "examples" / "workloads" / "chakra"
    doc = convert_files([str(example / "demo")], size_scale=0.25,
                        groups_file=example / "groups.json")
    kinds = sorted(op["collective"] for op in doc["ops"].values())
    assert kinds == ["allgather"] * 2 + ["allreduce"] * 10 + ["sendrecv"] * 4
    assert (doc["ranks"], len(doc["messages"]), doc["meta"]["inexact_waits"]) == (8, 188, 4)


def test_any_bytes_read_or_are_refused_in_one_line():
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    good = et_bytes(allreduce_ranks()[1])

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(st.one_of(st.binary(max_size=200),
                                st.tuples(st.integers(0, len(good) - 1), st.integers(0, 255))
                                .map(lambda f: good[:f[0]] + bytes([f[1]]) + good[f[0] + 1:])))
    def check(data: bytes) -> None:
        try:
            parse_et(data, "x.0.et")
        except ParameterError as e:
            assert "\n" not in str(e)

    check()
