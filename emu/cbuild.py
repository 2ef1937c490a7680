"""Compile the package's C sources on first use, cached by content (never a committed binary).

Two kinds: ``bpf`` objects (``clang -target bpf``, loaded with libbpf) and
``shared`` libraries (``clang -shared``, loaded with ctypes). The output name
carries a hash of the source, the flags and the compiler's version, so editing a
source or upgrading clang rebuilds it; writes are atomic, so concurrent runs
never see a partial file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Literal

from emu.errors import CapabilityError

Kind = Literal["bpf", "shared"]
_FLAGS: dict[str, list[str]] = {
    "bpf": ["-O2", "-g", "-target", "bpf", "-c"],
    "shared": ["-O2", "-shared", "-fPIC", "-Wall", "-Werror"],
}
_SUFFIX = {"bpf": ".o", "shared": ".so"}
_memo: dict[tuple, Path] = {}


def cache_dir() -> Path:
    base = os.environ.get("FABRICEMU_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fabricemu")
    return Path(base)


def _include_args(kind: Kind) -> list[str]:
    if kind != "bpf":
        return []
    # <asm/types.h> lives in the multiarch directory, which -target bpf does not search.
    machine = os.uname().machine
    multiarch = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(machine, "")
    inc = f"/usr/include/{multiarch}"
    return ["-I", inc] if multiarch and os.path.isdir(inc) else []


def compile_c(src: Path, kind: Kind, *, what: str, out_dir: Path | None = None) -> Path:
    """Compile ``src`` (once per content) and return the artefact's path.

    ``what`` names the feature for error messages ("the bpf ECN marker").
    Remembered per process by the source's mtime, so callers may ask per port.
    """
    memo_key = (src, kind, out_dir, src.stat().st_mtime_ns)
    if memo_key in _memo and _memo[memo_key].exists():
        return _memo[memo_key]
    clang = shutil.which("clang")
    if not clang:
        raise CapabilityError(f"{what} needs clang (apt install clang libbpf-dev, "
                              "or run scripts/setup.sh)")
    flags = [*_FLAGS[kind], *_include_args(kind)]
    version = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256(src.read_bytes() + " ".join(flags).encode()
                            + version.encode()).hexdigest()[:16]
    out_dir = out_dir or cache_dir()
    out = out_dir / f"{src.stem}-{digest}{_SUFFIX[kind]}"
    if not out.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        res = subprocess.run([clang, *flags, str(src), "-o", str(tmp)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise CapabilityError(f"clang could not compile {src} for {what}:\n"
                                  f"{res.stderr.strip()}")
        os.replace(tmp, out)
    _memo[memo_key] = out
    return out
