"""What a run records of the machine and the checkout it ran on (config.json): package
versions, the git commit, the capability probe."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "kernel": platform.release()}
    for dist in ("fabricemu", "pyroute2", "scapy", "pandas", "numpy", "networkx", "matplotlib"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "absent"
    return out


def git_commit() -> str | None:
    """HEAD of the checkout (+ '-dirty'), None outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def capabilities() -> dict:
    """The capability probe (about a second); its failure is recorded, not fatal."""
    try:
        from emu.capabilities import probe

        return probe().as_dict()
    except Exception as e:  # a probe bug must not lose a finished measurement
        return {"error": f"{type(e).__name__}: {e}"}
