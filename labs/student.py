"""A student's code: loaded from their working folder, called with a time limit, and
every failure turned into one line that names the method and the line of their file.

The checks never see a traceback: ``StudentError`` carries a sentence a student can
act on ("on_ack raised ZeroDivisionError: float division by zero (dctcp_lab.py,
line 42)"), and a call that does not return within its limit is one too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from core.errors import FabricEmuError

__all__ = ["StudentCode", "StudentError", "time_limit"]

T = TypeVar("T")
_MODULE_PREFIX = "fabricemu_lab_"


class StudentError(FabricEmuError):
    """The student's code failed: the message is for the student."""


class _Timeout(BaseException):
    """Raised inside the student's code when its time is up (not an Exception, so that
    their ``except Exception`` cannot swallow it)."""


@contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Stop the body after ``seconds`` of wall time with a StudentError (main thread
    only; elsewhere the body runs unbounded)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Timeout:
        raise StudentError(f"{what} did not return within {seconds:g} s "
                           "(a loop that never ends?)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


class StudentCode:
    """The student's file ``path``: its module, and calls into it that fail as
    StudentError with the line of that file that raised."""

    def __init__(self, path: Path):
        self.path = path.resolve()
        self._module: ModuleType | None = None

    @property
    def name(self) -> str:
        return self.path.name

    def module(self) -> ModuleType:
        if self._module is None:
            if not self.path.is_file():
                raise StudentError(f"{self.path}: no such file (did you run `emu lab start`?)")
            key = hashlib.sha1(str(self.path).encode()).hexdigest()[:12]
            spec = importlib.util.spec_from_file_location(_MODULE_PREFIX + key, self.path)
            if spec is None or spec.loader is None:
                raise StudentError(f"{self.path.name} cannot be loaded as a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            try:
                with time_limit(10.0, f"importing {self.path.name}"):
                    spec.loader.exec_module(module)
            except StudentError:
                del sys.modules[spec.name]
                raise
            except (Exception, SystemExit) as e:
                del sys.modules[spec.name]
                raise StudentError(f"importing {self.path.name} failed: {self.where(e)}") from None
            self._module = module
        return self._module

    def attr(self, name: str) -> Any:
        value = getattr(self.module(), name, None)
        if value is None:
            raise StudentError(f"{self.path.name} defines no {name}")
        return value

    def where(self, e: BaseException) -> str:
        """``e`` in one line, with the last line of this file it passed through."""
        mine = [f for f in traceback.extract_tb(e.__traceback__)
                if Path(f.filename).resolve() == self.path]
        at = f" ({self.path.name}, line {mine[-1].lineno})" if mine else ""
        return _one_line(e) + at

    def call(self, what: str, fn: Callable[..., T], *args: Any, limit_s: float = 5.0,
             **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``; StudentError saying ``what`` raised, or hung."""
        try:
            with time_limit(limit_s, what):
                return fn(*args, **kwargs)
        except StudentError:
            raise
        except Exception as e:
            raise StudentError(f"{what} raised {self.where(e)}") from None
