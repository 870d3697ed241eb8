"""What a newcomer meets in the first minutes (issue 21): messages that say what the user did,
one error style for usage mistakes, tables that never cut an id or a path, `recipe show`
that shows the whole recipe."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from flashbuild.arch import ArchSpec, parse_arch, parse_arch_spec
from flashbuild.cli import app
from flashbuild.console import DEGRADE_ERRORS, Column, plural, render_table
from flashbuild.errors import UsageError


def test_no_arch_and_no_gpu_does_not_quote_an_option_the_user_never_typed() -> None:
    with pytest.raises(UsageError) as typed:
        parse_arch_spec("native").resolve_native([])
    assert "`--arch native` needs a GPU" in typed.value.what
    with pytest.raises(UsageError) as default:
        parse_arch_spec("native").resolve_native([], typed=False)
    assert "native" not in default.value.what and "no --arch was given" in default.value.what
    assert "--arch sm120" in default.value.fix


@pytest.mark.parametrize(("typed", "meant"), [("sm12", "sm_120"), ("sm_12", "sm_120"),
                                              ("10", "sm_100"), ("sm_95", "sm_90")])
def test_a_mistyped_arch_suggests_what_was_meant(typed: str, meant: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_arch(typed)
    assert f"did you mean {meant}?" in err.value.evidence, err.value.evidence


def test_a_missing_source_tree_is_named_as_missing(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text('[recipe]\nname = "r"\n[source]\npath = "upstream"\n'
                      '[build]\nbackend = "setuptools"\n', encoding="utf-8")
    res = CliRunner().invoke(app, ["build", "--recipe", str(recipe), "--arch", "sm120"])
    assert res.exit_code == 10  # as `patch` has it for a missing tree
    assert f"the source tree {tmp_path / 'upstream'} does not exist" in res.output
    assert "setup.py" not in res.output and "recipe init" not in res.output
    assert "--source path/to/upstream" in res.output


@pytest.mark.parametrize(("argv", "what", "fix"), [
    (["buidl"], "error: no such command 'buidl'.", "fix: did you mean 'build'?"),
    (["build", "--jbos", "3"], "error: no such option: --jbos.", "--jobs"),
    (["recipe", "show"], "error: missing argument 'NAME'.", "flashbuild recipe show --help"),
])
def test_usage_errors_in_flashbuilds_own_form(argv: list[str], what: str, fix: str) -> None:
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2
    lines = res.output.splitlines()
    assert lines[0] == what, res.output
    assert lines[-1].startswith("fix:") and fix in lines[-1], res.output
    assert "\u256d" not in res.output and "Error" not in res.output  # no Typer panel


@pytest.mark.parametrize("argv", [[], ["recipe"]])
def test_a_bare_group_prints_its_help_and_exits_0(argv: list[str]) -> None:
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0 and "Usage:" in res.output and "Commands" in res.output


def test_plural() -> None:
    assert [plural(n, "file") for n in (0, 1, 2)] == ["0 files", "1 file", "2 files"]


def _render(width: int, rows: list[list[str]], encoding: str = "utf-8") -> str:
    """What a pipe of `encoding` receives (with the error handler the CLI installs)."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, errors=DEGRADE_ERRORS)
    console = Console(file=stream, width=width, color_system=None, emoji=False,
                      highlight=False)
    render_table(console, "steps", [Column("id", key=True), Column("what"),
                                    Column("path", key=True)], rows)
    stream.flush()
    return raw.getvalue().decode(encoding)


LONG = "/home/someone/projects/kernels/recipes/patches/a-rather-long-diff-name.patch"


def test_a_table_that_fits_is_a_table() -> None:
    out = _render(120, [["sm120-allow-list", "a diff", LONG]])
    assert "sm120-allow-list" in out and LONG in out and "\u2026" not in out
    widths = {len(line) for line in out.splitlines()[1:]}
    assert len(widths) == 1


def test_a_table_too_wide_for_the_terminal_becomes_a_list_with_nothing_cut() -> None:
    out = _render(60, [["portable-dynamic-loading", "make dlopen portable", LONG]])
    assert "\u2026" not in out and "..." not in out
    assert "- portable-dynamic-loading" in out and f"    path: {LONG}" in out


def test_cells_are_measured_as_the_encoding_will_print_them() -> None:
    out = _render(80, [["a", "x \u2192 y", "p"], ["bb", "plain", "q"]], encoding="ascii")
    assert "x -> y" in out
    rows = [line for line in out.splitlines() if line.startswith("|")]
    assert len({len(line) for line in rows}) == 1, out


def test_an_empty_table_is_one_line() -> None:
    assert _render(80, []).strip() == "steps: none"


