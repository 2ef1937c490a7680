"""A run directory's storage: every file replaced atomically and never through a
planted link (core.safefile), signals held while results are written, and one record per finished case
(``cases/NNN/``, what ``--resume`` reloads)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from core import safefile
from core.errors import FabricEmuError
from experiments.fidelity import FidelityReport

#: Subdirectory of a run directory with one record per committed case.
CASES_DIR = "cases"
#: The largest JSON file of a run directory read back (summary.json, config.json, a
#: case's unit.json): a 1,500-case run's summary.json is a few MB.
MAX_RUN_JSON_BYTES = 1 << 30
#: The largest CSV of a case record read back.
MAX_CASE_CSV_BYTES = 1 << 32


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then deliver them: a
    second Ctrl-C while results are written cannot leave them half written."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, lambda signum, _frame: caught.append(signum))
                for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:
            os.kill(os.getpid(), caught[0])


@dataclass(frozen=True)
class Mark:
    """How much a `CaseRecord` held at one moment (`CaseRecord.mark`)."""

    rows: int
    notes: int
    deviations: int
    frames: dict[str, int]
    cases: frozenset[str]
    spreads: frozenset[str]


@dataclass
class CaseRecord:
    """What one finished case (or cases measured together) recorded."""

    key: str
    rows: list[dict] = field(default_factory=list)
    frames: dict[str, list[pd.DataFrame]] = field(default_factory=dict)
    cases: dict[str, FidelityReport] = field(default_factory=dict)
    fabrics: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    deviations: list[dict] = field(default_factory=list)
    # Case -> the reasons of each attempt the gate refused for interference (Run.attempt).
    refused: dict[str, list[list[str]]] = field(default_factory=dict)
    # Case -> metric -> the spread of a randomised model's realisations (Run.spread).
    spreads: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)

    def mark(self) -> Mark:
        """What this unit holds now, for `rollback`."""
        return Mark(len(self.rows), len(self.notes), len(self.deviations),
                     {name: len(parts) for name, parts in self.frames.items()},
                     frozenset(self.cases), frozenset(self.spreads))

    def rollback(self, mark: Mark) -> None:
        """Forget what was recorded since ``mark`` (refusals excepted)."""
        del self.rows[mark.rows:], self.notes[mark.notes:], self.deviations[mark.deviations:]
        self.frames = {name: parts[:mark.frames[name]] for name, parts in self.frames.items()
                       if mark.frames.get(name)}
        self.cases = {c: r for c, r in self.cases.items() if c in mark.cases}
        self.spreads = {c: s for c, s in self.spreads.items() if c in mark.spreads}

    def empty(self) -> bool:
        return not (self.rows or self.frames or self.cases or self.notes or self.deviations)

    def save(self, root: Path, index: int) -> None:
        """``root/NNN/`` (unit.json and one CSV per frame), renamed into place whole."""
        safefile.make_dir(root, parents=False)
        final = root / f"{index:03d}"
        tmp = root / f".{index:03d}.tmp"
        # What a killed writer left: removed (a planted link itself, not what it points to).
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp)
        else:
            tmp.unlink(missing_ok=True)
        safefile.make_dir(tmp, parents=False, exist_ok=False)
        try:
            for name, parts in self.frames.items():
                safefile.write_csv(tmp / f"{name}.csv", pd.concat(parts, ignore_index=True))
            record = {"key": self.key, "rows": self.rows, "frames": list(self.frames),
                      "cases": {c: r.as_dict() for c, r in self.cases.items()},
                      "fabrics": self.fabrics, "notes": self.notes,
                      "deviations": self.deviations, "refused": self.refused,
                      "spreads": self.spreads}
            safefile.write_json(tmp / "unit.json", record)
            os.replace(tmp, final)  # safefile: ok - a directory we made, renamed whole
        except BaseException:  # a full disk, a Ctrl-C: no half record left behind
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @classmethod
    def load_all(cls, root: Path) -> list[CaseRecord]:
        """Every record under ``root``, in order; FabricEmuError naming a damaged or
        missing one."""
        units = []
        for path in _records(root):
            try:
                record = json.loads(safefile.read_regular(path / "unit.json",
                                                          MAX_RUN_JSON_BYTES))
                _check_record(record)
                frames = {name: [pd.read_csv(safefile.regular(path / f"{name}.csv",
                                                              MAX_CASE_CSV_BYTES))]
                          for name in record["frames"]}
                units.append(cls(record["key"], list(record["rows"]), frames,
                                 {c: FidelityReport.from_dict(r)
                                  for c, r in record["cases"].items()},
                                 dict(record["fabrics"]), list(record["notes"]),
                                 list(record.get("deviations", [])),
                                 dict(record.get("refused", {})),
                                 dict(record.get("spreads", {}))))
            except (OSError, ValueError, KeyError, TypeError, pd.errors.ParserError) as e:
                raise FabricEmuError(f"{path} is damaged ({e})") from None
            if len(units) != int(path.name) + 1:
                raise FabricEmuError(f"{root} misses case records before {path.name}")
        return units


#: unit.json's keys and the type of each (``rows``: a list of metric rows, objects).
_RECORD_TYPES = {"key": str, "rows": list, "frames": list, "cases": dict, "fabrics": dict,
                 "notes": list}


def _check_record(record: object) -> None:
    """TypeError naming what is wrong in a unit.json that parsed as JSON."""
    if not isinstance(record, dict):
        raise TypeError("unit.json does not hold an object")
    for key, kind in _RECORD_TYPES.items():
        if not isinstance(record.get(key), kind):
            raise TypeError(f"unit.json lacks {key!r} (or it has the wrong type)")
    if not all(isinstance(r, dict) and isinstance(r.get("case"), str) for r in record["rows"]):
        raise TypeError("unit.json has a malformed metric row")
    # A frame's name becomes a file name in the run directory (NAME.csv): nothing else.
    if not all(isinstance(n, str) and re.fullmatch(r"\w{1,100}", n, re.ASCII)
               for n in record["frames"]):
        raise TypeError("unit.json names a frame that is not a plain name")
    if not all(isinstance(r, dict) for r in record["cases"].values()):
        raise TypeError("unit.json has a malformed case verdict")


def _records(root: Path) -> list[Path]:
    """The case records under ``root`` (``NNN``, more digits past 999), in order."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if re.fullmatch(r"[0-9]{3,}", p.name)),
                  key=lambda p: int(p.name))


def record_count(root: Path) -> int:
    """How many case records ``root`` holds."""
    return len(_records(root))
