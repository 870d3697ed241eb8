"""FB119 (CUB's `debug_synchronous` argument) and FB124 (`AT_DISPATCH_*(x.type(), …)`) on the
smallest trees that show how their edits are drafted: a one-line call repeated word for word
is one step that expects each line, and a dispatch whose first argument is on the next line
is found and edited on that line."""

from __future__ import annotations

from pathlib import Path

from flashbuild.scanning.draft import draft_recipe
from flashbuild.scanning.findings import ScanOptions, ScanResult, make_target
from flashbuild.scanning.scan import scan_tree

STATIC = ScanOptions(static=True, jobs=1)

TWICE = """\
#include <cub/cub.cuh>

void twice(void* temp, size_t& bytes, const float* in, float* out, int n, cudaStream_t s) {
  if (n > 1024) {
    cub::DeviceReduce::Max(temp, bytes, in, out, n, s, true);
  } else {
    cub::DeviceReduce::Max(temp, bytes, in, out, n, s, true);
  }
}
"""


def _scan(root: Path, files: dict[str, str]) -> ScanResult:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return scan_tree(root, make_target("linux", "sm_90a"), STATIC)


def test_a_repeated_one_line_cub_call_is_one_step_for_each_line(tmp_path: Path) -> None:
    result = _scan(tmp_path, {"twice.cu": TWICE})
    assert [f.line for f in result.findings if f.rule == "FB119"] == [5, 7]
    d = draft_recipe(result, name="t", source_path="tree")
    assert [(s.transform, s.params) for s in d.steps] == [("replace-block", {
        "file": "twice.cu", "anchor": "cub::DeviceReduce::Max(temp, bytes, in, out, n, s, true);",
        "block": "    cub::DeviceReduce::Max(temp, bytes, in, out, n, s);", "expect": 2})]
    assert not d.todos
    assert sorted(f.line for f, ids in d.drafted if ids == (d.steps[0].id,)) == [5, 7]


DISPATCH_NEXT_LINE = """\
#include <torch/extension.h>

void run(at::Tensor value) {
  AT_DISPATCH_FLOATING_TYPES(
      value.type(), "run", [&] {
        scalar_t* p = value.data_ptr<scalar_t>();
      });
}
"""


def test_a_dispatch_whose_first_argument_is_on_the_next_line_is_found_and_drafted(
        tmp_path: Path) -> None:
    result = _scan(tmp_path, {"op.cu": DISPATCH_NEXT_LINE})
    assert [f.line for f in result.findings if f.rule == "FB124"] == [4]
    d = draft_recipe(result, name="t", source_path="tree")
    assert [s.params for s in d.steps] == [{
        "file": "op.cu", "anchor": 'value.type(), "run", [&] {',
        "block": '      value.scalar_type(), "run", [&] {'}]


def test_an_argument_line_that_also_reads_so_outside_a_dispatch_is_not_drafted(
        tmp_path: Path) -> None:
    """The edit is anchored on the argument's line, which holds no macro name: another line
    of the file that reads the same, outside a dispatch, would be edited too."""
    other = DISPATCH_NEXT_LINE + ('void log(at::Tensor value) {\n  describe(\n'
                                  '      value.type(), "run", [&] {\n      });\n}\n')
    result = _scan(tmp_path, {"op.cu": other})
    found = [f for f in result.findings if f.rule == "FB124"]
    assert [f.line for f in found] == [4]
    assert "not drafted" in found[0].fix.manual
    assert draft_recipe(result, name="t", source_path="tree").steps == []


def test_thc_and_at_check_under_an_undecided_condition_are_warnings(tmp_path: Path) -> None:
    """A branch for old torch (`#if TORCH_VERSION_MAJOR < 1`, `#ifdef OLD_TORCH`) that no
    build may compile: FB125/FB126 say it as a warning, not an error (a review, 2026-11-29)."""
    (tmp_path / "a.cpp").write_text(
        '#include <torch/extension.h>\n#if TORCH_VERSION_MAJOR < 1\n#include <THC/THC.h>\n'
        'extern THCState *state;\n#endif\n#ifdef OLD_TORCH\n'
        'void f(const at::Tensor &x) { AT_CHECK(x.is_cuda(), "x"); }\n#endif\n'
        '#include <THC/THC.h>\n', encoding="utf-8")
    found = scan_tree(tmp_path, make_target("linux", "sm_90a"),
                      ScanOptions(static=True, jobs=1)).findings
    assert [(f.rule, f.line, f.severity.value) for f in found
            if f.rule in ("FB125", "FB126")] == [
        ("FB125", 3, "warning"), ("FB125", 4, "warning"), ("FB126", 7, "warning"),
        ("FB125", 9, "error")]


def test_a_thc_header_torch_still_ships_is_a_warning_with_its_edit(tmp_path: Path) -> None:
    """mmcv 2.2.0's `#include <THC/THCAtomics.cuh>`: torch's CUDA builds still ship it (and
    THCDeviceUtils.cuh), forwarding to ATen, so the line compiles today; the edit to the
    ATen header is still drafted. THC.h beside it is gone: an error."""
    result = _scan(tmp_path, {"k.cu": "#include <THC/THCAtomics.cuh>\n"
                                      "#include <THC/THCDeviceUtils.cuh>\n"
                                      "#include <THC/THC.h>\n"
                                      "__global__ void k(float* x) { atomicAdd(x, 1.f); }\n"})
    found = [(f.rule, f.line, f.severity.value) for f in result.findings if f.rule == "FB125"]
    assert found == [("FB125", 1, "warning"), ("FB125", 2, "warning"), ("FB125", 3, "error")]
    messages = [f.message for f in result.findings if f.rule == "FB125"]
    assert "still ship" in messages[0] and "removed in torch 1.11" in messages[2]
    draft = draft_recipe(result, name="t", source_path=".")
    edits = [s for s in draft.steps if s.transform == "replace-block" or "thc" in s.id]
    assert edits, [s.id for s in draft.steps]
