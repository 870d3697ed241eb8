"""Edits no transform may make (issue 30): split a backslash-continued `#define`, take a device
symbol from one unit that another unit links against, route a target into a branch that only
traps. Each refused site is reported with why, and left as it is."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild import buildsystems
from flashbuild.cli import app
from flashbuild.patching.engine import PatchReport, StepReport
from flashbuild.patching.plan import plan_steps
from flashbuild.patching.report import EXPLAIN_WIDTH, explain_lines, step_result
from flashbuild.patching.transforms import registry
from flashbuild.patching.transforms.base import Site, TransformContext, TransformResult
from flashbuild.recipes.load import parse_recipe
from flashbuild.recipes.transforms import (
    ExplicitInstantiationsParams,
    InsertBlockParams,
    MacroEditParams,
    ReplaceBlockParams,
)
from flashbuild.source import cxx, separable
from tests.unit.transform_tree import DictTree

BASE = Path(__file__).resolve().parent.parent / "fixtures" / "transforms"
_CONTINUED = re.compile(r"\\[ \t]*\r?\n")


def _split_lines(text: str) -> list[str]:
    """The lines that follow a backslash-continued line but are not its continuation as
    written before: an inserted directive. A check on the output that needs no parser."""
    lines = text.splitlines(keepends=True)
    return [nxt for line, nxt in itertools.pairwise(lines)
            if _CONTINUED.search(line) and nxt.lstrip().startswith("#")]


# --- 1. no line inserted or removed inside a macro definition ----------------------------


def test_continued_line_reads_the_preprocessors_rule() -> None:
    data = (BASE / "macro_lines" / "inst.cu").read_bytes()
    assert b"\\ \n" in data  # the fixture's space after a backslash is the point: keep it
    src = cxx.parse(data.decode())
    inside = src.line_start(data.index(b"  template __global__ void k<T>(T*); \\"))
    found = cxx.continued_line(data, inside)
    assert found is not None and (found.directive, found.name) == ("define", "INSTANTIATE")
    assert found.describe() == "the #define INSTANTIATE (lines 5-7)"
    spaced = src.line_start(data.rindex(b"  template __global__ void k<T>(T*);"))
    assert cxx.continued_line(data, spaced).name == "INSTANTIATE_SPACED"  # type: ignore[union-attr]
    after = src.line_start(data.index(b"INSTANTIATE(float)"))
    assert cxx.continued_line(data, 0, after) is None


@pytest.mark.parametrize("mode", ["guard", "remove"])
def test_instantiation_inside_a_define_is_refused_not_split(mode: str) -> None:
    tree = DictTree.from_dir(BASE / "macro_lines")
    ctx = TransformContext(platform="windows", archs=("sm_120",), sources=("inst.cu",))
    result = registry()["explicit-instantiations"].apply(
        tree, ExplicitInstantiationsParams(files=("inst.cu",), mode=mode), ctx)
    out = result.changes["inst.cu"]
    assert _split_lines(out) == []
    # The spaced macro's lines are as they were; the well-formed macro's use is guarded.
    spaced = "#define INSTANTIATE_SPACED(T) \\ \n  template __global__ void k<T>(T*);\n"
    assert spaced in out
    refused = [s for s in result.sites if s.action == "refused"]
    assert [(s.line, s.kind) for s in refused] == [(14, "kernel-instantiation")]
    assert "the #define INSTANTIATE_SPACED (lines 13-14)" in refused[0].note
    if mode == "guard":
        assert "#if !defined(_MSC_VER)\nINSTANTIATE(float)\n#endif\n" in out


def test_insert_and_replace_block_refuse_an_anchor_inside_a_define() -> None:
    tree = DictTree.from_dir(BASE / "macro_lines")
    ctx = TransformContext(platform="linux", archs=("sm_120",))
    for where in ("before", "after"):
        result = registry()["insert-block"].apply(tree, InsertBlockParams(
            file="traits.h", anchor=r".*traits anchor.*", anchor_regex=True, where=where,
            block="  X(sm120, 101376) \\\n"), ctx)
        assert result.changes == {}, where
        assert [s.action for s in result.sites] == ["refused"]
        assert "the #define FK_TRAITS (lines 3-6)" in result.sites[0].note
    result = registry()["replace-block"].apply(tree, ReplaceBlockParams(
        file="traits.h", anchor=r".*traits anchor.*", anchor_regex=True, block="// gone\n"),
        ctx)
    assert result.changes == {} and [s.action for s in result.sites] == ["refused"]
    # The line after the macro is a safe anchor: the rule refuses only what splits.
    ok = registry()["insert-block"].apply(tree, InsertBlockParams(
        file="traits.h", anchor="// flashbuild: end of traits", block="// sm_120\n"), ctx)
    assert [s.action for s in ok.sites] == ["edit"] and "traits.h" in ok.changes


def test_macro_edit_refuses_a_line_break_without_a_backslash() -> None:
    tree = DictTree({"a.h": "#define LIST(X) \\\n  X(1) X(2)\n"})
    ctx = TransformContext(platform="linux", archs=())
    result = registry()["macro-edit"].apply(tree, MacroEditParams(
        files=("a.h",), find="X(2)", replace="X(2)\n  X(3)", directives=("define-function",)),
        ctx)
    assert result.changes == {} and result.sites[0].action == "refused"
    ok = registry()["macro-edit"].apply(tree, MacroEditParams(
        files=("a.h",), find="X(2)", replace="X(2) \\\n  X(3)",
        directives=("define-function",)), ctx)
    assert ok.sites[0].action == "edit"


# --- 2. separable compilation: a device symbol another unit links against stays ----------

_RECIPE = """
[recipe]
name = "sep"
[source]
path = "."
sources = ["**/*.cu"]
[[patch]]
id = "guard"
transform = "explicit-instantiations"
params = { files = ["csrc/kern.cu"], mode = "guard" }
[[patch]]
id = "drop-sm90"
transform = "exclude-sources"
params = { globs = ["csrc/sm90.cu"] }
"""


def _plan(root: Path, extra: str = "") -> list[tuple[dict[str, str], int, tuple[str, ...]]]:
    recipe = parse_recipe(_RECIPE + extra, root / "recipe.toml")
    return list(plan_steps(recipe, root, "windows", ("sm_120",)))


def test_separable_build_refuses_to_guard_or_drop_what_another_unit_uses() -> None:
    (guard_changes, guard_sites, guard_refused), (drop_changes, drop_sites, drop_refused) = \
        _plan(BASE / "separable")
    assert guard_changes == {} and guard_sites == 1
    assert len(guard_refused) == 1
    why = guard_refused[0]
    assert why.startswith("csrc/kern.cu:3: kernel scale_kernel is referenced from "
                          "csrc/launch.cu:4")
    assert "csrc/CMakeLists.txt:3" in why and "CUDA_SEPARABLE_COMPILATION ON" in why
    assert drop_changes == {} and drop_sites == 1
    assert drop_refused[0].startswith("csrc/sm90.cu:1: sm90_fast_exp (defined here, line 1) "
                                      "is referenced from csrc/launch.cu:3")


def test_whole_program_build_still_guards_and_drops(tmp_path: Path) -> None:
    # The same tree without the property: each unit's device code is complete in its object,
    # so the kernel instantiation is guarded and the source left out, as before.
    for path in (BASE / "separable").rglob("*"):
        if path.is_file():
            dest = tmp_path / path.relative_to(BASE / "separable")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(path.read_text().replace(
                "CUDA_SEPARABLE_COMPILATION ON", "CUDA_SEPARABLE_COMPILATION OFF"))
    (guard, _n, refused), (_drop, _m, drop_refused) = _plan(tmp_path)
    assert refused == () and drop_refused == ()
    assert "#if !defined(_MSC_VER)\ntemplate __global__" in guard["csrc/kern.cu"]


def test_separable_evidence_sources() -> None:
    assert separable.rdc_flag(["-O3", "-rdc=true"]) == "-rdc=true"
    assert separable.rdc_flag(["--relocatable-device-code", "true"]) == \
        "--relocatable-device-code true"
    assert separable.rdc_flag(["-dc", "-rdc=false"]) == ""
    assert separable.from_settings([("env", "NVCC_APPEND_FLAGS=-rdc=true")])
    assert separable.from_settings([("opt", "CMAKE_CUDA_SEPARABLE_COMPILATION=ON")])
    assert not separable.from_settings([("opt", "CMAKE_CUDA_SEPARABLE_COMPILATION=OFF")])
    assert separable.from_text("setup.py", "nvcc = ['-O3', '-dc']\n") == \
        "setup.py:1: nvcc = ['-O3', '-dc']"
    assert separable.from_text("CMakeLists.txt", "# CUDA_SEPARABLE_COMPILATION ON\n") == ""
    # Only what the build reads: a vendored CMakeLists no add_subdirectory reaches (FlashMLA's
    # csrc/cutlass turns it on for its own tests) does not count.
    files = {"CMakeLists.txt": "project(t)\ninclude(cmake/flags.cmake)\n",
             "cmake/flags.cmake": "set(X 1)\n",
             "third_party/cutlass/CMakeLists.txt": "set(CMAKE_CUDA_SEPARABLE_COMPILATION ON)\n"}
    assert separable.from_tree(buildsystems.get("cmake"), ".", files.get) == ""
    files["cmake/flags.cmake"] = "add_subdirectory(../third_party/cutlass)\n"
    assert separable.from_tree(buildsystems.get("cmake"), ".", files.get) == \
        "third_party/cutlass/CMakeLists.txt:1: set(CMAKE_CUDA_SEPARABLE_COMPILATION ON)"
    files["CMakeLists.txt"] = "add_subdirectory(../../outside)\n"
    assert separable.from_tree(buildsystems.get("cmake"), ".", files.get) == ""


# --- 3. no edit routes the target into a branch that only traps --------------------------


def _widen(files: tuple[str, ...], directives: tuple[str, ...]) -> TransformResult:
    tree = DictTree.from_dir(BASE / "trap_ladder")
    ctx = TransformContext(platform="linux", archs=("sm_120",), sources=tuple(tree.files))
    return registry()["macro-edit"].apply(tree, MacroEditParams(
        files=files, find="__CUDA_ARCH__ == 1000",
        replace="__CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1200",
        directives=directives), ctx)  # type: ignore[arg-type]


def test_widening_a_define_into_a_trap_branch_is_refused() -> None:
    result = _widen(("gate.h",), ("define",))
    assert result.changes == {}
    [site] = result.sites
    assert site.action == "refused"
    assert "routes sm_120 into" in site.note and "tile.cu:4 (through TL_IS_SM100)" in site.note
    assert "only `__trap();` (line 5)" in site.note


def test_widening_a_ladder_refuses_the_trap_branch_and_edits_the_real_one() -> None:
    result = _widen(("tile.cu",), ("if", "elif"))
    assert [(s.line, s.action) for s in result.sites] == [(13, "refused"), (22, "edit")]
    assert 'only `asm volatile("trap;");` (line 14)' in result.sites[0].note
    out = result.changes["tile.cu"]
    assert out.count("__CUDA_ARCH__ == 1200") == 1
    assert "== 1000 || __CUDA_ARCH__ == 1200\n  out[0] = 3.0f;" in out


def test_the_csrc_widening_still_applies() -> None:
    # csrc's FK_IS_SM100 path has a real body for sm_120: the rule must not refuse it.
    root = Path(__file__).resolve().parents[2] / "csrc"
    tree = DictTree({p: (root / p).read_text() for p in ("arch/sm_gate.h",
                                                          "arch/softmax_tiled.cu")})
    ctx = TransformContext(platform="linux", archs=("sm_120",), sources=tuple(tree.files))
    result = registry()["macro-edit"].apply(tree, MacroEditParams(
        files=("arch/sm_gate.h",), find="__CUDA_ARCH__ == 1000",
        replace="__CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1200", directives=("define",)),
        ctx)
    assert [s.action for s in result.sites] == ["edit"]


def test_recipe_init_drafts_no_widening_into_a_trap(tmp_path: Path) -> None:
    # The scan proposes widening each `== 1000` it finds (FB151); planning the draft with the
    # transform refuses the two that would trap on sm_120, and the draft says so.
    out = tmp_path / "recipe.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source",
                                   str(BASE / "trap_ladder"), "--static", "--platform",
                                   "linux", "--arch", "sm120", "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    recipe = parse_recipe(text, out)
    assert [s.params.files for s in recipe.patch] == [("tile.cu",)]  # gate.h's step left out
    assert "# REFUSED (left as it is): tile.cu:13: routes sm_120 into" in text
    assert "#   refused gate.h:3: routes sm_120 into" in text


def test_a_refused_site_is_in_the_explain_summary_without_verbose() -> None:
    why = ("inside the #define INSTANTIATE (lines 4-6): a line inserted or removed here "
           "would split it")
    step = StepReport(id="msvc-instantiations", description="", kind="transform",
                      matched=True, reason="platform windows is in windows", clauses=(),
                      files=("a.cu",), sites=(
                          Site("a.cu", 2, "kernel-instantiation", "edit"),
                          Site("a.cu", 5, "kernel-instantiation", "refused", note=why)))
    assert step_result(step) == "1 file, 1 edited, 1 refused"
    report = PatchReport(recipe="r", tree=Path("."), context={}, steps=(step,),
                         files_changed=(), files_written=(), build_excludes=(), dry_run=True)
    lines = explain_lines(report)
    assert all(len(line) <= EXPLAIN_WIDTH for line in lines)
    text = " ".join(" ".join(lines).split())
    assert f"refused a.cu:5 kernel-instantiation: {why}" in text
    assert "edit a.cu:2" not in text  # the other sites stay behind -v
