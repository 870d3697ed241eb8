"""`flashbuild build` for real: cmake + ninja + nvcc on a small csrc-shaped tree, for sm_90a.

One module-scoped build is reused by most tests, and one more by the two tests of a recipe
without project variables (compiles stay few). CPU only: the module is imported and asked
what it was built for; nothing runs on a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "build" / "minikern"
EXT = __import__("sysconfig").get_config_var("EXT_SUFFIX")


def _cli(tree: Path, cuda: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "flashbuild", "build", "--recipe", str(tree / "minikern.toml"),
            "--arch", "sm_90a", "--cuda", str(cuda), "--jobs", "2", "--launcher", "none",
            "--json", *extra]


def _run(argv: list[str], cwd: Path) -> tuple[int, dict[str, object]]:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=600)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {"stdout": done.stdout}
    doc["_stderr"] = done.stderr
    return done.returncode, doc


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, cuda_toolkit_root: Path
          ) -> tuple[Path, Path, dict[str, object]]:
    root = tmp_path_factory.mktemp("buildtree")
    tree = root / "minikern"
    shutil.copytree(FIXTURE, tree)
    code, doc = _run(_cli(tree, cuda_toolkit_root, "--install", "inplace"), root)
    assert code == 0, doc
    return tree, cuda_toolkit_root, doc


def _import_archs(python: str, cwd: Path, pythonpath: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([python, "-c", "import minikern; print(minikern.built_archs())"],
                          cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_build_inplace_imports_from_neutral_dir(built: tuple[Path, Path, dict[str, object]],
                                                tmp_path: Path) -> None:
    tree, _, doc = built
    assert doc["configured"] is True and doc["edges"]
    # The backend's step says how its time split between CMake's configure and the compile.
    compile_step = next(s for s in doc["steps"] if s["name"] == "compile")  # type: ignore[attr-defined]
    assert set(compile_step["parts"]) == {"configure", "compile"}
    assert sum(compile_step["parts"].values()) == pytest.approx(compile_step["seconds"], abs=0.01)
    pkg = tree / "python" / "minikern"
    assert (pkg / f"_C{EXT}").is_file() and (pkg / "libminikern_attn.so").is_file()
    manifest = json.loads((pkg / "flashbuild-manifest.json").read_text())
    assert manifest["archs"] == ["sm_90a"] and manifest["recipe"] == "minikern"
    assert "Used" in (manifest.get("ptxas_info") or "")
    assert _import_archs(sys.executable, tmp_path, tree / "python") == "900"


def test_the_installed_package_knows_which_gpus_it_runs_on(
        built: tuple[Path, Path, dict[str, object]], tmp_path: Path, fake_nvml: Path) -> None:
    """The manifest lists each binary's images as read from it, the shim carries them, and an
    import on an sm_120 GPU (NVML stood in) refuses the sm_90a-only build with the fix."""
    tree, _, _ = built
    pkg = tree / "python" / "minikern"
    manifest = json.loads((pkg / "flashbuild-manifest.json").read_text())
    binaries = {b["path"]: b for b in manifest["binaries"]}
    assert binaries[f"_C{EXT}"]["sass"] == ["sm_90a"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUDA_VISIBLE_DEVICES")}
    env.update(PYTHONPATH=str(tree / "python"), LD_LIBRARY_PATH=str(fake_nvml))
    argv = [sys.executable, "-c", "import minikern; print(minikern.built_archs())"]
    rtx = subprocess.run(argv, cwd=tmp_path, env={**env, "FAKE_NVML_GPUS": "12.0:RTX 5090"},
                         capture_output=True, text=True, check=False)
    assert rtx.returncode == 1, rtx.stdout
    last = rtx.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: minikern cannot run on this machine's GPU")
    assert f"flashbuild build {tree} --recipe {tree / 'minikern.toml'} --arch sm_120" in last
    h100 = subprocess.run(argv, cwd=tmp_path, env={**env, "FAKE_NVML_GPUS": "9.0:H100"},
                          capture_output=True, text=True, check=False)
    assert h100.returncode == 0 and h100.stdout.strip() == "900", h100.stderr
    # The build says so itself when this machine's GPU cannot run what it built (a re-run).
    tree_env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml), "FAKE_NVML_GPUS": "12.0:RTX"}
    again = subprocess.run(_cli(tree, built[1], "--install", "inplace"), cwd=tree.parent,
                           env=tree_env, capture_output=True, text=True, check=False, timeout=600)
    notes = json.loads(again.stdout)["notes"]
    assert any("GPU 0 (RTX, compute capability 12.0) cannot run this build (sm_90a)" in n
               for n in notes), notes


def test_noop_rebuild_does_no_work(built: tuple[Path, Path, dict[str, object]]) -> None:
    tree, cuda, _ = built
    code, doc = _run(_cli(tree, cuda, "--install", "inplace"), tree.parent)
    assert code == 0, doc
    assert doc["configured"] is False  # cmake was not re-run
    assert doc["ninja_no_work"] is True  # ninja: no work to do
    assert doc["install"]["skipped"] is True  # type: ignore[index]
    assert all("parts" not in s for s in doc["steps"])  # type: ignore[attr-defined]


def test_compile_error_keeps_previous_install(built: tuple[Path, Path, dict[str, object]]
                                              ) -> None:
    tree, cuda, _ = built
    module = tree / "python" / "minikern" / f"_C{EXT}"
    before = module.read_bytes()
    source = tree / "kernels" / "add.cu"
    good = source.read_text()
    source.write_text(good.replace("y[i] += x[i];", "y[i] += x[i] * planted_error;"))
    try:
        code, doc = _run(_cli(tree, cuda, "--install", "inplace"), tree.parent)
    finally:
        source.write_text(good)
    assert code == 6, doc
    assert "planted_error" in str(doc["what"]) and "is undefined" in str(doc["what"])
    log = Path(str(doc["details"]["log"]))  # type: ignore[index]
    assert log.is_file() and "planted_error" in log.read_text()
    assert module.read_bytes() == before


def test_ctrl_c_then_rerun_resumes(built: tuple[Path, Path, dict[str, object]]) -> None:
    tree, cuda, _ = built
    for cu in (tree / "kernels").glob("*.cu"):
        cu.touch()
    (tree / "attn.cu").touch()
    build_log = next((tree.parent / "build" / "flashbuild").glob("minikern-90a_real-*")) / \
        "logs" / "build.log"
    build_log.unlink()  # so the wait below sees this run's first step, not an older log's
    proc = subprocess.Popen(_cli(tree, cuda, "--install", "inplace"), cwd=tree.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if build_log.is_file() and "[1/" in build_log.read_text():
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert json.loads(out)["error"] == "interrupted"
    code, doc = _run(_cli(tree, cuda, "--install", "inplace"), tree.parent)
    assert code == 0, doc
    assert doc["ninja_no_work"] is False, doc


# --- staged builds: the tree is never patched, each build folder keeps its own patched mirror --

SM120_STEP = '''
[[patch]]
id = "sm120-note"
description = "an sm_120-only edit, so the sm_120 and sm_90a builds patch differently"
transform = "insert-block"
when = { arch = [">=120,<130"] }
expect = { sites = 1 }

[patch.params]
file = "archs.cu"
anchor = "std::string minikern_built_archs() {"
where = "before"
block = "// minikern: built with the sm_120 edits\\n"
'''


def _tree_state(tree: Path) -> dict[str, tuple[bytes, int, int]]:
    """Bytes, inode and mtime of every file of the tree."""
    return {p.relative_to(tree).as_posix(): (p.read_bytes(), p.stat().st_ino,
                                             p.stat().st_mtime_ns)
            for p in sorted(tree.rglob("*")) if p.is_file()}


def _variant_recipe(tree: Path) -> Path:
    """The fixture's recipe plus an sm_120-only patch step, beside the tree (not in it)."""
    text = (tree / "minikern.toml").read_text().replace('path = "."', f'path = "{tree.name}"')
    recipe = tree.parent / "minikern-sm120.toml"
    recipe.write_text(text.replace("[build]", SM120_STEP + "\n[build]", 1))
    return recipe


