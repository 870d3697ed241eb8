"""`flashbuild scan` on csrc and on a second tree of a different shape: the exact findings."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.patching.transforms.instantiations import find_sites
from flashbuild.recipes.transforms import ExplicitInstantiationsParams
from flashbuild.scanning.checks_cxx import _CANDIDATES, _candidates_for
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.scan import file_kind, scan_tree
from flashbuild.source import cxx

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
OTHER = ROOT / "tests" / "fixtures" / "scan" / "othertree"


def _keys(root: Path, platform: str, arch: str, *, skip: tuple[str, ...] = ()) -> list[str]:
    result = scan_tree(root, make_target(platform, arch))
    return [f"{f.rule} {f.path}:{f.line}" for f in result.findings if f.rule not in skip]


CSRC_WINDOWS_SM120 = [
    "FB190 CMakeLists.txt:15",
    "FB151 arch/sm_gate.h:15",
    "FB150 arch/sm_gate.h:25",
    "FB170 arch/traits.h:14",
    "FB101 attention/dispatcher.cpp:6",
    "FB102 attention/plugin.cu:95",
    "FB102 attention/plugin.cu:97",
    "FB102 attention/plugin.cu:99",
    "FB102 attention/plugin.cu:109",
    "FB142 kernels/norm.cu:267",
    "FB142 kernels/norm.cu:268",
    "FB142 kernels/norm.cu:269",
    "FB181 python/flashkern/__init__.py:13",
    "FB182 python/flashkern/__init__.py:42",
]


def test_csrc_windows_sm120_exact() -> None:
    assert _keys(CSRC, "windows", "sm120", skip=("FB140",)) == CSRC_WINDOWS_SM120


def test_csrc_kernel_instantiations_are_the_transforms_sites() -> None:
    result = scan_tree(CSRC, make_target("windows", "sm120"))
    per_file = Counter(f.path for f in result.findings if f.rule == "FB140")
    # The csrc recipe's `msvc-instantiations` step: 56 sites in 6 files (recipes/csrc.toml),
    # of which the six of the in-place kernels repeat their definitions' parameter lists (no
    # `__restrict__` there either): MSVC accepts those, the other 50 are errors.
    assert sum(per_file.values()) == 50
    assert len(per_file) == 6
    assert all(f.severity.value == "error" for f in result.findings if f.rule == "FB140")
    inplace = {f.line for f in result.findings
               if f.rule == "FB140" and f.path == "kernels/activation.cu"}
    assert not inplace & {65, 67, 69, 96, 98, 100}
    # Decoys (`.template` calls, `template<>` specialisations, definitions) are never sites.
    lines = {f.snippet for f in result.findings if f.rule == "FB140"}
    assert all(s.startswith(("template __global__", "FK_")) or "(" in s for s in lines)
    assert not any(s.startswith("template <") or ".template" in s for s in lines)


def test_instantiation_findings_are_the_transforms_decisions() -> None:
    # Scan = the transform run with every C++ file of the tree as the recipe's sources:
    # FB140/FB141 where it would guard, FB142 where it keeps, nothing where already guarded.
    sources = {}
    for path in sorted(CSRC.rglob("*")):
        if path.is_file() and file_kind(path.name) == "cxx":
            rel = path.relative_to(CSRC).as_posix()
            sources[rel] = cxx.parse(path.read_text(encoding="utf-8"), rel)
    files = sorted(sources)
    sites = find_sites(sources, files, ExplicitInstantiationsParams(files=tuple(files)))
    # A kernel's instantiation the transform keeps repeats its definition: no finding.
    expected = sorted([("FB142" if s.action == "keep" else "FB140" if s.kernel else "FB141",
                        s.path, s.line) for s in sites
                       if s.action != "already" and not (s.kernel and s.action == "keep")])
    result = scan_tree(CSRC, make_target("windows", "sm120"))
    found = sorted((f.rule, f.path, f.line) for f in result.findings
                   if f.rule in ("FB140", "FB141", "FB142"))
    assert found == expected
    assert any(s.action == "keep" for s in sites)


@pytest.mark.parametrize("root", [CSRC, OTHER])
def test_gated_candidate_search_matches_the_full_pattern(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file() and file_kind(path.name) == "cxx":
            text = path.read_text(encoding="utf-8")
            full = [(m.start(), m.lastgroup, m[0]) for m in _CANDIDATES.finditer(text)]
            gated = [(m.start(), m.lastgroup, m[0])
                     for m in _candidates_for(text).finditer(text)]
            assert gated == full, path


_EDGES = """#include <unistd.h>
  #  error no
x.kind::f8f6f4 ykind::mxf4 _cp.async.bulk.tensor asm("cp.async.bulk.tensor.2d");
if (prop->major == 9 && dev.cc_major==10 || p.ccMajor == 12) {}
static constexpr int kSmemSize = 4; SharedMem_bytes =
 x; 900 == __CUDA_ARCH__; __CUDA_ARCH__<=1000; a-small; max (a, b); __builtin_expect(x, 0);
