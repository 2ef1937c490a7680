"""The README and the repository say true things: default S, commands, licence, packaging."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_default_scale_in_the_readme_is_the_experiments_default():
    from core.scaling import DEFAULT_SCALE
    from experiments.measure import packet_time_s
    from topologies.base import NIC_RATE_BPS

    m = re.search(r"S = (\d+) by default\*\*, so a 400G NIC is shaped\s+to ([\d.]+) Mb/s and "
                  r"sends a 4 KB frame every ([\d.]+) ms", README)
    assert m, "the README's sentence on the default S changed form"
    assert float(m.group(1)) == DEFAULT_SCALE
    assert float(m.group(2)) == pytest.approx(NIC_RATE_BPS / DEFAULT_SCALE / 1e6)
    assert m.group(3) == f"{packet_time_s(NIC_RATE_BPS) * DEFAULT_SCALE * 1e3:.1f}"


def test_no_command_line_is_a_shell_pipeline_by_accident():
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            command = line.split("#", 1)[0]
            assert not re.search(r"\bemu\b.*\|", command), line


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    files = []
    for name in out.stdout.splitlines():
        path = ROOT / name
        if path.suffix in {".py", ".md", ".c", ".sh", ".toml", ".txt", ""} and path.is_file():
            files.append(path)
    return files


def test_nothing_cites_a_design_file_outside_the_repository():
    pattern = re.compile(r"DESIGN(\.md| ?§)|\.\./shared")
    offenders = []
    for path in _tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{path.relative_to(ROOT)}:{n}" for n, line in
                      enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert not offenders


def test_licence_packaging_and_vm():
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "fabricemu authors" in licence
    pyproject = (ROOT / "pyproject.toml").read_text()
    # An SPDX expression: setuptools drops the table form's support after 2027-02-18.
    assert 'license = "MIT"' in pyproject and 'requires = ["setuptools>=77"]' in pyproject
    assert re.search(r'"numpy>=[\d.]+"', pyproject)
    assert ".vagrant/" in (ROOT / ".gitignore").read_text().splitlines()
    tracked = subprocess.run(["git", "ls-files", ".vagrant"], cwd=ROOT, capture_output=True,
                             text=True).stdout
    assert tracked == ""
    # The Vagrantfile's own choices: tests/unit/test_vagrantfile.py.
