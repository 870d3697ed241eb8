"""The command-line interface: a thin Typer layer.

Each command parses its options and calls one stage function; there is no logic here. Stage
modules are imported inside the commands so `flashbuild --help` starts fast. Errors are caught
at this edge (`_edge`): a `FlashbuildError` is printed as one paragraph and becomes its exit
code; anything else is a bug, shown with its traceback only under `--debug`.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec

import typer
from typer.core import TyperCommand, TyperGroup

from flashbuild import __version__
from flashbuild.console import prepare_streams, ui
from flashbuild.errors import FlashbuildError, Interrupted

if TYPE_CHECKING:
    from collections.abc import Callable

def _flags_take_no_value(params: list[Any]) -> list[Any]:
    """Typer's help shows a `<bool>` placeholder after every flag (`--json <bool>`), as if it
    took a value; an empty metavar shows nothing, which is what a flag takes."""
    for param in params:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
            param.metavar = ""
    return params


class _Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_take_no_value(super().get_params(ctx))


class _Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_take_no_value(super().get_params(ctx))


app = typer.Typer(
    cls=_Group,
    name="flashbuild",
    help="Detect, patch, build, install and verify CUDA kernel extensions for new GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
recipe_app = typer.Typer(cls=_Group, help="List, show, check and draft recipes.",
                         no_args_is_help=True)
app.add_typer(recipe_app, name="recipe")

P = ParamSpec("P")

ArchOpt = Annotated[str | None, typer.Option(
    "--arch", "-a", help="Target GPU(s): sm120, sm_90a, 12.0, 120f, '90a;120', native. "
    "Default: the GPUs found.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON document on stdout.")]
RecipeOpt = Annotated[str | None, typer.Option(
    "--recipe", "-r", help="Recipe name or TOML file. Default: the bundled csrc recipe.")]
SourceOpt = Annotated[Path | None, typer.Option(
    "--source", "-s", help="Source tree the recipe applies to (overrides the recipe's).")]
PlatformOpt = Annotated[str | None, typer.Option(
    "--platform", help="Plan for another OS: linux or windows. Default: this machine's.")]
CudaOpt = Annotated[Path | None, typer.Option(
    "--cuda", help="CUDA toolkit root (or its nvcc) to use instead of the one doctor picks.")]


def _edge(func: Callable[P, int | None]) -> Callable[P, None]:
    """Turn a stage's result or error into an exit code, printing errors for people."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            code = func(*args, **kwargs) or 0
        except FlashbuildError as exc:
            _report(exc)
            code = exc.exit_code
        except KeyboardInterrupt:
            exc2 = Interrupted(
                "interrupted",
                fix="run the same command again: patching repairs or reverts, and the build "
                "resumes where ninja stopped")
            _report(exc2)
            code = exc2.exit_code
        except (typer.Exit, typer.Abort):
            raise
        except Exception as bug:  # the edge: a bug still gets one clear paragraph
            exc3 = FlashbuildError(
                f"flashbuild hit an internal error: {type(bug).__name__}: {bug}",
                fix="rerun with --debug for the traceback and report it; this is a bug in "
                "flashbuild, not in your setup")
            if ui.debug:
                import traceback

                traceback.print_exception(bug)
            _report(exc3)
            code = exc3.exit_code
        raise typer.Exit(code)

    return wrapper


def _report(exc: FlashbuildError) -> None:
    if ui.debug:
        import traceback

        traceback.print_exception(exc)
    if ui.json_mode:
        ui.emit_json({"ok": False, **exc.to_json()})
    from rich.markup import escape

    ui.err.print(f"[bold red]error:[/] {escape(exc.what.rstrip('.'))}.")
    if exc.evidence:
        ui.err.print(f"[dim]{escape(exc.evidence)}[/]")
    if exc.fix:
        ui.err.print(f"[bold]fix:[/] {escape(exc.fix)}")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"flashbuild {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every command run.")]
    = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    ui.configure(verbose=verbose, debug=debug)


@app.command(cls=_Command)
@_edge
def doctor(
    arch: ArchOpt = None,
    cuda: CudaOpt = None,
    json: JsonOpt = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Re-probe everything.")] = False,
) -> int:
    """Detect the CUDA toolchain, compilers, GPUs and Python; say what blocks a build and how
    to fix it. Exit 0 when nothing blocks a build, 3 otherwise."""
    ui.configure(json_mode=json)
    from flashbuild.detect.doctor import run_doctor

    return run_doctor(arch=arch, cuda=cuda, as_json=json, use_cache=not no_cache)