extern "C" void f(); dlsym(h, "x"); ssize_t n; __int128_t w; wgmma tcgen05 setmaxnreg
"""


@pytest.mark.parametrize("root", [CSRC, OTHER])
def test_the_start_guard_changes_no_match(root: Path) -> None:
    """`_START` (a lookahead that turns away positions no alternative can start at) gives the
    same matches as the bare alternation, on real files and on the edge cases of each
    alternative's first character."""
    import re

    from flashbuild.scanning.checks_cxx import _ALTERNATIVES

    bare = re.compile("|".join(p for p, _gate in _ALTERNATIVES))
    texts = [_EDGES] + [p.read_text(encoding="utf-8") for p in sorted(root.rglob("*"))
                        if p.is_file() and file_kind(p.name) == "cxx"]
    for text in texts:
        assert [(m.span(), m.lastgroup, m.groupdict()) for m in _CANDIDATES.finditer(text)] == \
            [(m.span(), m.lastgroup, m.groupdict()) for m in bare.finditer(text)]
    assert len(list(_CANDIDATES.finditer(_EDGES))) >= 20


def test_csrc_linux_sm120_only_arch_findings() -> None:
    assert _keys(CSRC, "linux", "sm120") == [
        "FB151 arch/sm_gate.h:15", "FB150 arch/sm_gate.h:25", "FB170 arch/traits.h:14"]


def test_csrc_linux_sm90a_is_clean() -> None:
    # The pristine tree is Linux-first for sm_90a: nothing to report (sm90/ is compiled and
    # has what it uses; the 200 KB Hopper traits fit 227 KB).
    assert _keys(CSRC, "linux", "sm_90a") == []


OTHER_WINDOWS_SM120 = [
    "FB190 CMakeLists.txt:2",
    "FB152 CMakeLists.txt:5",
    "FB191 CMakeLists.txt:13",
    "FB192 CMakeLists.txt:14",
    "FB110 src/kernels/gemv.cu:3",
    "FB111 src/kernels/gemv.cu:13",
    "FB140 src/kernels/gemv.cu:15",
    "FB140 src/kernels/gemv.cu:16",
    "FB153 src/kernels/gemv.cu:22",
    "FB160 src/kernels/mma_sm120.cu:4",
    "FB101 src/kernels/plugin.cpp:1",
    "FB130 src/kernels/plugin.cpp:11",
    "FB102 src/kernels/plugin.cpp:16",
    "FB120 src/kernels/util.cpp:5",
    "FB112 src/kernels/util.cpp:6",
    "FB112 src/kernels/util.cpp:6",
    "FB121 src/kernels/util.cpp:10",
    "FB181 src/pkg/fastops/__init__.py:6",
    "FB180 src/pkg/fastops/__init__.py:11",
    "FB182 src/pkg/fastops/__init__.py:12",
]


def test_othertree_is_crlf() -> None:
    assert b"\r\n" in (OTHER / "src/kernels/gemv.cu").read_bytes()


def test_othertree_windows_sm120_exact() -> None:
    assert _keys(OTHER, "windows", "sm120") == OTHER_WINDOWS_SM120


def test_othertree_linux_targets() -> None:
    # sm_120a has kind::f8f6f4; the tcgen05 file is gated on 100a, the wgmma one on 9.0a.
    assert _keys(OTHER, "linux", "sm_120a") == [
        "FB152 CMakeLists.txt:5", "FB153 src/kernels/gemv.cu:22",
        "FB180 src/pkg/fastops/__init__.py:11"]
    assert _keys(OTHER, "linux", "sm_100a") == [
        "FB153 src/kernels/gemv.cu:22", "FB180 src/pkg/fastops/__init__.py:11"]
    # For sm_100 without `a`, the CMake gate `"100a" IN_LIST` leaves the tcgen05 file out.
    assert "FB160" not in " ".join(_keys(OTHER, "linux", "sm100"))


def test_vendored_skipped_with_a_note_unless_asked() -> None:
    result = scan_tree(OTHER, make_target("windows", "sm120"))
    assert [s.path for s in result.skipped] == ["third_party"]
    full = scan_tree(OTHER, make_target("windows", "sm120"), ScanOptions(include_vendored=True))
    vendored = [f"{f.rule} {f.path}:{f.line}" for f in full.findings
                if f.path.startswith("third_party/")]
    assert vendored == ["FB110 third_party/vec/vec.h:2", "FB112 third_party/vec/vec.h:3"]


def test_every_finding_has_evidence_and_fix() -> None:
    for root in (CSRC, OTHER):
        for f in scan_tree(root, make_target("windows", "sm120")).findings:
            assert f.evidence and f.snippet and f.message
            assert f.fix.transform or f.fix.manual


# --- bad input --------------------------------------------------------------------------------

def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "ok.cu").write_text("#include <unistd.h>\n", encoding="utf-8")
    return root


def _scan(root: Path, **opts: int) -> tuple[list[str], dict[str, str]]:
    result = scan_tree(root, make_target("windows", "sm120"), ScanOptions(**opts))
    return ([f"{f.rule} {f.path}:{f.line}" for f in result.findings],
            {s.path: s.reason for s in result.skipped})


