"""The command-line interface: a thin Typer layer.

Each command parses its options and calls one stage function; there is no logic here. Stage
modules are imported inside the commands so `flashbuild --help` starts fast. Errors are caught
at this edge (`_edge`): a `FlashbuildError` is printed as one paragraph and becomes its exit
code; anything else is a bug, shown with its traceback only under `--debug`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec

import typer
from typer.core import TyperCommand, TyperGroup

from flashbuild import __version__, interrupts
from flashbuild.console import prepare_streams, ui
from flashbuild.errors import FlashbuildError, Interrupted, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

def _flags_take_no_value(params: list[Any]) -> list[Any]:
    """Typer's help shows a `<bool>` placeholder after every flag (`--json <bool>`), as if it
    took a value; an empty metavar shows nothing, which is what a flag takes."""
    for param in params:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
            param.metavar = ""
    return params


def paragraphs(text: str | None) -> str | None:
    """Help text with each paragraph on one line, for the help screen to wrap at the
    terminal's width (Typer keeps a docstring's hard line breaks after the first paragraph)."""
    if text is None:
        return None
    return "\n\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def summary(text: str | None) -> str:
    """The first paragraph of a command's help as one line: what the command list shows (the
    whole docstring there, with its hard line breaks, is ragged at any width)."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


