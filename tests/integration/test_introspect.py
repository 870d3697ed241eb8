"""Introspection with the real tools: a scratch CMake configure read through the File API, and
setup.py record mode under the build hook (torch's CPU wheel writes build.ninja; nothing is
compiled). Bad input (a setup.py that raises, hangs or reaches for the network, a configure
that fails) gives a model that says so or a one-line fallback, the tree stays byte-identical,
and nothing is written outside the build root."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from flashbuild import platforms
from flashbuild.arch import parse_arch_spec
from flashbuild.building.cmake import find_tools
from flashbuild.pipeline.introspect import introspect
from flashbuild.proc import ProcessRunner
from flashbuild.recipes.load import parse_recipe
from flashbuild.recipes.model import Recipe
from flashbuild.source.treemodel import Introspection
from tests.markers import needs_torch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "introspect"


def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _tree(tmp_path: Path, name: str) -> Path:
    """A copy of the fixture at `<tmp>/work/<name>`: the build root is `<tmp>/work/build`."""
    dest = tmp_path / "work" / name
    shutil.copytree(FIXTURES / name, dest)
    return dest


def _run(tree: Path, backend: str, arch: str = "sm_90a", extra: str = "",
         timeout: float = 300.0) -> Introspection:
    recipe = parse_recipe(f'[recipe]\nname = "t"\n[source]\npath = "{tree.name}"\n'
                          f'[build]\nbackend = "{backend}"\n{extra}', None)
    before = _snapshot(tree)
    outcome = introspect(recipe, tree, parse_arch_spec(arch), timeout=timeout)
    assert _snapshot(tree) == before, "introspection changed the tree"
    # Nothing outside the build root (`<tree>/../build`) was written.
    assert sorted(p.name for p in tree.parent.iterdir()) == sorted([tree.name, "build"])
    return outcome


@pytest.fixture(autouse=True)
def _needs_toolkit(cuda_toolkit_root: Path) -> None:
    """Skip where no CUDA toolkit exists (the fixture skips)."""


# --- CMake ----------------------------------------------------------------------------------

def test_cmake_targets_arch_variable_and_bindings_come_from_the_configure(
        tmp_path: Path) -> None:
    tree = _tree(tmp_path, "cmake_archvar")
    outcome = _run(tree, "cmake")
    model = outcome.model
    assert model is not None, outcome.fallback
    # only80 exists only for MY_ARCH=80: not in this configuration.
    assert [(t.name, t.kind) for t in model.targets] == [("archmod", "module")]
    assert model.arch_variable is not None
    assert (model.arch_variable.name, model.arch_variable.form) == ("MY_ARCH", "arch_codes")
    unit = model.unit("src/kernel.cu")
    assert unit is not None
    assert unit.arch_flags == ("-gencode=arch=compute_90a,code=sm_90a",)
    # `extra` is registered only under ARCHMOD_EXTRA, which this configuration does not set.
    assert [(b.module, b.names) for b in model.bindings] == [("archmod", ("scale",))]


def test_a_findcuda_trees_arch_variable_is_read_from_the_scripts_build_ninja_runs(
        tmp_path: Path) -> None:
    # FindCUDA's flags live in the per-source scripts build.ninja runs, not in build.ninja:
    # read there, the default (`-arch sm_61`) is not --arch, and GPU_SM is the variable that
    # makes it so. Before, no arch flag was found at all and nothing was confirmed.
    tree = _tree(tmp_path, "cmake_findcuda")
    outcome = _run(tree, "cmake")
    model = outcome.model
    assert model is not None, outcome.fallback
    var = model.arch_variable
    assert var is not None
    assert (var.name, var.form, var.value) == ("GPU_SM", "arch_codes", "90a")
    assert "sm_90a" in var.evidence
    # FindCUDA was given the toolkit flashbuild chose, not the first nvcc it would find
    # itself (here /usr/local/cuda-13.0 beside the venv's PyPI toolkit).
    (cache,) = (tree.parent / "build").rglob("CMakeCache.txt")
    entries = {key.split(":")[0]: value for key, _, value in
               (line.partition("=") for line in cache.read_text().splitlines())
               if value and not key.startswith(("//", "#"))}
    assert entries["CUDA_TOOLKIT_ROOT_DIR"] == entries["CUDAToolkit_ROOT"]


def test_an_arch_list_made_from_a_capabilities_variable_is_steered_by_it(
        tmp_path: Path) -> None:
    # `list(TRANSFORM KERNEL_CAPS … OUTPUT_VARIABLE CMAKE_CUDA_ARCHITECTURES)` hides the
    # CMAKE_CUDA_ARCHITECTURES flashbuild sets: before, no variable was a candidate (none in
    # ${} on an arch line) and the configure built 75, 80, 86 and 89.
    tree = _tree(tmp_path, "cmake_capslist")
    outcome = _run(tree, "cmake")
    model = outcome.model
    assert model is not None, outcome.fallback
    var = model.arch_variable
    assert var is not None
    assert (var.name, var.value) == ("KERNEL_CAPS", "90a")
    assert "sm_90a" in var.evidence and "sm_89" not in var.evidence


def test_a_missing_toolkit_component_gets_a_stand_in_and_a_note(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "cmake_archvar")
    outcome = _run(tree, "cmake", extra='[[build.options]]\ndefine = { WITH_ABSENT_LIB = "ON", '
                   'MY_ARCH = "90a" }\n')
    assert outcome.model is not None, outcome.fallback
    assert any("CUDA::flashbuild_absent_component not found" in n for n in outcome.model.notes)
    assert outcome.model.arch_variable is None  # the recipe set it already


def test_a_configure_that_fails_falls_back_with_one_line(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "cmake_archvar")
    lists = tree / "CMakeLists.txt"
    lists.write_text(lists.read_text(encoding="utf-8") + 'message(FATAL_ERROR "no way")\n',
                     encoding="utf-8")
    outcome = _run(tree, "cmake")
    assert outcome.model is None
    assert outcome.fallback.startswith("the CMake configure failed")
    assert "\n" not in outcome.fallback
    assert "CMakeLists.txt:26 (message): no way" in outcome.fallback


# --- setup.py record mode --------------------------------------------------------------------

@needs_torch
def test_an_env_switched_extension_exists_only_with_its_switch(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "setup_envswitch")
    off = _run(tree, "setuptools")
    assert off.model is not None, off.fallback
    assert off.model.targets == ()
    assert "PROJECT_CUDA_EXT" in [r.name for r in off.model.env_reads]
    on = _run(tree, "setuptools",
              extra='[[build.env]]\nset = { PROJECT_CUDA_EXT = "1" }\n')
    assert on.model is not None, on.fallback
    (ext,) = on.model.targets
    assert ext.name == "envpkg._cuda"
    unit = on.model.unit("csrc/kernel.cu")
    assert unit is not None and unit.language == "CUDA"
    # The build hook replaced the setup.py's sm_80 with --arch's flags.
    assert unit.arch_flags == ("-gencode=arch=compute_90a,code=sm_90a",)
    assert "ENVPKG_FAST" in unit.defines and "csrc/include" in unit.includes
    assert any("arch=compute_80,code=sm_80" in n for n in on.model.notes)


@needs_torch
def test_setuptools_own_build_ext_is_recorded_not_taken_for_a_build_tool(
        tmp_path: Path) -> None:
    # Plain `Extension`s that setuptools' build_ext compiles with g++: before, record mode
    # stopped at the first compiler command as "setup.py runs its own build tool" and left
    # static reading; now each command is noted and nothing compiles.
    tree = _tree(tmp_path, "setup_plainext")
    outcome = _run(tree, "setuptools")
    assert outcome.model is not None, outcome.fallback
    assert outcome.model.exception is None
    assert sorted(t.name for t in outcome.model.targets) == ["plain_hooks_preload_cu13",
                                                              "plain_hooks_torch_cu13"]
    unit = outcome.model.unit("csrc/hooks.cpp")
    assert unit is not None and unit.language == "CXX"
    assert "-std=c++17" in unit.flags
    assert not list((tmp_path / "work" / "build").rglob("*.o")), "record mode compiled"


@needs_torch
def test_recipe_init_installs_the_top_level_modules_the_record_names(tmp_path: Path) -> None:
    # The static reading computes `plain_hooks_preload` from the f-string; the record, as
    # run, builds `plain_hooks_preload_cu13`: [install] top_level is the record's.
    text, out = _init(tmp_path, "setup_plainext", "sm_90a")
    recipe = parse_recipe(text, out)
    assert recipe.install is not None
    assert recipe.install.top_level == ("plain_hooks_preload_cu13", "plain_hooks_torch_cu13")
    assert "top_level: setup.py (record) builds plain_hooks_preload_cu13" in text


@needs_torch
def test_a_run_time_load_named_in_jit_is_recorded_as_an_extension(tmp_path: Path) -> None:
    # jitpkg/kern.py calls load() as it is imported; with it in `[build] jit` the record
    # (setup.cfg only: setuptools' own stand-in setup.py) builds it as `jitpkg.jitkern`,
    # with load()'s flags and --arch's, and kern.cu compiled through a file of its own
    # (kern.cpp and kern.cu would both be kern.o).
    tree = _tree(tmp_path, "setup_jit")
    outcome = _run(tree, "setuptools", extra='jit = ["jitpkg/kern.py"]\n')
    assert outcome.model is not None, outcome.fallback
    assert outcome.model.exception is None
    (target,) = outcome.model.targets
    assert target.name == "jitpkg.jitkern"
    cpp = outcome.model.unit("jitpkg/csrc/kern.cpp")
    assert cpp is not None and "TORCH_EXTENSION_NAME=jitkern" in cpp.defines
    (cuda,) = [u for u in target.sources if u.language == "CUDA"]
    assert cuda.path.endswith("flashbuild-jit/jitkern/1/kern.cuda.cu")
    assert cuda.arch_flags == ("-gencode=arch=compute_90a,code=sm_90a",)
    assert "JITKERN_FAST" in cuda.defines
    assert any(i.endswith("jitpkg/csrc") for i in cuda.includes)
    # Without `jit`, the same tree builds nothing.
    plain = _run(_tree(tmp_path / "plain", "setup_jit"), "setuptools")
    assert plain.model is not None and plain.model.targets == ()


@needs_torch
def test_recipe_init_drafts_a_run_time_load_to_be_built_ahead_of_time(tmp_path: Path) -> None:
    text, out = _init(tmp_path, "setup_jit", "sm_90a")
    recipe = parse_recipe(text, out)
    assert recipe.build.backend == "setuptools"
    assert recipe.build.jit == ("jitpkg/kern.py",)
    assert recipe.install is not None and recipe.install.package == "jitpkg"
    assert recipe.verify.exports == ("jitkern.scale",)
    assert "compiles its kernels at run time" not in text  # no run-time-only TODO


def _cpu_torch() -> bool:
    """Whether the torch here is a CPU-only build (read from its version.py, not imported)."""

    from flashbuild.detect.pyenv import parse_torch_version_file

    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    fields = parse_torch_version_file(
        (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8"))
    return not fields.get("cuda")




@needs_torch
def test_a_setup_py_that_builds_only_for_a_cuda_torch_is_recorded_as_the_build_runs(
        tmp_path: Path) -> None:
    """A setup.py that tests for a CUDA torch (`'cu' in torch.__version__`,
    `torch.version.cuda.split`) records its extension here too: a CPU-only torch is shown as
    the CUDA build a real build needs, and the model says so. Its bindings unit includes a
    header only CUDA builds of torch ship: it is stubbed, and the names are read."""
    tree = _tree(tmp_path, "setup_cudatorch")
    outcome = _run(tree, "setuptools")
    assert outcome.model is not None, outcome.fallback
    assert outcome.model.exception is None
    (ext,) = outcome.model.targets
    assert ext.name == "cudapkg._cuda"
    assert {u.path for u in ext.sources} == {"csrc/bindings.cpp", "csrc/kernel.cu"}
    (bound,) = outcome.model.bindings
    assert bound.names == ("scale",), bound.error
    shown = [n for n in outcome.model.notes if "CPU-only build" in n]
    if _cpu_torch():
        assert shown and "+cu" in shown[0], outcome.model.notes
        assert "c10/cuda/impl/cuda_cmake_macros.h" in bound.stubbed
    else:
        assert not shown


@needs_torch
def test_a_setup_py_that_needs_a_real_cuda_torch_is_recorded_with_the_one_here(
        tmp_path: Path) -> None:
    """Shown a CUDA torch, this setup.py calls what only a real one has and raises; the record
    is taken again with the CPU-only torch as it is, which gets through, and says why."""
    tree = _tree(tmp_path, "setup_cudainternals")
    outcome = _run(tree, "setuptools")
    assert outcome.model is not None, outcome.fallback
    assert outcome.model.exception is None
    assert [t.name for t in outcome.model.targets] == ["internals_cuda"]
    if _cpu_torch():
        (note,) = [n for n in outcome.model.notes if "recorded with the CPU-only" in n]
        assert "_nccl_version" in note and "setup.py:9" in note


@needs_torch
def test_a_setup_py_that_runs_cmake_itself_is_read_through_that_configure(
        tmp_path: Path) -> None:
    """natten's shape: setup.py's build_ext runs `cmake <csrc>` then `cmake --build`. The
    configure runs with File API queries in its build folder; `cmake --build` is where
    record mode stops; the model is that configure's targets. Nothing is compiled."""
    tree = _tree(tmp_path, "setup_owncmake")
    outcome = _run(tree, "setuptools",
                   extra='[[build.env]]\nset = { OWNPKG_CUDA_ARCH = "{arch_dotted}" }\n')
    assert outcome.model is not None, outcome.fallback
    model = outcome.model
    assert model.system == "setuptools" and "the CMake configure it runs" in model.via
    assert [t.name for t in model.targets if t.name == "_own"] == ["_own"]
    unit = model.unit("csrc/kern.cu")
    assert unit is not None and unit.language == "CUDA" and "OWN_FAST=1" in unit.defines
    assert any("sm_90" in f for f in unit.arch_flags), unit.arch_flags
    assert any("cmake --build" in n for n in model.notes), model.notes
    # The setup.py configured in a `tempfile` folder: it was inside the build root.
    assert list((tmp_path / "work" / "build").rglob("ownpkg-*")), "TMPDIR was not contained"
    # (CMake's own compiler checks compile in CMakeFiles/ during any configure.)
    assert not [p for p in tmp_path.rglob("*") if (p.suffix in (".o", ".so")
                and "CMakeFiles" not in p.parts[:-1]) or p.name == "kern.cu.o"], \
        "record mode compiled something"


