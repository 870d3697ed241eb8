"""The build hook's `-j` for build tools a setup.py runs itself (building/backends/resources/
sitecustomize.py, `raise_jobs`). natten 0.21.7 runs `cmake --build DIR -j <cores // 4>`: 4 on
the 16-core H200 machine, where its 109 units were still compiling after 1,000 s; MAX_JOBS,
flashbuild's plan from cores and free memory, never reached it. The hook is loaded under
another name, so its start-up code does not run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchload import load

HOOK = (Path(__file__).resolve().parents[2] / "flashbuild" / "building" / "backends" /
        "resources" / "sitecustomize.py")


@pytest.fixture
def hook() -> ModuleType:
    return load("flashbuild_hook_jobs_under_test", HOOK)


@pytest.mark.parametrize(("argv", "raised", "old"), [
    (["cmake", "--build", "b", "-j", "4"], ["cmake", "--build", "b", "-j", "16"], "4"),
    (["cmake", "--build", "b", "--parallel=2"], ["cmake", "--build", "b", "--parallel=16"], "2"),
    (["/usr/bin/cmake", "--build", "b", "--", "-j3"],
     ["/usr/bin/cmake", "--build", "b", "--", "-j16"], "3"),
    (["ninja", "-C", "b", "-j", "2"], ["ninja", "-C", "b", "-j", "16"], "2"),
    (["make", "-j8", "all"], ["make", "-j16", "all"], "8"),
])
def test_a_lower_parallelism_is_raised_to_the_plan(hook: ModuleType, argv: list[str],
                                                   raised: list[str], old: str) -> None:
    assert hook.raise_jobs(argv, 16) == (raised, old)


@pytest.mark.parametrize("argv", [
    ["cmake", "--build", "b", "-j", "32"],   # more than the plan: the tree's own choice
    ["cmake", "-S", ".", "-B", "b", "-j", "2"],  # a configure, not a build
    ["cmake", "--build", "b"],               # no -j: CMAKE_BUILD_PARALLEL_LEVEL says it
    ["g++", "-j", "2", "x.cpp"],             # not a build tool
    ["make", "-j"],                          # unbounded
    ["make", "-j1", "all"],                  # serial on purpose, perhaps not parallel-safe
])
def test_anything_else_is_left_as_it_is(hook: ModuleType, argv: list[str]) -> None:
    assert hook.raise_jobs(argv, 16) == (argv, "")


def test_the_running_command_gets_the_plan_and_the_report_says_so(
        hook: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = tmp_path / "hook.jsonl"
    monkeypatch.setenv("MAX_JOBS", "6")
    monkeypatch.setenv("FLASHBUILD_HOOK_REPORT", str(report))
    started: list[object] = []

    def fake_init(self: object, args: object, *rest: object, **kwargs: object) -> None:
        started.append(args)  # what Popen would have run; nothing is started

    monkeypatch.setattr(subprocess.Popen, "__init__", fake_init)
    hook._own_build_jobs()
    subprocess.Popen(["make", "-j2", "all"])
    subprocess.Popen("make -j2 all", shell=True)  # a shell line is left as it is
    assert started == [["make", "-j6", "all"], "make -j2 all"]
    (record,) = [json.loads(line) for line in report.read_text().splitlines()]
    assert (record["jobs_raised"], record["from"], record["to"]) == ("make -j2 all", "2", "6")


def test_the_build_says_what_it_raised() -> None:
    from types import SimpleNamespace

    from flashbuild.building.backends.setuptools import _hook_notes

    record = {"jobs_raised": "cmake --build /tmp/b", "from": "4", "to": "16",
              "where": "setup.py:491"}
    (note,) = _hook_notes([record], SimpleNamespace(), None)  # type: ignore[arg-type]
    assert note.startswith("the setup.py ran `cmake --build /tmp/b …` with -j 4 (setup.py:491)")
    assert "16 jobs" in note and "FLASHBUILD_OWN_JOBS=0" in note
