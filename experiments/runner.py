"""Running an experiment: parse and check its options, prepare the run directory
(a new one, ``--force`` to start over, ``--resume`` to keep its finished cases),
execute it into a ``experiments.rundir.Run`` and finish it, keeping what finished
cases measured when it stops."""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from core import safefile
from core.errors import FabricEmuError, ParameterError
from core.scaling import DEFAULT_SCALE, Scale
from experiments.exporter import serving
from experiments.faultrun import planned
from experiments.options import (
    WATCH_OPTIONS,
    Option,
    TypedOptions,
    resolve_options,
    resolve_typed,
    typed_check,
)
from experiments.report import console
from experiments.rundir import Run, RunResult
from experiments.storage import CASES_DIR, MAX_RUN_JSON_BYTES


def _is_run_dir(path: Path) -> bool:
    return (path / "config.json").is_file() or (path / CASES_DIR).is_dir()


#: What a run writes into its directory; --force removes these and nothing else.
_RUN_OUTPUTS = ("*.csv", "*.png", "config.json", "summary.json", ".*.tmp")


def prepare_out_dir(name: str, out: str | Path | None, *, force: bool,
                    resume: bool) -> tuple[Path, bool]:
    """The run directory and whether this run created it.

    No ``out``: ``runs/NAME-YYYYmmdd-HHMMSS`` made with an exclusive mkdir, with
    ``-2``, ``-3``, ... if another run took the name. A given ``out`` that exists
    and is not empty is refused unless ``force`` (its run outputs are removed first)
    or ``resume`` (kept: the caller reloads the finished cases)."""
    if force and resume:
        raise ParameterError("--force/--resume", "both", "give one of them")
    if out is None:
        base = Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
        for n in itertools.count(1):
            path = base if n == 1 else base.with_name(f"{base.name}-{n}")
            try:
                path.mkdir(parents=True)
            except FileExistsError:
                continue
            except OSError as e:
                raise FabricEmuError(f"cannot create the run directory {path}: "
                                     f"{e.strerror}") from None
            return path, True
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ParameterError("--out", str(path), "exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not (force or resume):
            raise ParameterError("--out", str(path), "is not empty; add --force to start "
                                 "over or --resume to keep its finished cases")
        if not _is_run_dir(path):
            raise ParameterError("--out", str(path), "is not empty and is not a run "
                                 "directory (no config.json); refusing to write into it")
        if force:
            for pattern in _RUN_OUTPUTS:
                for old in path.glob(pattern):
                    old.unlink()
            shutil.rmtree(path / CASES_DIR, ignore_errors=True)
        return path, False
    created = not path.exists()
    safefile.make_dir(path)
    return path, created


def run_experiment(name: str, options: Mapping[str, Option],
                   options_type: type[TypedOptions],
                   execute: Callable[[Run, TypedOptions], None], out_dir: str | Path | None,
                   quick: bool, overrides: Mapping[str, Any], *,
                   check: Callable[[TypedOptions], None] | None = None,
                   force: bool = False, resume: bool = False, show: bool = True) -> RunResult:
    """What every experiment's ``run()`` does: parse, type and check every option,
    prepare the run directory (nothing is created if an option is refused), execute,
    finish (and print the tables unless ``show`` is False). config.json records the
    parsed options; ``execute`` gets them typed (``options_type``)."""
    opts, typed = resolve_typed(options_type, options, quick, overrides, check)
    if resume and out_dir is not None and (Path(out_dir) / "config.json").is_file():
        given = opts
        opts, quick = _resumed_options(name, options, Path(out_dir), opts, overrides,
                                       typed_check(options_type, check))
        opts.update({k: given[k] for k in WATCH_OPTIONS if k in given})
        typed = options_type.of(opts)
    # The exporter listens before the run directory is made: a port in use leaves nothing.
    with serving(opts.get("metrics_port"), name, Scale(opts.get("scale", DEFAULT_SCALE))):
        path, created = prepare_out_dir(name, out_dir, force=force, resume=resume)
        rec = Run(name, path, opts, quick=quick, spec=options)
        try:
            if resume:
                rec.resume()
            rec.start()
            with planned(opts.get("faults"), opts.get("detect_delay", 0.0),
                         opts.get("holddown", 0.0)):
                execute(rec, typed)
        except BaseException as e:
            # A long sweep keeps what its finished cases measured: the run directory is
            # written, marked invalid with the reason, and the error still propagates.
            if rec.units and path.is_dir():  # on disk: said first, a second Ctrl-C may cut the rest
                console.print(f"{len(rec.units)} finished case(s) kept in {path}; add --resume "
                              f"--out {path} to run the rest", style="yellow", markup=False)
                reason = f"incomplete: stopped by {type(e).__name__}: {e}".rstrip(": ")
                with contextlib.suppress(Exception):
                    rec.finish(show=False, stopped=reason)
            else:
                rec.discard(created)
            raise
        return rec.finish(show=show)


def _resumed_options(name: str, options: Mapping[str, Option], out: Path,
                     opts: dict[str, Any], overrides: Mapping[str, Any],
                     check: Callable[[dict[str, Any]], None] | None
                     ) -> tuple[dict[str, Any], bool]:
    """The options of the run being resumed; options given now must agree with them."""
    try:
        config = json.loads(safefile.read_regular(out / "config.json", MAX_RUN_JSON_BYTES))
        experiment, stored, quick = config["experiment"], config["options"], config["quick"]
        if not isinstance(stored, dict):
            raise TypeError("its options are not a table")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FabricEmuError(f"cannot resume {out}: unreadable config.json ({e}); use "
                             "--force to start over") from None
    if experiment != name:
        raise ParameterError("--resume", str(out), f"holds a {experiment!r} run, not {name!r}")
    try:
        resumed = resolve_options(options, bool(quick), stored, check)
    except ParameterError as e:
        raise FabricEmuError(f"cannot resume {out}: its options no longer parse ({e})") from None
    for key in set(overrides) - set(WATCH_OPTIONS):
        if opts[key] != resumed[key]:
            raise ParameterError(key, overrides[key], f"the run being resumed has {key}="
                                 f"{options[key].format(resumed[key])}; drop the option or "
                                 "use --force to start over")
    return resumed, bool(quick)