@needs_torch
def test_recipe_init_sets_the_arch_variable_a_setup_py_reads(tmp_path: Path) -> None:
    text, out = _init(tmp_path, "setup_owncmake", "sm_90a")
    recipe = parse_recipe(text, out)
    # `9.0` and `90` turn the build on for sm_90, not sm_90a: the spelling that asks for
    # --arch's SASS is the one drafted.
    assert [dict(t.set) for t in recipe.build.env if "OWNPKG_CUDA_ARCH" in t.set] == [
        {"OWNPKG_CUDA_ARCH": "{arch_codes}"}]
    assert "OWNPKG_CUDA_ARCH=90a builds _own" in text


@needs_torch
def test_recipe_init_steers_a_setup_py_whose_own_build_picks_another_arch(
        tmp_path: Path) -> None:
    """As recorded, the CMake configure the setup.py runs compiles for sm_80 (its default);
    the draft sets the arch variable it reads so that the record asks for --arch's: `9.0`
    and `90` give sm_90 (the tree pastes the number into CMAKE_CUDA_ARCHITECTURES), `90a`
    gives sm_90a."""
    text, out = _init(tmp_path, "setup_ownarch", "sm_90a")
    recipe = parse_recipe(text, out)
    assert [dict(t.set) for t in recipe.build.env if "OWNPKG_CUDA_ARCH" in t.set] == [
        {"OWNPKG_CUDA_ARCH": "{arch_codes}"}]
    assert "as run it compiled for sm_80" in text and "TODO: [build]" not in text


