"""The C build cache never hands root a file someone else could have planted."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from emu import cbuild
from emu.cbuild import UnsafePathError, check_dir_chain, check_trusted_file

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
needs_clang = pytest.mark.skipif(shutil.which("clang") is None, reason="clang is not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")

# A library whose constructor leaves a file behind: proof that it was loaded.
_PLANT_C = textwrap.dedent("""
    #include <fcntl.h>
    #include <unistd.h>
    __attribute__((constructor)) static void planted(void) {
        int fd = open(MARKER, O_CREAT | O_WRONLY, 0644);
        if (fd >= 0) close(fd);
    }
    int roce_burst_max(void) { return 1 << 20; }
""")


def _burst_source() -> Path:
    return ROOT / "engine" / "csrc" / "roce_burst.c"


def _build_plant(tmp_path: Path, marker: Path) -> Path:
    src = tmp_path / "plant.c"
    src.write_text(_PLANT_C)
    out = tmp_path / "plant.so"
    subprocess.run(["clang", "-shared", "-fPIC", f'-DMARKER="{marker}"', str(src), "-o", str(out)],
                   check=True, capture_output=True)
    # The plant works: loading it leaves the marker (so its absence later means something).
    subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(out)!r})"], check=True)
    assert marker.exists()
    marker.unlink()
    return out


def _load_burst(cache: Path) -> subprocess.CompletedProcess:
    """Load the engine's compiled sender in a fresh process, as a run would."""
    code = ("from emu.cbuild import compile_c\n"
            "from engine.burst import Burst, source\n"
            "print(Burst(send_path='compiled').detail)\n"
            "print(compile_c(source(), 'shared', what='test'))\n")
    env = {**os.environ, "FABRICEMU_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def _plant(cache: Path, plant: Path, *, owner: int, matching_record: bool) -> Path:
    """Put ``plant`` under the name the cache expects, optionally with a record that
    vouches for its hash (so only the owner check can catch it)."""
    target = cbuild.artefact_path(_burst_source(), "shared", cache)
    shutil.copy(plant, target)
    os.chown(target, owner, owner)
    if matching_record:
        inputs = cbuild._inputs(_burst_source(), "shared", shutil.which("clang"))[1]
        record = {"inputs_sha256": inputs, "artefact_sha256": cbuild._sha256_file(target)}
        rec = target.with_name(target.name + ".json")
        rec.write_text(json.dumps(record))
        os.chown(rec, owner, owner)
    return target


@needs_clang
@needs_root
def test_a_library_planted_by_another_user_is_never_loaded(tmp_path):
    marker = tmp_path / "planted-library-ran"
    plant = _build_plant(tmp_path, marker)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    target = _plant(cache, plant, owner=NOBODY, matching_record=True)
    res = _load_burst(cache)
    assert res.returncode == 0, res.stderr
    assert "sendmmsg (compiled)" in res.stdout
    assert not marker.exists()
    assert os.stat(target).st_uid == 0  # rebuilt in place, by us
    assert target.read_bytes() != plant.read_bytes()


@needs_clang
@needs_root
def test_a_root_owned_file_with_the_wrong_hash_is_rebuilt(tmp_path):
    marker = tmp_path / "planted-library-ran"
    plant = _build_plant(tmp_path, marker)
    cache = tmp_path / "cache"
    assert _load_burst(cache).returncode == 0  # a genuine build and its record
    target = cbuild.artefact_path(_burst_source(), "shared", cache)
    built = target.read_bytes()
    shutil.copy(plant, target)  # same owner and mode, other content
    res = _load_burst(cache)
    assert res.returncode == 0, res.stderr
    assert not marker.exists()
    assert target.read_bytes() != plant.read_bytes()
    assert len(target.read_bytes()) == len(built)
    assert "rebuilding" in res.stderr


@needs_clang
@needs_root
@pytest.mark.parametrize("how", ["cache owned by nobody", "world-writable parent"])
def test_an_untrusted_cache_directory_is_not_used(tmp_path, how):
    marker = tmp_path / "planted-library-ran"
    plant = _build_plant(tmp_path, marker)
    if how == "cache owned by nobody":
        cache = tmp_path / "cache"
        cache.mkdir(mode=0o755)
        _plant(cache, plant, owner=0, matching_record=True)
        os.chown(cache, NOBODY, NOBODY)
    else:
        shared = tmp_path / "shared"
        shared.mkdir()
        os.chmod(shared, 0o777)  # not sticky: anyone may swap the cache below it
        cache = shared / "cache"
        cache.mkdir(mode=0o700)
        _plant(cache, plant, owner=0, matching_record=True)
    res = _load_burst(cache)
    assert res.returncode == 0, res.stderr
    assert not marker.exists()
    assert "not using the C build cache" in res.stderr
    used = Path(res.stdout.splitlines()[-1])
    assert used.parent != cache and not used.exists()  # a private directory, removed at exit


@needs_clang
@needs_root
def test_a_planted_bpf_object_is_replaced(tmp_path):
    from emu.ecn.bpf import compile_marker, marker_source

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    target = cbuild.artefact_path(marker_source(), "bpf", cache)
    target.write_bytes(b"\x7fELF not a marker")
    os.chown(target, NOBODY, NOBODY)
    obj = compile_marker(out_dir=cache)
    assert obj == target
    data = obj.read_bytes()
    assert int.from_bytes(data[18:20], "little") == 247  # EM_BPF: a real build
    assert os.stat(obj).st_uid == 0
    assert b"fabricemu_mark" in data


@needs_clang
def test_a_good_cache_entry_is_reused(tmp_path):
    from emu.ecn.bpf import compile_marker

    cache = tmp_path / "cache"
    obj = compile_marker(out_dir=cache)
    before = os.stat(obj).st_mtime_ns
    cbuild._memo.clear()  # as a new process would
    assert compile_marker(out_dir=cache) == obj
    assert os.stat(obj).st_mtime_ns == before
    assert stat.S_IMODE(os.stat(cache).st_mode) & 0o077 == 0 or os.geteuid() != 0


@needs_clang
def test_a_header_beside_the_source_is_an_input(tmp_path):
    """An edit of a shared header (engine/csrc/crc32.h) builds the sources again."""
    src = tmp_path / "a.c"
    src.write_text('#include "h.h"\nint f(void) { return H; }\n')
    (tmp_path / "h.h").write_text("#define H 1\n")
    clang = shutil.which("clang")
    before = cbuild._inputs(src, "shared", clang)[1]
    assert cbuild._inputs(src, "shared", clang)[1] == before
    (tmp_path / "h.h").write_text("#define H 2\n")
    assert cbuild._inputs(src, "shared", clang)[1] != before


def test_the_root_cache_ignores_home(monkeypatch):
    monkeypatch.delenv("FABRICEMU_CACHE", raising=False)
    monkeypatch.setenv("HOME", "/home/somebody")
    monkeypatch.setenv("XDG_CACHE_HOME", "/home/somebody/.cache")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert cbuild.cache_dir() == Path(cbuild.ROOT_CACHE_DIR)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cbuild.cache_dir() == Path("/home/somebody/.cache/fabricemu")


def test_directory_chain_checks(tmp_path):
    base = tmp_path / "base"
    (base / "cache").mkdir(parents=True)
    assert check_dir_chain(base / "cache") == (base / "cache").resolve()
    os.chmod(base, 0o775)
    with pytest.raises(UnsafePathError, match="writable by others"):
        check_dir_chain(base / "cache")
    os.chmod(base, 0o1777)  # sticky above the cache: others cannot rename our entry
    assert check_dir_chain(base / "cache")
    with pytest.raises(UnsafePathError, match="writable by others"):
        check_dir_chain(base)  # but the cache itself must not be shared
    os.chmod(base, 0o755)


def test_file_checks(tmp_path):
    real = tmp_path / "lib.so"
    real.write_bytes(b"x")
    os.chmod(real, 0o644)
    check_trusted_file(real)
    link = tmp_path / "link.so"
    link.symlink_to(real)
    with pytest.raises(UnsafePathError, match="not a regular file"):
        check_trusted_file(link)
    os.chmod(real, 0o666)
    with pytest.raises(UnsafePathError, match="writable by others"):
        check_trusted_file(real)


@needs_clang
def test_an_artefact_without_a_valid_record_is_refused(tmp_path):
    from emu.ecn.bpf import compile_marker, marker_source

    obj = compile_marker(out_dir=tmp_path)
    inputs = cbuild._inputs(marker_source(), "bpf", shutil.which("clang"))[1]
    cbuild.verify_artefact(obj, inputs)
    with pytest.raises(UnsafePathError, match="other inputs"):
        cbuild.verify_artefact(obj, "0" * 64)
    obj.with_name(obj.name + ".json").write_text("{truncated")
    with pytest.raises(UnsafePathError, match="not a valid build record"):
        cbuild.verify_artefact(obj, inputs)


def test_libbpf_comes_from_a_trusted_absolute_path():
    paths = cbuild.system_library("libbpf.so.1")
    if not paths:
        pytest.skip("libbpf.so.1 is not installed")
    for path in paths:
        assert path.is_absolute()
        check_trusted_file(path)


def test_the_compiler_is_asked_its_version_once(tmp_path, monkeypatch):
    """A forked engine worker inherits the parent's answer: no subprocess per worker
    start. A different compiler binary (an upgrade) is asked again."""
    clang = tmp_path / "clang"
    clang.write_text("#!/bin/sh\necho 'clang version 1'\n")
    clang.chmod(0o755)
    calls = []
    real_run = cbuild.subprocess.run

    def counting_run(args, **kw):
        calls.append(args)
        return real_run(args, **kw)

    monkeypatch.setattr(cbuild, "_versions", {})
    monkeypatch.setattr(cbuild.subprocess, "run", counting_run)
    assert cbuild._clang_version(str(clang)) == "clang version 1\n"
    assert cbuild._clang_version(str(clang)) == "clang version 1\n"
    assert len(calls) == 1
    clang.write_text("#!/bin/sh\necho 'clang version 2.0'\n")
    assert cbuild._clang_version(str(clang)) == "clang version 2.0\n"
    assert len(calls) == 2
