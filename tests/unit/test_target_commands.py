"""The target arch is parsed once per command (issue 26, "a test counts"): each command that
takes `--arch` parses it at its edge and passes it down typed. `build TREE`, `recipe init`
and `scan` are counted in test_target.py; these are the others. Arch text read from files
(a manifest, a recipe's `when`, a CMake cache) is data, not the command's target, and is
not counted: the counter sees `parse_arch_spec`, which only the edges call."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from tests.unit.test_target import _count_parses, _stop_recording

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def test_verify_parses_the_target_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import flashbuild.verifying.command as command
    import flashbuild.verifying.verify  # noqa: F401

    seen: list[Any] = []

    # verify itself is not run: its checks start a fresh Python, not in a unit test
    monkeypatch.setattr(command, "verify_install", _stop_recording(seen, "targets"))
    calls = _count_parses(monkeypatch)
    CliRunner().invoke(app, ["verify", str(FIXTURES / "verify" / "kern.dll"),
                             "--arch", "sm120+PTX", "--no-gpu"])
    assert calls == ["sm120+PTX"]
    assert [t.arch.sm for t in seen[0].targets] == ["sm_120"]


def test_doctor_parses_the_target_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import flashbuild.detect.doctor as doctor
    import flashbuild.detect.rules  # noqa: F401

    seen: list[Any] = []

    monkeypatch.setattr(doctor, "collect", _stop_recording(seen, "spec"))
    calls = _count_parses(monkeypatch)
    res = CliRunner().invoke(app, ["doctor", "--arch", "sm_90a;sm120", "--json"])
    assert seen, res.output
    assert calls == ["sm_90a;sm120"]
    assert [a.sm for a in seen[0].archs] == ["sm_90a", "sm_120"]


def test_doctor_packages_parses_the_target_once(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import flashbuild.pipeline.installed as installed

    monkeypatch.setattr(installed, "default_site_packages", lambda: (tmp_path,))
    calls = _count_parses(monkeypatch)
    res = CliRunner().invoke(app, ["doctor", "--packages", "--arch", "sm120", "--json"])
    assert res.exit_code == 0, res.output
    assert calls == ["sm120"]


def test_patch_parses_the_target_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flashbuild.patching.report
    import flashbuild.pipeline.command
    import flashbuild.recipes.when  # noqa: F401

    tree = tmp_path / "mk"
    shutil.copytree(FIXTURES / "build" / "minikern", tree)
    calls = _count_parses(monkeypatch)
    res = CliRunner().invoke(app, ["patch", "--recipe", str(tree / "minikern.toml"),
                                   "--source", str(tree), "--platform", "windows",
                                   "--arch", "sm_120", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert calls == ["sm_120"]


def test_ci_init_parses_the_target_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flashbuild.ci.command
    import flashbuild.ci.workflow  # noqa: F401
    from tests.unit.test_ci_init import SPEC, _tree

    tree = _tree(tmp_path)
    calls = _count_parses(monkeypatch)
    res = CliRunner().invoke(app, ["ci", "init", "--recipe", str(tree / "tiny.toml"),
                                   "--arch", "90a;120", "--source", str(tree),
                                   "--cuda", "13.0", *SPEC])
    assert res.exit_code == 0, res.output
    assert calls == ["90a;120"]


def test_build_of_the_default_recipe_parses_the_target_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flashbuild.pipeline.command as command

    seen: list[Any] = []

    monkeypatch.setattr(command, "choose_toolkit", _stop_recording(seen, "targets"))
    calls = _count_parses(monkeypatch)
    res = CliRunner().invoke(app, ["build", "--arch", "sm120", "--build-dir",
                                   str(tmp_path / "b")])
    assert seen, res.output
    assert calls == ["sm120"]