@needs_torch
def test_a_setup_py_that_runs_a_build_tool_itself_falls_back_before_it_compiles(
        tmp_path: Path) -> None:
    tree = _tree(tmp_path, "setup_ownninja")
    outcome = _run(tree, "setuptools")
    assert outcome.model is None
    assert "runs its own build tool (ninja -v, setup.py:12)" in outcome.fallback
    assert not list(tmp_path.rglob("k.o")), "record mode ran ninja"


@needs_torch
def test_a_build_without_ninja_is_recorded_and_compiles_nothing(tmp_path: Path) -> None:
    """BuildExtension(use_ninja=False) compiles through setuptools' compiler object: record
    mode takes each command there (the .cu one with --arch's flags) and runs none."""
    tree = _tree(tmp_path, "setup_noninja")
    outcome = _run(tree, "setuptools")
    assert outcome.model is not None, outcome.fallback
    cu = outcome.model.unit("csrc/k.cu")
    cpp = outcome.model.unit("csrc/bind.cpp")
    assert cu is not None and cpp is not None
    assert cu.arch_flags == ("-gencode=arch=compute_90a,code=sm_90a",), cu.arch_flags
    assert not list(tmp_path.rglob("*.o")), "record mode compiled something"


@needs_torch
def test_a_setup_py_that_raises_is_recorded_with_its_line(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "setup_allowlist")
    outcome = _run(tree, "setuptools", arch="sm_120")
    assert outcome.model is not None, outcome.fallback
    exc = outcome.model.exception
    assert exc is not None and exc.type == "RuntimeError"
    assert "unsupported arch 12.0" in exc.message and exc.where == "setup.py:10"