@app.command(cls=_Command)
@_edge
def verify(
    path: Annotated[Path | None, typer.Argument(
        help="What to verify: a binary (.so/.pyd), a folder, a wheel (.whl, read without "
        "installing it), or a flashbuild-manifest.json. Default: the installed `flashkern` "
        "package.")] = None,
    *,
    package: Annotated[str | None, typer.Option(
        "--package", "-p", help="Installed package (import or distribution name) to verify, "
        "found without importing it; its binaries come from its files.")] = None,
    arch: Annotated[str | None, typer.Option(
        "--arch", "-a", help="Target GPU(s): sm120, sm_90a, 12.0, '90a;120+PTX'. Default: "
        "the manifest's archs; with neither, images are listed, not judged.")] = None,
    strict_arch: Annotated[bool, typer.Option(
        "--strict-arch/--no-strict-arch", help="Fail a binary that holds SASS or PTX for an "
        "arch that is not a target (PTX of a target's own compute arch is allowed). "
        "--no-strict-arch lists them as a warning.")] = True,
    recipe: Annotated[str | None, typer.Option(
        "--recipe", "-r", help="Take the exports, kernels and dynamic_smem to check from this "
        "recipe's \\[verify] table (name or TOML file) instead of the manifest: for a binary "
        "built without flashbuild.")] = None,
    json: JsonOpt = False,
    bench: Annotated[bool, typer.Option("--bench", help="Also run the bandwidth benchmark.")]
    = False,
    gpu: Annotated[bool | None, typer.Option(
        "--gpu/--no-gpu", help="Run the kernel self-check. Default: when a GPU and torch "
        "are present.")] = None,
) -> int:
    """Prove a build is right for the target GPU, built by flashbuild or not: per binary the
    target's SASS present and no other arch's, the recipe's kernels in the cubins, libraries
    that resolve, kernel resources within the arch's limits, a clean import of an installed
    package, and on a GPU the kernels' self-check. Exit 0 when every check passes, 8 when one
    fails or the input holds no binary, 2 when PATH does not exist."""
    ui.configure(json_mode=json)
    from flashbuild.verifying.command import run_verify

    return run_verify(path=path, package=package, arch=arch, as_json=json, bench=bench,
                      gpu=gpu, strict_arch=strict_arch, recipe=recipe)


@app.command(cls=_Command)
@_edge
def patch(
    *,
    recipe: RecipeOpt = None,
    source: SourceOpt = None,
    platform: PlatformOpt = None,
    arch: ArchOpt = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the coloured diff of what would change; write nothing.")]
    = False,
    diff: Annotated[bool, typer.Option(
        "--diff", help="Print the diff of the patched tree against the original.")] = False,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Show every step, whether it applies, and why.")] = False,
    revert: Annotated[bool, typer.Option(
        "--revert", help="Restore the original tree byte for byte (with --dry-run: show what "
        "would be restored).")] = False,
    discard_edits: Annotated[bool, typer.Option(
        "--discard-edits", help="Overwrite or revert files changed since flashbuild patched "
        "them (without it such files stop the run, exit 10).")] = False,
    json: JsonOpt = False,
) -> int:
    """Apply a recipe's patches to its source tree, transactionally (re-applying rewrites
    nothing; an interrupted run is repaired by the next one). Exit 5 when a patch does not
    apply (the tree is left unchanged), 9 when another run holds the tree, 10 when a file was
    changed since flashbuild patched it or the tree's flashbuild state cannot be trusted."""
    ui.configure(json_mode=json)
    from flashbuild.patching.report import run_patch

    return run_patch(recipe=recipe, source=source, platform=platform, arch=arch,
                     dry_run=dry_run, diff=diff, explain=explain, revert=revert, as_json=json,
                     discard_edits=discard_edits)


@app.command(cls=_Command)
@_edge
def build(
    *,
    recipe: RecipeOpt = None,
    source: SourceOpt = None,
    arch: ArchOpt = None,
    cuda: CudaOpt = None,
    platform: PlatformOpt = None,
    jobs: Annotated[str, typer.Option(
        "--jobs", "-j", help="Parallel jobs: auto (min of cores and free RAM / per-job "
        "estimate) or a number.")] = "auto",
    launcher: Annotated[str, typer.Option(
        "--launcher", help="Compiler launcher: none, auto (sccache, then ccache), sccache, "
        "ccache.")] = "auto",
    install: Annotated[str, typer.Option(
        "--install", help="wheel (pip-install into this environment), inplace (next to the "
        "package in the source tree) or none.")] = "wheel",
    build_dir: Annotated[Path | None, typer.Option(
        "--build-dir", help="Use this build folder instead of one keyed by recipe, arch, "
        "platform, toolkit and host compiler.")] = None,
    in_place: Annotated[bool, typer.Option(
        "--in-place", help="Patch the source tree itself (revert with `flashbuild patch "
        "--revert`) instead of a mirror of it in the build folder.")] = False,
    json: JsonOpt = False,
) -> int:
    """Patch, configure (CMake + Ninja), compile and install. Exit 6 when the build fails (log
    kept, previous install intact), 130 when interrupted (run again to resume)."""
    ui.configure(json_mode=json)
    from flashbuild.building.command import run_build

    return run_build(recipe=recipe, source=source, arch=arch, cuda=cuda, platform=platform,
                     jobs_text=jobs, launcher_text=launcher, install_text=install,
                     build_dir=build_dir, as_json=json, in_place=in_place)


