"""The experiments `emu run NAME` knows, their options, and the calls the CLI makes.

```python
EXPERIMENTS["incast"].OPTIONS            # name -> Option(default, help, quick, parse)
cli_run("incast", out="runs/x", quick=True, scale=50000, overrides={"senders": "4"})
demo("runs/demo")                        # `emu demo`
report("runs/x")                         # `emu report DIR`
```
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from emu.errors import ParameterError
from experiments import collective, ecmp, fairness, incast, ratios
from experiments import demo as demo_module
from experiments.common import RunResult

EXPERIMENTS: dict[str, ModuleType] = {
    "incast": incast, "collective": collective, "ratios": ratios, "ecmp": ecmp,
    "fairness": fairness, "demo": demo_module,
}


def default_out(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def parse_sets(items: list[str] | None) -> dict[str, str]:
    """``["key=value", ...]`` (repeated ``--set``) -> dict; values parsed later per option."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParameterError("--set", item, "expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def cli_run(name: str, out: str | Path | None = None, quick: bool = False,
            scale: float | None = None, overrides: Mapping[str, str] | None = None) -> RunResult:
    """``emu run NAME [--quick] [--scale S] [--out DIR] [--set key=value ...]``."""
    if name not in EXPERIMENTS:
        raise ParameterError("experiment", name, f"known: {', '.join(EXPERIMENTS)}")
    opts: dict[str, object] = dict(overrides or {})
    if scale is not None:
        opts["scale"] = float(scale)
    return EXPERIMENTS[name].run(str(out or default_out(name)), quick=quick, **opts)


def demo(out: str | Path | None = None, quick: bool = False) -> RunResult:
    """``emu demo``: the default experiment on a k=4 fat-tree."""
    return demo_module.run(str(out or default_out("demo")), quick=quick)


def report(run_dir: str | Path) -> list[Path]:
    """``emu report DIR``: re-render the plots and the table of a finished run."""
    from experiments.report import render_report

    return render_report(run_dir)


def describe() -> dict[str, dict[str, dict[str, object]]]:
    """Options of every experiment, for ``emu run --help``-style listings."""
    return {name: {k: {"default": o.default, "quick": o.quick, "help": o.help}
                   for k, o in mod.OPTIONS.items()} for name, mod in EXPERIMENTS.items()}
