"""A regular (non-editable) wheel of flashbuild works on its own: it carries the bundled
recipes, patches and csrc/ (setup.py's build_py puts them in `flashbuild/_bundled/`) and the
CLI finds them with no source checkout next to the package. No nvcc build here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent.parent


def _run(argv: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False,
                          timeout=600)


#: What setup.py leaves out of the bundled folders; bytecode also because pip compiles
#: csrc/python/ when it installs the wheel.
_NOT_SHIPPED_DIRS = {"__pycache__", ".flashbuild"}
_NOT_SHIPPED_SUFFIXES = {".pyc", ".so", ".pyd", ".o", ".obj"}


def _tree_digest(tree: Path) -> dict[str, str]:
    """Every shipped file's sha256, by its path inside `tree`."""
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.rglob("*"))
            if p.is_file() and not _NOT_SHIPPED_DIRS & set(p.parts)
            and p.suffix not in _NOT_SHIPPED_SUFFIXES}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Build the wheel from this checkout and install it into a fresh venv."""
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), str(ROOT)],
        capture_output=True, text=True, check=False, timeout=600)
    assert built.returncode == 0, built.stderr
    wheels = list(dist.glob("flashbuild-*.whl"))
    assert len(wheels) == 1, wheels

    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)],
                   check=True, timeout=600)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["XDG_CACHE_HOME"] = str(base / "cache")
    env["LOCALAPPDATA"] = str(base / "cache")
    paths = json.loads(_run([str(python), "-c", "import json, sysconfig; "
                             "print(json.dumps(sysconfig.get_paths()))"],
                            cwd=base, env=env).stdout)
    # flashbuild's dependencies come from this test's environment, listed after the venv's own
    # site-packages: a plain path in a .pth file processes no .pth files there, so the
    # editable install's import hook (an `import` line in its .pth) never loads.
    ours = sorted({p for key in ("purelib", "platlib")
                   if (p := __import__("sysconfig").get_paths()[key])})
    Path(paths["purelib"], "zz_flashbuild_test_deps.pth").write_text(
        "\n".join(ours) + "\n", encoding="utf-8")
    done = _run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheels[0])],
                cwd=base, env=env)
    assert done.returncode == 0, done.stderr

    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    exe = shutil.which("flashbuild", path=paths["scripts"])
    assert exe is not None, f"no flashbuild script in {paths['scripts']}"
    return {"python": str(python), "exe": exe, "env": env, "cwd": elsewhere,
            "purelib": Path(paths["purelib"]), "cache": base / "cache"}


def _cli(installed: dict[str, object], *args: str) -> subprocess.CompletedProcess[str]:
    env = installed["env"]
    cwd = installed["cwd"]
    assert isinstance(env, dict) and isinstance(cwd, Path)
    return _run([str(installed["exe"]), *args], cwd=cwd, env=env)


def _bundled(installed: dict[str, object]) -> Path:
    purelib = installed["purelib"]
    assert isinstance(purelib, Path)
    return purelib / "flashbuild" / "_bundled"


def test_imports_the_installed_copy(installed: dict[str, object]) -> None:
    env = installed["env"]
    assert isinstance(env, dict)
    done = _run([str(installed["python"]), "-c", "import flashbuild; print(flashbuild.__file__)"],
                cwd=Path(str(installed["cwd"])), env=env)
    assert done.returncode == 0, done.stderr
    here = Path(done.stdout.strip()).resolve()
    assert here.is_relative_to(Path(str(installed["purelib"])).resolve()), here
    assert not here.is_relative_to(ROOT), here


def test_wheel_carries_the_bundled_folders(installed: dict[str, object]) -> None:
    bundled = _bundled(installed)
    for name in ("recipes", "patches", "csrc"):
        source = _tree_digest(ROOT / name)
        shipped = _tree_digest(bundled / name)
        # Exactly the repo folder's files, byte for byte.
        assert shipped == source, name
    assert (bundled / "csrc" / "CMakeLists.txt").is_file()
    assert (bundled / "recipes" / "csrc.toml").is_file()


def test_recipe_list_and_show(installed: dict[str, object]) -> None:
    listed = _cli(installed, "recipe", "list")
    assert listed.returncode == 0, listed.stderr
    assert "csrc" in listed.stdout
    shown = _cli(installed, "recipe", "show", "csrc")
    assert shown.returncode == 0, shown.stderr
    assert "msvc-instantiations" in shown.stdout


def test_patch_dry_run_uses_the_bundled_tree(installed: dict[str, object]) -> None:
    csrc = _bundled(installed) / "csrc"
    before = _tree_digest(csrc)
    done = _cli(installed, "patch", "--platform", "windows", "--arch", "sm120", "--dry-run",
                "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert Path(doc["tree"]).resolve() == csrc.resolve()
    assert sum(1 for step in doc["steps"] if step["matched"]) == 7, doc["steps"]
    assert _tree_digest(csrc) == before  # a dry run leaves the installed tree alone


def test_scan_the_bundled_tree(installed: dict[str, object]) -> None:
    csrc = _bundled(installed) / "csrc"
    done = _cli(installed, "scan", str(csrc), "--platform", "linux", "--arch", "sm_90a",
                "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert Path(doc["root"]).resolve() == csrc.resolve()
    assert doc["files_scanned"] > 0 and doc["blocking"] is False


def test_default_build_root_is_the_user_cache(installed: dict[str, object]) -> None:
    """A build of the bundled tree must not write into site-packages."""
    env = installed["env"]
    assert isinstance(env, dict)
    code = ("import os\n"
            "from flashbuild import platforms\n"
            "from flashbuild.building import builddir\n"
            "from flashbuild.recipes.load import load_recipe\n"
            "tree = load_recipe('csrc').source_root(None)\n"
            "cache = platforms.current().user_cache_dir(os.environ)\n"
            "print(builddir.default_root(tree, cache_dir=cache))\n")
    done = _run([str(installed["python"]), "-c", code], cwd=Path(str(installed["cwd"])), env=env)
    assert done.returncode == 0, done.stderr
    root = Path(done.stdout.strip())
    assert root.is_relative_to(Path(str(installed["cache"])) / "flashbuild" / "build"), root
