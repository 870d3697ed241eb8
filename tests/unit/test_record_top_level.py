"""[install] top_level from a setup.py record: the names the record builds as run win over
those the static reading computed (torch-memory-saver 0.0.10: its f-string names end in the
CUDA major TMS_CUDA_MAJOR gives; static reading computed them without it, and the draft's
top_level named modules the build does not make)."""

from __future__ import annotations

from flashbuild.scanning.draft import BuildDraft
from flashbuild.scanning.draft_check import _install_from_record
from flashbuild.source.treemodel import BuildTarget, TargetKind


def _target(name: str, kind: TargetKind = "module") -> BuildTarget:
    return BuildTarget(name=name, kind=kind, artifact="", sources=(),
                       defined_at="setup.py:179")


def test_the_record_names_replace_the_static_reading() -> None:
    b = BuildDraft(top_level=["hooks_preload", "hooks_torch"])
    b.notes["install"].append("top_level: setup.py builds hooks_preload, hooks_torch with no "
                              "package, so pip installs them at the top of site-packages")
    _install_from_record(b, [_target("hooks_preload_cu13"), _target("hooks_torch_cu13")], [])
    assert b.top_level == ["hooks_preload_cu13", "hooks_torch_cu13"]
    assert b.notes["install"] == [
        "top_level: setup.py (record) builds hooks_preload_cu13, hooks_torch_cu13 with no "
        "package; the static reading's hooks_preload, hooks_torch is not built as run"]


def test_names_the_record_agrees_with_are_kept_as_they_are() -> None:
    b = BuildDraft(top_level=["rotary_emb"])
    b.notes["install"].append("top_level: setup.py builds rotary_emb with no package")
    _install_from_record(b, [_target("rotary_emb")], [])
    assert b.top_level == ["rotary_emb"]
    assert b.notes["install"] == ["top_level: setup.py builds rotary_emb with no package"]


def test_an_executable_of_the_configure_a_setup_py_runs_is_no_module() -> None:
    # torch-kdtree's setup.py runs CMake, whose configure also defines `test_kdtree`, an
    # executable: the module to install stays `torch_knn`.
    b = BuildDraft(top_level=["torch_knn"])
    _install_from_record(b, [_target("test_kdtree", "executable"), _target("torch_knn")], [])
    assert b.top_level == ["torch_knn"]