class _Command(TyperCommand):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = paragraphs(self.help)
        if self.short_help is None:
            self.short_help = summary(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_take_no_value(super().get_params(ctx))


class _Group(TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = paragraphs(self.help)
        if self.short_help is None:
            self.short_help = summary(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_take_no_value(super().get_params(ctx))

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        """Click's usage errors (an unknown option, a missing argument) in flashbuild's own
        `error:` / `fix:` form with exit 2, instead of Typer's boxed panel beside it; a bare
        `flashbuild` (or `flashbuild recipe`) prints its help and exits 0."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode,
                                windows_expand_args, **extra)
        exceptions = _click_exceptions()
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args,
                                **extra)
        except exceptions.ClickException as exc:
            # click >= 8.2 raises this for a bare group (its own exit code is 2).
            if type(exc).__name__ == "NoArgsIsHelpError":
                typer.echo(exc.ctx.get_help())
                code = 0
            else:
                _report(_usage_error(exc))
                code = exc.exit_code
        except typer.Abort:
            code = 1
        if code == 130:
            # Typer turns a KeyboardInterrupt in its own parsing or dispatch (outside any
            # command's _edge) into Exit(130) and prints nothing: seen under load, SIGTERM
            # 0.05 s after start-up (tests/reliability/test_signals.py).
            message = interrupts.unreported_message()
            interrupts.finished()
            if message is not None:
                sys.stderr.write(message)
        sys.exit(code if isinstance(code, int) else 0)


def _click_exceptions() -> Any:
    """The exception module of the click Typer runs on: newer Typer vendors its own copy."""
    import typer.core

    vendored = getattr(typer.core, "_click", None)
    if vendored is not None:
        return vendored.exceptions
    import importlib

    return importlib.import_module("click.exceptions")


def _usage_error(exc: Any) -> FlashbuildError:
    """A Click exception as a FlashbuildError: its message, the usage line as evidence, and
    where the options are listed as the fix."""
    from flashbuild.errors import UsageError

    ctx = getattr(exc, "ctx", None)
    usage = ctx.get_usage().strip() if ctx is not None else ""
    command = ctx.command_path if ctx is not None else "flashbuild"
    message = exc.format_message().strip()
    # Click's suggestion ("Did you mean 'build'?", "(Possible options: --jobs, --json)") is
    # the fix, not part of what failed.
    what, _sep, hint = _split_hint(message)
    fix = f"see `{command} --help`"
    if hint:
        fix = f"{hint} ({fix})"
    return UsageError(what[:1].lower() + what[1:], evidence=" ".join(usage.split()), fix=fix)


def _split_hint(message: str) -> tuple[str, str, str]:
    """Click's message and the suggestion it appends, apart."""
    for marker, lead in ((". Did you mean ", "did you mean "), (" Did you mean ", "did you mean "),
                         (" (Possible options: ", "possible options: ")):
        what, sep, hint = message.partition(marker)
        if sep:
            return what, sep, lead + hint.rstrip(")?.") + ("?" if "mean" in lead else "")
    return message, "", ""


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
ci_app = typer.Typer(cls=_Group, help="Write CI workflows that build a tree's wheel matrix.",
                     no_args_is_help=True)
app.add_typer(ci_app, name="ci")

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
        interrupts.begin()
        try:
            _check_cwd()
            code = func(*args, **kwargs) or 0
        except FlashbuildError as exc:
            if isinstance(exc, Interrupted):
                _end_children()
            _report(exc)
            interrupts.mark_reported()
            code = exc.exit_code
        except KeyboardInterrupt:
            _end_children()
            exc2 = Interrupted(
                f"interrupted by {interrupts.describe()}",
                evidence="every process flashbuild had started was ended",
                fix="run the same command again: patching repairs or reverts, and the build "
                "resumes where ninja stopped")
            _report(exc2)
            interrupts.mark_reported()
            code = exc2.exit_code
        except (typer.Exit, typer.Abort):
            raise
        except Exception as bug:  # the edge: a bug still gets one clear paragraph
            if isinstance(bug, OSError) and _stdout_broken(bug):
                # stdout on /dev/full (ENOSPC), a closed pipe or fd: an internal error, then
                # a second traceback when Python flushed stdout at exit (issue 27).
                out_err = UsageError(
                    "flashbuild could not write its output to stdout",
                    evidence=f"{type(bug).__name__}: {bug.strerror or bug}",
                    fix="send stdout to a file or pipe that can take it (a disk with space)")
                _report(out_err)
                raise typer.Exit(out_err.exit_code) from None
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


def _stdout_broken(bug: OSError) -> bool:
    """Whether `bug` came from writing stdout (a frame of its traceback holds stdout, or the
    console that writes to it); when so, stdout is pointed at the null device so that the
    flush at exit cannot fail a second time."""
    outs = {id(sys.stdout), id(sys.__stdout__), id(getattr(sys.stdout, "buffer", None))}
    tb = bug.__traceback__
    hit = False
    while tb is not None and not hit:
        for value in tb.tb_frame.f_locals.values():
            if id(value) in outs or id(getattr(value, "file", None)) in outs:
                hit = True
                break
        tb = tb.tb_next
    if hit:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return hit


def _check_cwd() -> None:
    """Raise UsageError when the current folder no longer exists: every relative path (and
    `Path.cwd()` in doctor and build) failed later as an internal error (issue 27)."""
    try:
        Path.cwd()
    except FileNotFoundError as exc:
        raise UsageError(
            "the current folder no longer exists (it was deleted or moved after this shell "
            "entered it)", evidence=f"getcwd: {exc.strerror}",
            fix="`cd` into an existing folder and run again") from exc


def _end_children() -> None:
    """A stop signal ends every child still running, also those a worker thread started
    (doctor's probes), before the message: nothing outlives the run (proc.py)."""
    from flashbuild.proc import end_all_children

    with interrupts.shielded():
        end_all_children()


def _report(exc: FlashbuildError) -> None:
    # A second Ctrl-C while the message prints must not turn it into a traceback.
    with interrupts.shielded():
        _print_error(exc)


def _print_error(exc: FlashbuildError) -> None:
    if ui.debug:
        import traceback

        traceback.print_exception(exc)
    if ui.json_mode:
        ui.emit_json({"ok": False, **exc.to_json()})
    from rich.markup import escape

    what = exc.what.rstrip(".")
    ui.err.print(f"[bold red]error:[/] {escape(what)}{'' if what.endswith(('?', '!')) else '.'}")
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
    packages: Annotated[bool, typer.Option(
        "--packages", help="Check the installed packages instead of the build toolchain: "
        "which distributions carry GPU code (SASS/PTX in their .so/.pyd/.dll files, read "
        "without importing them) that the GPUs present, or --arch, cannot run.")] = False,
) -> int:
    """Check this machine for CUDA extension builds.

    Detect the CUDA toolchain, compilers, GPUs and Python; say what blocks a build and how
    to fix it. Exit 0 when nothing blocks a build, 3 otherwise.

    With --packages: for each installed distribution whose binaries hold GPU code, and each
    GPU (or --arch), say `fails` (no image runs there: "no kernel image is available"), `jit`
    (only PTX runs: a slow first launch) or `ok` (SASS). Exit 3 when one fails."""
    ui.configure(json_mode=json)
    if packages:
        from flashbuild.pipeline.installed import run_packages

        return run_packages(arch=arch, as_json=json)
    from flashbuild.detect.doctor import run_doctor

    return run_doctor(arch=arch, cuda=cuda, as_json=json, use_cache=not no_cache)


@app.command(cls=_Command)
@_edge
def verify(
    path: Annotated[Path | None, typer.Argument(
        metavar="[PATH]", help="What to verify: a binary (.so/.pyd), a folder, a wheel (.whl, "
        "read without installing it), or a flashbuild-manifest.json. Default: the installed "
        "`flashkern` package.")] = None,
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
    allow_placeholders: Annotated[bool, typer.Option(
        "--allow-placeholders", help="Warn instead of failing when most (not all) kernels of "
        "a target only trap there: for a library that calls only its other kernels on that "
        "arch.")] = False,
    recipe: Annotated[str | None, typer.Option(
        "--recipe", "-r", help="Take the exports, kernels and dynamic_smem to check from this "
        "recipe's \\[verify] table (name or TOML file) instead of the manifest: for a binary "
        "built without flashbuild.")] = None,
    policy: Annotated[str | None, typer.Option(
        "--policy", help="manylinux policy the ELF binaries' glibc/libstdc++ symbol versions "
        "must fit: manylinux2014, manylinux_2_17, manylinux_2_28, manylinux_2_34, "
        "manylinux_2_39. Default: a wheel's own manylinux tag.")] = None,
    json: JsonOpt = False,
    bench: Annotated[bool, typer.Option("--bench", help="Also run the bandwidth benchmark.")]
    = False,
    gpu: Annotated[bool | None, typer.Option(
        "--gpu/--no-gpu", help="Run the kernel self-check. Default: when a GPU and torch "
        "are present.")] = None,
) -> int:
    """Prove a binary, wheel or package is right for the target GPU.

    Built by flashbuild or not: per binary the target's SASS present and no other arch's,
    the recipe's kernels in the cubins, libraries that resolve, kernel resources within the
    arch's limits, a clean import of an installed package, and on a GPU the kernels'
    self-check. Exit 0 when every check passes, 8 when one
    fails or the input holds no binary, 2 when PATH does not exist."""
    ui.configure(json_mode=json)
    from flashbuild.verifying.command import run_verify

    return run_verify(path=path, package=package, arch=arch, as_json=json, bench=bench,
                      gpu=gpu, strict_arch=strict_arch, recipe=recipe,
                      allow_placeholders=allow_placeholders, policy=policy)


@app.command(cls=_Command)
@_edge
def repair(
    wheels: Annotated[list[Path], typer.Argument(
        metavar="WHEEL...", help="Linux wheels to retag (`linux_x86_64`, as `flashbuild "
        "build` writes them); Windows wheels (`win_amd64`) to check.", show_default=False)],
    *,
    policy: Annotated[str, typer.Option(
        "--policy", help="manylinux policy to tag the wheels with: manylinux_2_17, "
        "manylinux_2_28, manylinux_2_34, manylinux_2_39.")] = "manylinux_2_28",
    wheel_dir: Annotated[Path | None, typer.Option(
        "--wheel-dir", "-w", help="Where to write the retagged wheels. Default: beside each "
        "wheel.")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        "--exclude", help="A library (soname, wildcards allowed) a requirement of the wheel "
        "provides, left outside it; repeatable.")] = None,
    json: JsonOpt = False,
) -> int:
    """Tag Linux wheels with a manylinux policy, bundling nothing.

    Only when every ELF binary's GLIBC_/GLIBCXX_/CXXABI_ versions fit the policy (verify's
    table) and every library it needs is in the wheel, a system library the policy allows, or
    one of torch, the CUDA runtime and libraries or the driver (never bundled), or --exclude;
    then the file name, WHEEL's tags and RECORD are rewritten. A Windows wheel is checked by
    the same rule for the DLLs its .pyd files import (torch's, CUDA's and nvcuda.dll are
    never bundled) and copied unchanged. Exit 8 naming each symbol version or library that
    forbids it; 2 for a wheel that is neither a Linux nor a Windows platform wheel."""
    ui.configure(json_mode=json)
    from flashbuild.verifying.command import run_repair

    return run_repair(wheels=wheels, policy=policy, out_dir=wheel_dir, exclude=exclude or [],
                      as_json=json)


@app.command(cls=_Command)
@_edge
def patch(
    path: Annotated[Path | None, typer.Argument(
        help="The tree to patch. Without --recipe: the bundled recipe that matches the tree "
        "by its content (as `build PATH` chooses it); no match is an error that says how to "
        "draft one with `recipe init`.", show_default=False)] = None,
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
    """Apply a recipe's patches to its source tree.

    The recipe is chosen as `build PATH` chooses it and said in one line: --recipe, else the
    bundled recipe that matches PATH by content (exit 4 when none does: patch writes into the
    tree, so it never uses an unreviewed draft), else with no tree the bundled csrc library.
    Transactional: re-applying rewrites nothing, an interrupted run is repaired by the next
    one, --revert restores the tree byte for byte. Exit 5 when a patch does not
    apply (the tree is left unchanged), 9 when another run holds the tree, 10 when a file was
    changed since flashbuild patched it or the tree's flashbuild state cannot be trusted."""
    ui.configure(json_mode=json)
    from flashbuild.pipeline.command import run_patch_command

    return run_patch_command(path=path, recipe=recipe, source=source, platform=platform,
                             arch=arch, dry_run=dry_run, diff=diff, explain=explain,
                             revert=revert, as_json=json, discard_edits=discard_edits)


@app.command(cls=_Command)
@_edge
def build(
    path: Annotated[Path | None, typer.Argument(
        help="The tree to build. Without --recipe: the bundled recipe that matches the tree "
        "by its content, else a recipe drafted as `recipe init` drafts it (written into the "
        "build root for review).", show_default=False)] = None,
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
    contain: Annotated[bool, typer.Option(
        "--contain", help="Run the configure and compile contained, as introspection runs "
        "a tree's scripts: on Linux a network namespace (no host reachable) and a PID "
        "namespace (nothing outlives the build), else proxies to a closed port; pip with "
        "--no-build-isolation and no index. A build that downloads fails with one "
        "paragraph saying so.")] = False,
    deps: Annotated[bool, typer.Option(
        "--deps/--no-deps", help="Install the tree's missing build requirements and its "
        "package's missing dependencies, with every installed distribution (torch) pinned "
        "to its version; --no-deps only names them with the pip command.")] = True,
    json: JsonOpt = False,
) -> int:
    """Patch, configure, compile and install a tree for the target GPU.

    The recipe's backend builds it: CMake + Ninja, or setuptools (a torch cpp_extension
    setup.py). Exit 6 when the build fails (log
    kept, previous install intact), 130 when interrupted (run again to resume)."""
    ui.configure(json_mode=json)
    from flashbuild.pipeline.command import one_tree, run_build

    return run_build(recipe=recipe, source=one_tree(path, source, command="build"), arch=arch,
                     cuda=cuda, platform=platform, jobs_text=jobs, launcher_text=launcher,
                     install_text=install, build_dir=build_dir, as_json=json, in_place=in_place,
                     contain=contain, deps=deps)


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
    name: Annotated[str, typer.Argument(metavar="NAME",
                                        help="Bundled recipe name or recipe file.")],
    json: JsonOpt = False,
) -> int:
    """Show a recipe's steps, build settings and artifacts."""
    ui.configure(json_mode=json)
    from flashbuild.recipes.report import show_recipe

    return show_recipe(name, as_json=json)


@recipe_app.command(cls=_Command, name="check")
@_edge
def recipe_check(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Recipe TOML file to validate.")],
    json: JsonOpt = False,
) -> int:
    """Validate a recipe file.

    Exit 4 with the file:line of the first problem."""
    ui.configure(json_mode=json)
    from flashbuild.recipes.report import check_recipe

    return check_recipe(file, as_json=json)


ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Overwrite an existing file inside the tree being read (refused without "
    "it: the tree's own files are not output).")]
