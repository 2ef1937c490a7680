"""The unit of work shared by collectives, the engine and the model.

A collective compiles to a DAG of point-to-point ``Message``s; the engine sends
each as one RDMA WRITE on its own queue pair (own UDP source port, so its own
ECMP hash), starting once all its dependencies have been received; the model
prices the same DAG.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Message:
    """One RDMA WRITE of ``size_bytes`` from ``src`` to ``dst`` (host names).

    ``deps`` are ids of messages that must have *completed* (fully received) before
    this one may start; ``start_s`` is the earliest start in real seconds after the
    run's time zero (open-loop traffic such as incast or replay); ``gap_s`` is the
    compute between the last dependency's completion (time zero for a message without
    dependencies) and this message's post, in real seconds: the message is posted at
    ``max(last dependency done + gap_s, start_s)``.
    ``step`` is the algorithm step (ring step, tree level) and ``chunk`` the data
    chunk index, both for analysis; ``reduce`` says the receiver reduces the chunk.
    """

    msg_id: int
    src: str
    dst: str
    size_bytes: int
    deps: tuple[int, ...] = ()
    start_s: float = 0.0
    gap_s: float = 0.0
    step: int = 0
    chunk: int = 0
    reduce: bool = False
    tag: str = ""


@dataclass
class Workload:
    """A named DAG of messages plus what it means (for busbw and the model)."""

    name: str
    messages: list[Message]
    ranks: list[str]                 # rank -> host
    size_bytes: int                  # the collective's nominal size S (NCCL-tests "size")
    meta: dict = field(default_factory=dict)