def _build(recipe: Path, cuda: Path, arch: str, cwd: Path, *extra: str
           ) -> dict[str, object]:
    argv = [sys.executable, "-m", "flashbuild", "build", "--recipe", str(recipe), "--arch", arch,
            "--cuda", str(cuda), "--jobs", "2", "--launcher", "none", "--install", "none",
            "--json", *extra]
    code, doc = _run(argv, cwd)
    assert code == 0, doc
    return doc


def test_switching_arch_keeps_each_build_and_never_patches_the_tree(
        built: tuple[Path, Path, dict[str, object]]) -> None:
    tree, cuda, _ = built
    recipe = _variant_recipe(tree)
    before = _tree_state(tree)

    first = _build(recipe, cuda, "sm120", tree.parent)
    mirror120 = Path(str(first["build_dir"])) / "src"
    assert first["staged"] is True and first["source_dir"] == str(tree)
    assert first["cmake_source"] == str(mirror120)
    assert "sm_120 edits" in (mirror120 / "archs.cu").read_text()
    assert first["ninja_no_work"] is False

    other = _build(recipe, cuda, "sm_90a", tree.parent)
    assert other["build_dir"] != first["build_dir"]
    assert "sm_120 edits" not in (Path(str(other["build_dir"])) / "src" / "archs.cu").read_text()

    again = _build(recipe, cuda, "sm120", tree.parent)
    assert again["build_dir"] == first["build_dir"]
    assert again["configured"] is False  # cmake was not re-run
    assert again["ninja_no_work"] is True  # switching arch and back recompiled nothing
    assert again["staging"]["linked"] == []  # type: ignore[index]
    assert again["staging"]["reverted"] == []  # type: ignore[index]
    # the user's tree: the same bytes, inodes and mtimes, and no patch state in it
    assert _tree_state(tree) == before
    assert not (tree / ".flashbuild").exists()