ScanArchOpt = Annotated[str, typer.Option(
    "--arch", "-a", help="Target GPU(s) to judge the tree for: sm120, sm_90a, '90a;120'.")]


@app.command(cls=_Command)
@_edge
def scan(  # noqa: PLR0917 - Typer maps each option to a parameter
    source: Annotated[Path, typer.Argument(metavar="[SOURCE]",
                                           help="Root of the tree to scan.")] = Path(),
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
    force: ForceOpt = False,
    static: Annotated[bool, typer.Option(
        "--static", help="Execute nothing: read the text only (no build introspection, no "
        "preprocessor, no compiler); for untrusted trees. By default the scan configures the "
        "tree (CMake) or runs its setup.py in record mode, as building does.")] = False,
    compile_units: Annotated[bool, typer.Option(
        "--compile", help="Confirm instruction findings (FB160/FB170) by compiling their "
        "units for the target, however many (by default only when two or fewer are needed).")]
    = False,
) -> int:
    """List what will break in a kernel tree for a platform and GPU.

    Asks the tree's build what it compiles (configure or setup.py record, nothing compiled;
    this machine's platform only), reads the tree's C++/CUDA, CMake, setup.py and Python and
    lists what will break for the target platform and arch, with the fix for each. A
    finding `build` takes care of (by itself, or with a step of the bundled recipe that
    matches the tree, which the report names) is at most a warning. Exit 11 when errors were
    found: the build fails without a change."""
    ui.configure(json_mode=json)
    from flashbuild.pipeline.scan import scan_command

    return scan_command(source, platform=platform, arch=arch, as_json=json, sarif=sarif,
                        include_vendored=include_vendored, jobs=jobs, force=force,
                        static=static, compile_units=compile_units)


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
    force: ForceOpt = False,
    static: Annotated[bool, typer.Option(
        "--static", help="Execute nothing from the tree: draft the build tables from its text "
        "only, without configuring CMake or running setup.py in record mode.")] = False,
    draft: Annotated[bool, typer.Option(
        "--draft", help="Draft a recipe even when a bundled recipe matches the tree (without "
        "it such a tree gets none: the bundled recipe is named instead).")] = False,
) -> int:
    """Draft a recipe for a tree from a scan.

    A \\[\\[patch]] step for every finding a transform fixes, and a commented TODO with the
    evidence for every finding that needs a person. A tree that a bundled recipe matches by
    content (as `build PATH` chooses it) gets no draft unless --draft: the bundled recipe is
    named, with the findings its steps fix and the commands that use it."""
    ui.configure(json_mode=json)
    from flashbuild.pipeline.recipe_init import init_command

    return init_command(source, platform=platform, arch=arch, output=output, as_json=json,
                        check=compile_check, force=force, static=static, draft=draft)