@needs_torch
def test_a_setup_py_that_hangs_is_stopped(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "setup_hang")
    outcome = _run(tree, "setuptools", timeout=8)
    assert outcome.model is None
    assert "did not finish within 8 s" in outcome.fallback


@needs_torch
def test_a_setup_py_whose_daemon_holds_the_output_falls_back_in_bounded_time(
        tmp_path: Path) -> None:
    """The daemon (a session of its own) outlives the timeout's kill of the tree and keeps the
    output pipe open: the record stops PIPE_GRACE_S after the kill, and the one fallback line
    names the daemon (before, the line said every process was ended)."""
    tree = _tree(tmp_path, "setup_daemon")
    if platforms.current().containment().namespaces:
        # In a PID namespace the daemon ends with setup.py (its pid there is not the host's).
        start = time.monotonic()
        outcome = _run(tree, "setuptools", timeout=8)
        assert outcome.model is None
        assert "did not finish within 8 s" in outcome.fallback
        assert "outside the process tree" not in outcome.fallback
        assert time.monotonic() - start < 20
        return
    try:
        outcome = _run(tree, "setuptools", timeout=8)
        assert outcome.model is None
        (pid_file,) = (tmp_path / "work" / "build").rglob("sleeper.pid")
        assert "did not finish within 8 s" in outcome.fallback
        assert f"pid {int(pid_file.read_text())} (" in outcome.fallback
        assert "outside the process tree" in outcome.fallback
        assert "\n" not in outcome.fallback
    finally:
        for pid_file in (tmp_path / "work" / "build").rglob("sleeper.pid"):
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(int(pid_file.read_text())).kill()


