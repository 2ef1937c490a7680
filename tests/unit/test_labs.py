"""The lab pack as a whole: every lab is complete and consistent, every reference
solution passes its own algorithm checks and every untouched starter fails them with
feedback naming a TODO; the grader, the harness, start and export behave (no root)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import ParameterError
from labs.catalog import all_labs, find_lab
from labs.emulation import check_runnable
from labs.grader import grade
from labs.harness import Harness, HarnessError
from labs.student import StudentCode, StudentError
from labs.verdict import CheckResult, Grade, fail, ok, ungraded
from labs.workspace import export_pack, pack_files, start_lab, write_new_or_replace

REPO = Path(__file__).resolve().parents[2]
LABS = all_labs()
IDS = [f"lab{lab.number}" for lab in LABS]


def test_the_pack_has_the_labs_the_issue_lists():
    assert {1}.issubset({lab.number for lab in LABS})
    assert len({lab.number for lab in LABS}) == len(LABS)


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_every_lab_is_complete(lab):
    for path in (lab.folder / "README.md", lab.starter / lab.student_file,
                 lab.solution / lab.student_file, lab.folder / "checks.py"):
        assert path.is_file(), path
    handout = (lab.folder / "README.md").read_text()
    assert len(handout) > 2000, "a handout with goals, background, steps and questions"
    module = lab.checks_module()
    for check in lab.checks:
        assert callable(getattr(module, check.function, None)), check.function
        assert "TODO" in check.todo or "given" in check.todo, check.todo
    assert lab.estimate_s() <= 300, "a lab's check takes at most 5 minutes"
    starter = (lab.starter / lab.student_file).read_text()
    assert "TODO" in starter


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_the_solution_passes_every_algorithm_check(lab):
    g = grade(lab, lab.solution, emulation=False)
    algo = [r for r in g.results if r.kind == "algorithm"]
    assert algo, "every lab has algorithm checks"
    failed = [(r.id, r.outcome.feedback) for r in algo if r.outcome.status != "passed"]
    assert not failed
    assert all(r.outcome.status == "ungraded" for r in g.results if r.kind == "emulation")


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_the_untouched_starter_fails_naming_a_todo(lab):
    g = grade(lab, lab.starter, emulation=False)
    failed = [r for r in g.results if r.outcome.status == "failed"]
    assert failed and g.verdict == "FAILED"
    assert all("TODO" in r.feedback() for r in failed), [r.feedback() for r in failed]


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_every_scenario_parses_with_the_solution(lab):
    check_runnable(lab, lab.solution)


def test_find_lab_by_number_or_name_and_a_clear_error():
    assert find_lab("1").slug == "dctcp"
    assert find_lab("dctcp").number == 1
    with pytest.raises(ParameterError, match="known labs"):
        find_lab("99")


# ----------------------------------------------------------------------------- grader

def test_a_file_that_does_not_import_fails_every_check_with_its_line(tmp_path):
    lab = find_lab(1)
    (tmp_path / lab.student_file).write_text("import math\n\nx = 1 / 0\n")
    g = grade(lab, tmp_path, emulation=False)
    assert g.verdict == "FAILED" and g.score == 0
    assert all("ZeroDivisionError" in r.outcome.feedback and "line 3" in r.outcome.feedback
               for r in g.results if r.outcome.status == "failed")


def test_an_exception_in_an_event_names_the_method_and_line(tmp_path):
    lab = find_lab(1)
    text = (lab.solution / lab.student_file).read_text()
    broken = text.replace("        self.acked_bytes += bytes_acked\n",
                          "        self.acked_bytes += bytes_acked\n        {}[bytes_acked]\n")
    (tmp_path / lab.student_file).write_text(broken)
    g = grade(lab, tmp_path, emulation=False)
    alpha = next(r for r in g.results if r.id == "alpha")
    assert alpha.outcome.status == "failed"
    assert "on_ack" in alpha.outcome.feedback and "KeyError" in alpha.outcome.feedback
    assert f"{lab.student_file}, line" in alpha.outcome.feedback


def test_a_method_that_never_returns_is_stopped(tmp_path):
    code_file = tmp_path / "loop.py"
    code_file.write_text("def spin():\n    while True:\n        pass\n")
    code = StudentCode(code_file)
    with pytest.raises(StudentError, match="did not return within 0.2 s"):
        code.call("spin()", code.attr("spin"), limit_s=0.2)


def test_the_harness_refuses_what_the_engine_would():
    class Nan:
        rate_bps = 1e9
        window_bytes = None
        next_timer_s = math.inf

        def on_ack(self, *args):
            self.rate_bps = math.nan

    h = Harness(Nan())
    with pytest.raises(HarnessError, match="rate_bps after on_ack is nan"):
        h.ack(4096, 10e-6)

    class Stuck:
        rate_bps = 1e9
        window_bytes = None
        next_timer_s = 0.0

        def on_timer(self, now_s):
            pass  # never moves next_timer_s on

    with pytest.raises(HarnessError, match="next_timer_s move forward"):
        Harness(Stuck()).advance(1e-6)


def test_the_harness_fires_timers_at_their_own_time():
    class Ticker:
        rate_bps = 1e9
        window_bytes = None

        def __init__(self):
            self.next_timer_s = 5e-6
            self.fired: list[float] = []

        def on_timer(self, now_s):
            self.fired.append(now_s)
            self.next_timer_s = now_s + 5e-6

    h = Harness(Ticker())
    h.advance(17e-6)
    assert h.cc.fired == pytest.approx([5e-6, 10e-6, 15e-6])
    assert h.now_s == pytest.approx(17e-6)


def _grade(*outcomes):
    g = Grade(1, "t")
    for i, (o, visibility) in enumerate(outcomes):
        g.results.append(CheckResult(f"c{i}", "title", "algorithm", "TODO 1", visibility, 2.0, o))
    return g


def test_results_json_is_gradescope_and_ungraded_costs_nothing():
    g = _grade((ok("fine"), "visible"), (fail("wrong"), "hidden"),
               (ungraded("machine too busy"), "visible"))
    doc = json.loads(g.results_json())
    assert doc["score"] == 2 and doc["max_score"] == 6
    assert [t.get("status") for t in doc["tests"]] == ["passed", "failed", None]
    assert doc["tests"][1]["visibility"] == "after_published"
    assert "wrong" not in doc["tests"][1]["output"] and "TODO 1" in doc["tests"][1]["output"]
    assert "ungraded (not a fail)" in doc["tests"][2]["output"]
    assert g.verdict == "FAILED"
    assert _grade((ok(), "visible"), (ungraded("busy"), "visible")).verdict == "INCOMPLETE"
    assert "wrong" in json.dumps(json.loads(g.results_json(show_hidden=True)))


# ----------------------------------------------------------------------------- workspace

def test_start_copies_the_starter_and_the_handout(tmp_path):
    lab = find_lab(1)
    written = start_lab(lab, tmp_path / "work")
    names = {p.name for p in written}
    assert {lab.student_file, "HANDOUT.md"} <= names
    assert (tmp_path / "work" / lab.student_file).read_text() == \
        (lab.starter / lab.student_file).read_text()
    with pytest.raises(ParameterError, match="not empty"):
        start_lab(lab, tmp_path / "work")


def test_start_never_writes_through_a_link(tmp_path):
    lab = find_lab(1)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ParameterError, match="symbolic link"):
        start_lab(lab, tmp_path / "link")
    results = tmp_path / "results.json"
    results.symlink_to(victim)
    write_new_or_replace(results, "{}")
    assert victim.read_text() == "precious" and not results.is_symlink()


def test_export_leaves_out_every_solution_and_still_grades(tmp_path):
    files = pack_files(REPO)
    rel = [p.relative_to(REPO) for p in files]
    assert not [p for p in rel if "solution" in p.parts]
    for lab in LABS:
        assert (lab.starter / lab.student_file).relative_to(REPO) in rel
    pack = tmp_path / "pack"
    export_pack(pack, REPO)
    assert not list(pack.rglob("solution"))
    # The pack's own grader grades a correct answer without any solution/ present.
    answer = tmp_path / "answer"
    shutil.copytree(find_lab(1).solution, answer, ignore=shutil.ignore_patterns("runs", "*.json"))
    script = ("import sys; from pathlib import Path; from labs.catalog import find_lab; "
              "from labs.grader import grade; "
              "g = grade(find_lab(1), Path(sys.argv[1]), emulation=False); "
              "print(sum(r.outcome.status == 'passed' for r in g.results))")
    env = {**os.environ, "PYTHONPATH": str(pack)}
    out = subprocess.run([sys.executable, "-c", script, str(answer)], cwd=pack, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    n_algo = sum(c.kind == "algorithm" for c in find_lab(1).checks)
    assert int(out.stdout.strip()) == n_algo


# ----------------------------------------------------------------------------- the CLI

def _emu(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    env.pop("FABRICEMU_DEBUG", None)
    return subprocess.run([sys.executable, "-c", "from cli.app import main; main()", *args],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("args", [
    ("lab", "check", "99", "."),
    ("lab", "check", "1", "no-such-folder", "--no-emulation"),
    ("lab", "run", "1", "."),
    ("lab", "start", "1", "."),
    ("lab", "export", "."),
])
def test_bad_lab_commands_are_one_line_errors(args, tmp_path):
    (tmp_path / "something").write_text("not empty")
    proc = _emu(*args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["something"]


def test_a_student_session_from_start_to_check(tmp_path):
    start = _emu("lab", "start", "1", "work", cwd=tmp_path)
    assert start.returncode == 0, start.stderr
    check = _emu("lab", "check", "1", "work", "--no-emulation", cwd=tmp_path)
    assert check.returncode == 1, check.stdout          # the untouched starter fails
    assert "TODO 1" in check.stdout and "TODO 2" in check.stdout
    doc = json.loads((tmp_path / "work" / "results.json").read_text())
    assert doc["max_score"] == find_lab(1).max_points() and doc["score"] < doc["max_score"]
    shutil.copy(find_lab(1).solution / "dctcp_lab.py", tmp_path / "work" / "dctcp_lab.py")
    solved = _emu("lab", "check", "1", "work", "--no-emulation", cwd=tmp_path)
    assert solved.returncode == 3, solved.stdout        # incomplete: emulation not run
    assert "INCOMPLETE" in solved.stdout and "FAILED " not in solved.stdout


def test_through_sudo_what_a_lab_command_wrote_goes_back_to_the_user(tmp_path, monkeypatch):
    import labs.workspace as ws

    runs = tmp_path / "runs" / "lab1-x"
    runs.mkdir(parents=True)
    (runs / "metrics.csv").write_text("x")
    (tmp_path / "runs" / "link").symlink_to("/etc/passwd")
    calls = []
    monkeypatch.setattr(ws.os, "geteuid", lambda: 0)
    monkeypatch.setattr(ws.os, "lchown", lambda path, uid, gid: calls.append((Path(path), uid, gid)))
    monkeypatch.setenv("SUDO_UID", "1234")
    monkeypatch.setenv("SUDO_GID", "99")
    assert ws.hand_back([tmp_path / "runs", tmp_path / "missing.json"]) == 4
    assert {c[0].name for c in calls} == {"runs", "lab1-x", "metrics.csv", "link"}
    assert all(c[1:] == (1234, 99) for c in calls)       # lchown: the link itself, not /etc/passwd
    monkeypatch.delenv("SUDO_UID")
    assert ws.hand_back([tmp_path / "runs"]) == 0
