"""The experiments `emu run NAME` knows, their options, and the calls the CLI makes.

```python
EXPERIMENTS["incast"].OPTIONS            # name -> Option(default, help, quick, parse)
cli_run("incast", out="runs/x", quick=True, scale=50000, overrides={"senders": "4"})
demo("runs/demo", scale=200000)          # `emu demo` = `emu run demo`
report("runs/x")                         # `emu report DIR`
```
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from core.errors import ParameterError
from experiments import cc_compare, collective, ecmp, fairness, incast, ratios, sweep
from experiments import demo as demo_module
from experiments.report import render_report
from experiments.rundir import RunResult
from experiments.runner import run_experiment

#: Each module declares NAME, OPTIONS (name -> Option), Options (their typed form, a
#: frozen dataclass), check(opts: Options) and execute(run, opts: Options); `cli_run`
#: runs it through `experiments.runner.run_experiment`.
EXPERIMENTS: dict[str, ModuleType] = {
    "incast": incast, "collective": collective, "ratios": ratios, "ecmp": ecmp,
    "fairness": fairness, "sweep": sweep, "cc": cc_compare, "demo": demo_module,
}


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


def cli_run(name: str, out: str | Path | None = None, quick: bool = False,
            scale: float | str | None = None, overrides: Mapping[str, Any] | None = None, *,
            force: bool = False, resume: bool = False, show: bool = True) -> RunResult:
    """``emu run NAME [--quick] [--scale S] [--out DIR] [--set key=value ...]
    [--force | --resume]``; every option is parsed and checked before anything is
    built or created. No ``out``: a new ``runs/NAME-<time>`` directory."""
    if name not in EXPERIMENTS:
        raise ParameterError("experiment", name, f"known: {', '.join(EXPERIMENTS)}")
    if resume and out is None:
        raise ParameterError("--resume", True, "give the run directory to resume with --out")
    opts: dict[str, Any] = dict(overrides or {})
    if scale is not None:
        if "scale" in opts:
            raise ParameterError("--scale", scale, "S is also given as --set scale=; give it once")
        opts["scale"] = scale
    module = EXPERIMENTS[name]
    return run_experiment(module.NAME, module.OPTIONS, module.Options, module.execute,
                          None if out is None else str(out), quick, opts, check=module.check,
                          force=force, resume=resume, show=show)


def demo(out: str | Path | None = None, quick: bool = False, scale: float | str | None = None,
         overrides: Mapping[str, Any] | None = None, *, force: bool = False,
         resume: bool = False) -> RunResult:
    """``emu demo``: the default experiment on a k=4 fat-tree; ``emu run demo`` alike."""
    return cli_run("demo", out, quick, scale, overrides, force=force, resume=resume)


def report(run_dir: str | Path) -> list[Path]:
    """``emu report DIR``: re-render the plots and the table of a finished run."""

    return render_report(run_dir)


def describe() -> dict[str, dict[str, dict[str, object]]]:
    """Options of every experiment, for ``emu run --help``-style listings."""
    return {name: {k: {"default": o.default, "quick": o.quick, "help": o.help}
                   for k, o in mod.OPTIONS.items()} for name, mod in EXPERIMENTS.items()}
