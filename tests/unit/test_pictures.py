"""Issue 28's pictures: the scan's verdict line and findings table, the build's stage table,
the ci matrix and recipe init tables, each at 80 columns; and the status lines of a long scan,
which stay one line per stage on a pipe."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from flashbuild.building.request import StepTime
from flashbuild.console import UI, render_table, wrap
from flashbuild.pipeline.command import STAGE_COLUMNS
from flashbuild.pipeline.driver import stage_rows
from flashbuild.scanning.findings import make_target
from flashbuild.scanning.report import category_rows, kernel_verdict, print_report
from flashbuild.scanning.scan import scan_tree

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDERS = ROOT / "tests" / "fixtures" / "scan" / "placeholders"


def _console(encoding: str = "utf-8") -> Console:
    """An 80-column pipe: what a CI log or `| less` gets."""
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="flashbuild.degrade")
    return Console(file=stream, width=80, color_system=None, emoji=False, highlight=False,
                   soft_wrap=True, legacy_windows=False)


def _text(console: Console) -> str:
    stream = console.file
    assert isinstance(stream, io.TextIOWrapper)
    stream.flush()
    return stream.buffer.getvalue().decode(stream.encoding)  # type: ignore[attr-defined]


def _fits(text: str) -> None:
    long = [line for line in text.splitlines() if len(line) > 80]
    assert not long, long


# --- scan ------------------------------------------------------------------------------------

def test_verdict_counts_the_kernels_that_hold_work_for_the_target() -> None:
    # Four kernels; hopper_only_kernel and launcher_kernel only trap on sm_120 (FB154).
    result = scan_tree(PLACEHOLDERS, make_target("linux", "sm_90a;sm120"))
    assert [kernel_verdict(result, count) for count in result.kernels] == [
        "kernels for sm_90a: 4 of 4 compiled",
        "kernels for sm_120: 2 of 4 compiled, 2 trap (gated to sm_90)"]


def test_verdict_says_none_when_every_kernel_is_gated(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    text = (PLACEHOLDERS / "src" / "attention.cuh").read_text(encoding="utf-8")
    (tree / "src" / "kernels.cu").write_text(text.split("struct Impl")[0] + "}\n",
                                             encoding="utf-8")
    result = scan_tree(tree, make_target("linux", "sm120"))
    assert [kernel_verdict(result, c) for c in result.kernels] == [
        "kernels for sm_120: none - every kernel gated to sm_90"]
    (tree / "src" / "kernels.cu").write_text("int main() { return 0; }\n", encoding="utf-8")
    result = scan_tree(tree, make_target("linux", "sm120"))
    assert kernel_verdict(result, result.kernels[0]).endswith("no __global__ kernel in the "
                                                             "files the build compiles")


def test_the_report_opens_with_the_verdict_and_the_findings_table() -> None:
    result = scan_tree(PLACEHOLDERS, make_target("linux", "sm120"))
    console = _console()
    print_report(result, console)
    lines = _text(console).splitlines()
    # The header (wrapped: the fixture's path is long), then the verdict, then the table.
    assert lines[0].startswith("flashbuild scan ") and lines[1].startswith("  ")
    assert lines[2] == "kernels for sm_120: 2 of 4 compiled, 2 trap (gated to sm_90)"
    assert lines[3] == "findings by category"
    table = lines[4:11]
    cells = [[cell.strip() for cell in row.split("│")[1:-1]] for row in table]
    assert ["arch-gating", "0", "2", "0", "2"] in cells and ["total", "0", "2", "0", "2"] in cells
    _fits("\n".join(lines[:12]))


def test_category_rows_count_per_severity_with_a_total() -> None:
    result = scan_tree(ROOT / "csrc", make_target("windows", "sm120"))
    rows = category_rows(result.findings)
    assert rows[-1] == ["total", *(str(n) for n in result.counts().values()),
                        str(len(result.findings))]
    assert sum(int(row[4]) for row in rows[:-1]) == len(result.findings)
    console = _console("cp1252")
    from flashbuild.scanning.report import _TABLE_COLUMNS

    render_table(console, "findings by category", _TABLE_COLUMNS, rows)
    text = _text(console)
    _fits(text)
    assert "+---" in text or "|" in text  # an ASCII box where the code page lacks the heavy one
    assert all(row[0] in text for row in rows)


def test_wrapped_lines_keep_paths_whole() -> None:
    path = "csrc/sm100/prefill/sparse/fwd/head128/instantiations/phase1_k512.cu"
    lines = wrap(f"gates: stubbed headers in {path} and {path}, " + "word " * 30, 80,
                 indent="       ")
    assert all(len(line) <= 80 for line in lines)
    assert sum(path in line for line in lines) == 2
    assert all(line.startswith("       ") for line in lines[1:])


# --- the status line of a long scan ------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_a_piped_scan_says_each_stage_once_on_stderr(encoding: str) -> None:
    ui = UI(out=_console(), err=_console(encoding))
    with ui.activity() as stage:
        stage("introspecting the build (a CMake configure)")
        stage("reading 104 files")
        stage("reading 104 files")
        stage("preprocessing 7 unit(s) for sm_120 (nvcc --dryrun passes)")
        for done in range(1, 8):  # the counter moves a terminal's line, not a log's
            stage(f"preprocessing 7 unit(s) for sm_120 (nvcc --dryrun passes) [{done}/7]")
    dots = "…" if encoding == "utf-8" else "..."
    assert _text(ui.err).splitlines() == [
        f"{dots} introspecting the build (a CMake configure)", f"{dots} reading 104 files",
        f"{dots} preprocessing 7 unit(s) for sm_120 (nvcc --dryrun passes)"]
    assert _text(ui.out) == ""  # stdout keeps only the report


def test_the_scan_tells_its_stages(tmp_path: Path) -> None:
    told: list[str] = []
    tree = tmp_path / "tree"
    shutil.copytree(PLACEHOLDERS, tree)
    scan_tree(tree, make_target("linux", "sm120"), stage=told.append)
    assert told[0] == "reading 2 files"


def test_say_wrapped_breaks_between_words_under_the_bullet() -> None:
    ui = UI(out=_console("ascii"))
    ui.say_wrapped("introspection: the build hook replaces the setup.py's own arch flags "
                   "(-gencode arch=compute_100f,code=sm_100f -gencode "
                   "arch=compute_90a,code=sm_90a) with --arch's")
    lines = _text(ui.out).splitlines()
    assert len(lines) > 1 and lines[0].startswith("* introspection:")
    assert all(line.startswith("  ") and line[2] != " " for line in lines[1:])
    assert "arch=compute_90a,code=sm_90a)" in "\n".join(lines)
    _fits("\n".join(lines))


# --- build -----------------------------------------------------------------------------------

def test_the_build_ends_with_seconds_per_stage() -> None:
    steps = [StepTime("checks", 0.41), StepTime("patch", 0.2, note="6 file(s) changed"),
             StepTime("compile", 542.3, note="32 step(s); configured",
                      parts=(("configure", 12.3), ("compile", 530.0))),
             StepTime("install", 3.04, note="/home/user/.venv/lib/python3.12/site-packages")]
    rows = stage_rows(steps)
    assert [row[:2] for row in rows] == [
        ["checks", "0.4"], ["patch", "0.2"], ["configure", "12.3"], ["compile", "530.0"],
        ["install", "3.0"], ["total", "545.9"]]
    assert rows[3][2] == "32 step(s); configured"
    console = _console()
    render_table(console, "seconds per stage", STAGE_COLUMNS, rows)
    text = _text(console)
    _fits(text)
    assert "530.0" in text and "configure" in text and "site-packages" in text


def test_a_skipped_stage_says_so() -> None:
    rows = stage_rows([StepTime("compile", 0.1, skipped=True, note="no work to do"),
                       StepTime("install", 0.0, skipped=True)])
    assert rows == [["compile", "0.1", "no work to do"], ["install", "0.0", "skipped"],
                    ["total", "0.1", ""]]


@pytest.mark.parametrize("encoding", ["utf-8", "cp1252", "ascii"])
def test_tables_survive_the_code_page(encoding: str) -> None:
    console = _console(encoding)
    render_table(console, "seconds per stage", STAGE_COLUMNS,
                 stage_rows([StepTime("patch", 1.0, note="mirror → 3 files")]))
    text = _text(console)
    _fits(text)
    assert ("mirror → 3 files" if encoding == "utf-8" else "mirror -> 3 files") in text


def test_on_a_terminal_the_stage_is_a_transient_status_line() -> None:
    terminal = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None,
                       legacy_windows=False)
    ui = UI(out=_console(), err=terminal)
    with ui.activity() as stage:
        stage("reading 104 files")
        ui.say("introspection: reused")  # stdout is a pipe: it stays there
    assert _text(ui.out) == "• introspection: reused\n"
    shown = terminal.file.getvalue()  # type: ignore[attr-defined]
    assert "reading 104 files" in shown and "\n… reading" not in shown  # rewritten, not a line


def test_under_json_a_pipe_gets_no_stage_lines() -> None:
    ui = UI(out=_console(), err=_console(), json_mode=True)
    with ui.activity() as stage:
        stage("reading 104 files")
    assert _text(ui.err) == "" and _text(ui.out) == ""
