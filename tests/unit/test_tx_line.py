"""The compiled delay lines (roce_tx.c: tx_service's hold, tx_release) against Python's
(engine.sources.DelayLine, engine.requester.Requester.release, engine.handover): the
same NIC with three QPs (two delayed by different amounts beyond the NIC clock, one
not), served and released at the same random times, hands the same frames (bytes,
send stamps included) to its socket, books the same lags, and its lines are due at
the same times."""

from __future__ import annotations

import ctypes
import random
import socket
import time
from array import array
from types import SimpleNamespace

import pytest

from core.errors import CapabilityError
from core.frame import WIRE_OVERHEAD_BYTES
from engine.books import NEVER_NS, Books
from engine.burst import Burst
from engine.cloop import LOOP_DONE, LOOP_LINE
from engine.handover import Handover
from engine.requester import Requester
from engine.sources import DelayLine
from engine.tx import (
    TX_AFTER,
    TX_ARM,
    TX_EMPTY,
    TX_GROW,
    TX_IDLE,
    TX_LAGS,
    TxCall,
    TxGbn,
    TxLib,
    TxLine,
    TxNic,
    TxQp,
    line_ring,
)
from tests.unit.loop_rig import loop_rig
from traffic.gbn import GbnSender
from traffic.pacing import Deadlines
from traffic.roce import Flow, QpTemplate, parse_frame

FWD_NS = 50_000                       # the NIC clock's delay
DELAYS_NS = (FWD_NS + 30_000, FWD_NS + 170_000, FWD_NS)   # the three QPs' path delays
TURN_NS = 20_000
PACKETS = 300
NS_PER_BIT = 4.0                      # a 320-byte frame every ~10 us


@pytest.fixture(scope="module")
def libs() -> tuple[TxLib, Burst]:
    try:
        return TxLib(), Burst("compiled")
    except (CapabilityError, OSError) as e:
        pytest.skip(f"no compiler for roce_tx.c: {e}")


class _Books:
    """What Requester.release and Handover use of ``engine.books.Books``."""

    book_lags = Books.book_lags

    def __init__(self) -> None:
        self.turn_ns = TURN_NS
        self.deadlines = Deadlines()
        self.lags = array("q")
        self.lag_total_ns = 0
        self.packets_sent = 0


