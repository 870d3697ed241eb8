"""Human output on a legacy code page, and foreign text printed as it is (issue 11, items 1, 8, 9).

A GitHub Windows runner gives a step a piped stdout that Python encodes in cp1252; here the
same stream is an `io.TextIOWrapper(..., encoding="cp1252")` over bytes, put in place of
sys.stdout, so Rich writes to it exactly as it would there."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from flashbuild.building.jobs import HostResources, plan_jobs
from flashbuild.console import UI, clip, degrade, lit, prepare_streams
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.report import print_report
from flashbuild.scanning.scan import scan_tree
from flashbuild.verifying.report import user_targets

GIB = 1024**3


def _cp1252_stdout(monkeypatch: pytest.MonkeyPatch, *, prepared: bool = True) -> io.TextIOWrapper:
    stream = io.TextIOWrapper(io.BytesIO(), encoding="cp1252", newline="\n")
    if prepared:
        prepare_streams(stream)
    monkeypatch.setattr(sys, "stdout", stream)
    return stream


def _written(stream: io.TextIOWrapper) -> str:
    stream.flush()
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("cp1252")


def test_build_summary_line_survives_cp1252(monkeypatch: pytest.MonkeyPatch) -> None:
    # Item 1: the jobs reason ends the build's output with "→"; on cp1252 that raised
    # UnicodeEncodeError after compiling and installing.
    reason = plan_jobs(None, HostResources(cores=8, available_bytes=16 * GIB)).reason
    assert "→" in reason
    stream = _cp1252_stdout(monkeypatch)
    UI().step(f"jobs: {reason}")
    out = _written(stream)
    assert "-> " in out and "nvcc jobs" in out
    assert out.startswith("• jobs: auto: 8 cores")  # "•" is in cp1252 (0x95): kept


def test_without_prepared_streams_the_same_line_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the runner did before: the stream's strict error handler refuses "→".
    _cp1252_stdout(monkeypatch, prepared=False)
    with pytest.raises(UnicodeEncodeError):
        UI().step("→")


def test_doctor_marks_and_unknown_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _cp1252_stdout(monkeypatch)
    ui = UI()
    ui.info("✓ nothing blocks a build")
    ui.info("✗ 2 problem(s) block a build")
    ui.literal("C:\\Users\\José\\日本\\kern.dll")  # é is in cp1252; the CJK name is not
    out = _written(stream).splitlines()
    assert out == ["ok nothing blocks a build", "x 2 problem(s) block a build",
                   "C:\\Users\\José\\\\u65e5\\u672c\\kern.dll"]
    assert degrade("a → b", "utf-8") == "a → b"  # nothing changes where the encoding can


def test_scan_line_numbers_are_not_emoji(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Item 8: `activation.cu:100:1` printed as `activation.cu💯1` (Rich's :100: shortcode).
    root = tmp_path / "[proj]"
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "activation.cu").write_text("\n" * 99 + "#include <unistd.h>\n")
    result = scan_tree(root, make_target("windows", "sm120"), ScanOptions(jobs=1))
    stream = _cp1252_stdout(monkeypatch)
    print_report(result, UI().out)
    out = _written(stream)
    assert "kernels/activation.cu:100:1" in out
    assert "[proj]" in out  # a folder name in brackets is not Rich markup


def test_foreign_text_is_never_markup_or_emoji(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _cp1252_stdout(monkeypatch)
    ui = UI()
    path = "/src/[bold]x[/]/kern.cu:100:1 :smile:"
    ui.step(f"wrote {lit(path)}")
    ui.literal(path)
    ui.verbose = True
    ui.err = Console(file=sys.stdout, emoji=False, highlight=False, soft_wrap=True)
    ui.command(f"nvcc {path}")
    assert _written(stream).splitlines() == [f"• wrote {path}", path, f"$ nvcc {path}"]


def test_long_paths_are_not_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    # Item 9: Rich wrapped a long path at the console width (80 when piped), mid-name.
    monkeypatch.setenv("COLUMNS", "40")
    stream = _cp1252_stdout(monkeypatch)
    long_path = "/home/user/" + "/".join(["a_rather_long_folder_name"] * 6) + "/kern.cu"
    UI().step(f"build folder {lit(long_path)} (log: build.log)")
    lines = _written(stream).splitlines()
    assert lines == [f"• build folder {long_path} (log: build.log)"]


@pytest.mark.parametrize(("text", "limit", "keep", "expected"), [
    ("short", 10, "start", "short"),
    ("int x = some_identifier_name(y);", 20, "start", "int x =…"),
    ("one_token_longer_than_the_limit rest", 10, "start", "one_token_longer_than_the_limit…"),
    ("error: C:\\path\\to\\file.cu(12): bad thing", 12, "end", "…bad thing"),
    ("lead\nC:\\a\\very\\long\\token", 8, "end", "…C:\\a\\very\\long\\token"),
])
def test_clip_cuts_between_tokens(text: str, limit: int, keep: str, expected: str) -> None:
    assert clip(text, limit, keep=keep) == expected


@pytest.mark.parametrize(("cmake", "shown"), [
    ("120-real", "sm_120"), ("90a-real;120", "sm_90a, sm_120+PTX"), ("90-virtual", "compute_90"),
    ("native", "native"),
])
def test_verify_header_uses_the_users_arch_spelling(cmake: str, shown: str) -> None:
    assert user_targets(cmake) == shown


def test_say_prints_a_whole_step_literally(monkeypatch: pytest.MonkeyPatch) -> None:
    # For callers whose step text names paths (the build's "configuring <folder>").
    stream = _cp1252_stdout(monkeypatch)
    UI().say("configuring C:\\src\\[proj]\\build :100: → done")
    assert _written(stream) == "• configuring C:\\src\\[proj]\\build :100: -> done\n"
