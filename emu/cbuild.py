"""Compile the package's C sources on first use, cached by content (never a committed binary).

Two kinds: ``bpf`` objects (``clang -target bpf``, loaded with libbpf) and
``shared`` libraries (``clang -shared``, loaded with ctypes). The output name
carries a hash of the source, the flags and the compiler's version, so editing a
source or upgrading clang rebuilds it; writes are atomic, so concurrent runs
never see a partial file.

A cached artefact is code that root runs, so nothing is loaded on trust:

* the cache directory and every directory above it must be owned by root (or,
  when not root, by us) and writable by nobody else (a sticky directory such as
  /tmp is allowed above it); as root the default is a root-owned 0700
  /var/cache/fabricemu, never a directory under the invoking user's HOME;
* the artefact and its record (``<artefact>.json``: hash of the inputs and of the
  artefact as built) must be regular files with that owner and mode, and the
  artefact's sha256 must still be the one recorded at build time.

An artefact that fails a check is rebuilt in place; a cache directory that fails
is replaced by a fresh private directory for this process. Since the chain is
writable only by trusted users, the file cannot change between the check and the
caller's load.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from core import safefile
from core.errors import CapabilityError
from core.frame import (
    ACK_FRAME_BYTES,
    CNP_FRAME_BYTES,
    FIRST_QPN,
    INT_HEADER_BYTES,
    INT_MAX_HOPS,
    INT_RECORD_BYTES,
    OFF_ACK_INT,
    OFF_INT,
    OFF_INT_RETH,
    ROCE_UDP_PORT,
)

log = logging.getLogger(__name__)

Kind = Literal["bpf", "shared"]
#: The C sources take the frame geometry they need from core.frame, as -D flags.
_GEOMETRY = [f"-DROCE_UDP_PORT={ROCE_UDP_PORT}", f"-DINT_HEADER_BYTES={INT_HEADER_BYTES}",
             f"-DINT_RECORD_BYTES={INT_RECORD_BYTES}", f"-DINT_MAX_HOPS={INT_MAX_HOPS}",
             f"-DOFF_INT={OFF_INT}", f"-DOFF_INT_RETH={OFF_INT_RETH}",
             f"-DOFF_ACK_INT={OFF_ACK_INT}", f"-DACK_FRAME_BYTES={ACK_FRAME_BYTES}",
             f"-DCNP_FRAME_BYTES={CNP_FRAME_BYTES}", f"-DFIRST_QPN={FIRST_QPN}"]
_FLAGS: dict[str, list[str]] = {
    "bpf": ["-O2", "-g", "-target", "bpf", "-c", *_GEOMETRY],
    # No floating-point contraction: the C twins give the Python classes' doubles
    # (an FMA rounds once where Python rounds twice; aarch64 has it in its baseline).
    "shared": ["-O2", "-ffp-contract=off", "-shared", "-fPIC", "-Wall", "-Werror", *_GEOMETRY],
}
_SUFFIX = {"bpf": ".o", "shared": ".so"}
ROOT_CACHE_DIR = "/var/cache/fabricemu"
_memo: dict[tuple, Path] = {}
_versions: dict[tuple[str, int, int], str] = {}
_fresh_dir: Path | None = None


class UnsafePathError(CapabilityError):
    """A path that someone other than root (or us) could have written."""


def trusted_uids() -> frozenset[int]:
    """Owners whose files we run: root always; ourselves only when we are not root."""
    euid = os.geteuid()
    return frozenset({0}) if euid == 0 else frozenset({0, euid})


def cache_dir() -> Path:
    """FABRICEMU_CACHE if set; else /var/cache/fabricemu as root (HOME may be the
    sudo caller's); else $XDG_CACHE_HOME/fabricemu or ~/.cache/fabricemu."""
    if os.environ.get("FABRICEMU_CACHE"):
        return Path(os.environ["FABRICEMU_CACHE"])
    if os.geteuid() == 0:
        return Path(ROOT_CACHE_DIR)
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fabricemu")


def _describe(st: os.stat_result) -> str:
    return f"owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}"


def check_dir_chain(directory: Path) -> Path:
    """Resolve ``directory`` and check that no untrusted user can write it or any
    directory above it; return the resolved path or raise UnsafePathError."""
    real = Path(os.path.realpath(directory))
    uids = trusted_uids()
    parts = real.parts
    for i in range(1, len(parts) + 1):
        path = Path(*parts[:i])
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePathError(f"{path} is not a directory")
        if st.st_uid not in uids:
            raise UnsafePathError(f"{path} is not ours to trust ({_describe(st)})")
        writable_by_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        # Above the cache a sticky directory is fine: others cannot rename our entries.
        sticky_ok = st.st_mode & stat.S_ISVTX and i < len(parts)
        if writable_by_others and not sticky_ok:
            raise UnsafePathError(f"{path} is writable by others ({_describe(st)})")
    return real


def check_trusted_file(path: Path) -> None:
    """A regular file (not a link) owned by a trusted user and writable by no one else."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{path} is not a regular file")
    if st.st_uid not in trusted_uids():
        raise UnsafePathError(f"{path} is not ours to trust ({_describe(st)})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(f"{path} is writable by others ({_describe(st)})")


def _make_private_dir(directory: Path) -> Path:
    """Create ``directory`` (0700) if missing, make it 0700 if root owns it, check the chain."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(directory)
    if os.geteuid() == 0 and st.st_uid == 0 and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(directory, stat.S_IMODE(st.st_mode) & 0o700)
    return check_dir_chain(directory)


def _fresh_private_dir(why: str) -> Path:
    """A new 0700 directory for this process only, removed at exit."""
    global _fresh_dir
    if _fresh_dir is None:
        fresh = Path(tempfile.mkdtemp(prefix="fabricemu-build-", dir="/tmp"))
        atexit.register(shutil.rmtree, fresh, True)
        try:
            check_dir_chain(fresh)
        except UnsafePathError as e:
            raise CapabilityError(f"no safe directory to build C code in: {why}; {e}") from e
        log.warning("not using the C build cache: %s; building in %s", why, fresh)
        _fresh_dir = fresh
    return _fresh_dir


def safe_cache_dir(requested: Path | None = None) -> Path:
    """The cache directory to use: ``requested`` (or :func:`cache_dir`) if it is safe,
    else a fresh private directory."""
    directory = requested or cache_dir()
    try:
        return _make_private_dir(directory)
    except (UnsafePathError, OSError) as e:
        return _fresh_private_dir(str(e))


def _include_args(kind: Kind) -> list[str]:
    if kind != "bpf":
        return []
    # <asm/types.h> lives in the multiarch directory, which -target bpf does not search.
    machine = os.uname().machine
    multiarch = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(machine, "")
    inc = f"/usr/include/{multiarch}"
    return ["-I", inc] if multiarch and os.path.isdir(inc) else []


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def _record_path(artefact: Path) -> Path:
    return artefact.with_name(artefact.name + ".json")


def verify_artefact(artefact: Path, inputs_sha256: str) -> None:
    """Raise UnsafePathError unless ``artefact`` and its record are trusted files, the
    record is for these inputs and the artefact still has the hash recorded at build."""
    record_path = _record_path(artefact)
    check_trusted_file(artefact)
    check_trusted_file(record_path)
    try:
        record = json.loads(record_path.read_text())
        recorded_inputs, recorded_artefact = record["inputs_sha256"], record["artefact_sha256"]
    except (ValueError, KeyError, TypeError) as e:
        raise UnsafePathError(f"{record_path} is not a valid build record") from e
    if recorded_inputs != inputs_sha256:
        raise UnsafePathError(f"{artefact} was built from other inputs")
    if _sha256_file(artefact) != recorded_artefact:
        raise UnsafePathError(f"{artefact} is not the file that was built (sha256 differs)")


@contextlib.contextmanager
def _build_lock(directory: Path) -> Iterator[None]:
    """One builder per cache directory at a time, so an artefact and its record match."""
    fd = safefile.open_lock(directory / ".lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _clang_version(clang: str) -> str:
    """``clang --version``, asked once per process and compiler binary: the engine's
    workers are forked after the parent compiled its libraries, so they inherit the
    answer instead of each starting a subprocess."""
    st = os.stat(clang)
    key = (os.path.realpath(clang), st.st_mtime_ns, st.st_size)
    version = _versions.get(key)
    if version is None:
        version = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout
        _versions[key] = version
    return version


def _inputs(src: Path, kind: Kind, clang: str) -> tuple[list[str], str]:
    flags = [*_FLAGS[kind], *_include_args(kind)]
    version = _clang_version(clang)
    # The headers beside a source are part of it (engine/csrc/crc32.h).
    headers = b"".join(h.read_bytes() for h in sorted(src.parent.glob("*.h")))
    digest = hashlib.sha256(src.read_bytes() + headers + " ".join(flags).encode()
                            + version.encode())
    return flags, digest.hexdigest()


def _clang(what: str) -> str:
    clang = shutil.which("clang")
    if not clang:
        raise CapabilityError(f"{what} needs clang (apt install clang libbpf-dev, "
                              "or run scripts/setup.sh)")
    return clang


def _artefact_name(src: Path, kind: Kind, inputs_sha256: str) -> str:
    return f"{src.stem}-{inputs_sha256[:16]}{_SUFFIX[kind]}"


def artefact_path(src: Path, kind: Kind, directory: Path) -> Path:
    """Where ``src`` compiled as ``kind`` lives in ``directory`` (whether built or not)."""
    _, inputs_sha256 = _inputs(src, kind, _clang(f"compiling {src.name}"))
    return directory / _artefact_name(src, kind, inputs_sha256)


def _build(clang: str, flags: list[str], src: Path, out: Path, inputs_sha256: str,
           what: str) -> None:
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    res = subprocess.run([clang, *flags, str(src), "-o", str(tmp)], capture_output=True, text=True)
    if res.returncode != 0:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise CapabilityError(f"clang could not compile {src} for {what}:\n{res.stderr.strip()}")
    os.chmod(tmp, 0o644)
    record = {"source": str(src), "flags": flags, "inputs_sha256": inputs_sha256,
              "artefact_sha256": _sha256_file(tmp)}
    os.replace(tmp, out)  # safefile: ok - clang's output, in a private directory
    safefile.write_json(_record_path(out), record)


def compile_c(src: Path, kind: Kind, *, what: str, out_dir: Path | None = None) -> Path:
    """Compile ``src`` (once per content) and return the verified artefact's path.

    ``what`` names the feature for error messages ("the bpf ECN marker").
    Remembered per process by the source's mtime, so callers may ask per port.
    """
    memo_key = (src, kind, out_dir, src.stat().st_mtime_ns)
    if memo_key in _memo and _memo[memo_key].exists():
        return _memo[memo_key]
    clang = _clang(what)
    flags, inputs_sha256 = _inputs(src, kind, clang)
    directory = safe_cache_dir(out_dir)
    out = directory / _artefact_name(src, kind, inputs_sha256)
    with _build_lock(directory):
        try:
            verify_artefact(out, inputs_sha256)
        except (UnsafePathError, FileNotFoundError) as e:
            if not isinstance(e, FileNotFoundError):
                log.warning("rebuilding %s: %s", out.name, e)
            _build(clang, flags, src, out, inputs_sha256, what)
            verify_artefact(out, inputs_sha256)
    _memo[memo_key] = out
    return out


def system_library(soname: str) -> list[Path]:
    """Trusted absolute paths of ``soname`` from the dynamic linker's cache, so that
    root never loads a library found through LD_LIBRARY_PATH or the working directory."""
    ldconfig = next((p for p in ("/usr/sbin/ldconfig", "/sbin/ldconfig") if os.path.exists(p)), None)
    listing = ""
    if ldconfig:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    found = []
    for line in listing.splitlines():
        name, _, target = line.strip().partition(" => ")
        if name.split(" ", 1)[0] != soname or not target.startswith("/"):
            continue
        real = Path(os.path.realpath(target))
        try:
            check_dir_chain(real.parent)
            check_trusted_file(real)
        except (UnsafePathError, OSError) as e:
            log.warning("not loading %s: %s", target, e)
            continue
        found.append(real)
    return found
