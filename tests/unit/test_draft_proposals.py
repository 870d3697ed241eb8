"""Typed findings and the fix as a step (issue 18 item 5): the checks fill `Finding.facts` and
propose the step (`Fix.step`); recipe init merges the proposals, keeping the arch's suffix."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from typer.testing import CliRunner

from flashbuild.arch import Arch, Suffix
from flashbuild.cli import app
from flashbuild.recipes.load import parse_recipe
from flashbuild.scanning.draft import draft_recipe, render
from flashbuild.scanning.facts import ArchBranchFacts, InstructionFacts, SharedMemoryFacts
from flashbuild.scanning.findings import (
    Category,
    Finding,
    Fix,
    ScanOptions,
    ScanResult,
    Severity,
    make_target,
)
from flashbuild.scanning.proposals import (
    ExcludeSources,
    GuardInstantiation,
    NoStepNeeded,
    NvccAppendFlag,
    WidenArchCondition,
    nvcc_append_flags,
)
from flashbuild.scanning.scan import scan_tree

ROOT = Path(__file__).resolve().parents[2]
STATIC = ScanOptions(static=True, jobs=1)

KERNEL = ('__global__ void {name}() {{\n'
          '  asm volatile("wgmma.fence.sync.aligned;");\n'
          '}}\n')
BRANCH = ("#if __CUDA_ARCH__ == 1000\n"
          "#define FAST 1\n"
          "#endif\n"
          "__global__ void k() {}\n")
TRAITS = ("template <int Arch>\n"
          "struct Traits {\n"
          "  static constexpr int kSmemBytes = 160 * 1024;\n"
          "};\n"
          "\n"
          "__global__ void k() { extern __shared__ char s[]; }\n")


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _scan(root: Path, platform: str, arch: str) -> ScanResult:
    return scan_tree(root, make_target(platform, arch), STATIC)


def _finding(rule: str, path: str, fix: Fix, severity: Severity = Severity.ERROR) -> Finding:
    return Finding(rule=rule, category=Category.ARCH_INSTRUCTIONS, path=path, line=1, col=1,
                   severity=severity, message="m", evidence="e", snippet="s", fix=fix)


def _draft(findings: list[Finding], arch: str = "sm120") -> ScanResult:
    return ScanResult(root=Path("/nonexistent"), target=make_target("windows", arch),
                      findings=tuple(findings), skipped=(), files_scanned=1, seconds=0.0)


# --- facts: typed, and the arch keeps its suffix ----------------------------------------------

def test_instruction_facts_keep_the_arch_suffix(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"a.cu": KERNEL.format(name="a")})
    found = [f for f in _scan(root, "linux", "sm_100f").findings
             if isinstance(f.facts, InstructionFacts)]
    assert [(f.rule, f.facts.instruction, f.facts.arch) for f in found
            if isinstance(f.facts, InstructionFacts)] == [
        ("FB160", "wgmma", Arch(10, 0, Suffix.FAMILY))]


def test_branch_facts_keep_the_arch_suffix(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"b.cu": BRANCH})
    facts = [f.facts for f in _scan(root, "linux", "sm_120a").findings if f.rule == "FB151"]
    assert facts == [ArchBranchFacts(arch=Arch(12, 0, Suffix.ARCH), directives=("if",),
                                     ladder=("FAST",))]


# --- proposals → steps ------------------------------------------------------------------------

def test_exclusions_of_one_arch_merge_into_one_step_named_with_its_suffix(
        tmp_path: Path) -> None:
    root = _tree(tmp_path, {"b.cu": KERNEL.format(name="b"), "a.cu": KERNEL.format(name="a"),
                            "inc/w.cuh": "__device__ void w() { asm volatile(\"wgmma.x;\"); }\n"})
    result = _scan(root, "linux", "sm_100f")
    d = draft_recipe(result, name="t", source_path="tree")
    assert [(s.id, s.transform, s.params, s.when) for s in d.steps] == [
        ("exclude-for-sm100f", "exclude-sources", {"globs": ["a.cu", "b.cu"]},
         {"arch": ["sm_100f"]})]
    assert "Sources using instructions sm_100f lacks (scan FB160)" in render(d)


def test_a_header_is_refused_and_a_note_proposes_nothing() -> None:
    arch = Arch(12, 0)
    header = _finding("FB160", "k.cuh", Fix(step=ExcludeSources(
        file="k.cuh", arch=arch, refusal="a header: excluding it changes nothing")))
    note = _finding("FB160", "n.cu", Fix(manual="none if X is off",
                                         step=ExcludeSources(file="n.cu", arch=arch)),
                    Severity.NOTE)
    d = draft_recipe(_draft([header, note]), name="t", source_path="tree")
    assert d.steps == [] and d.todos == [] and d.handled == []
    assert d.refused == [(header, "a header: excluding it changes nothing")]


def test_an_arch_ladder_is_refused_and_a_plain_branch_is_widened_for_the_suffixed_arch(
        tmp_path: Path) -> None:
    root = _tree(tmp_path, {"ladder.cu": BRANCH,
                            "plain.cu": BRANCH.replace("#define FAST 1\n", "int fast = 1;\n")})
    d = draft_recipe(_scan(root, "linux", "sm_120a"), name="t", source_path="tree")
    assert [(s.id, s.when, s.params["find"]) for s in d.steps] == [
        ("plain-120a-equality-1", {"arch": ["sm_120a"]}, "__CUDA_ARCH__ == 1000")]
    assert [(f.path, why.split(":")[0]) for f, why in d.refused] == [
        ("ladder.cu", "arch-detection ladder")]


def test_traits_derived_for_the_suffixed_arch(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"t.cu": TRAITS})
    result = _scan(root, "linux", "sm_120a")
    smem = [f for f in result.findings if isinstance(f.facts, SharedMemoryFacts)]
    assert [f.facts.arch for f in smem if isinstance(f.facts, SharedMemoryFacts)] == [
        Arch(12, 0, Suffix.ARCH)]
    d = draft_recipe(result, name="t", source_path="tree")
    [step] = d.steps
    assert (step.id, step.transform, step.when) == ("sm120a-traits", "insert-block",
                                                    {"arch": ["sm_120a"]})
    assert "struct Traits<1200>" in step.params["block"]
    assert "kSmemBytes = 99 * 1024;" in step.params["block"]
    # The anchor: the first non-blank line after the primary template.
    assert step.params["anchor"] == "__global__ void k() { extern __shared__ char s[]; }"


def test_instantiation_proposals_merge_into_one_step_and_name_it_for_the_kept_ones() -> None:
    def site(path: str, kind: Literal["kernel", "host", "kept"]) -> Finding:
        return _finding("FB140", path, Fix(step=GuardInstantiation(file=path, site=kind)))

    kept = site("c.cu", "kept")
    d = draft_recipe(_draft([site("b.cu", "kernel"), site("a.cu", "host"), kept,
                             site("b.cu", "kernel")]), name="t", source_path="tree")
    [step] = d.steps
    assert (step.id, step.params, step.when) == (
        "msvc-instantiations", {"files": ["a.cu", "b.cu"], "mode": "guard"},
        {"platform": ["windows"]})
    assert step.comment.startswith("2 kernel and 1 host instantiation sites; 1 host")
    assert d.handled == [(kept, "kept by the explicit-instantiations step")]


def test_kinds_land_in_rank_order_and_fixes_without_a_proposal_are_todos_last() -> None:
    plain = _finding("FB110", "a.cu", Fix(manual="remove it"))
    build = _finding("FB222", "setup.py", Fix(step=NoStepNeeded(stage="build", reason="b")))
    install = _finding("FB181", "z/__init__.py",
                       Fix(step=NoStepNeeded(stage="install", reason="i")))
    widen = _finding("FB151", "w.cu", Fix(step=WidenArchCondition(
        file="w.cu", arch=Arch(12, 0), kind="range", summary="s")))
    d = draft_recipe(_draft([plain, build, install, widen]), name="t", source_path="tree")
    assert d.handled == [(install, "i"), (build, "b")]
    assert d.todos == [widen, plain]


def test_nvcc_flags_come_in_one_order_whatever_the_findings_order() -> None:
    use_cuda = _finding("FB210", "a.cu", Fix(env=NvccAppendFlag(flag="-DUSE_CUDA")))
    zc = _finding("FB200", "setup.py",
                  Fix(env=NvccAppendFlag(flag="-Xcompiler /Zc:preprocessor")))
    assert nvcc_append_flags([use_cuda, zc, use_cuda]) == [
        "-Xcompiler /Zc:preprocessor", "-DUSE_CUDA"]


def test_csrc_draft_for_a_suffixed_arch_keeps_the_suffix_and_loads(tmp_path: Path) -> None:
    out = tmp_path / "recipe.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(ROOT / "csrc"),
                                   "--static", "--platform", "windows", "--arch", "sm_120a",
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    recipe = parse_recipe(out.read_text(encoding="utf-8"), out)
    by_id = {s.id: s for s in recipe.patch}
    assert by_id["sm120a-traits"].when.arch == ("sm_120a",)
    assert "sm_120a allows" in by_id["sm120a-traits"].params.block
    assert {s.when.arch for s in recipe.patch if s.transform == "macro-edit"} == {("sm_120a",)}


# --- step ids: unique across the draft --------------------------------------------------------

DISPATCH = ("#include <torch/extension.h>\n"
            "void run(at::Tensor x) {\n"
            '  AT_DISPATCH_FLOATING_TYPES(x.type(), "run", [&] { });\n'
            "}\n")
TORCH_CXX17 = ("cmake_minimum_required(VERSION 3.18)\nproject(m LANGUAGES CXX)\n"
               "find_package(Torch CONFIG REQUIRED)\nset(CMAKE_CXX_STANDARD 17)\n")


def test_steps_that_would_share_an_id_each_keep_their_edit(tmp_path: Path) -> None:
    """Two files of one basename with the same line (a/ops.cu, b/ops.cu), and two
    CMakeLists.txt that pin C++17: each file's edit is a step of its own, under an id no other
    step has, and each finding names a step the draft keeps."""
    root = _tree(tmp_path, {"a/ops.cu": DISPATCH, "b/ops.cu": DISPATCH,
                            "CMakeLists.txt": TORCH_CXX17 + "add_subdirectory(sub)\n",
                            "sub/CMakeLists.txt": TORCH_CXX17})
    d = draft_recipe(_scan(root, "linux", "sm_90a"), name="t", source_path="tree")
    ids = [s.id for s in d.steps]
    assert len(ids) == len(set(ids)), ids
    edited = sorted((s.transform, s.params["file"]) for s in d.steps)
    assert edited == [("replace-block", "CMakeLists.txt"), ("replace-block", "a/ops.cu"),
                      ("replace-block", "b/ops.cu"), ("replace-block", "sub/CMakeLists.txt")]
    drafted = {(f.rule, f.path) for f, step_ids in d.drafted if set(step_ids) <= set(ids)}
    assert {("FB124", "a/ops.cu"), ("FB124", "b/ops.cu"), ("FB195", "CMakeLists.txt"),
            ("FB195", "sub/CMakeLists.txt")} <= drafted
    # The rendered recipe loads: ids unique there too.
    parse_recipe(render(d), Path("recipe.toml"))
