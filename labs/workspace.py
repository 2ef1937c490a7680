"""A student's working folder (``emu lab start``) and the pack a teacher hands out
(``emu lab export``): the whole project without any lab's ``solution/``.

Both create every file they write (``O_EXCL``: an existing file or a planted
symbolic link is refused, never written through), in folders they made or that
were empty.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from core import safefile
from core.errors import ParameterError
from labs.catalog import LABS_DIR, Lab

__all__ = ["REPO_ROOT", "export_pack", "hand_back", "pack_files", "start_lab",
           "write_new_or_replace"]

REPO_ROOT = LABS_DIR.parent
#: Never in a pack: solutions, and what a checkout grows (venv, runs, caches, git).
_EXCLUDED_DIRS = {"solution", ".git", ".venv", "runs", "__pycache__", ".pytest_cache",
                  ".ruff_cache", ".hypothesis", ".vagrant", "build", "dist"}


def _fresh_dir(dest: Path) -> None:
    """``dest`` made, or an existing empty directory that is not a link."""
    if dest.is_symlink():
        raise ParameterError("folder", str(dest), "is a symbolic link; give a new folder")
    if dest.exists():
        if not dest.is_dir() or any(dest.iterdir()):
            raise ParameterError("folder", str(dest), "exists and is not empty; give a new folder")
        return
    dest.mkdir(parents=True)


def _copy_new(src: Path, dst: Path) -> None:
    """Copy one file to a path that must not exist yet (nor be a link)."""
    safefile.make_dir(dst.parent)
    safefile.write_bytes(dst, src.read_bytes(), mode=src.stat().st_mode & 0o777, replace=False)


def start_lab(lab: Lab, dest: Path) -> list[Path]:
    """Copy the lab's starter code and its handout into ``dest`` (new or empty)."""
    _fresh_dir(dest)
    written = []
    for src in sorted(lab.starter.rglob("*")):
        rel = src.relative_to(lab.starter)
        # What grading the starter in place leaves (runs, results.json) is not starter code.
        if src.is_file() and _EXCLUDED_DIRS.isdisjoint(rel.parts) and rel.name != "results.json":
            dst = dest / rel
            _copy_new(src, dst)
            written.append(dst)
    _copy_new(lab.folder / "README.md", dest / "HANDOUT.md")
    return [*written, dest / "HANDOUT.md"]


def _git_files(root: Path) -> list[Path] | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    # A file in a merge conflict is listed once per stage: each path once.
    return [root / p for p in dict.fromkeys(out.stdout.decode().split("\0")) if p]


def pack_files(root: Path = REPO_ROOT) -> list[Path]:
    """The files of the student pack: the project's files (git's list where there is
    one), without solutions or a checkout's own clutter."""
    files: Iterable[Path] = _git_files(root) or (p for p in root.rglob("*") if p.is_file())
    keep = []
    for p in files:
        rel = p.relative_to(root)
        if _EXCLUDED_DIRS.isdisjoint(rel.parts) and p.is_file() and not p.is_symlink():
            keep.append(p)
    return sorted(keep)


def export_pack(dest: Path, root: Path = REPO_ROOT) -> list[Path]:
    """Write the student pack into ``dest`` (new or empty)."""
    _fresh_dir(dest)
    written = []
    for src in pack_files(root):
        dst = dest / src.relative_to(root)
        _copy_new(src, dst)
        written.append(dst)
    return written


def write_new_or_replace(path: Path, text: str) -> None:
    """Write ``path`` atomically, replacing a link instead of following it
    (core.safefile). On failure the previous version stays."""
    safefile.write_text(path, text)


def hand_back(paths: Iterable[Path]) -> int:
    """Through sudo, give what a lab command wrote (run directories, results.json) back
    to the user who asked for it, as `scripts/run demo` does: root's files in a
    student's folder would be theirs to read but not to remove. Links are changed
    themselves, never followed. Returns how many entries changed owner."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not uid.isdigit():
        return 0
    owner = (int(uid), int(gid) if gid and gid.isdigit() else int(uid))
    changed = 0
    for path in paths:
        if not path.exists() and not path.is_symlink():
            continue
        entries = [path]
        if path.is_dir() and not path.is_symlink():
            for root, dirs, files in os.walk(path, followlinks=False):
                entries += [Path(root) / name for name in dirs + files]
        for entry in entries:
            os.lchown(entry, *owner)
            changed += 1
    return changed
