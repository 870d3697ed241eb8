"""Four findings of the session's review, each on the smallest input that showed it."""

from __future__ import annotations

import sys
from pathlib import Path

from flashbuild.proc import ProcessRunner
from flashbuild.scanning.draft_check import repository_fix
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.scan import scan_tree
from flashbuild.verifying import runtime


def test_a_bool_init_after_an_operator_is_no_debug_synchronous(tmp_path: Path) -> None:
    # DeviceReduce::Reduce(tmp, bytes, in, out, n, op, init): 7 arguments, a bool last.
    (tmp_path / "r.cu").write_text(
        "#include <cub/cub.cuh>\n"
        "void f(void* t, size_t& b, const bool* in, bool* out, int n, cudaStream_t stream) {\n"
        "  cub::DeviceReduce::Reduce(t, b, in, out, n, cub::Max(), false);\n"
        "  cub::DeviceReduce::Sum(t, b, in, out, n, stream, false);\n}\n", encoding="utf-8")
    found = scan_tree(tmp_path, make_target("linux", "sm_90a"), ScanOptions(static=True, jobs=1))
    assert [f.line for f in found.findings if f.rule == "FB119"] == [4]


def test_a_plain_missing_export_has_no_import_error_behind_it(tmp_path: Path) -> None:
    (tmp_path / "mypkgy").mkdir()
    (tmp_path / "mypkgy" / "__init__.py").write_text("x = 1\n", encoding="utf-8")
    probe = runtime.import_check("mypkgy", ["rms_norm"], runner=ProcessRunner(),
                                 python=sys.executable,
                                 env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})
    assert probe.missing_exports == ("rms_norm",) and probe.why == {}, probe


def test_a_pkg_info_with_a_bad_version_does_not_stop_the_draft(tmp_path: Path) -> None:
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: x\n"
                                       "Version: 2024.1-custom!!\nHome-page: https://h/x\n",
                                       encoding="utf-8")
    assert "build from the project's repository" in repository_fix(tmp_path, "them")