@ci_app.command(cls=_Command, name="init")
@_edge
def ci_init(  # noqa: PLR0917 - Typer maps each option to a parameter
    recipe: Annotated[str, typer.Option(
        "--recipe", "-r", help="Bundled recipe name, or a recipe file inside the tree.")],
    arch: Annotated[str, typer.Option(
        "--arch", "-a", help="Targets every job builds: '90a;120', sm120, 120f.")],
    platform: Annotated[str, typer.Option(
        "--platform", help="Platforms of the matrix: linux, windows or linux,windows.")]
    = "linux,windows",
    cuda: Annotated[str, typer.Option(
        "--cuda", help="CUDA versions of the matrix (major.minor): 12.9,13.0.")] = "13.0",
    python: Annotated[str, typer.Option(
        "--python", help="Python versions of the matrix: 3.11,3.12,3.13.")] = "3.12",
    runner: Annotated[list[str] | None, typer.Option(
        "--runner", help="PLATFORM=LABEL, a GitHub-hosted runner label to use instead of "
        "the default (ubuntu-24.04, windows-2022); repeatable.")] = None,
    source: Annotated[Path | None, typer.Option(
        "--source", "-s", help="The tree (its repository's top folder). Default: a recipe "
        "file's \\[source] path; here for a bundled recipe.")]
    = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Where to write the workflow. Default: "
        "<tree>/.github/workflows/flashbuild.yml.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing file.")] = False,
    torch: Annotated[str | None, typer.Option(
        "--torch", help="torch release (2.9.1) or specifier the jobs install. Default: the "
        "newest build for each CUDA.")] = None,
    flashbuild_spec: Annotated[str | None, typer.Option(
        "--flashbuild-spec", help="What the jobs pip-install to get flashbuild. Default: "
        "this flashbuild's own git checkout, as its remote URL pinned to the commit "
        "(refused when it is not one).")] = None,
    max_job_hours: Annotated[float | None, typer.Option(
        "--max-job-hours", help="The compile time a job may be estimated at (default 5; "
        "GitHub cancels a hosted job at 6 h); a slower job is split by arch group.")] = None,
    unit_seconds: Annotated[float | None, typer.Option(
        "--unit-seconds", help="Core-seconds one compile unit takes per arch, from a build "
        "of this tree. Default: the slowest measured (docs/ci.md).")] = None,
    linux_image: Annotated[str | None, typer.Option(
        "--linux-image", help="Where the Linux legs build: manylinux_2_28 (default: the PyPA "
        "image, wheels tagged manylinux_2_28) or none (the runner itself, wheels tagged "
        "linux_x86_64).")] = None,
    json: JsonOpt = False,
) -> int:
    """Write a GitHub Actions workflow that builds the tree's wheels over a matrix of
    platforms, CUDA and Python versions (doctor, build, verify per job; sccache on the GitHub
    Actions cache; a release job that collects the wheels). Each job's compile time is
    estimated from the tree's compile units; a job over --max-job-hours becomes one job and
    one wheel per arch group, and an abi3 wheel is built once for all its Pythons. Exit 2 for
    an arch a CUDA of the matrix cannot compile, one arch alone estimated past
    --max-job-hours, an unknown runner label or an existing file without --force; 4 for a
    recipe without \\[install]; nothing is written then."""
    ui.configure(json_mode=json)
    from flashbuild.ci.command import run_ci_init

    return run_ci_init(recipe=recipe, arch=arch, platform=platform, cuda=cuda, python=python,
                       runners=runner or [], source=source, output=output, force=force,
                       flashbuild_spec=flashbuild_spec, torch=torch, as_json=json,
                       max_job_hours=max_job_hours, unit_seconds=unit_seconds,
                       linux_image=linux_image)


def main() -> None:
    """Run the CLI (flashbuild/__main__.py is the entry point: it installs the stop signals'
    handler before this module's imports; installing it again here is harmless)."""
    try:
        # Inside the try: a stop signal that lands here (the entry point's handler is already
        # in place) gets the one-line message too, not a silent exit 130.
        interrupts.install()
        # Before Typer prints anything (--help included): output must survive a legacy code
        # page.
        prepare_streams()
        app()
    except KeyboardInterrupt:  # before or during Typer's own parsing, outside any _edge
        interrupts.finished()
        sys.stderr.write(interrupts.startup_message())
        sys.exit(130)
    finally:
        # The exit code is decided: a signal from now on cannot print a traceback.
        interrupts.finished()
