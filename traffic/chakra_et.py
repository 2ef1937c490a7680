"""A reader of MLCommons Chakra execution-trace (ET) files: the protobuf wire format of
the few messages a network workload needs, written from Chakra's published schema
(``schema/protobuf/et_def.proto``, the attribute-based schema of version 0.0.4).

A ``.et`` file is a stream of records, each a varint byte length then one protobuf
message: first a ``GlobalMetadata`` (field 1 ``version``, 2 ``attr``), then ``Node``
messages. Of a Node this reads ``id`` (1), ``name`` (2), ``type`` (3), ``ctrl_deps``
(4), ``data_deps`` (5), ``duration_micros`` (7) and the scalar attributes (10:
``AttributeProto`` name 1 and a scalar ``value``); other fields are skipped, as the
protobuf rules for unknown fields say. Anything that breaks the wire format (a
truncated record, a field of the wrong wire type) is a one-line ParameterError naming
the file and the byte offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ParameterError
from core.safefile import read_regular

#: Chakra's NodeType enum.
NODE_TYPES = {0: "INVALID_NODE", 1: "METADATA_NODE", 2: "MEM_LOAD_NODE", 3: "MEM_STORE_NODE",
              4: "COMP_NODE", 5: "COMM_SEND_NODE", 6: "COMM_RECV_NODE", 7: "COMM_COLL_NODE",
              8: "STORAGE_NODE", 9: "BATCH_NODE", 10: "CHECKPOINT_NODE"}
#: Chakra's CollectiveCommType enum.
COMM_TYPES = {0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER",
              5: "BROADCAST", 6: "ALL_TO_ALL", 7: "REDUCE_SCATTER", 8: "REDUCE_SCATTER_BLOCK",
              9: "BARRIER"}
#: Limits that keep a hostile file from exhausting memory before it is refused.
MAX_FILE_BYTES = 1 << 31
MAX_DEPS = 1 << 20

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
#: AttributeProto's scalar value fields: field number -> how to decode it.
_ATTR_SCALARS = {3: "double", 5: "float", 7: "int", 9: "int", 11: "uint", 13: "uint",
                 15: "sint", 17: "sint", 19: "fixed32", 21: "fixed64", 23: "sfixed32",
                 25: "sfixed64", 27: "bool", 29: "string"}


@dataclass
class EtNode:
    """One Chakra Node: what the converter needs of it."""

    node_id: int
    name: str = ""
    type: int = 0
    deps: list[int] = field(default_factory=list)      # ctrl_deps then data_deps
    duration_micros: int = 0
    attrs: dict[str, int | float | bool | str] = field(default_factory=dict)

    @property
    def type_name(self) -> str:
        return NODE_TYPES.get(self.type, f"node type {self.type}")


@dataclass
class EtTrace:
    """One rank's file: the metadata's version and attributes, and the nodes."""

    path: str
    version: str
    attrs: dict[str, int | float | bool | str]
    nodes: list[EtNode]


class _Wire:
    """A cursor over protobuf bytes; errors name the file and the absolute offset."""

    def __init__(self, data: bytes, where: str, base: int = 0) -> None:
        self.data, self.where, self.base, self.pos = data, where, base, 0

    def fail(self, why: str) -> ParameterError:
        return ParameterError(self.where, f"byte {self.base + self.pos}", why)

    def done(self) -> bool:
        return self.pos >= len(self.data)

    def varint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise self.fail("truncated (a varint runs past the end)")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift >= 70:
                raise self.fail("not protobuf (a varint longer than 10 bytes)")

    def take(self, n: int) -> _Wire:
        if n > len(self.data) - self.pos:
            raise self.fail(f"truncated (a field of {n} bytes runs past the end)")
        sub = _Wire(self.data[self.pos:self.pos + n], self.where, self.base + self.pos)
        self.pos += n
        return sub

    def key(self) -> tuple[int, int]:
        key = self.varint()
        number, wire = key >> 3, key & 7
        if number == 0 or wire not in (_VARINT, _I64, _LEN, _I32):
            raise self.fail(f"not protobuf (field {number}, wire type {wire})")
        return number, wire

    def value(self, wire: int) -> int | bytes:
        """A field's raw value: an int (varint, fixed) or bytes (length-delimited)."""
        if wire == _VARINT:
            return self.varint()
        if wire == _LEN:
            return self.take(self.varint()).data
        width = 8 if wire == _I64 else 4
        return int.from_bytes(self.take(width).data, "little")


