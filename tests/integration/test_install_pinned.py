"""A tree's missing requirements, installed with everything installed pinned: real pip, a
throwaway venv and a local index of wheels written here (no network: `PIP_NO_INDEX` with
`PIP_FIND_LINKS`).

The class: llama-cpp-python requires `typing_extensions`, which a fresh venv lacks; the
wheel goes in with `--no-deps` (pip must never swap torch), so its import failed. Now the
missing requirement is installed, and a requirement that would move an installed
distribution (torch's place here: `fbpinned`) is refused by pip and left to the user."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from flashbuild.detect import pinned
from flashbuild.installing import install as installing
from flashbuild.proc import ProcessRunner

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(sysconfig.get_platform().startswith("win"),
                                 reason="venv layout")]


def _wheel(index: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A pure-Python wheel `name-version`, one module of the same name."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(index / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


@pytest.fixture
def world(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """(a venv's python with fbpinned 1.0 installed, the environment pointing pip at the
    local index only)."""
    index = tmp_path / "index"
    index.mkdir()
    _wheel(index, "fbpinned", "1.0")
    _wheel(index, "fbpinned", "2.0")
    _wheel(index, "fbdep", "1.0")
    _wheel(index, "fbwants_new", "1.0", ("fbpinned>=2.0",))
    _wheel(index, "fbpkg", "1.0", ("fbdep>=1.0",))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    env = {"PATH": "/usr/bin:/bin", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HOME": str(tmp_path)}
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "fbpinned==1.0"],
                   env=env, check=True, timeout=300, capture_output=True)
    return python, env


def _version(python: str, module: str) -> str:
    done = subprocess.run([python, "-c", f"import {module}; print({module}.VERSION)"],
                          capture_output=True, text=True, timeout=60, check=False)
    return done.stdout.strip() or "absent"


def test_a_missing_requirement_is_installed(world: tuple[str, dict[str, str]]) -> None:
    python, env = world
    done = pinned.install_pinned(python, ["fbdep>=1.0"], ProcessRunner(), env)
    assert done.ok, done.error
    assert _version(python, "fbdep") == "1.0"
    assert "<every installed distribution at its version>" in done.command


def test_one_that_would_move_an_installed_distribution_is_refused(
        world: tuple[str, dict[str, str]]) -> None:
    python, env = world
    done = pinned.install_pinned(python, ["fbwants_new"], ProcessRunner(), env)
    assert not done.ok and done.error
    assert _version(python, "fbpinned") == "1.0"  # never upgraded
    assert _version(python, "fbwants_new") == "absent"


def test_the_install_stage_installs_a_wheels_missing_dependency(
        world: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """`--no-deps` for the wheel, then its missing requirement, said in a note."""
    python, env = world
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "fbpkg"], env=env,
                   check=True, timeout=300, capture_output=True)
    plan = installing.InstallPlan(mode="wheel", package="fbpkg", package_dir=None,
                                  artifacts=(), dll_dirs=(), manifest_name="m.json",
                                  manifest=b"{}", python=python, work_dir=tmp_path)
    warnings, notes = installing.install_requirements_of(plan, "fbpkg", ProcessRunner(), env)
    assert warnings == [] and _version(python, "fbdep") == "1.0"
    assert notes == ("installed fbdep, which fbpkg requires, with every installed "
                     "distribution pinned to its version",)


def test_no_deps_only_names_them(world: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    python, env = world
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "fbpkg"], env=env,
                   check=True, timeout=300, capture_output=True)
    plan = installing.InstallPlan(mode="wheel", package="fbpkg", package_dir=None,
                                  artifacts=(), dll_dirs=(), manifest_name="m.json",
                                  manifest=b"{}", python=python, work_dir=tmp_path,
                                  install_requirements=False)
    (warning,), notes = installing.install_requirements_of(plan, "fbpkg", ProcessRunner(),
                                                           env)
    assert notes == () and _version(python, "fbdep") == "absent"
    assert f"`{python} -m pip install 'fbdep'`" in warning
