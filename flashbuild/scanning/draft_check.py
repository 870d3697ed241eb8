"""Drafts checked against the configured build, and drafts that agree with themselves.

`apply_model` replaces what `draft_build` guessed from the text with what the configured build
says (source/treemodel.py, from pipeline/introspect.py):

- `[build] targets` / `[[artifact]]`: only the module and shared-library targets this
  configuration defines (a target the CMakeLists defines only for another arch is left out,
  and a note says so);
- the tree's own arch variable (e.g. `GPU_ARCH`), confirmed by a configure, as a
  `[[build.options]]` define set from `--arch`;
- `[install]`: the package that holds the modules, also when its `__init__.py` does not import
  them (the tree's Python imports `pkg.module`);
- `[verify] exports`: only the names the configured build's bindings register (their unit
  preprocessed with its real flags), else none, with a TODO saying why;
- a setup.py that raised in record mode: the drafted `[[build.env]]` that made it raise is
  dropped, and a TODO quotes the exception.

`reconcile` makes the draft agree with itself (issue 21): a finding the drafted build
environment or the build hook already handles is listed as handled, not as a TODO.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from packaging.metadata import Metadata

from flashbuild import buildsystems
from flashbuild.scanning.draft import (
    BuildDraft,
    BuildTodo,
    Draft,
    DraftArtifact,
    _bound_names,
    _read,
    holding_package,
    install_beside_importer,
    install_from_imports,
    package_folder,
    plugin_exports_note,
)
from flashbuild.scanning.proposals import ForceBuild, NvccAppendFlag, handled_by_build
from flashbuild.source.setup_record import exception_fix

if TYPE_CHECKING:
    from collections.abc import Sequence

    from flashbuild.source.setup_record import RaisedError
    from flashbuild.source.treemodel import BuildTarget, TreeModel


def apply_model(d: Draft, model: TreeModel, root: Path, python_files: Sequence[str]) -> None:
    b = d.build
    if b is None:
        return
    b.notes["build"].append(f"read from the configured build ({model.via}, "
                            f"{model.seconds:.1f} s)")
    b.notes["build"] += list(model.notes)
    if buildsystems.get(model.system).compiles_cmake_targets:
        _cmake_targets(b, model)
        for name, value, why in model.needed_defines:
            b.options.append(({name: value}, f"{name}: {why}; the configure ran with "
                              f"{name}={value}"))
        if model.arch_variable is not None:
            var = model.arch_variable
            b.options.append(({var.name: "{" + var.form + "}"},
                              f"{var.name}: the CMakeLists builds its arch flags from it "
                              f"(configured with {var.name}={var.value}: {var.evidence})"))
        configured = [_module_name(t) for t in model.modules()]
        if b.package is None:
            install_from_imports(root, python_files, b, configured)
        _configured_top_level(b, configured)
        if b.package is None:
            install_beside_importer(root, python_files, b, configured)
        if b.package is None and not b.top_level and configured and not any(
                PurePosixPath(f).name == "__init__.py" for f in python_files):
            # Modules of a tree with no Python package (libKMCUDA's, a C-API module built as
            # a plain SHARED library): Python imports them by their own name. Where there is
            # a package, one that imports them in a way not read here stays a TODO.
            b.top_level = configured
            b.todos = [t for t in b.todos if t.table != "install"]
            b.notes["install"].append(
                f"top_level: the configured build's module(s) {', '.join(configured)}, in a tree "
                "with no Python package: installed where Python finds them by name")
    elif model.exception is not None:
        if any(t.evidence == str(model.exception) for t in b.todos):
            return _exports(b, model, root)
        b.todos.append(missing_file_todo(model.exception, root) or BuildTodo(
            table="build", what="setup.py raised when run as the build runs it (record mode)",
            evidence=str(model.exception),
            fix=exception_fix(str(model.exception)) or
            "set the project's own switches in [[build.env]] so that it accepts this "
            "arch and platform, or patch the check; flashbuild drafts no environment it "
            "cannot confirm"))
    else:
        _from_record(b, model, python_files, root)
    if model.jit:
        b.notes["build"].append(
            "kernels compiled at run time (not by this build): " + "; ".join(
                f"{j.how} at {j.where}" + (f" ({' '.join(j.arch_flags[:3])})"
                                           if j.arch_flags else "")
                for j in model.jit[:4]) + (" …" if len(model.jit) > 4 else ""))
    if model.network:
        b.notes["build"].append(
            "setup.py reached for the network in record mode (refused): " + "; ".join(
                f"{n.call} {n.target} at {n.where}" for n in model.network[:3]))
    _exports(b, model, root)


#: The labels of a PKG-INFO `Project-URL` that name where the sources live, in that order.
_SOURCE_LABELS = ("source", "source code", "repository", "code", "github", "homepage")


def repository_fix(root: Path, what: str) -> str:
    """The fix for files a source distribution left out: build from the project's repository
    at this version, named from the tree's PKG-INFO (a `Project-URL` for its sources, else
    `Home-page`) where it has one; `what` is what the copy left out."""
    url, version = "", ""
    try:
        raw = (root / "PKG-INFO").read_bytes()
        meta = Metadata.from_email(raw, validate=False)
        # With validate=False a field is checked when read: a bad one raises here.
        version = str(meta.version or "")
        urls = {k.lower(): v for k, v in (meta.project_urls or {}).items()}
        url = next((urls[k] for k in _SOURCE_LABELS if k in urls), "") or \
            str(meta.home_page or "")
    except (OSError, ValueError, ExceptionGroup):
        url, version = "", ""
    where = f" ({url})" if url.startswith(("https://", "http://")) else ""
    at = f"at version {version}" if version else "at this version"
    return (f"build from the project's repository{where} {at}, with its submodules (`git "
            f"clone --recursive`, then check out that version's tag): this copy of the tree, "
            f"a source distribution perhaps, left {what} out; then `flashbuild build "
            "<checkout>` (or a recipe's [source] path = \"<checkout>\")")


def missing_file_todo(exc: RaisedError, root: Path) -> BuildTodo | None:
    """A blocking `source` TODO when setup.py stopped because a file of the tree is not
    there (its run's copy lacked it, and so does the tree): a source distribution that left
    out a file its setup.py reads. None for any other exception."""
    if not exc.missing or (root / exc.missing).exists():
        return None
    return BuildTodo(
        table="source",
        what=f"the tree lacks `{exc.missing}`, which setup.py opens as it runs ({exc.where})",
        evidence=str(exc),
        fix=repository_fix(root, f"`{exc.missing}`"))


def _missing_sources(b: BuildDraft, model: TreeModel, root: Path) -> None:
    """Sources the configured build compiles that the tree does not have (a source
    distribution that left its csrc/ out): no step can fix that, and the compile would stop
    at the first with ninja's "missing and no known rule". A TODO of table `source` blocks."""
    missing = {u.path: t.name for t in model.targets for u in t.sources
               if u.path in model.missing_sources}
    if not missing:
        return
    shown = sorted(missing)
    b.todos.append(BuildTodo(
        table="source",
        what=f"the tree lacks {len(shown)} source file(s) its build compiles: "
        + ", ".join(shown[:4]) + (" …" if len(shown) > 4 else ""),
        evidence=f"{model.via}: " + "; ".join(f"{missing[p]} compiles {p}" for p in shown[:4]),
        fix=repository_fix(root, "them")))


def _configured_top_level(b: BuildDraft, configured: Sequence[str]) -> None:
    """`[install] top_level` as this configuration has it: none once a package is known to
    hold the modules (the tree's Python imports them from it), and only modules it defines."""
    if not b.top_level:
        return
    kept = [m for m in b.top_level if m in configured] if b.package is None else []
    if kept == b.top_level:
        return
    b.top_level = kept
    b.notes["install"] = [n for n in b.notes["install"] if "top-level" not in n]
    if b.package is None and not kept:
        b.todos.append(BuildTodo(
            table="install", what="no package imports the modules this configuration "
            "builds", evidence="the drafted top-level modules are not defined in this "
            "configuration", fix="add [install] package = \"NAME\" and package_dir = "
            "\"path/to/NAME\", or top_level = [\"<module>\"]"))


def _module_name(target: BuildTarget) -> str:
    return target.artifact.split(".")[0] if target.artifact else target.name


def _artifact_name(target: BuildTarget) -> str:
    if target.kind == "module" or not target.artifact:
        return _module_name(target)
    stem = target.artifact.split(".")[0]
    return stem.removeprefix("lib") if stem.startswith("lib") and len(stem) > 3 else stem


def _cmake_targets(b: BuildDraft, model: TreeModel) -> None:
    static = {a.target: a for a in b.artifacts}
    built = [t for t in model.targets if t.kind in ("module", "plugin")
             and not PurePosixPath(t.defined_at.split(":")[0]).is_absolute()]
    b.artifacts = [DraftArtifact(name=_artifact_name(t), kind="module" if t.kind == "module"
                                 else "plugin", target=t.name,
                                 where=f"{t.defined_at}, defined in this configuration")
                   for t in built]
    gone = [a for name, a in static.items() if name not in {t.name for t in built}]
    if gone:
        b.notes["build"].append(
            "not defined in this configuration (left out): "
            + ", ".join(f"{a.target} ({a.where})" for a in gone))
    # The text's guesses about computed target names are answered by the build.
    b.todos = [t for t in b.todos if t.table != "artifact"]
    if not built:
        b.todos.append(BuildTodo(
            table="artifact", what="the configured build defines no module or shared library",
            evidence=f"{model.via}: targets "
            + (", ".join(t.name for t in model.targets) or "none"),
            fix="add an [[artifact]] per binary the build must install"))


def _from_record(b: BuildDraft, model: TreeModel, python_files: Sequence[str],
                 root: Path) -> None:
    """The build tables from a setup.py record that ran through."""
    built = [t for t in model.targets if t.sources]
    cuda = [t for t in built if any(u.language == "CUDA" for u in t.sources)]
    if not cuda and model.argv_options:
        b.todos.append(BuildTodo(
            table="build", what="setup.py builds no CUDA extension as run, and looks for "
            "command-line options: " + ", ".join(f"`{o.name}` ({o.where})"
                                                 for o in model.argv_options[:4]),
            evidence=f"{model.via}: no extension with CUDA sources",
            fix="flashbuild's setuptools backend passes no setup.py options: patch the "
            "check to also read an environment variable, then set it in [[build.env]]"))
    if not built and model.jit:
        b.todos.insert(0, _run_time_only(model))
    _missing_sources(b, model, root)
    if b.package is None:
        _install_from_record(b, built, python_files)
    b.notes["build"].append(
        "setup.py record mode: builds " + (", ".join(
            f"{t.name} ({len(t.sources)} sources)" for t in built) or "no extension"))


#: Names of the variables a setup.py reads that may turn its ahead-of-time build on.
_BUILD_SWITCH = re.compile(r"BUILD|CUDA|OPS?\b|OPS_|EXT|FORCE|KERNEL|COMPILE")


def _run_time_only(model: TreeModel) -> BuildTodo:
    """A setup.py that builds no extension as run, in a tree whose Python compiles kernels at
    run time (deepspeed's op builders): what the build would install is the pure-Python
    package. Said first, before any [install] TODO, because it is why there is no module:
    the kernels come with the first use, or with the project's own switch for an
    ahead-of-time build (the variables its setup.py read are named; which of them builds
    what is the project's to say)."""
    switches = list(dict.fromkeys(r.name for r in model.env_reads
                                  if r.where.startswith("setup.py:")
                                  and _BUILD_SWITCH.search(r.name)))
    return BuildTodo(
        table="build", what="setup.py builds no extension as run: the tree compiles its "
        "kernels at run time",
        evidence=f"{model.via}: no extension; " + "; ".join(
            f"{j.how} at {j.where}" for j in model.jit[:3]),
        fix="nothing for flashbuild to compile as the tree stands: install it with pip and "
        "its kernels compile on first use (with the CUDA toolkit and a host compiler "
        "present); to build them ahead of time, set the project's switch in [[build.env]]"
        + (f" (its setup.py reads {', '.join(switches[:4])}; e.g. the recipe lines "
           f"[[build.env]] set = {{ {switches[0]} = \"1\" }}, if 1 turns it on)"
           if switches else ""))


def _install_from_record(b: BuildDraft, built: Sequence[BuildTarget],
                         python_files: Sequence[str]) -> None:
    """[install] from the extension names the record holds (`torch_scatter._scatter_cuda`,
    built in a loop the static reading could not name): the package they live in, where a
    folder of the tree holds it."""
    # Python modules only: a setup.py that runs CMake itself is modelled from its
    # configure, whose executables (torch-kdtree's `test_kdtree`) are no module to install.
    dotted = [t.name for t in built if "." in t.name and t.kind == "module"]
    tops = [t.name for t in built if t.name and "." not in t.name and t.kind == "module"]
    if tops and b.top_level != tops:
        # Named by the record as run (a name the static reading could not compute, or
        # computed otherwise: torch-memory-saver's f-string ends in the CUDA major an
        # environment variable gives): modules without a package, installed by pip at the
        # top of site-packages. The record's names are the ones this configuration builds.
        static = [m for m in b.top_level if m not in tops]
        b.top_level = tops
        b.todos = [t for t in b.todos if t.table != "install"]
        b.notes["install"] = [n for n in b.notes["install"] if not n.startswith("top_level:")]
        b.notes["install"].append(
            f"top_level: setup.py (record) builds {', '.join(tops)} with no package" +
            (f"; the static reading's {', '.join(static)} is not built as run" if static
             else ""))
    if not dotted:
        return
    package = holding_package(dotted)
    folder = package_folder(package, python_files)
    if folder is None:
        return
    b.package, b.package_dir = package, folder
    b.todos = [t for t in b.todos if t.table != "install"]
    b.notes["install"].append(
        f"extension module(s) {', '.join(dotted[:3])}{' …' if len(dotted) > 3 else ''} "
        f"(setup.py record) live in package `{package}`")


def _module_of(macro_name: str, source: str, model: TreeModel) -> str:
    """The module's own (last) name; `TORCH_EXTENSION_NAME` is what the unit's compile command
    defines it to, else the module its target builds (the artifact's stem for a CMake target:
    natten's target `natten` writes `libnatten.<suffix>`), else the extension's name."""
    if macro_name != "TORCH_EXTENSION_NAME":
        return macro_name
    unit = model.unit(source)
    defined = next((d.split("=", 1)[1] for d in unit.defines
                    if d.startswith("TORCH_EXTENSION_NAME=")), "") if unit is not None else ""
    if defined:
        return defined
    owner = next((t for t in model.targets if any(u.path == source for u in t.sources)), None)
    if owner is None:
        return macro_name
    if owner.artifact:
        return owner.artifact.split(".", 1)[0]
    return owner.name.rsplit(".", 1)[-1]


def _path_in_package(source: str, module: str, model: TreeModel, package: str | None) -> str:
    """The module's dotted path below `[install] package`: `a._a` for the extension
    `pkg.a._a` installed with package `pkg` (verify imports `pkg.a` on the way), else its own
    name."""
    owner = next((t for t in model.targets if any(u.path == source for u in t.sources)), None)
    if owner is None or not package or not owner.name.startswith(f"{package}."):
        return module
    below = owner.name[len(package) + 1:]
    return below if below.rsplit(".", 1)[-1] == module else module


def _package_binds(root: Path, b: BuildDraft, module: str) -> set[str] | None:
    if b.package_dir is None:
        return set()
    text = _read(root, f"{b.package_dir}/__init__.py")
    try:
        tree = ast.parse(text or "")
    except SyntaxError:
        return set()
    return _bound_names(tree, module)


def _exports(b: BuildDraft, model: TreeModel, root: Path) -> None:
    """Exports only from the bindings the configured build compiles (never from the text)."""
    drafted = list(b.exports)
    b.exports = []
    b.notes.pop("verify", None)
    b.todos = [t for t in b.todos if t.table != "verify"]
    for binding in model.bindings:
        if binding.names:
            module = _module_of(binding.module, binding.source, model)
            bound = _package_binds(root, b, module)
            # verify looks names up on the package: one its __init__.py does not bind is
            # written `module.name` (as draft._exports does).
            where = _path_in_package(binding.source, module, model, b.package)
            names = [n if bound is None or n in bound else f"{where}.{n}"
                     for n in binding.names]
            b.exports += [n for n in names if n not in b.exports]
            b.notes["verify"].append(
                f"exports: what {binding.source} registers for {module}, preprocessed "
                "with the configured build's flags" + (
                    f" (headers absent here stubbed: {', '.join(binding.stubbed[:3])})"
                    if binding.stubbed else ""))
    if b.exports:
        return
    if buildsystems.get(model.system).compiles_cmake_targets and b.artifacts and all(
            a.kind == "plugin" for a in b.artifacts):
        plugin_exports_note(b)  # shared libraries only: no Python names to look up
        return
    why = "; ".join(f"{x.source}: {x.error or 'registers no name'}" for x in model.bindings) \
        or "no bindings unit of a module target could be preprocessed"
    if buildsystems.get(model.system).runs_setup_py and not drafted and not model.bindings:
        return  # nothing was drafted and nothing could be read: no table, no TODO
    b.todos.append(BuildTodo(
        table="verify", what="exports not drafted: they are taken only from what the "
        "configured build's bindings register", evidence=why,
        fix="list the names the module must export in [verify] exports once the bindings "
        "compile here"))


# --- a draft that agrees with itself -----------------------------------------------------------

def reconcile(d: Draft) -> None:
    """Move to `handled` what the drafted build environment, or the build hook, already does."""
    b = d.build
    if b is None:
        return
    env_values = {k: v for _w, values, _c in b.env for k, v in values.items()}
    appended = env_values.get("NVCC_APPEND_FLAGS", "")
    force = [k for k in env_values if k.upper().endswith("FORCE_BUILD")]
    kept = []
    for f in d.todos:
        reason = ""
        env = f.fix.env
        if isinstance(env, NvccAppendFlag) and env.flag in appended:
            reason = f"[[build.env]] NVCC_APPEND_FLAGS passes {env.flag}"
        elif isinstance(env, ForceBuild) and force:
            reason = f"[[build.env]] sets {force[0]} (compile instead of download)"
        else:
            # The drafted backend may differ from the one the scan read (scan.mark_handled).
            reason = handled_by_build(f, backend=b.backend)
        if reason:
            d.handled.append((f, reason))
        else:
            kept.append(f)
    d.todos = kept
    if buildsystems.get(b.backend).reads_torch_arch_list:
        # The build hook hands torch the arch list in place of the hard-coded one.
        b.todos = [t for t in b.todos if not re.search(r"gencode list in setup\.py", t.what)]