def test_binary_file_skipped(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "src" / "blob.cu").write_bytes(b"\x7fELF\0\0\0#include <unistd.h>\n")
    found, skipped = _scan(root)
    assert found == ["FB110 src/ok.cu:1"]
    assert "binary" in skipped["src/blob.cu"]


def test_a_latin1_file_is_scanned_with_a_note(tmp_path: Path) -> None:
    """Read as patch reads it (source/text.py): before, a Latin-1 header was skipped ("not
    UTF-8") and its unistd.h was never reported."""
    root = _tree(tmp_path)
    (root / "src" / "latin1.h").write_bytes("// caf\xe9\n#include <unistd.h>\n".encode("latin-1"))
    result = scan_tree(root, make_target("windows", "sm120"), ScanOptions())
    found = [f"{f.rule} {f.path}:{f.line}" for f in result.findings]
    assert sorted(found) == ["FB010 src/latin1.h:1", "FB110 src/latin1.h:2", "FB110 src/ok.cu:1"]
    (note,) = [f for f in result.findings if f.rule == "FB010"]
    assert note.severity.value == "note" and "Latin-1" in note.message
    assert "U+00E9" in note.evidence and note.col == 7
    assert result.skipped == () and result.files_scanned == 2


def test_a_utf16_file_with_a_bom_is_scanned_with_a_note(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "src" / "msvc.h").write_bytes(
        "\ufeff// \u00e9\r\n#include <unistd.h>\r\n".encode("utf-16-le"))
    result = scan_tree(root, make_target("windows", "sm120"), ScanOptions())
    assert sorted(f"{f.rule} {f.path}:{f.line}" for f in result.findings) == [
        "FB010 src/msvc.h:1", "FB110 src/msvc.h:2", "FB110 src/ok.cu:1"]
    assert "UTF-16-LE" in next(f.message for f in result.findings if f.rule == "FB010")


def test_scan_and_patch_read_a_file_alike() -> None:
    """One reader (source/text.py): what patch decodes, the scan decodes, BOM aside."""
    from flashbuild.patching.tree import decode_text
    from flashbuild.source.text import decode

    for data in (b"caf\xc3\xa9", "caf\xe9".encode("latin-1"), b"\xef\xbb\xbfx",
                 "\ufeffx\u00e9".encode("utf-16-be")):
        decoded = decode(data)
        assert decoded is not None and decode_text("f", data) == decoded[0]
    assert decode(b"\x7fELF\0") is None


def test_huge_generated_file_skipped(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "src" / "gen.cu").write_text("#include <unistd.h>\n" + "// x\n" * 2000)
    found, skipped = _scan(root, max_file_bytes=4096)
    assert found == ["FB110 src/ok.cu:1"]
    assert "cap" in skipped["src/gen.cu"]


def test_symlink_loop_skipped(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "src" / "loop").symlink_to(root, target_is_directory=True)
    (root / "dangling.h").symlink_to(root / "missing.h")
    found, skipped = _scan(root)
    assert found == ["FB110 src/ok.cu:1"]
    assert "loop" in skipped["src/loop"]
    assert "broken symlink" in skipped["dangling.h"]


def test_unreadable_folder_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The folder is made unreadable by the OS call failing as it does for a folder without
    # read permission, not by chmod(0): that neither works on Windows nor stops root.
    root = _tree(tmp_path)
    locked = root / "locked"
    locked.mkdir()
    (locked / "x.cu").write_text("#include <unistd.h>\n")
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    found, skipped = _scan(root)
    assert found == ["FB110 src/ok.cu:1"]
    assert "unreadable folder" in skipped["locked"]


def test_parallel_equals_serial(tmp_path: Path) -> None:
    root = tmp_path / "many"
    for i in range(60):
        shutil.copytree(OTHER / "src", root / f"copy{i}")
    serial = scan_tree(root, make_target("windows", "sm120"), ScanOptions(jobs=1))
    pooled = scan_tree(root, make_target("windows", "sm120"), ScanOptions(jobs=2))
    threads = scan_tree(root, make_target("windows", "sm120"),
                        ScanOptions(jobs=2, executor="thread"))
    assert serial.findings == pooled.findings == threads.findings
    assert len(serial.findings) > 60


# --- CLI and JSON ---------------------------------------------------------------------------

def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["scan", str(CSRC), "--platform", "windows", "--arch", "sm120",
                              "--json"])
    assert res.exit_code == 11, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1 and doc["blocking"] is True
    assert doc["counts"]["error"] == sum(f["severity"] == "error" for f in doc["findings"])
    # --static: a unit test runs no tool (the default scan would configure csrc with CMake).
    res = runner.invoke(app, ["scan", str(CSRC), "--platform", "linux", "--arch", "sm_90a",
                              "--static"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["scan", str(CSRC), "--platform", "beos", "--arch", "sm120"])
    assert res.exit_code == 2


def test_json_validates_against_its_schema() -> None:
    import jsonschema

    from flashbuild.scanning.report import SCHEMA_PATH, to_json

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    for root in (CSRC, OTHER):
        doc = {"schema_version": 1, "ok": False,
               **to_json(scan_tree(root, make_target("windows", "sm120")))}
        jsonschema.validate(doc, schema)
