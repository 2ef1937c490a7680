"""The experiments `emu run NAME` knows, their options, and the calls the CLI makes.

```python
EXPERIMENTS["incast"].OPTIONS            # name -> Option(default, help, quick, parse)
cli_run("incast", out="runs/x", quick=True, scale=50000, overrides={"senders": "4"})
load_config("incast.toml", "incast")     # `--config FILE`: the --set keys, from TOML
rerun_of("runs/x")                       # `--rerun DIR`: (experiment, quick, options)
demo("runs/demo", scale=200000)          # `emu demo` = `emu run demo`
report("runs/x")                         # `emu report DIR`
```
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import tomllib

from core import safefile
from core.errors import FabricEmuError, ParameterError
from experiments.report import render_report
from experiments.rundir import RunResult
from experiments.runner import run_experiment
from experiments.storage import MAX_RUN_JSON_BYTES


class _Modules(Mapping[str, ModuleType]):
    """Experiment name -> its module, imported when first asked for: `emu run
    collective` need not import the other thirteen first (0.6 s, 1/4 of its start)."""

    def __init__(self, paths: dict[str, str]) -> None:
        self._paths = paths

    def __getitem__(self, name: str) -> ModuleType:
        return importlib.import_module(self._paths[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


#: Each module declares NAME, OPTIONS (name -> Option), Options (their typed form, a
#: frozen dataclass), check(opts: Options) and execute(run, opts: Options); `cli_run`
#: runs it through `experiments.runner.run_experiment`.
EXPERIMENTS: Mapping[str, ModuleType] = _Modules({
    name: f"experiments.{module}" for name, module in (
        ("incast", "incast"), ("collective", "collective"), ("ratios", "ratios"),
        ("ecmp", "ecmp"), ("fairness", "fairness"), ("sweep", "sweep"), ("cc", "cc_compare"),
        ("demo", "demo"), ("workload", "workload"), ("training", "training"),
        ("failure", "failure"), ("routing", "routing_compare"), ("inference", "inference"),
        ("bimodal", "bimodal"))})


def parse_sets(items: list[str] | None) -> dict[str, str]:
    """``["key=value", ...]`` (repeated ``--set``) -> dict; values parsed later per option.
    A key given twice is refused: which value would win is not obvious."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParameterError("--set", item, "expected KEY=VALUE")
        if key.strip() in out:
            raise ParameterError("--set", item, f"{key.strip()} is given twice")
        out[key.strip()] = value.strip()
    return out


def _known(name: str) -> ModuleType:
    if name not in EXPERIMENTS:
        raise ParameterError("experiment", name, f"known: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


#: A --config file holds a line per option: a larger one is not one.
MAX_CONFIG_BYTES = 1 << 20


def load_config(path: str | Path, name: str) -> dict[str, Any]:
    """``--config FILE``: experiment ``name``'s options from a TOML file, one
    ``key = value`` per option, the keys of ``--set`` (lists as TOML arrays or as
    ';'-separated strings). Values are parsed later, as ``--set``'s are."""
    options = _known(name).OPTIONS
    try:
        table = tomllib.loads(safefile.read_regular(path, MAX_CONFIG_BYTES).decode("utf-8"))
    except OSError as e:
        raise ParameterError("--config", str(path), e.strerror or str(e)) from None
    except UnicodeDecodeError as e:
        raise ParameterError("--config", str(path), f"not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ParameterError("--config", str(path), f"not TOML: {e}") from None
    unknown = sorted(set(table) - set(options))
    if unknown:
        raise ParameterError("--config", str(path), f"{', '.join(unknown)}: not an option of "
                             f"{name} (known: {', '.join(options)})")
    nested = sorted(k for k, v in table.items() if isinstance(v, dict))
    if nested:
        raise ParameterError("--config", str(path), f"{', '.join(nested)}: a table, not a value")
    return table


def rerun_of(run_dir: str | Path) -> tuple[str, bool, dict[str, Any]]:
    """``--rerun DIR``: the experiment, ``--quick`` and every option of the run in
    ``DIR``, from its config.json."""
    path = Path(run_dir) / "config.json"
    try:
        config = json.loads(safefile.read_regular(path, MAX_RUN_JSON_BYTES))
        name, quick, options = config["experiment"], config["quick"], config["options"]
    except OSError as e:
        raise ParameterError("--rerun", str(run_dir), f"no run there ({e.strerror})") from None
    except (ValueError, KeyError, TypeError) as e:
        raise FabricEmuError(f"cannot rerun {run_dir}: unreadable config.json ({e})") from None
    if not isinstance(options, dict):
        raise FabricEmuError(f"cannot rerun {run_dir}: config.json has no options table")
    _known(name)
    return name, bool(quick), options


def cli_run(name: str, out: str | Path | None = None, quick: bool = False,
            scale: float | str | None = None, overrides: Mapping[str, Any] | None = None, *,
            force: bool = False, resume: bool = False, show: bool = True) -> RunResult:
    """``emu run NAME [--quick] [--scale S] [--out DIR] [--set key=value ...]
    [--force | --resume]``; every option is parsed and checked before anything is
    built or created. No ``out``: a new ``runs/NAME-<time>`` directory."""
    module = _known(name)
    if resume and out is None:
        raise ParameterError("--resume", True, "give the run directory to resume with --out")
    opts: dict[str, Any] = dict(overrides or {})
    if scale is not None:
        if "scale" in opts:
            raise ParameterError("--scale", scale, "S is also given as --set scale=; give it once")
        opts["scale"] = scale
    return run_experiment(module.NAME, module.OPTIONS, module.Options, module.execute,
                          None if out is None else str(out), quick, opts, check=module.check,
                          force=force, resume=resume, show=show)


def demo(out: str | Path | None = None, quick: bool = False, scale: float | str | None = None,
         overrides: Mapping[str, Any] | None = None, *, force: bool = False,
         resume: bool = False) -> RunResult:
    """``emu demo``: the default experiment on a k=4 fat-tree; ``emu run demo`` alike."""
    return cli_run("demo", out, quick, scale, overrides, force=force, resume=resume)


def report(run_dir: str | Path, predictions: str | Path | None = None) -> list[Path]:
    """``emu report DIR [--predictions F]``: re-render the plots and the table of a
    finished run, with the user's predictions in F joined to it."""

    return render_report(run_dir, predictions=predictions)


def describe() -> dict[str, dict[str, dict[str, object]]]:
    """Options of every experiment, for ``emu run --help``-style listings."""
    return {name: {k: {"default": o.default, "quick": o.quick, "help": o.help}
                   for k, o in mod.OPTIONS.items()} for name, mod in EXPERIMENTS.items()}