def test_in_place_patches_the_tree_and_patch_revert_restores_it(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "minikern"
    shutil.copytree(FIXTURE, tree)
    recipe = _variant_recipe(tree)
    pristine = {k: v[0] for k, v in _tree_state(tree).items()}
    folder = tmp_path / "one-build-folder"
    doc = _build(recipe, cuda_toolkit_root, "sm120", tmp_path, "--in-place", "--build-dir",
                 str(folder))
    assert doc["staged"] is False and doc["cmake_source"] == str(tree)
    assert "sm_120 edits" in (tree / "archs.cu").read_text()
    assert (tree / ".flashbuild" / "journal.json").is_file()
    # a staged build of a tree patched in place would patch it twice: refused, tree unchanged
    code, refused = _run([sys.executable, "-m", "flashbuild", "build", "--recipe", str(recipe),
                          "--arch", "sm120", "--cuda", str(cuda_toolkit_root), "--install",
                          "none", "--json"], tmp_path)
    assert code == 10, refused
    assert "--in-place" in str(refused["fix"])
    done = subprocess.run([sys.executable, "-m", "flashbuild", "patch", "--recipe", str(recipe),
                           "--revert"], cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {k: v[0] for k, v in _tree_state(tree).items()} == pristine
    assert not (tree / ".flashbuild").exists()
    # the same build folder, staged now: CMake's cache names the tree as its source, so it is
    # configured afresh from the mirror instead of failing ("does not match the source")
    staged = _build(recipe, cuda_toolkit_root, "sm120", tmp_path, "--build-dir", str(folder))
    assert staged["configured"] is True and staged["cmake_source"] == str(folder / "src")
    assert any("was configured from" in str(n) for n in staged["notes"])  # type: ignore[attr-defined]
    assert {k: v[0] for k, v in _tree_state(tree).items()} == pristine


def test_a_recipe_without_install_table_stops_before_compiling(tmp_path: Path,
                                                              cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "minikern"
    shutil.copytree(FIXTURE, tree)
    recipe = tree / "minikern.toml"
    text = recipe.read_text()
    start = text.index("[install]")
    end = text.find("\n[", start + 1)
    recipe.write_text(text[:start] + (text[end + 1:] if end != -1 else ""))
    build_dir = tmp_path / "b"
    code, doc = _run(_cli(tree, cuda_toolkit_root, "--build-dir", str(build_dir)), tmp_path)
    assert code == 2, doc
    assert "no [install] table" in str(doc.get("what", "")) + str(doc.get("_stderr", ""))
    assert not list(build_dir.rglob("CMakeCache.txt")), "it configured before refusing"


@dataclass(frozen=True)
class HooklessBuild:
    """One build of minikern by a recipe that names no project variables, shared by the two
    tests below (each checks its own side of it)."""

    tree: Path
    raw: Path | None
    """The PyPI toolkit's own folder (the wheel layout) it was built with; None where that
    toolkit is not installed (then it was built with the CMake-usable toolkit root)."""
    code: int
    doc: dict[str, object]


@pytest.fixture(scope="module")
def hookless(tmp_path_factory: pytest.TempPathFactory, cuda_toolkit_root: Path
             ) -> HooklessBuild:
    """A copy of minikern whose recipe drops `output_dir_var` and `exclude_var`, built and
    installed in place with `--cuda` naming the raw PyPI toolkit where it is installed, and
    an empty XDG cache (so flashbuild makes its toolkit-shaped folder as on a fresh machine).
    Two full builds before, one now: the toolkit flashbuild is handed and the recipe's
    [build] variables are independent of each other."""
    import sysconfig

    root = tmp_path_factory.mktemp("hookless")
    tree = root / "minikern"
    shutil.copytree(FIXTURE, tree)
    recipe = tree / "minikern.toml"
    text = recipe.read_text()
    recipe.write_text(text.replace('output_dir_var = "FLASHKERN_OUTPUT_DIR"\n', "")
                      .replace('exclude_var = "FLASHKERN_SOURCES_EXCLUDE"\n', ""))
    assert "FLASHKERN_" not in recipe.read_text()
    pypi = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13"
    raw = pypi if (pypi / "bin" / "nvcc").is_file() else None
    done = subprocess.run(_cli(tree, raw or cuda_toolkit_root, "--install", "inplace"),
                          cwd=root, capture_output=True, text=True, check=False, timeout=600,
                          env={**os.environ, "XDG_CACHE_HOME": str(root / "cache")})
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {"stdout": done.stdout[-3000:]}
    doc["_stderr"] = done.stderr[-3000:]
    return HooklessBuild(tree=tree, raw=raw, code=done.returncode, doc=doc)


def test_builds_with_the_raw_pypi_toolkit(hookless: HooklessBuild) -> None:
    """What a fresh machine has after `pip install -e .[cuda]`: only the wheel layout, whose
    own nvcc fails CMake's compiler check (`cannot find -lcudadevrt`). flashbuild must hand
    CMake the nvcc of the toolkit-shaped folder it makes, not the wheel's."""
    if hookless.raw is None:
        pytest.skip("the PyPI CUDA toolkit is not installed (pip install -e .[cuda])")
    assert hookless.code == 0, hookless.doc
    doc = hookless.doc
    assert doc["configured"] is True and doc["edges"]
    cache = (Path(str(doc["build_dir"])) / "CMakeCache.txt").read_text()
    compiler = next(line for line in cache.splitlines()
                    if line.startswith("CMAKE_CUDA_COMPILER:"))
    assert str(hookless.raw) not in compiler, compiler


def test_a_recipe_without_project_variables_still_finds_its_artifacts(
        hookless: HooklessBuild) -> None:
    """Most upstream trees have no FLASHKERN_OUTPUT_DIR-style hook: with [build] naming no
    output variable, the project writes where its own CMakeLists says (here: into its package
    folder inside the staged sources) and flashbuild still finds and installs the binaries."""
    assert hookless.code == 0, hookless.doc
    pkg = hookless.tree / "python" / "minikern"
    assert (pkg / f"_C{EXT}").is_file() and (pkg / "flashbuild-manifest.json").is_file()


# Last in the file: flashbuild runs with the venv's interpreter here, CMake's Python changes,
# and the shared build is configured and compiled again (so is it by the next build with
# this interpreter). Every other test that builds in that folder (the staged sm_90a build
# of the arch switch too) comes first and rebuilds it incrementally.
def test_wheel_into_a_venv(built: tuple[Path, Path, dict[str, object]], tmp_path: Path) -> None:
    tree, cuda, _ = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    python = str(venv / "bin" / "python")
    # flashbuild runs with the venv's interpreter (it builds for and installs into the
    # interpreter it runs on); flashbuild itself comes from this checkout's environment.
    site = __import__("sysconfig").get_paths()["purelib"]
    argv = [python, *_cli(tree, cuda, "--install", "wheel")[1:]]
    done = subprocess.run(argv, cwd=tree.parent, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([site, str(ROOT)])},
                          timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    install = doc["install"]
    assert install["mode"] == "wheel" and str(install["wheel"]).endswith(  # type: ignore[index]
        "-cp{0}{1}-cp{0}{1}-linux_x86_64.whl".format(*sys.version_info[:2]))
    neutral = tmp_path / "neutral"
    neutral.mkdir()
    assert _import_archs(python, neutral) == "900"
    subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", "minikern"], check=True)
    with pytest.raises(subprocess.CalledProcessError):
        _import_archs(python, neutral)