class _World:
    """One NIC and its three QPs in C; ``compiled``: their lines too, else Python's."""

    def __init__(self, lib: TxLib, burst: Burst, shapes: list[tuple], start_psn: int,
                 compiled: bool):
        self.lib, self.burst, self.compiled = lib, burst, compiled
        self.rx, tx = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        tx.setblocking(False)
        self.tx = tx
        self.qps = (TxQp * 3)()
        self.tx_ns = [array("q", bytes(8 * PACKETS)) for _ in range(3)]
        self.lines = (TxLine * 2)()
        self.rings: list[ctypes.Array] = [line_ring(line, 2) for line in self.lines]
        for k, q in enumerate(self.qps):
            q.gbn = TxGbn.of(GbnSender(PACKETS, None, 1e9, start_psn))
            q.sched.max_catchup_ns = 20_000_000
            q.rate_bps, q.window_bytes = 100e9, -1.0
            for j, shape in enumerate(shapes[k]):
                q.shape[j] = burst.shape_address(shape)
                q.bits[j] = (len(shape.buf) + WIRE_OVERHEAD_BYTES) * 8
            q.tx_ns = ctypes.cast(self.tx_ns[k].buffer_info()[0], ctypes.POINTER(ctypes.c_int64))
            q.first_tx_ns = q.last_tx_ns = -1
            q.next_trace_ns = NEVER_NS
            q.line_ns = DELAYS_NS[k] - FWD_NS
            if compiled and q.line_ns:
                self.lines[k].delay_ns = DELAYS_NS[k]
                q.line = ctypes.pointer(self.lines[k])
        self.active = (ctypes.c_int32 * 3)(0, 1, 2)
        self.nic = TxNic(fd=tx.fileno(), fwd_ns=FWD_NS, ns_per_bit=NS_PER_BIT, period_start=-1,
                         n_active=3, active=ctypes.cast(self.active, ctypes.POINTER(ctypes.c_int32)),
                         n_lines=2, lines=ctypes.cast(self.lines, ctypes.POINTER(TxLine)),
                         line_due=NEVER_NS)
        self.nic.sched.max_catchup_ns = 20_000_000
        self.lag_buf = (ctypes.c_int64 * 4096)()
        self.call = TxCall(nic=ctypes.addressof(self.nic), qps=ctypes.cast(self.qps, ctypes.POINTER(TxQp)),
                           buf=burst.buffer_address,
                           lags=ctypes.cast(self.lag_buf, ctypes.POINTER(ctypes.c_int64)),
                           lags_cap=len(self.lag_buf), scale_ns=1e9, payload_bytes=256,
                           max_catchup_ns=20_000_000)
        self.lags: list[int] = []
        # Python's lines: DelayLine and Requester.release over a real Handover.
        self.books = _Books()
        nic = SimpleNamespace(backlog=[], sock=tx, slot=0, ns_per_bit=NS_PER_BIT)
        self.py_qps = [SimpleNamespace(nic=nic, plan=SimpleNamespace(fwd_delay_emu_ns=d))
                       for d in DELAYS_NS]
        for qp in self.py_qps:
            qp.delay = DelayLine(qp)
        self.requester = SimpleNamespace(books=self.books, out=Handover(self.books, burst))
        self.shapes = shapes

    def _drain_lags(self) -> None:
        self.lags.extend(self.lag_buf[:self.call.n_lags])
        self.call.n_lags = 0

    def serve(self, wall: int) -> None:
        call = self.call
        call.now = wall - FWD_NS
        call.horizon = call.now + TURN_NS
        while True:
            event = self.lib.service(ctypes.addressof(call))
            if event in (TX_ARM, TX_EMPTY):
                return
            if event == TX_LAGS:
                self._drain_lags()
            elif event == TX_GROW:
                k = call.qp
                self.rings[k] = line_ring(self.lines[k], 2 * self.lines[k].cap, self.rings[k])
            elif event == TX_AFTER:
                assert call.hold and not self.compiled and call.sent == call.count
                qp = self.py_qps[call.qp]
                qp.delay.hold(qp.delay.frames, (call.now + qp.plan.fwd_delay_emu_ns,
                                                self.shapes[call.qp][call.which], call.psn,
                                                call.count, call.lag, call.step,
                                                bool(call.solicit)), self.books.deadlines)
            else:
                assert event == TX_IDLE

    def release(self, wall: int) -> None:
        if not self.compiled:
            deadlines = self.books.deadlines  # as the worker's loop fires them
            while (due := deadlines.next_ns()) is not None and due <= wall + TURN_NS:
                line = deadlines.pop_next()
                Requester.release(self.requester, line, wall)  # type: ignore[arg-type]
            return
        call = self.call
        call.now, call.horizon, call.build_only = wall, wall + TURN_NS, 0
        while self.nic.line_due <= wall + TURN_NS:  # as the compiled loop does, a burst a call
            while (event := self.lib.release(ctypes.addressof(call))) == TX_LAGS:
                self._drain_lags()
            assert event == TX_ARM

    def due(self) -> int:
        if self.compiled:
            return self.nic.line_due
        due = self.books.deadlines.next_ns()
        return NEVER_NS if due is None else due

    def frames(self) -> dict[int, list[bytes]]:
        by_qp: dict[int, list[bytes]] = {}
        while True:
            try:
                frame = self.rx.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return by_qp
            by_qp.setdefault(parse_frame(frame).dqpn, []).append(frame)

    def close(self) -> None:
        self.rx.close()
        self.tx.close()


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_lines_send_what_python_s_send_when_it_does(libs, seed: int):
    lib, burst = libs
    rng = random.Random(seed)
    shapes = []
    for k in range(3):
        flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
                    0xC000 + k, 70 + k)
        tmpl = QpTemplate(flow, 256 * PACKETS, mtu_payload_bytes=256)
        shapes.append(tuple(tmpl.shapes[tmpl.opcode(i)] for i in (0, 1, PACKETS - 1)))
    start_psn = rng.choice([0, (1 << 24) - 100])
    worlds = [_World(lib, burst, shapes, start_psn, compiled) for compiled in (True, False)]
    got: list[dict[int, list[bytes]]] = [{}, {}]
    wall = 1_000_000_000
    try:
        for _ in range(600):
            wall += rng.choice([0, 700, 3_000, 10_000, 40_000, 150_000])
            for w in worlds:
                w.serve(wall)
                w.release(wall)
            assert worlds[0].due() == worlds[1].due()
            for k, w in enumerate(worlds):
                for qpn, frames in w.frames().items():
                    got[k].setdefault(qpn, []).extend(frames)
            assert got[0] == got[1]
        for w in worlds:
            w._drain_lags()
        assert sorted(worlds[0].lags) == sorted(worlds[1].lags + list(worlds[1].books.lags))
        assert worlds[0].call.packets_sent == \
            worlds[1].call.packets_sent + worlds[1].books.packets_sent
        assert [len(got[0][70 + k]) for k in range(3)] == [PACKETS] * 3  # all of it went
        assert max(w.cap for w in worlds[0].lines) > 2                     # the rings grew
    finally:
        for w in worlds:
            w.close()


def test_the_compiled_loop_wakes_for_a_line_and_hands_a_blocked_nic_to_python(libs):
    """roce_loop.c: a NIC's line head is a deadline of the loop's own (one sleep, then
    tx_release, then nothing due); a NIC whose backlog Python holds goes to Python."""
    lib, _ = libs
    nic = TxNic(line_due=NEVER_NS)  # no lines: tx_release finds it empty
    nics = (ctypes.c_void_p * 1)(ctypes.addressof(nic))
    due = (ctypes.c_int64 * 1)(NEVER_NS)
    blocked = (ctypes.c_uint8 * 1)()
    call = TxCall()
    with loop_rig(release=lib.release_address, tx=ctypes.addressof(call), nics=nics,
                  blocked=ctypes.addressof(blocked), due=due, n_nics=1, turn_ns=TURN_NS,
                  batch_ns=TURN_NS) as (loop_lib, c, _, _):
        at = time.monotonic_ns() + 20 * TURN_NS
        nic.line_due = at
        assert loop_lib.loop_pass(ctypes.addressof(c)) == LOOP_DONE
        assert c.wakeups == 1 and time.monotonic_ns() >= at - TURN_NS
        assert nic.line_due == NEVER_NS and call.now >= at - TURN_NS
        nic.line_due = time.monotonic_ns()
        blocked[0] = 1
        assert loop_lib.loop_pass(ctypes.addressof(c)) == LOOP_LINE
        assert (c.slot, c.tx_event) == (0, -1) and nic.line_due != NEVER_NS
