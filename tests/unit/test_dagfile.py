"""Workload files (traffic/dagfile.py, docs/workloads.md): the example reads, a
generated iteration round-trips, every malformed file is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import FabricEmuError, ParameterError
from experiments.workload import EXAMPLE
from traffic.dagfile import FORMAT, dump_dag, read_dag
from traffic.iteration import Layout, Transformer, iteration

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BASE = {"format": FORMAT, "name": "x", "ranks": 2,
        "messages": [{"id": 0, "src": 0, "dst": 1, "size_bytes": 100},
                     {"id": 1, "src": 1, "dst": 0, "size_bytes": 100, "deps": [0],
                      "gap_s": 1e-6}]}


def test_the_example_reads_and_binds_to_the_first_hosts():
    dag = read_dag(Path(EXAMPLE).read_text())
    wl = dag.bind(["a", "b", "c", "d", "e"])
    assert wl.ranks == ["a", "b", "c", "d"]
    m4 = next(m for m in wl.messages if m.msg_id == 4)
    assert (m4.src, m4.dst, m4.deps, m4.gap_s, m4.tag) == ("a", "c", (2, 3), 5e-6, "pp")
    assert wl.meta["op_of"][4] == "pp-0" and wl.meta["ops"]["tp-s0"]["ranks"] == 2
    with pytest.raises(ParameterError, match="more ranks"):
        dag.bind(["a", "b", "c"])


def test_a_generated_iteration_round_trips():
    hosts = [f"h{i}" for i in range(8)]
    wl = iteration(Transformer(layers=2, micro_batches=2), Layout(tp=2, pp=2, dp=2), hosts,
                   size_scale=0.25)
    back = read_dag(json.dumps(dump_dag(wl))).bind(hosts)
    assert back.messages == wl.messages
    assert back.meta["compute"] == wl.meta["compute"]
    assert back.meta["ops"] == wl.meta["ops"] and back.meta["op_of"] == wl.meta["op_of"]
    with pytest.raises(ParameterError, match="not a host"):
        read_dag(json.dumps(dump_dag(wl))).bind(hosts[::-1][:4])


@pytest.mark.parametrize(("change", "match"), [
    (lambda d: d.update(ranks=1), "ranks"),
    (lambda d: d.update(extra=1), "unknown key"),
    (lambda d: d.update(format="v2"), "format"),
    (lambda d: d["messages"][1].update(deps=[1]), "itself"),
    (lambda d: d["messages"][1].update(deps=[7]), "no message"),
    (lambda d: d["messages"][0].update(deps=[1]), "cycle"),
    (lambda d: d["messages"][0].update(id=1), "unique"),
    (lambda d: d["messages"][0].update(dst=0), "own source"),
    (lambda d: d["messages"][0].update(dst=2), "dst"),
    (lambda d: d["messages"][0].update(size_bytes=0), "size_bytes"),
    (lambda d: d["messages"][0].update(size_bytes=True), "size_bytes"),
    (lambda d: d["messages"][0].update(gap_s=-1), "gap_s"),
    (lambda d: d["messages"][0].update(gap_s=float("inf")), "gap_s"),
    (lambda d: d["messages"][0].update(op="nope"), "op"),
    (lambda d: d.update(ops={"a": {"collective": "gather", "size_bytes": 1, "ranks": 2}}),
     "collective"),
    (lambda d: d.update(compute=[{"rank": 5, "duration_s": 1}]), "rank"),
    (lambda d: d.update(messages=[]), "messages"),
])
def test_malformed_files_are_refused_in_one_line(change, match):
    data = json.loads(json.dumps(BASE))
    change(data)
    with pytest.raises(ParameterError, match=match) as e:
        read_dag(json.dumps(data))
    assert "\n" not in str(e.value)


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 2**64), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(
                                ["id", "src", "dst", "size_bytes", "deps", "gap_s", "ranks",
                                 "messages", "ops", "compute", "rank", "duration_s", "op",
                                 "collective", "format", "name", "x"]), inner, max_size=5)),
    max_leaves=20)


@given(_JSON)
def test_any_json_is_a_dag_or_a_one_line_error(data):
    try:
        read_dag(json.dumps(data))
    except FabricEmuError as e:
        assert "\n" not in str(e) and len(str(e)) <= 500


@given(st.binary(max_size=200))
def test_any_bytes_are_a_dag_or_a_one_line_error(raw):
    try:
        read_dag(raw)
    except FabricEmuError as e:
        assert "\n" not in str(e)


@given(st.integers(0, 1), st.sampled_from(["id", "src", "dst", "size_bytes", "deps", "gap_s",
                                           "start_s", "tag", "op", "step"]),
       st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(), st.text(max_size=5),
                 st.lists(st.integers(-1, 3), max_size=3)))
def test_any_field_value_is_accepted_or_refused_in_one_line(i, key, value):
    data = json.loads(json.dumps(BASE))
    data["messages"][i][key] = value
    try:
        read_dag(json.dumps(data))
    except FabricEmuError as e:
        assert "\n" not in str(e)