def test_recipe_show_shows_the_setuptools_backend_env_and_install(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        '[recipe]\nname = "r"\n[source]\npath = "."\n[build]\nbackend = "setuptools"\n'
        '[[build.env]]\nwhen = { platform = "windows" }\nset = { X_FORCE_BUILD = "TRUE" }\n'
        '[[artifact]]\nname = "r_cuda"\nkind = "module"\n'
        '[install]\npackage = "r"\npackage_dir = "r"\n', encoding="utf-8")
    res = CliRunner().invoke(app, ["recipe", "show", str(recipe)], terminal_width=100)
    assert res.exit_code == 0, res.output
    assert "build: backend setuptools" in res.output
    assert "build env (platform=windows): X_FORCE_BUILD=TRUE" in res.output
    assert "artifact r_cuda (module)" in res.output and "target )" not in res.output
    assert "install: package `r` from r" in res.output
    assert "patch steps: none" in res.output


def test_recipe_show_of_csrc_names_its_cmake_options() -> None:
    res = CliRunner().invoke(app, ["recipe", "show", "csrc"], terminal_width=100)
    assert "cmake : -D" not in res.output
    assert "cmake options (always): -DCMAKE_BUILD_TYPE=Release" in res.output
    assert "build: backend cmake" in res.output


def test_arch_spec_default_is_unchanged() -> None:
    assert parse_arch_spec("native").resolve_native([(12, 0)], typed=False) == ArchSpec(
        (parse_arch("sm120"),))


@pytest.mark.parametrize(("run_gpu", "gpu", "why"), [
    (None, False, "no NVIDIA GPU on this machine"),
    (None, True, "the package was not imported"),
    (False, True, "--no-gpu was given"),
])
def test_verify_says_why_the_gpu_self_check_was_skipped(run_gpu: bool | None, gpu: bool,
                                                       why: str) -> None:
    from flashbuild.verifying.verify import Expectations, Status, _runtime_checks

    def no_process(*args: object, **kwargs: object) -> object:
        raise AssertionError("no process may start")

    checks = _runtime_checks("flashkern", Expectations(), run_gpu=run_gpu, bench=False,
                             runner=no_process, python="python", env={}, search_path=None,
                             selfcheck=(), import_module=False, gpu_present=lambda: gpu,
                             prior=())
    skipped = [c for c in checks if c.area == "gpu"]
    assert skipped and skipped[0].status is Status.SKIP
    assert skipped[0].summary == f"no GPU self-check: {why}"


def test_why_a_toolkit_was_chosen_completes_a_sentence() -> None:
    from flashbuild.detect.cuda import _WHY

    for origin, why in _WHY.items():
        sentence = f"chosen because {why}"
        words = sentence.split()
        # "because" is followed by a clause: a subject (it / its nvcc / VAR) and a verb.
        assert words[2] in {"it", "its"} or words[2].isupper(), (origin, sentence)
        assert any(w in words for w in ("is", "was", "points")), (origin, sentence)


def test_doctor_rule_ids_name_the_check_not_a_failure() -> None:
    """An `ok` verdict under `toolkit.missing` read as a failure: ids name what is checked."""
    from flashbuild.detect.rules import RULES

    failure_words = ("missing", "too-", "mismatch", "cannot", "outside", "found", "none")
    for rule in RULES:
        assert not any(word in rule for word in failure_words) or rule in _ONLY_WHEN_WRONG, rule


#: Rules that only ever report a problem (never an `ok` verdict) may be named for it.
_ONLY_WHEN_WRONG = {"toolkit.half-installed", "toolkit.version-unknown", "toolkit.too-old",
                    "toolkit.arch-removed", "torch.arch-missing", "driver.older-than-toolkit"}


def test_python_header_is_looked_for_in_the_include_folder(tmp_path: Path) -> None:
    from flashbuild.detect.pyenv import python_header

    assert python_header(str(tmp_path)) is None and python_header(None) is None
    (tmp_path / "Python.h").write_text("", encoding="utf-8")
    assert python_header(str(tmp_path)) == str(tmp_path / "Python.h")


def test_distribution_ids_read_id_and_id_like() -> None:
    from flashbuild.platforms.linux import distribution_ids

    assert distribution_ids('ID=ubuntu\nID_LIKE="debian"\n') == ["ubuntu", "debian"]
    assert distribution_ids('ID="rocky"\nID_LIKE="rhel centos fedora"\n')[:2] == ["rocky", "rhel"]


def test_build_with_no_arch_on_a_machine_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.detect import gpu

    monkeypatch.setattr(gpu, "probe_gpus", lambda env, runner: gpu.GpuReport((), None, None,
                                                                            "none"))
    res = CliRunner().invoke(app, ["build"])
    assert res.exit_code == 2
    assert "no --arch was given, and there is no GPU to build for" in res.output
    assert "--arch native" not in res.output
