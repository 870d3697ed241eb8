"""A setup.py tree's `[build-system] requires` that this Python lacks: installed with
everything installed pinned, or named in a note; never torch, never a version change, and
the build goes on either way (pip without build isolation does not check them either).
mamba-ssm's shape: `setuptools>=61`, `wheel`, `packaging`, `ninja`, and torch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from flashbuild import platforms
from flashbuild.building.backends import setuptools as st
from tests.unit.pip_fakes import PipWorld

PYPROJECT = """[build-system]
requires = ["setuptools>=61.0.0", "wheel", "packaging", "ninja", "torch>=2.7,<2.8",
            "build>=1.3; python_version < '3'"]
build-backend = "setuptools.build_meta"
"""


def _request(tree: Path, *, install: bool = True) -> SimpleNamespace:
    (tree / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    return SimpleNamespace(source_dir=tree, python="python",
                           env={"XDG_CACHE_HOME": str(tree / "cache")},
                           platform=platforms.get("linux"), install_requirements=install)


def test_the_absent_ones_are_installed_pinned_and_nothing_else(tmp_path: Path) -> None:
    env = PipWorld({"setuptools": "50.0", "torch": "2.11.0", "wheel": "0.45"}, on_path=("ninja",))
    (note,) = st.absent_build_requirements(_request(tmp_path), env)  # type: ignore[arg-type]
    # packaging only: setuptools 50 is kept (a version change is never made), torch is the
    # installed one, ninja is on PATH, `build` has a marker that is false here.
    assert env.installs() == [["packaging"]]
    assert note.startswith("installed the build requirements packaging ")
    assert env.installed["torch"] == "2.11.0"


def test_refused_or_no_deps_they_are_named_and_the_build_goes_on(tmp_path: Path) -> None:
    env = PipWorld({"setuptools": "70", "torch": "2.11.0"}, refuse=True,
                   refusal="ERROR: No matching distribution")
    (note,) = st.absent_build_requirements(_request(tmp_path), env)  # type: ignore[arg-type]
    assert "wheel, packaging, ninja" in note and "No matching distribution" in note
    assert note.endswith('`python -m pip install "wheel" "packaging" "ninja"`')
    quiet = PipWorld({"setuptools": "70", "torch": "2.11.0"})
    (note,) = st.absent_build_requirements(  # type: ignore[arg-type]
        _request(tmp_path, install=False), quiet)
    assert "(--no-deps)" in note
    assert quiet.installs() == []


def test_a_tree_without_a_pyproject_needs_nothing(tmp_path: Path) -> None:
    env = PipWorld({})
    request = SimpleNamespace(source_dir=tmp_path, python="python", env={},
                              install_requirements=True)
    assert st.absent_build_requirements(request, env) == ()  # type: ignore[arg-type]
    assert env.calls == []