def _expect(w: _Wire, wire: int, want: int, what: str) -> None:
    if wire != want:
        w.pos -= 1  # point at the field's key
        raise w.fail(f"{what} has wire type {wire}, not {want}: not Chakra's schema")


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _scalar(kind: str, raw: int | bytes) -> int | float | bool | str:
    if kind == "string":
        return bytes(raw).decode("utf-8", "replace")  # type: ignore[arg-type]
    assert isinstance(raw, int)
    if kind == "double":
        return struct.unpack("<d", raw.to_bytes(8, "little"))[0]
    if kind == "float":
        return struct.unpack("<f", raw.to_bytes(4, "little"))[0]
    if kind == "sint":
        return (raw >> 1) ^ -(raw & 1)
    if kind == "bool":
        return bool(raw)
    if kind in ("int", "sfixed64"):
        return _signed(raw, 64)
    if kind == "sfixed32":
        return _signed(raw, 32)
    return raw  # uint, fixed32, fixed64


_WIRE_OF = {"double": _I64, "fixed64": _I64, "sfixed64": _I64, "float": _I32, "fixed32": _I32,
            "sfixed32": _I32, "string": _LEN}


def _attribute(w: _Wire) -> tuple[str, int | float | bool | str | None]:
    """(name, value) of an AttributeProto; a list or bytes value reads as None."""
    name, value = "", None
    while not w.done():
        number, wire = w.key()
        if number == 1:
            _expect(w, wire, _LEN, "an attribute's name")
            name = bytes(w.value(wire)).decode("utf-8", "replace")  # type: ignore[arg-type]
        elif number in _ATTR_SCALARS:
            kind = _ATTR_SCALARS[number]
            _expect(w, wire, _WIRE_OF.get(kind, _VARINT), f"attribute value field {number}")
            value = _scalar(kind, w.value(wire))
        else:
            w.value(wire)
    return name, value


def _deps(w: _Wire, wire: int, out: list[int]) -> None:
    """A repeated uint64: packed (length-delimited) or one varint."""
    if wire == _LEN:
        packed = w.take(w.varint())
        while not packed.done():
            out.append(packed.varint())
    else:
        _expect(w, wire, _VARINT, "a dependency")
        out.append(w.varint())
    if len(out) > MAX_DEPS:
        raise w.fail(f"more than {MAX_DEPS} dependencies on one node")


def _node(w: _Wire) -> EtNode:
    node = EtNode(0)  # proto3 leaves a zero id out
    ctrl: list[int] = []
    data: list[int] = []
    while not w.done():
        number, wire = w.key()
        if number in (1, 3, 7):
            _expect(w, wire, _VARINT, f"Node field {number}")
            value = w.varint()
            if number == 1:
                node.node_id = value
            elif number == 3:
                node.type = value
            else:
                node.duration_micros = value
        elif number == 2:
            _expect(w, wire, _LEN, "Node.name")
            node.name = bytes(w.value(wire)).decode("utf-8", "replace")  # type: ignore[arg-type]
        elif number in (4, 5):
            _deps(w, wire, ctrl if number == 4 else data)
        elif number == 10:
            _expect(w, wire, _LEN, "Node.attr")
            name, value = _attribute(w.take(w.varint()))
            if value is not None:
                node.attrs[name] = value
        else:
            w.value(wire)
    node.deps = ctrl + data
    return node


def _metadata(w: _Wire) -> tuple[str, dict[str, int | float | bool | str]]:
    version, attrs = "", {}
    while not w.done():
        number, wire = w.key()
        if number not in (1, 2):
            w.pos -= 1
            raise w.fail(f"field {number}")
        _expect(w, wire, _LEN, "GlobalMetadata field")
        sub = w.take(w.varint())
        if number == 1:
            version = sub.data.decode("utf-8", "replace")
        else:
            name, value = _attribute(sub)
            if value is not None:
                attrs[name] = value
    return version, attrs


def parse_et(data: bytes, where: str) -> EtTrace:
    """One rank's ET bytes: GlobalMetadata, then nodes (module doc)."""
    w = _Wire(data, where)
    if w.done():
        raise w.fail("empty: not a Chakra trace (no GlobalMetadata record)")
    try:
        version, attrs = _metadata(w.take(w.varint()))
    except ParameterError as e:
        raise w.fail(f"not a Chakra trace: its first record is no GlobalMetadata ({e.why})") \
            from None
    nodes = []
    seen: set[int] = set()
    while not w.done():
        start = w.pos
        node = _node(w.take(w.varint()))
        if node.node_id in seen:
            w.pos = start
            raise w.fail(f"node id {node.node_id} appears twice")
        seen.add(node.node_id)
        nodes.append(node)
    return EtTrace(where, version, attrs, nodes)


def read_et(path: Path) -> EtTrace:
    """Read (a regular file only) and parse one rank's ``.et`` file."""
    return parse_et(read_regular(path, MAX_FILE_BYTES), path.name)