@recipe_app.command(cls=_Command, name="list")
@_edge
def recipe_list(json: JsonOpt = False) -> int:
    """List the bundled recipes."""
    ui.configure(json_mode=json)
    from flashbuild.recipes.report import list_recipes

    return list_recipes(as_json=json)


@recipe_app.command(cls=_Command, name="show")
@_edge
def recipe_show(
    name: Annotated[str, typer.Argument(help="Bundled recipe name or recipe file.")],
    json: JsonOpt = False,
) -> int:
    """Show a recipe: its steps and their conditions, build options and artifacts."""
    ui.configure(json_mode=json)
    from flashbuild.recipes.report import show_recipe

    return show_recipe(name, as_json=json)


@recipe_app.command(cls=_Command, name="check")
@_edge
def recipe_check(
    file: Annotated[Path, typer.Argument(help="Recipe TOML file to validate.")],
    json: JsonOpt = False,
) -> int:
    """Validate a recipe file (exit 4 with the file:line of the first problem)."""
    ui.configure(json_mode=json)
    from flashbuild.recipes.report import check_recipe

    return check_recipe(file, as_json=json)


ScanArchOpt = Annotated[str, typer.Option(
    "--arch", "-a", help="Target GPU(s) to judge the tree for: sm120, sm_90a, '90a;120'.")]


@app.command(cls=_Command)
@_edge
def scan(  # noqa: PLR0917 - Typer maps each option to a parameter
    source: Annotated[Path, typer.Argument(help="Root of the tree to scan.")] = Path(),
    arch: ScanArchOpt = "sm120",
    platform: PlatformOpt = None,
    json: JsonOpt = False,
    sarif: Annotated[Path | None, typer.Option(
        "--sarif", help="Also write the findings as SARIF 2.1.0 to this file.")] = None,
    include_vendored: Annotated[bool, typer.Option(
        "--include-vendored", help="Also scan vendored code: git submodules, third_party/-style "
        "folders, copies of CUTLASS/CCCL.")]
    = False,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", help="Worker processes (default: all cores).")] = None,
) -> int:
    """Read a kernel tree (C++/CUDA, CMake, setup.py, Python) and list what will break for the
    target platform and arch, with the fix for each. Exit 11 when errors were found."""
    ui.configure(json_mode=json)
    from flashbuild.scanning.report import run_scan

    return run_scan(source, platform=platform, arch=arch, as_json=json, sarif=sarif,
                    include_vendored=include_vendored, jobs=jobs)


@recipe_app.command(cls=_Command, name="init")
@_edge
def recipe_init(  # noqa: PLR0917 - Typer maps each option to a parameter
    source: Annotated[Path, typer.Option("--source", "-s", help="Tree to draft a recipe for.")],
    arch: ScanArchOpt = "sm120",
    platform: PlatformOpt = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the recipe here (default: print it).")] = None,
    json: JsonOpt = False,
    compile_check: Annotated[bool, typer.Option(
        "--compile-check", help="Compile each translation unit a drafted code step touches "
        "with nvcc for the target, before and after the step, and say so in the draft.")] = False,
    static: Annotated[bool, typer.Option(
        "--static", help="Execute nothing from the tree: draft the build tables from its text "
        "only, without configuring CMake or running setup.py in record mode.")] = False,
) -> int:
    """Draft a recipe from a scan: a \\[\\[patch]] step for every finding a transform fixes, and a
    commented TODO with the evidence for every finding that needs a person."""
    ui.configure(json_mode=json)
    from flashbuild.building.introspect import introspect_for_draft
    from flashbuild.scanning.draft import run_init

    return run_init(source, platform=platform, arch=arch, output=output, as_json=json,
                    check=compile_check, introspect=None if static else introspect_for_draft)


def main() -> None:
    """Console-script entry point."""
    # Before Typer prints anything (--help included): output must survive a legacy code page.
    prepare_streams()
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - during Typer's own parsing
        sys.exit(130)
