"""`flashbuild ci init`'s job estimates (issue 31, "Matrices that fit the cap"): the compile
time from the tree's units and the measured table, the split of a slow job by arch group, the
refusal when one arch alone is too slow, the Python axis collapsed for a Python-free wheel, and
the matrix table at 80 columns on an ASCII pipe."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from flashbuild.arch import parse_arch_spec
from flashbuild.ci import estimate
from flashbuild.ci.estimate import SECONDS_PER_UNIT_ARCH, Units, job_seconds, split_archs
from flashbuild.cli import app
from flashbuild.console import ui
from flashbuild.errors import UsageError
from flashbuild.pipeline.driver import _repack_label
from tests.unit.test_ci_init import RECIPE, SPEC, _init, matrix

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ci.md"


def _setup_tree(tmp_path: Path, cuda: int, *, host: int = 0, extra: str = "",
                options: str = "") -> Path:
    """A setup.py tree of one CUDAExtension with `cuda` .cu and `host` .cpp sources;
    `extra` ends the extension's arguments, `options` the setup() call's."""
    tree = tmp_path / "tiny-tree"
    (tree / "tiny").mkdir(parents=True)
    (tree / "csrc").mkdir()
    sources = [f"csrc/k{i}.cu" for i in range(cuda)] + [f"csrc/h{i}.cpp" for i in range(host)]
    for source in sources:
        (tree / source).write_text("// unit\n", encoding="utf-8")
    (tree / "setup.py").write_text(
        "from setuptools import setup\n"
        "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
        f"setup(name='tiny', ext_modules=[CUDAExtension('tiny._C', {sources!r}{extra})],\n"
        f"      cmdclass={{'build_ext': BuildExtension}}{options})\n", encoding="utf-8")
    (tree / "tiny" / "__init__.py").write_text("", encoding="utf-8")
    (tree / "tiny.toml").write_text(RECIPE, encoding="utf-8")
    return tree


# --- the estimate ---------------------------------------------------------------------------

def test_the_table_is_the_slowest_measured_build_per_unit_and_arch() -> None:
    figures = [m.per_unit_arch for m in estimate.MEASUREMENTS]
    assert max(figures) == SECONDS_PER_UNIT_ARCH
    # causal-conv1d's 4 units on 4 busy cores of 16, 531.9 s wall for one arch.
    assert round(SECONDS_PER_UNIT_ARCH, 1) == 531.9
    assert all(m.source for m in estimate.MEASUREMENTS)
    assert estimate.RUNNER_VCPUS == 4


def test_docs_show_the_measurements_the_code_uses() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for row in estimate.measurement_table():
        assert row in text, row


@pytest.mark.parametrize(("cuda", "host", "archs", "expected"), [
    (40, 0, 3, 40 * 3 * 500 / 4),   # more units than vCPUs: 4 compiles at a time
    (2, 1, 3, (2 * 3 + 1) * 500 / 3),  # 3 units keep 3 of the 4 vCPUs busy
    (0, 0, 5, 0.0),
])
def test_a_job_is_units_times_archs_over_the_compiles_at_once(
        cuda: int, host: int, archs: int, expected: float) -> None:
    units = Units(cuda=cuda, host=host, how="")
    assert job_seconds(units, archs, vcpus=4, unit_seconds=500) == pytest.approx(expected)


def test_a_setup_py_trees_units_are_its_extensions_sources(tmp_path: Path) -> None:
    tree = _setup_tree(tmp_path, 7, host=2)
    (tree / "csrc" / "unused.cu").write_text("// not in setup.py\n", encoding="utf-8")
    units = estimate.read_units(tree, backend="setuptools", archs=parse_arch_spec("90a").archs,
                                platform="linux")
    assert (units.cuda, units.host) == (7, 2)
    assert units.how.startswith("setup.py: 7 CUDA and 2 C++ sources of 1 extension")


def test_a_cmake_trees_units_are_its_own_sources_not_vendored_ones(tmp_path: Path) -> None:
    tree = tmp_path / "cm"
    (tree / "src").mkdir(parents=True)
    (tree / "third_party" / "lib").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text("project(x LANGUAGES CUDA)\n", encoding="utf-8")
    for name in ("a.cu", "b.cu", "bind.cpp"):
        (tree / "src" / name).write_text("//\n", encoding="utf-8")
    (tree / "third_party" / "lib" / "v.cu").write_text("//\n", encoding="utf-8")
    units = estimate.read_units(tree, backend="cmake", archs=(), platform="linux")
    assert (units.cuda, units.host) == (2, 1)
    assert "upper bound" in units.how


def test_the_matrix_carries_each_jobs_estimate(tmp_path: Path) -> None:
    # 10 CUDA units, 2 archs, 4 vCPUs: 10 x 2 x 531.9 / 4 = 2659.5 s.
    tree = _setup_tree(tmp_path, 10)
    result = CliRunner().invoke(app, [
        "ci", "init", "--recipe", str(tree / "tiny.toml"), "--source", str(tree),
        "--arch", "90a;120", "--platform", "linux", "--cuda", "13.0", "--python", "3.12",
        "--json", *SPEC])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [e["estimate_seconds"] for e in doc["matrix"]] == [2660]
    assert doc["estimate"]["cuda_units"] == 10 and doc["estimate"]["arch_groups"] == [
        "sm_90a;sm_120"]
    text = (tree / ".github" / "workflows" / "flashbuild.yml").read_text(encoding="utf-8")
    assert [e["arch"] for e in matrix(text)] == ["sm_90a;sm_120"]
    assert "timeout-minutes: 360" in text


# --- the split ------------------------------------------------------------------------------

def test_split_archs_makes_the_fewest_even_groups() -> None:
    units = Units(cuda=100, host=0, how="")
    # One arch: 100 x 500 / 4 = 12,500 s; a 7-hour budget fits 2 archs a job.
    assert split_archs(5, units, vcpus=4, unit_seconds=500, budget_s=7 * 3600) == [2, 2, 1]
    assert split_archs(5, units, vcpus=4, unit_seconds=500, budget_s=20 * 3600) == [5]
    assert split_archs(5, units, vcpus=4, unit_seconds=500, budget_s=3 * 3600) is None


def test_a_job_past_the_budget_becomes_one_wheel_per_arch_group(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 96 CUDA units (flash-attention's count): one arch is 96 x 531.9 / 4 = 3 h 33 min.
    tree = _setup_tree(tmp_path, 96)
    ui.configure(json_mode=False)
    text = _init(tree, arch="80;90a;100;120", platform="linux,windows", cuda="13.0",
                 python="3.12").read_text(encoding="utf-8")
    entries = matrix(text)
    assert [(e["platform"], e["arch"]) for e in entries] == [
        (p, a) for p in ("linux", "windows") for a in ("sm_80", "sm_90a", "sm_100", "sm_120")]
    # Each job's archs reach the build, the verify and the artifact name from its entry.
    assert "FLASHBUILD_ARCH: ${{ matrix.arch }}" in text
    assert "ARCH_LABEL: ${{ matrix.arch-label }}" in text
    assert len({e["arch-label"] for e in entries}) == 4
    out = capsys.readouterr().out
    assert "split:" in out and "one wheel per arch group" in out
    assert "3:33" in out


def test_a_split_setup_py_wheel_is_named_by_its_archs() -> None:
    # Two arch groups of one coordinate must not give one wheel file name (the release step
    # stops on a repeat): the local version carries the archs, then CUDA and torch.
    request = SimpleNamespace(arch=parse_arch_spec("90a;120"),
                              toolkit=SimpleNamespace(release=SimpleNamespace(major=13,
                                                                              minor=0)))
    built = SimpleNamespace(torch_version="2.13.0+cu130")
    assert _repack_label(request, built) == "sm90a.sm120.cu130torch2.13"  # type: ignore[arg-type]
    request.toolkit.release = None
    built.torch_version = ""
    assert _repack_label(request, built) == "sm90a.sm120"  # type: ignore[arg-type]


# --- the refusal ----------------------------------------------------------------------------

def test_one_arch_past_the_budget_is_refused_with_how_to_split(tmp_path: Path) -> None:
    tree = _setup_tree(tmp_path, 96)
    with pytest.raises(UsageError) as info:
        _init(tree, arch="90a", max_job_hours=2)
    err = info.value
    assert "3 h 33 min" in err.what and "2 h" in err.what
    assert "96 CUDA" in err.evidence and "532 core-seconds" in err.evidence
    assert "fewer units" in err.fix and "bigger runner" in err.fix
    assert not (tree / ".github").exists()


def test_the_cli_refuses_with_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    tree = _setup_tree(tmp_path, 96)
    result = CliRunner().invoke(app, [
        "ci", "init", "--recipe", str(tree / "tiny.toml"), "--source", str(tree),
        "--arch", "90a", "--max-job-hours", "2", "--json", *SPEC])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["error"] == "usage" and "one arch of this tree alone" in doc["what"]
    assert not (tree / ".github").exists()


@pytest.mark.parametrize(("option", "value"), [("max_job_hours", 7.0), ("max_job_hours", 0.0),
                                               ("unit_seconds", -1.0)])
def test_estimate_options_out_of_range_are_refused(tmp_path: Path, option: str,
                                                   value: float) -> None:
    tree = _setup_tree(tmp_path, 1)
    with pytest.raises(UsageError):
        _init(tree, **{option: value})
    assert not (tree / ".github").exists()


def test_unit_seconds_from_a_measured_build_replaces_the_table(tmp_path: Path) -> None:
    # At 100 core-seconds a unit, 96 units x 4 archs fit one 5-hour job: no split.
    text = _init(_setup_tree(tmp_path, 96), arch="80;90a;100;120", platform="linux",
                 cuda="13.0", python="3.12", unit_seconds=100.0).read_text(encoding="utf-8")
    assert [e["arch"] for e in matrix(text)] == ["sm_80;sm_90a;sm_100;sm_120"]
    assert "--unit-seconds 100" in text


# --- the Python axis ------------------------------------------------------------------------



def test_an_abi3_wheel_is_built_once_for_every_python(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # torch's documented way: the extension on the limited API, the wheel tagged for it.
    tree = _setup_tree(tmp_path, 2, extra=", py_limited_api=True",
                       options=", options={'bdist_wheel': {'py_limited_api': 'cp39'}}")
    ui.configure(json_mode=False)
    text = _init(tree, platform="linux,windows", cuda="12.9,13.0",
                 python="3.12,3.11,3.13").read_text(encoding="utf-8")
    entries = matrix(text)
    assert {e["python"] for e in entries} == {"3.11"}  # the oldest builds it
    assert len(entries) == 4  # 2 platforms x 2 CUDA, not x 3 Pythons
    out = capsys.readouterr().out
    assert "python collapsed: setup.py tags the wheel cp39-abi3" in out
    assert "3.11+" in out


def test_a_python_free_tag_from_get_tag_collapses_too(tmp_path: Path) -> None:
    # xformers' setup.py: its own bdist_wheel returns ("py39", "none", plat) for an extension
    # on torch's stable ABI.
    tree = _setup_tree(tmp_path, 2)
    (tree / "setup.py").write_text(
        (tree / "setup.py").read_text(encoding="utf-8") +
        "\nclass bdist_wheel_abi_none:\n    def get_tag(self):\n"
        "        python, abi, plat = 1, 2, 3\n        return 'py39', 'none', plat\n"
        "FLAGS = ['-DTORCH_TARGET_VERSION=0x020a000000000000']\n", encoding="utf-8")
    units = estimate.read_units(tree, backend="setuptools", archs=(), platform="linux")
    assert units.abi3 == "setup.py's bdist_wheel.get_tag tags the wheel py39-none"
    assert "torch's stable ABI" in units.abi_note


def test_py_limited_api_without_an_abi3_tag_keeps_one_wheel_per_python(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = _setup_tree(tmp_path, 2, extra=", py_limited_api=True")
    ui.configure(json_mode=False)
    text = _init(tree, platform="linux", cuda="13.0", python="3.11,3.12").read_text(
        encoding="utf-8")
    assert [e["python"] for e in matrix(text)] == ["3.11", "3.12"]
    assert "nothing tags the wheel abi3" in " ".join(capsys.readouterr().out.split())


# --- the table ------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["ascii", "cp1252"])
def test_a_split_matrix_prints_as_an_ascii_safe_table_at_80_columns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str) -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="flashbuild.degrade")
    monkeypatch.setattr(ui, "out", Console(file=stream, width=80, color_system=None,
                                           emoji=False, highlight=False, soft_wrap=True))
    monkeypatch.setattr(ui, "json_mode", False)
    _init(_setup_tree(tmp_path, 96), arch="80;90a;100;120", platform="linux,windows",
          cuda="13.0", python="3.12", torch="2.13.0")
    stream.flush()
    lines = stream.buffer.getvalue().decode(encoding).splitlines()  # type: ignore[attr-defined]
    assert all(len(line) <= 80 for line in lines[1:]), lines
    table = [line for line in lines if line[:1] in "|+"]
    assert all(line.isascii() for line in table)  # ASCII borders where box drawing can't go
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in table
            if re.match(r"^\| \w", line)]
    assert rows[0] == ["os (runner)", "arch", "cuda", "torch", "python", "h:mm"]
    assert rows[1] == ["ubuntu-24.04", "sm_80", "13.0 pypi", "2.13.0 cu130", "3.12", "3:33"]
    assert len(rows) == 1 + 8
