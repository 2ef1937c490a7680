"""Facts with one home: the frame geometry, RoCEv2's UDP port and the default S are
defined once (core.frame, core.scaling) and every other place derives from there."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLOORS = ("core", "topologies", "traffic", "model", "emu", "engine", "experiments", "bench",
          "cli")
#: 4096 that is not the RoCE MTU payload: (file, why).
OTHER_4096 = {
    "emu/netns.py": "MS_BIND, the mount flag",
    "emu/rocesink.py": "SO_RCVBUF of the fallback sink socket",
}


def _numbers(path: Path) -> list[str]:
    """The numeric literals of a Python file's code (comments and strings excluded)."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return [t.string.replace("_", "") for t in tokens if t.type == tokenize.NUMBER]


def _code(path: Path) -> str:
    """A Python file's code with strings and comments blanked out."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return " ".join('""' if t.type == tokenize.STRING else t.string
                    for t in tokens if t.type != tokenize.COMMENT)


def _sources() -> list[Path]:
    return [p for floor in FLOORS for p in (REPO / floor).rglob("*.py")]


def test_frame_sizes_and_the_port_are_written_once():
    where: dict[str, list[str]] = {"4791": [], "4154": [], "4096": [], "58": [], "74": []}
    for path in _sources():
        rel = str(path.relative_to(REPO))
        for number in _numbers(path):
            if number in where and not (number == "4096" and rel in OTHER_4096):
                where[number].append(rel)
    assert where["4791"] == ["core/frame.py"]
    assert where["4096"] == ["core/frame.py"]
    assert where["4154"] == [] and where["58"] == [] and where["74"] == []  # derived there


def test_the_c_sources_take_the_port_from_core_frame():
    for path in [*(REPO / "emu" / "bpf").glob("*.c"), *(REPO / "engine" / "csrc").glob("*.c")]:
        assert not re.search(r"\b4791\b", re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)), path


def test_the_default_scale_is_defined_once():
    defined = [str(p.relative_to(REPO)) for p in _sources()
               if re.search(r"^DEFAULT_SCALE\s*=", p.read_text(), flags=re.M)]
    assert defined == ["core/scaling.py"]
    # Every option or parameter named scale defaults to it, never to a number.
    keyword = r"\bscale(?:_factor)?\s*(?::\s*[\w.| ]+)?=\s*[0-9]"  # scale: float = 4000
    argparse = r"--scale\"[^)]*default=\s*[0-9]"                  # add_argument default
    literal = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in _sources()
               for pattern, text in ((keyword, _code(p)), (argparse, p.read_text()))
               for m in re.finditer(pattern, text)]
    assert literal == []


def test_test_modules_have_unique_basenames():
    """pytest imports test files by basename (no packages under tests/): two files of one
    name in unit/ and integration/ stop the whole suite at collection."""
    names = [p.name for p in (REPO / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