@needs_torch
def test_network_calls_fail_at_once_and_are_reported(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "setup_network")
    outcome = _run(tree, "setuptools", timeout=60)
    assert outcome.model is not None, outcome.fallback
    (call,) = outcome.model.network
    assert call.call == "getaddrinfo" and "example.invalid" in call.target
    assert outcome.model.exception is not None
    assert "refused while flashbuild records" in outcome.model.exception.message
    assert outcome.model.exception.where == "setup.py:7"


# --- recipe init, then build, with no hand edit --------------------------------------------

def test_drafted_targets_and_install_match_what_the_configured_build_produces(
        tmp_path: Path) -> None:
    """`recipe init` then `build` with the draft as written: the drafted targets are the ones
    the build compiles, and the module lands in the drafted [install] package."""
    from typer.testing import CliRunner

    from flashbuild.cli import app

    tree = _tree(tmp_path, "cmake_archvar")
    out = tmp_path / "archvar.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--source", str(tree), "--platform",
                                   "linux", "--arch", "sm_90a", "-o", str(out)])
    assert res.exit_code == 0, res.output
    recipe = parse_recipe(out.read_text(encoding="utf-8"), out)
    assert recipe.build.targets == ("archmod",)
    assert [a.name for a in recipe.artifact] == ["archmod"]
    assert recipe.install is not None and recipe.install.package_dir == "archpkg"
    assert recipe.build.options[0].define == {"MY_ARCH": "{arch_codes}"}
    # archpkg/__init__.py does not import archmod: verify looks the name up on the module.
    assert recipe.verify.exports == ("archmod.scale",)
    res = CliRunner().invoke(app, ["build", "--recipe", str(out), "--source", str(tree),
                                   "--arch", "sm_90a", "--install", "inplace", "-j", "2",
                                   "--json"])
    assert res.exit_code == 0, res.output
    built = sorted(p.name.split(".")[0] for p in (tree / "archpkg").glob("*.so"))
    assert built == ["archmod"]


def _drafted_env(recipe: Recipe) -> list[dict[str, str]]:
    """The [[build.env]] tables a draft set, but the arch list every setup.py draft gets."""
    return [dict(t.set) for t in recipe.build.env if "TORCH_CUDA_ARCH_LIST" not in t.set]


def _init(tmp_path: Path, name: str, arch: str) -> tuple[str, Path]:
    from typer.testing import CliRunner

    from flashbuild.cli import app

    tree = _tree(tmp_path, name)
    before = _snapshot(tree)
    out = tmp_path / f"{name}.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--source", str(tree), "--platform",
                                   "linux", "--arch", arch, "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert _snapshot(tree) == before
    return out.read_text(encoding="utf-8"), out


@needs_torch
def test_recipe_init_drafts_the_switch_that_turns_the_cuda_extension_on(
        tmp_path: Path) -> None:
    text, out = _init(tmp_path, "setup_envswitch", "sm_90a")
    recipe = parse_recipe(text, out)
    assert [dict(t.set) for t in recipe.build.env] == [{"PROJECT_CUDA_EXT": "1"}]
    assert "PROJECT_CUDA_EXT is set (setup.py:8)" in text
    assert recipe.install is not None and recipe.install.package == "envpkg"
    assert recipe.verify.exports == ("_cuda.launch",)


@needs_torch
def test_a_variable_named_for_the_cuda_release_is_drafted_from_the_toolkit(
        tmp_path: Path) -> None:
    # setup.py raises until TKPKG_CUDA_MAJOR is set, and names its extension for it: the
    # draft sets it to `{cuda_major}`, which the build renders from the toolkit it uses.
    text, out = _init(tmp_path, "setup_toolkitmajor", "sm_90a")
    recipe = parse_recipe(text, out)
    assert _drafted_env(recipe) == [{"TKPKG_CUDA_MAJOR": "{cuda_major}"}]
    assert "setup.py raises without TKPKG_CUDA_MAJOR" in text
    assert re.search(r"tkpkg\._cuda_cu1[0-9]", text), text
    # No TODO about it (the fixture's one TODO is FB231: no pyproject.toml declares torch).
    assert "TODO: [build]" not in text and "asks for TKPKG_CUDA_MAJOR" not in text, text


