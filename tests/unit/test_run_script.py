"""scripts/run and .ci/run: path handling and elevation, on a copy with stub set-up and venv
(no network, no packages installed, nothing run as root but echo)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _write_exec(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def repo() -> Iterator[Path]:
    """The real scripts/run, venv-path.sh and .ci/run in a throw-away tree (readable by
    nobody), a stub setup.sh, a stub venv and a fake sudo that only reports its call."""
    top = Path(tempfile.mkdtemp(prefix="fabricemu-runscript-"))
    top.chmod(0o755)
    repo = top / "repo"
    for rel in ("scripts/run", "scripts/venv-path.sh", ".ci/run"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, repo / rel)
    _write_exec(repo / "scripts" / "setup.sh", '#!/bin/sh\necho "setup in $(pwd) as uid $(id -u)"\n')
    for tool in ("python", "emu"):
        _write_exec(repo / ".venv" / "bin" / tool, '#!/bin/sh\necho "$0 $* in $(pwd)"\n')
    _write_exec(top / "fakebin" / "sudo",
                '#!/bin/sh\necho "sudo called: $*"\necho "CI=${CI:-unset}"\n')
    for path in top.rglob("*"):
        path.chmod(path.stat().st_mode | stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0))
    yield repo
    shutil.rmtree(top)


def _run(repo: Path, command: str, *, as_nobody: bool = False, path: str = SAFE_PATH,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    argv = ["bash", "-c", command]
    if as_nobody:
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    full_env = {"PATH": path, "HOME": "/", **(env or {})}
    return subprocess.run(argv, cwd=repo, env=full_env, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture(autouse=True)
def _no_system_venv_override():
    if os.path.exists("/etc/fabricemu/venv"):
        pytest.skip("/etc/fabricemu/venv points the scripts at another venv on this machine")


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")


@needs_root
def test_run_from_inside_scripts_as_root_calls_the_venv_by_absolute_path(repo):
    fakebin = repo.parent / "fakebin"
    res = _run(repo, "cd scripts && ./run test -k ring", path=f"{fakebin}:{SAFE_PATH}")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"setup in {repo} as uid 0"
    assert lines[1] == f"{repo}/.venv/bin/python -m pytest -q -k ring in {repo}"
    assert "sudo called" not in res.stdout  # root never goes through sudo (none needed)


@needs_root
def test_demo_goes_to_emu_demo_with_its_arguments(repo):
    res = _run(repo, f"cd / && {repo}/scripts/run demo --quick")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == f"{repo}/.venv/bin/emu demo --quick in {repo}"


@needs_root
def test_an_unknown_command_is_refused_before_anything_runs(repo):
    res = _run(repo, "scripts/run bogus")
    assert res.returncode == 2
    assert "usage: scripts/run demo|test" in res.stderr
    assert "setup in" not in res.stdout


@needs_root
@pytest.mark.parametrize("ci", [None, "1"])
def test_a_user_is_elevated_with_sudo_without_their_path(repo, ci):
    fakebin = repo.parent / "fakebin"
    env = {"CI": ci} if ci else {}
    res = _run(repo, "cd scripts && ./run test tests/unit", as_nobody=True,
               path=f"{fakebin}:{SAFE_PATH}", env=env)
    assert res.returncode == 0, res.stderr
    call = res.stdout.splitlines()[0]
    carry = "/usr/bin/env CI=true " if ci else ""
    assert call == f"sudo called: -- {carry}/bin/bash {repo}/scripts/run test tests/unit"
    assert "preserve-env" not in call and " -E " not in call
    assert "setup in" not in res.stdout  # nothing ran before elevation


@needs_root
def test_a_user_without_sudo_gets_a_clear_error(repo):
    if shutil.which("sudo", path=SAFE_PATH):
        pytest.skip("sudo is installed in the system path here")
    res = _run(repo, "scripts/run demo", as_nobody=True)
    assert res.returncode == 1
    assert "needs root" in res.stderr and "install sudo" in res.stderr


@needs_root
def test_ci_runs_the_readme_test_command(repo):
    """Without arguments: the unit tests on every CPU, then the integration tests alone."""
    res = _run(repo, f"cd /tmp && {repo}/.ci/run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-2:] == [
        f"{repo}/.venv/bin/python -m pytest -q -n auto tests/unit in {repo}",
        f"{repo}/.venv/bin/python -m pytest -q tests/integration in {repo}"]


@needs_root
@pytest.mark.parametrize("failing", ["tests/unit", "tests/integration"])
def test_a_failing_pass_fails_the_suite_and_the_other_still_runs(repo, failing):
    _write_exec(repo / ".venv" / "bin" / "python",
                f'#!/bin/sh\necho "$*"\ncase "$*" in *{failing}*) exit 3;; esac\n')
    res = _run(repo, "scripts/run test")
    assert res.returncode == 3, res.stdout
    assert [line.split()[-1] for line in res.stdout.splitlines()[-2:]] == [
        "tests/unit", "tests/integration"]


def test_the_readme_commands_carry_no_sudo_prefix():
    readme = (ROOT / "README.md").read_text()
    assert "scripts/run demo" in readme and "scripts/run test" in readme
    assert "sudo scripts/run" not in readme
    assert "bash scripts/run test" not in (ROOT / ".ci" / "run").read_text()
    assert "exec scripts/run test" in (ROOT / ".ci" / "run").read_text()


def test_setup_installs_the_apt_packages_dpkg_does_not_know(repo):
    """On a fresh machine dpkg-query exits 1 (some packages are unknown to it): the set-up
    must install them, not stop silently under set -e."""
    shutil.copy2(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    (repo / "pyproject.toml").write_text("")
    (repo / ".venv" / ".fabricemu-installed").touch()  # the venv is up to date
    fakebin = repo.parent / "fakebin"
    _write_exec(fakebin / "dpkg-query",
                "#!/bin/sh\necho 'gcc install ok installed'\necho 'git install ok installed'\n"
                "echo 'dpkg-query: no packages found matching mininet' >&2\nexit 1\n")
    _write_exec(fakebin / "apt-get", f'#!/bin/sh\necho "$*" >> {repo}/apt-calls\n')
    _write_exec(fakebin / "debconf-set-selections", "#!/bin/sh\ncat > /dev/null\n")
    _write_exec(fakebin / "sudo", '#!/bin/sh\nexec "$@"\n')
    res = _run(repo, "scripts/setup.sh", path=f"{fakebin}:{SAFE_PATH}")
    assert res.returncode == 0, res.stdout + res.stderr
    install = (repo / "apt-calls").read_text().splitlines()[-1].split()
    assert "mininet" in install and "clang" in install
    assert "gcc" not in install and "git" not in install
