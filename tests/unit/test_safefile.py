"""core.safefile: never through a planted link, whole or not at all, a full disk included."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from core import safefile
from core.safefile import WriteError


def test_replaces_a_planted_link_without_touching_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("secret")  # safefile: ok - the test's own planted target
    out = tmp_path / "out"
    out.mkdir()
    (out / "x.png").symlink_to(victim)
    safefile.write_bytes(out / "x.png", b"png")
    assert victim.read_text() == "secret"
    assert not (out / "x.png").is_symlink() and (out / "x.png").read_bytes() == b"png"
    assert sorted(p.name for p in out.iterdir()) == ["x.png"]


def test_guessable_temporary_names_are_never_opened(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("secret")  # safefile: ok - the test's own planted target
    for name in (".config.json.tmp", f".config.json.{os.getpid()}.tmp", "config.json.tmp"):
        (tmp_path / name).symlink_to(victim)
    safefile.write_json(tmp_path / "config.json", {"a": 1})
    assert victim.read_text() == "secret"
    assert (tmp_path / "config.json").read_text() == '{\n "a": 1\n}'


def test_failure_keeps_the_previous_version_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    safefile.write_text(path, "old")
    with pytest.raises(RuntimeError), safefile.open_atomic(path, True) as f:
        f.write("half")
        raise RuntimeError("boom")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["summary.json"]


def test_enospc_is_one_line_and_keeps_the_previous_version(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.csv"
    safefile.write_text(path, "old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(WriteError) as e:
        safefile.write_text(path, "new" * 1000)
    assert "no space left on device" in str(e.value) and "previous version is kept" in str(e.value)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["metrics.csv"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tiny tmpfs needs root")
def test_a_really_full_disk(tmp_path: Path) -> None:
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a tmpfs here: {e}")
    try:
        safefile.write_text(mnt / "a.csv", "old")
        with pytest.raises(WriteError, match="no space left on device.*previous version is kept"):
            safefile.write_bytes(mnt / "a.csv", b"x" * (1 << 20))
        assert (mnt / "a.csv").read_text() == "old" and os.listdir(mnt) == ["a.csv"]
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_refuses_a_directory_others_may_write_without_the_sticky_bit(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(WriteError, match="others may write"):
        safefile.write_text(shared / "f", "x")
    shared.chmod(0o1777)  # sticky, as /tmp: the random O_EXCL name is safe there
    safefile.write_text(shared / "f", "x")


def test_make_dir_refuses_a_planted_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cases").symlink_to(elsewhere)
    with pytest.raises(WriteError, match="symbolic link"):
        safefile.make_dir(tmp_path / "cases")
    assert safefile.make_dir(tmp_path / "a" / "b").is_dir()


def test_lock_file_is_never_a_link(tmp_path: Path) -> None:
    (tmp_path / "lock").symlink_to(tmp_path / "victim")
    with pytest.raises(WriteError, match="symbolic link"):
        safefile.open_lock(tmp_path / "lock")
    assert not (tmp_path / "victim").exists()


def test_figure_format_follows_the_suffix(tmp_path: Path) -> None:
    calls = []

    class Fig:
        def savefig(self, f, **kw) -> None:  # noqa: ANN001
            calls.append(kw)
            f.write(b"data")

    safefile.save_figure(Fig(), tmp_path / "a.svg", dpi=90)
    assert calls == [{"dpi": 90, "format": "svg"}] and (tmp_path / "a.svg").read_bytes() == b"data"