@needs_torch
def test_recipe_init_follows_a_switch_to_the_second_switch_it_makes_setup_py_read(
        tmp_path: Path) -> None:
    # CHAIN_WITH_CUDA=1 alone raises (no FORCE_CUDA): the switch it made the
    # setup.py read next is tried with it, and both are drafted, with the lines that read them.
    text, out = _init(tmp_path, "setup_chainswitch", "sm_90a")
    recipe = parse_recipe(text, out)
    assert _drafted_env(recipe) == [{"CHAIN_WITH_CUDA": "1", "FORCE_CUDA": "1"}]
    assert "CHAIN_WITH_CUDA at setup.py:12, FORCE_CUDA at setup.py:17" in text
    assert "builds chainpkg._cuda" in text


@needs_torch
def test_a_setup_py_that_asks_for_a_gpu_is_answered_for_the_target(tmp_path: Path) -> None:
    # No GPU here: `torch.cuda.is_available()` from the tree's setup.py is answered True and
    # its capability is --arch's, so record mode sees the CUDA extension the target build
    # compiles (torch's own calls still get the real answers).
    text, out = _init(tmp_path, "setup_gpugate", "sm_90a")
    recipe = parse_recipe(text, out)
    assert "setup.py raises" not in text, text
    assert "`gatepkg._cuda` (CUDAExtension, 2 source(s)): built" in text
    assert recipe.install is not None and recipe.install.package == "gatepkg"


@needs_torch
def test_an_extension_static_reading_cannot_name_is_drafted_from_the_record(
        tmp_path: Path) -> None:
    # `extension_type(…)` over globbed sources: static reading names no extension, and the
    # draft had been a CMake one with "no setup.py extension" (exit 4 at build).
    text, out = _init(tmp_path, "setup_unnamedext", "sm_90a")
    recipe = parse_recipe(text, out)
    assert recipe.build.backend == "setuptools"
    assert "builds unpkg.backend (3 sources)" in text, text
    assert recipe.install is not None and recipe.install.package == "unpkg"
    assert "scale_cuda" in " ".join(recipe.verify.exports)


@needs_torch
def test_a_source_the_tree_lacks_is_a_blocking_todo_and_a_generated_one_is_not(
        tmp_path: Path) -> None:
    from flashbuild.pipeline.choose import blocks, parse_todos

    text, out = _init(tmp_path, "setup_missingsrc", "sm_90a")
    todos = [t for t in parse_todos(text) if t.table == "source"]
    assert [t.what for t in todos] == [
        "the tree lacks 1 source file(s) its build compiles: csrc/kernel.cu"], text
    assert "msrcpkg._cuda compiles csrc/kernel.cu" in todos[0].evidence
    # The sdist's PKG-INFO names where its sources live: the Source URL over the Homepage.
    assert "repository (https://github.com/example/msrcpkg) at version 0.3.1" in todos[0].fix
    assert blocks(todos[0], parse_recipe(text, out), installing=False)


@needs_torch
def test_a_file_the_setup_py_opens_and_the_tree_lacks_is_a_blocking_todo(
        tmp_path: Path) -> None:
    from flashbuild.pipeline.choose import blocks, parse_todos

    text, out = _init(tmp_path, "setup_missingfile", "sm_90a")
    todos = [t for t in parse_todos(text) if t.table == "source"]
    # The line is setup.py's own, not the import machinery's frame that raised.
    assert [t.what for t in todos] == [
        "the tree lacks `envs.py`, which setup.py opens as it runs (setup.py:16)"], text
    assert "FileNotFoundError" in todos[0].evidence
    assert "repository" in todos[0].fix and "`envs.py`" in todos[0].fix
    assert blocks(todos[0], parse_recipe(text, out), installing=False)


@needs_torch
def test_recipe_init_drafts_no_environment_a_setup_py_rejects(tmp_path: Path) -> None:
    text, out = _init(tmp_path, "setup_allowlist", "sm_120")
    recipe = parse_recipe(text, out)
    assert recipe.build.env == ()
    # The build sets TORCH_CUDA_ARCH_LIST itself, so the setup.py raises with or without it.
    assert "TODO: [build] setup.py raises when run as the build runs it, with or without" in text
    assert "unsupported arch 12.0: this project builds for 8.0-9.0 only (setup.py:10)" in text


def test_a_cmakelists_too_old_for_cmake_4_is_configured_with_the_policy_it_names(
        tmp_path: Path) -> None:
    cmake_exe = find_tools(ProcessRunner(), dict(os.environ)).cmake  # what introspection runs
    version = subprocess.run([cmake_exe, "--version"], capture_output=True, text=True,
                             check=True).stdout
    major = int(re.search(r"version (\d+)", version)[1])  # type: ignore[index]
    text, _out = _init(tmp_path, "cmake_oldminimum", "sm_90a")
    # Read from the configured build, not statically: the configure ran.
    assert "# build tables: checked against the configured build (CMake File API" in text, text
    drafted = 'define = { CMAKE_POLICY_VERSION_MINIMUM = "3.5" }' in text
    # CMake 3.x configures it as it is; CMake 4 only with the variable its refusal names,
    # which the build then passes too.
    assert drafted == (major >= 4), text
    if drafted:
        assert "CMake refuses `cmake_minimum_required` older than 3.5" in text


def test_a_toolkit_library_variable_left_notfound_gets_a_stand_in(tmp_path: Path) -> None:
    text, _out = _init(tmp_path, "cmake_notfoundlib", "sm_90a")
    # Read from the configured build (the old code fell back to static reading), and the
    # draft says the build itself needs the library.
    assert "# build tables: checked against the configured build (CMake File API" in text, text
    assert 'targets = ["nflib"]' in text
    assert "CUDA::flashbuildabsent not found in the toolkit" in text
    assert "the build itself needs the library: install flashbuildabsent into the toolkit" \
        in text


def test_a_build_missing_a_toolkit_component_says_which_and_how_to_get_it(
        tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flashbuild.cli import app

    tree = _tree(tmp_path, "cmake_archvar")
    recipe = tmp_path / "absent.toml"
    recipe.write_text(
        f'[recipe]\nname = "absent"\n[source]\npath = "{tree}"\n[build]\n'
        'targets = ["archmod"]\n[[build.options]]\n'
        'define = { WITH_ABSENT_LIB = "ON", MY_ARCH = "{arch_codes}" }\n'
        '[[artifact]]\nname = "archmod"\nkind = "module"\ntarget = "archmod"\n'
        '[install]\npackage = "archpkg"\npackage_dir = "archpkg"\n', encoding="utf-8")
    res = CliRunner().invoke(app, ["build", "--recipe", str(recipe), "--source", str(tree),
                                   "--arch", "sm_90a", "--install", "inplace", "--json"])
    assert res.exit_code == 6, res.output
    assert "links CUDA::flashbuild_absent_component, which the toolkit at" in res.output
    assert "install flashbuild_absent_component into the toolkit at" in res.output
    assert "pip install" not in res.output  # no cuda-toolkit extra ships it


def test_a_build_stopped_by_a_findcuda_library_variable_says_which_and_how_to_get_it(
        tmp_path: Path) -> None:
    """libKMCUDA's `CUDA_curand_LIBRARY`, on a toolkit without cuRAND: the build names the
    component and how to get it, as for a CUDA:: target, not "read the first error"."""
    from typer.testing import CliRunner

    from flashbuild.cli import app

    tree = _tree(tmp_path, "cmake_notfoundlib")
    recipe = tmp_path / "nf.toml"
    recipe.write_text(
        f'[recipe]\nname = "nf"\n[source]\npath = "{tree}"\n[build]\ntargets = ["nflib"]\n'
        '[[artifact]]\nname = "nflib"\nkind = "plugin"\ntarget = "nflib"\n'
        '[install]\npackage = "nfpkg"\npackage_dir = "nfpkg"\n', encoding="utf-8")
    res = CliRunner().invoke(app, ["build", "--recipe", str(recipe), "--source", str(tree),
                                   "--arch", "sm_90a", "--install", "none", "--json"])
    assert res.exit_code == 6, res.output
    assert "links CUDA::flashbuildabsent, which the toolkit at" in res.output
    assert "CMake left CUDA_flashbuildabsent_LIBRARY NOTFOUND" in res.output
    assert "install flashbuildabsent into the toolkit at" in res.output


@needs_torch
def test_a_command_line_switch_is_recorded_and_left_to_a_person(tmp_path: Path) -> None:
    outcome = _run(_tree(tmp_path, "setup_argvswitch"), "setuptools")
    assert outcome.model is not None, outcome.fallback
    assert [(o.name, o.where) for o in outcome.model.argv_options] == [
        ("--cuda_ext", "setup.py:8")]
    text, _out = _init(tmp_path / "init", "setup_argvswitch", "sm_90a")
    assert "looks for command-line options: `--cuda_ext` (setup.py:8)" in text


def test_a_tree_with_no_build_files_is_not_configured(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flashbuild.cli import app

    tree = tmp_path / "work" / "bare"
    tree.mkdir(parents=True)
    (tree / "k.cu").write_text("__global__ void k() {}\n", encoding="utf-8")
    out = tmp_path / "bare.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--source", str(tree), "--platform",
                                   "linux", "--arch", "sm_90a", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "static reading (nothing to configure" in out.read_text(encoding="utf-8")
    assert sorted(p.name for p in tree.parent.iterdir()) == ["bare"]  # no build folder made


def test_arch_flags_from_cuda_architectures_reach_the_model(tmp_path: Path) -> None:
    """The bundled csrc/ sets no gencode itself: CMake derives it from CUDA_ARCHITECTURES,
    and the model says so."""
    tree = tmp_path / "work" / "csrc"
    shutil.copytree(FIXTURES.parents[1].parent / "csrc", tree)
    outcome = _run(tree, "cmake")
    assert outcome.model is not None, outcome.fallback
    unit = outcome.model.unit("kernels/norm.cu")
    assert unit is not None
    assert unit.arch_flags == ("--generate-code=arch=compute_90a,code=[sm_90a]",)
    assert "CUDA_ARCHITECTURES of _C" in unit.origin


def test_an_arch_variable_is_found_even_when_its_default_is_the_target(
        tmp_path: Path) -> None:
    """MY_ARCH defaults to 80, so an sm_80 configure matches without it (as FlashRT's
    nvidia-smi detection does on a GPU machine); it chooses the arch all the same, and the
    draft must set it from --arch."""
    outcome = _run(_tree(tmp_path, "cmake_archvar"), "cmake", arch="sm_80")
    assert outcome.model is not None, outcome.fallback
    var = outcome.model.arch_variable
    assert var is not None and (var.name, var.form, var.value) == ("MY_ARCH", "arch_numbers",
                                                                   "80")


def test_recipe_init_drafts_the_edit_that_makes_a_literal_arch_list_read_the_flag(
        tmp_path: Path) -> None:
    """recipe init tries the edit on a copy, configures it again and drafts the step only
    because that configure compiles for --arch (the tree itself is never touched)."""
    text, out = _init(tmp_path, "cmake_literalarchs", "sm_90")
    recipe = parse_recipe(text, out)
    (step,) = [p for p in recipe.patch if p.id == "arch-from-flag"]
    assert step.transform == "replace-block"
    assert step.params.anchor == 'CUDA_ARCHITECTURES "75;80")'  # type: ignore[attr-defined]
    assert step.params.block == (  # type: ignore[attr-defined]
        'CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")')
    assert "Proven: configured again with this edit, it compiles for sm_90" in " ".join(
        line.removeprefix("# ") for line in text.splitlines())
    # The step applies as drafted, and the arch check's fix names the same line.
    import subprocess
    import sys

    from flashbuild.building.backends.cmake import arch_fix

    tree = out.parent / "work" / "cmake_literalarchs"
    assert "CMakeLists.txt:8 writes its own arch list" in arch_fix([], tree)
    done = subprocess.run([sys.executable, "-m", "flashbuild", "patch", str(tree), "--recipe",
                           str(out), "--platform", "linux", "--arch", "sm_90"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (tree / "CMakeLists.txt").read_text(encoding="utf-8").splitlines()
    assert lines[7].strip() == 'CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")'


def test_a_shared_library_that_defines_its_python_init_is_a_top_level_module(
        tmp_path: Path) -> None:
    """libKMCUDA's shape: `add_library(kmc SHARED …)` makes libkmc.so, whose python.cc defines
    PyInit_libkmc: a module Python imports as `libkmc`, not a plugin some package loads."""
    text, out = _init(tmp_path, "cmake_capimodule", "sm_90a")
    recipe = parse_recipe(text, out)
    assert [(a.name, a.kind, a.target) for a in recipe.artifact] == [("libkmc", "module", "kmc")]
    assert recipe.install is not None and recipe.install.top_level == ("libkmc",), text
    assert "TODO: [install]" not in text


def test_a_cmake_backend_left_at_cpu_is_switched_to_cuda_and_drafted(tmp_path: Path) -> None:
    """As written the project configures its CPU backend (no CUDA unit): the cache variable
    whose STRINGS offer CUDA is tried, and the configure with it compiles kern.cu for sm_90a."""
    text, out = _init(tmp_path, "cmake_backendswitch", "sm_90a")
    recipe = parse_recipe(text, out)
    assert [dict(o.define) for o in recipe.build.options] == [{"BSW_BACKEND": "CUDA"}], text
    assert "BSW_BACKEND: the CUDA backend (CMakeLists.txt:6)" in text
    assert "# build tables: checked against the configured build (CMake File API" in text


@needs_torch
def test_a_switch_whose_setup_py_cannot_read_a_suffixed_arch_list_gets_the_plain_one(
        tmp_path: Path) -> None:
    # PARSE_BUILD_OPS=1 reaches the tree's int() on TORCH_CUDA_ARCH_LIST: `9.0a` raises
    # (deepspeed 0.19.8's op builders, `'0a'`), `9.0` runs. The plain spelling is drafted with
    # the exception as its reason, and the switch with it; the hook's -gencode still says 90a.
    text, out = _init(tmp_path, "setup_archparse", "sm_90a")
    recipe = parse_recipe(text, out)
    assert [dict(t.set) for t in recipe.build.env] == [
        {"TORCH_CUDA_ARCH_LIST": "{arch_dotted}"}, {"PARSE_BUILD_OPS": "1"}], text
    assert "refuses 9.0a (ValueError at setup.py:14: invalid literal for int() with base 10: " \
        "'0a'); with 9.0 it runs" in text
    assert "builds parsepkg._ops" in text
    assert "replaces the setup.py's own arch flags (-gencode=arch=compute_90,code=sm_90)" \
        in text
