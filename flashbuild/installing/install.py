"""Install the built binaries where Python imports them, with the loader shim and manifest.

Modes:
- `wheel` (default for the bundled kernels): a wheel of the package with the fresh binaries,
  installed with `python -m pip install --force-reinstall --no-deps` into the target
  interpreter's environment, so `pip uninstall <package>` removes it again.
- `inplace`: the binaries next to the package's Python files in the source tree, as the
  playbooks do (`python -c "import pkg"` works with the tree on sys.path).
- `none`: build only.

Top-level extension modules (`[install] top_level`, or a setup.py module that pip puts at the
top of site-packages) go to the import root, beside the package or, in a tree without one,
alone: to the top of site-packages in a wheel, to the top of the tree in place. Without a
package there is no `__init__.py` for the loader shim: the wheel carries the manifest in its
`.dist-info` folder, an in-place install writes only the modules, and both say so.

Nothing is replaced until every check has passed: a read-only target, or a file another
process holds (a loaded `.pyd` on Windows), is an InstallError before the first file moves;
an in-place install swaps its files all or nothing (`replace_all`); and a failed build never
reaches this module, so the previous install stays intact. An unchanged re-run (same
binaries, same shim data, same manifest, target still there) installs nothing, which keeps
the no-op rebuild well under a second.

"Target still there" means the installed files hold the bytes this build folder installed,
not only that they exist: each build folder (one per arch) keeps its own stamp, and another
arch's install writes the same paths. So the stamp records every installed file's size,
mtime and SHA-256; a file whose size or mtime moved is hashed, and a different hash means
another build is installed, which is replaced (`build --arch sm120`, `--arch sm_100`,
`--arch sm120` leaves the sm120 build installed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from flashbuild import platforms
from flashbuild.detect import pinned
from flashbuild.errors import FlashbuildError, InstallError
from flashbuild.installing import shim
from flashbuild.installing.wheel import build_wheel, dist_info_dir, read_member, repack_wheel
from flashbuild.outputs import open_new, write_no_follow
from flashbuild.proc import Runner, quote, tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.building.artifacts import BuiltArtifact, InstallMode
    from flashbuild.platforms.base import Platform

INSTALL_STAMP = "flashbuild-install.json"


@dataclass(frozen=True, kw_only=True)
class InstallPlan:
    mode: InstallMode
    package: str | None
    """Import name (`flashkern`); None when the binaries are top-level modules only."""
    package_dir: Path | None
    """The package's folder in the source tree (its Python files); None without a package."""
    artifacts: tuple[BuiltArtifact, ...]
    """The binaries; one with a `relpath` goes there below the import root (a top-level
    module: its file name), the others into the package folder."""
    dll_dirs: tuple[str, ...]
    """Rendered into the loader shim (absolute, existing folders)."""
    preload: tuple[str, ...] = ()
    """Wheel libraries the loader shim loads first (Linux), rendered into it."""
    import_torch: bool = False
    """Whether the loader shim imports torch first (Linux), which loads the torch libraries
    (libc10, libtorch_cpu) the binaries link and no loader path of theirs holds."""
    install_requirements: bool = True
    """Install the wheel's missing dependencies with everything installed pinned, instead of
    only naming them."""
    manifest_name: str
    manifest: bytes
    """The manifest file's content, written beside the module."""
    python: str
    """The interpreter whose environment a wheel is installed into."""
    distribution: str = ""
    """Distribution name of the wheel (default: the package name)."""
    version: str = "0.0.0"
    work_dir: Path
    """Where the wheel is built and the install stamp is kept (the build folder)."""
    prebuilt: Path | None = None
    """A wheel the build produced itself (setuptools): installed with the shim and the
    manifest added, instead of a wheel made from `package_dir`."""
    images: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """The GPU images each binary holds (path relative to the package -> `sm_90a`, ...),
    rendered into the shim for its arch check at import."""
    local_version: str = ""
    """The local version label a repacked `prebuilt` wheel gets when its version has none
    (`cu130torch2.13`), so wheels of two CUDA or torch builds differ by file name."""
    rebuild: str = ""
    """The command that rebuilds the package for another arch (`{arch}` and `{source}` left
    to fill)."""
    source: str = ""
    """The tree it was built from, for `{source}`."""
    tree: Path | None = None
    """The tree an in-place install writes into: without a package, its top is the import
    root that top-level modules go to."""
    jit: tuple[tuple[str, str], ...] = ()
    """load() names the package compiles at run time, built ahead of time: (name, dotted
    module), rendered into the shim, which answers those calls with the modules."""

    @property
    def name(self) -> str:
        """The package, else the first top-level module: the wheel's default distribution."""
        if self.package is not None:
            return self.package
        tops = top_level_names(self.artifacts)
        return tops[0] if tops else "extension"

    def shim_text(self) -> str:
        assert self.package is not None, "no package, no loader shim"
        return shim.render(self.dll_dirs, package=self.package, images=dict(self.images),
                           rebuild=self.rebuild, source=self.source, preload=self.preload,
                           import_torch=self.import_torch, jit=dict(self.jit))


def top_level_names(artifacts: Sequence[BuiltArtifact]) -> list[str]:
    """Import names of the modules that sit at the import root (a `relpath` without a
    folder): `rotary_emb` for `rotary_emb.cpython-312-x86_64-linux-gnu.so`."""
    return [a.relpath.split(".", 1)[0] for a in artifacts
            if a.kind == "module" and a.relpath and "/" not in a.relpath]


@dataclass(frozen=True)
class InstallResult:
    mode: InstallMode
    location: Path | None
    """The installed package folder (None for `none`)."""
    files: tuple[Path, ...] = ()
    wheel: Path | None = None
    skipped: bool = False
    """True when the same install was already in place (nothing written)."""
    notes: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())
    """What the user should act on (a folder pip left behind), shown with the build's notes."""

    def to_json(self) -> dict[str, object]:
        return {"mode": self.mode, "location": str(self.location) if self.location else None,
                "files": [str(f) for f in self.files],
                "wheel": str(self.wheel) if self.wheel else None, "skipped": self.skipped,
                "notes": list(self.notes), "warnings": list(self.warnings)}


def install(plan: InstallPlan, runner: Runner, env: Mapping[str, str]) -> InstallResult:
    if plan.mode == "none":
        return InstallResult("none", None, notes=("--install none: nothing installed",))
    digest = _plan_digest(plan)
    previous = _read_stamp(plan.work_dir)
    notes: tuple[str, ...] = ()
    if previous is not None and previous.get("digest") == digest:
        files, replaced = _still_installed(previous)
        if files and not replaced:
            location = Path(str(previous["location"]))
            return InstallResult(plan.mode, location, files, skipped=True,
                                 notes=("unchanged: already installed",))
        if replaced:
            notes = (f"reinstalled: {', '.join(replaced[:3])}"
                     f"{' …' if len(replaced) > 3 else ''} held another build since this one "
                     "was installed",)
    result = _install_inplace(plan) if plan.mode == "inplace" else _install_wheel(plan, runner, env)
    _write_stamp(plan.work_dir, digest, result)
    return dataclasses.replace(result, notes=(*result.notes, *notes)) if notes else result


# --- inplace -----------------------------------------------------------------------------

def _install_inplace(plan: InstallPlan) -> InstallResult:
    if plan.package is None or plan.package_dir is None:
        return _install_inplace_top_level(plan)
    target = plan.package_dir
    root = import_root(plan.package_dir, plan.package)
    destinations = [root / a.relpath if a.relpath else target / a.path.name
                    for a in plan.artifacts]
    shim_file = target / f"{shim.SHIM_MODULE}.py"
    init = target / "__init__.py"
    manifest = target / plan.manifest_name
    planned = [*destinations, shim_file, init, manifest]
    check_writable(target, planned)
    init_text = init.read_bytes().decode("utf-8") if init.is_file() else ""
    contents: list[tuple[Path, Path | bytes]] = [
        *((dest, a.path) for a, dest in zip(plan.artifacts, destinations, strict=True)),
        (shim_file, plan.shim_text().encode("utf-8")),
        (init, shim.insert(init_text).encode("utf-8")),
        (manifest, plan.manifest)]
    replace_all(contents)
    tops = [d for a, d in zip(plan.artifacts, destinations, strict=True)
            if a.relpath and "/" not in a.relpath]
    notes = (f"--install inplace: top-level module(s) {', '.join(d.name for d in tops)} "
             f"copied to {root}, beside the package (`import "
             f"{', '.join(top_level_names(plan.artifacts))}` with {root} on sys.path); the "
             "loader shim runs when the package is imported",) if tops else ()
    return InstallResult("inplace", target, (*destinations, shim_file, manifest), notes=notes)


def _install_inplace_top_level(plan: InstallPlan) -> InstallResult:
    """Top-level modules and no package: the modules go to the top of the tree (where
    `setup.py build_ext --inplace` puts them), and nothing else does: there is no
    `__init__.py` to carry the loader shim, nor a package folder for the manifest."""
    if plan.tree is None:
        raise InstallError("an in-place install without a package needs the tree to write to",
                           fix="this is a flashbuild bug; use `--install wheel`")
    root = plan.tree
    destinations = [root / (a.relpath or a.path.name) for a in plan.artifacts]
    check_writable(root, destinations)
    replace_all([(dest, a.path) for a, dest in zip(plan.artifacts, destinations,
                                                      strict=True)])
    names = ", ".join(top_level_names(plan.artifacts)) or plan.name
    note = (f"--install inplace: top-level module(s) {', '.join(d.name for d in destinations)} "
            f"copied to the top of the tree ({root}); `import {names}` works with that folder "
            "on sys.path. No package holds them, so nothing else is written: no loader shim "
            "(no GPU check at import, no Windows DLL folders) and no manifest (`--install "
            "wheel` puts the manifest in the wheel's .dist-info)")
    return InstallResult("inplace", root, tuple(destinations), notes=(note,))


#: Suffixes of the staged new file and of the previous file kept until every swap succeeded.
_NEW, _OLD = ".flashbuild-tmp", ".flashbuild-old"


def replace_all(contents: Sequence[tuple[Path, Path | bytes]]) -> None:
    """Put each `(destination, file or bytes)` in place, all or nothing.

    Every new file is staged beside its destination first; then each existing destination is
    checked to be replaceable (Windows refuses to replace a `.pyd` a running Python has
    loaded, WinError 5); then the previous files are moved aside one by one and the new ones
    moved in. When a swap fails after others succeeded, the ones done are moved back, so the
    package never holds a mix of old and new binaries. Bytes equal to the destination's are
    skipped (an unchanged `__init__.py` keeps its mtime)."""
    plat = platforms.current()
    recover_swaps([dest for dest, _ in contents], plat)
    staged: list[tuple[Path, Path]] = []
    try:
        for dest, source in contents:
            if isinstance(source, bytes) and dest.is_file() and dest.read_bytes() == source:
                continue
            tmp = dest.with_name(dest.name + _NEW)
            # Listed before it is written: a write that fails half-way (a full disk) must not
            # leave a partial `.so.flashbuild-tmp` in the package.
            staged.append((tmp, dest))
            try:
                _stage(tmp, source)
            except OSError as exc:
                raise _not_written(dest, exc) from exc
        held = [dest for _, dest in staged if dest.exists() and _held(dest)]
        if held:
            raise _in_use(held, "it is open in another process")
        _swap(plat, staged)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def _stage(tmp: Path, source: Path | bytes) -> None:
    """Write the staged copy, never through a link left at `tmp` (created exclusively)."""
    with open_new(tmp) as fh:
        if isinstance(source, bytes):
            fh.write(source)
        else:
            with source.open("rb") as src:
                shutil.copyfileobj(src, fh)
    if not isinstance(source, bytes):
        shutil.copystat(source, tmp)


def _not_written(dest: Path, exc: OSError) -> InstallError:
    full = exc.errno == errno.ENOSPC
    return InstallError(
        f"{dest.name} could not be written{' (the disk is full)' if full else ''}; nothing "
        "was replaced",
        evidence=f"{dest}: {exc.strerror or exc}",
        fix="free space on that disk and run again" if full
        else "make the package folder writable and run again",
        details={"files": [str(dest)]})


def recover_swaps(dests: Sequence[Path], plat: Platform | None = None) -> list[Path]:
    """Finish what a killed in-place install left, so that every later run starts clean.

    A kill between moving a file aside (`X.flashbuild-old`) and moving its new copy in left
    the package without `__init__.py`, and no later run put it back (issue 27). When a
    destination is missing and its `.flashbuild-old` exists the swap was cut off: every
    `.flashbuild-old` among `dests` is put back (the previous install, whole). When every
    destination exists the swap had finished and the backups are removed. Idempotent: a run
    killed during this recovery is recovered by the next one. Returns the files restored."""
    plat = plat or platforms.current()
    backups = [(d, d.with_name(d.name + _OLD)) for d in dests]
    backups = [(d, b) for d, b in backups if b.is_file() and not b.is_symlink()]
    for dest in dests:
        dest.with_name(dest.name + _NEW).unlink(missing_ok=True)
    cut_off = any(not d.exists() for d, _ in backups)
    restored = []
    for dest, backup in backups:
        if cut_off:
            plat.replace(backup, dest)
            restored.append(dest)
        else:
            with contextlib.suppress(OSError):
                backup.unlink()
    return restored


def recover_tree(tree: Path) -> list[Path]:
    """`recover_swaps` for every `.flashbuild-old` in `tree`, folder by folder: run before a
    tree is read, since a package without `__init__.py` is not found as a package."""
    by_folder: dict[Path, list[Path]] = {}
    for folder, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.endswith(_OLD):
                by_folder.setdefault(Path(folder), []).append(
                    Path(folder) / name[:-len(_OLD)])
    restored: list[Path] = []
    for dests in by_folder.values():
        with contextlib.suppress(OSError):
            restored += recover_swaps(dests)
    return restored


def _held(path: Path) -> bool:
    """Whether another process keeps `path` from being replaced: on Windows a loaded `.pyd`
    or `.dll` (its image is mapped) cannot be opened for writing. Opening it in `r+b` and
    closing it changes nothing."""
    try:
        with path.open("r+b"):
            return False
    except OSError:
        return True


def _swap(plat: Platform, staged: Sequence[tuple[Path, Path]]) -> None:
    done: list[tuple[Path, Path | None]] = []
    try:
        for tmp, dest in staged:
            backup = dest.with_name(dest.name + _OLD) if dest.exists() else None
            if backup is not None:
                plat.replace(dest, backup)
            done.append((dest, backup))
            plat.replace(tmp, dest)
    except OSError as exc:
        for dest, backup in reversed(done):
            if backup is not None:
                plat.replace(backup, dest)
            else:
                dest.unlink(missing_ok=True)
        raise _in_use([done[-1][0]] if done else [], str(exc)) from exc
    for _, backup in done:
        if backup is not None:
            with contextlib.suppress(OSError):  # removed on a later run if something holds it
                backup.unlink()


def _in_use(paths: Sequence[Path], why: str) -> InstallError:
    names = ", ".join(p.name for p in paths) or "a file"
    return InstallError(
        f"{names} could not be replaced; nothing was replaced",
        evidence=f"{'; '.join(str(p) for p in paths)}: {why}",
        fix="close every Python process that imported the package (on Windows a loaded .pyd "
        "cannot be replaced) and run again",
        details={"files": [str(p) for p in paths]},
    )


def import_root(package_dir: Path, package: str) -> Path:
    """The folder `import <package>` resolves from: `package_dir` up one level per name."""
    root = package_dir
    for _ in package.split("."):
        root = root.parent
    return root


def check_writable(folder: Path, files: Sequence[Path], *,
                   platform: Platform | None = None) -> None:
    """Raise InstallError, before anything is replaced, when the folder or a file that would
    be replaced cannot be written (by the rules of `platform`, default this machine's)."""
    plat = platform or platforms.current()
    problems = []
    if not folder.is_dir():
        problems.append(f"{folder} does not exist")
    elif not plat.writable(folder):
        problems.append(f"{folder} is not writable")
    problems += [f"{f} is read-only" for f in files if f.exists() and not plat.writable(f)]
    if problems:
        raise InstallError(
            "the install target cannot be written; nothing was replaced",
            evidence="; ".join(problems),
            fix="make the folder writable, install elsewhere (`--install wheel` into a venv "
            "you own), or use `--install none` and copy the files from the build folder",
            details={"problems": problems},
        )


def _write_bytes_atomic(dest: Path, data: bytes) -> None:
    if dest.is_file() and dest.read_bytes() == data:
        return
    try:
        write_no_follow(dest, data)
    except OSError as exc:
        raise _not_written(dest, exc) from exc


# --- wheel -------------------------------------------------------------------------------

def _install_wheel(plan: InstallPlan, runner: Runner, env: Mapping[str, str]) -> InstallResult:
    platlib = _platlib(plan.python, runner, env)
    package = plan.package
    location = platlib.joinpath(*package.split(".")) if package is not None else platlib
    installed = [platlib / a.relpath if a.relpath else location / a.path.name
                 for a in plan.artifacts]
    planned = [f for f in installed if f.parent.is_dir()]
    check_writable(platlib, planned)
    # Without a package the manifest has no folder of its own: the wheel's .dist-info holds
    # it (installers copy that folder whole, and RECORD lists it, so uninstall removes it).
    dist_info: dict[str, bytes] = {} if package is not None else \
        {plan.manifest_name: plan.manifest}
    if plan.prebuilt is not None:
        added: dict[str, bytes] = {}
        if package is not None:
            arcname = package.replace(".", "/") + "/__init__.py"
            raw = read_member(plan.prebuilt, arcname)
            added = {"__init__.py": shim.insert(raw.decode("utf-8") if raw else "").encode(),
                     f"{shim.SHIM_MODULE}.py": plan.shim_text().encode("utf-8"),
                     plan.manifest_name: plan.manifest}
        wheel = repack_wheel(plan.prebuilt, package=package, extra=added,
                             extra_meta=dist_info, out_dir=plan.work_dir / "dist",
                             local_version=plan.local_version)
    else:
        extra: dict[str, Path | bytes] = {}
        if package is not None and plan.package_dir is not None:
            init = plan.package_dir / "__init__.py"
            init_text = init.read_bytes().decode("utf-8") if init.is_file() else ""
            extra = {a.path.name: a.path for a in plan.artifacts if not a.relpath}
            extra["__init__.py"] = shim.insert(init_text).encode("utf-8")
            extra[f"{shim.SHIM_MODULE}.py"] = plan.shim_text().encode("utf-8")
            extra[plan.manifest_name] = plan.manifest
        wheel = build_wheel(distribution=plan.distribution or plan.name,
                            version=plan.version, package=package,
                            package_dir=plan.package_dir, extra=extra,
                            top={a.relpath: a.path for a in plan.artifacts if a.relpath},
                            extra_meta=dist_info, out_dir=plan.work_dir / "dist")
    argv = [plan.python, "-m", "pip", "install", "--force-reinstall", "--no-deps",
            "--no-input", "--disable-pip-version-check", "--quiet", str(wheel)]
    done = runner.run(argv, env=env, timeout=600, check=False)
    if not done.ok:
        raise InstallError(
            f"pip could not install {wheel.name}",
            evidence=f"command: {quote(argv)}\n{tail(done.output)}",
            fix="read pip's message; the wheel is kept at the path above and the previous "
            "install is unchanged unless pip reported otherwise",
            details={"wheel": str(wheel)},
        )
    if package is not None:
        files = (*installed, *(location / name for name in (f"{shim.SHIM_MODULE}.py",
                                                            plan.manifest_name)))
    else:
        files = (*installed, platlib / dist_info_dir(wheel) / plan.manifest_name)
    left = pip_leftovers(platlib, plan.name.split(".")[0], plan.distribution or plan.name)
    unmet, installed_deps = install_requirements_of(plan, wheel.name.split("-")[0], runner,
                                                    env, wheel=wheel)
    notes: tuple[str, ...] = installed_deps
    if package is None:
        notes += (f"top-level module(s) {', '.join(top_level_names(plan.artifacts))} installed "
                 f"at the top of {platlib}, with no package: no loader shim (no GPU check at "
                 "import, no Windows DLL folders); the manifest is in "
                 f"{dist_info_dir(wheel)}/",)
    return InstallResult("wheel", location, files, wheel=wheel, notes=notes,
                         warnings=(*_clean_leftovers(left), *unmet))


#: `pip check`'s lines: `NAME VERSION requires REQ, which is not installed.` and `NAME VERSION
#: has requirement REQ, but you have OTHER VERSION.`
_PIP_CHECK = re.compile(r"^(?P<name>\S+) \S+ (?:requires (?P<missing>.+), which is not "
                        r"installed\.|has requirement (?P<req>.+), but you have (?P<have>.+)\.)$")


def pip_check(python: str, distribution: str, runner: Runner,
              env: Mapping[str, str] | None = None) -> tuple[list[str], list[str]]:
    """(requirements of the installed distribution this Python lacks, those installed at a
    version it excludes), from `pip check`, which evaluates the markers in that Python."""
    try:
        done = runner.run([python, "-m", "pip", "check", "--disable-pip-version-check"],
                          env=env, timeout=120, check=False)
    except FlashbuildError:  # a pip that hangs or cannot start: the install itself is done
        return [], []
    key = canonicalize_name(distribution)
    missing: list[str] = []
    conflicts: list[str] = []
    for line in done.output.splitlines():
        m = _PIP_CHECK.match(line.strip())
        if m is None or canonicalize_name(m["name"]) != key:
            continue
        if m["missing"]:
            missing.append(m["missing"])
        else:
            conflicts.append(f"{m['req']} (this Python has {m['have']})")
    return missing, conflicts


def unmet_requirements(python: str, distribution: str, runner: Runner,
                       env: Mapping[str, str] | None = None, *, why: str = "") -> list[str]:
    """What the installed distribution requires that this Python lacks, as one warning (or
    none): the wheel goes in with `--no-deps`, so that pip never replaces the torch it was
    built against. `why`: why they were not installed for it (pip's refusal)."""
    missing, conflicts = pip_check(python, distribution, runner, env)
    return _unmet_warning(python, distribution, missing, conflicts, why=why)


def _unmet_warning(python: str, distribution: str, missing: Sequence[str],
                   conflicts: Sequence[str], *, why: str = "") -> list[str]:
    if not missing and not conflicts:
        return []
    parts = ([f"{', '.join(missing)}, not installed"] if missing else []) + \
        ([f"{', '.join(conflicts)}"] if conflicts else [])
    shown = " ".join(f"'{r}'" for r in missing)
    return [f"{distribution} requires {'; '.join(parts)} (pip check): flashbuild installs the "
            "wheel without its dependencies, so that pip never replaces the torch it was "
            "built against" + (f"; {why}" if why else "")
            + (f"; install them with `{python} -m pip install {shown}`" if missing else "")]


def install_requirements_of(plan: InstallPlan, distribution: str, runner: Runner,
                            env: Mapping[str, str], *, wheel: Path | None = None,
                            ) -> tuple[list[str], tuple[str, ...]]:
    """(warnings, notes) about the installed wheel's own requirements: the missing ones are
    installed with everything already installed pinned (detect/pinned.py), with the version
    limits the wheel's METADATA gives them (`pip check` names them bare), unless the plan
    says not to; what is still unmet is a warning with the pip command."""
    missing, conflicts = pip_check(plan.python, distribution, runner, env)
    if not missing or not plan.install_requirements:
        return _unmet_warning(plan.python, distribution, missing, conflicts), ()
    wanted = _declared(wheel, missing)
    done = pinned.install_pinned(plan.python, wanted, runner, env,
                                 memo=pinned.memo_file(platforms.current(), env))
    if not done.ok:
        why = (f"pip could not install them with everything installed pinned "
               f"({done.error.splitlines()[-1] if done.error else 'no reason given'})")
        return _unmet_warning(plan.python, distribution, missing, conflicts, why=why), ()
    note = (f"installed {', '.join(done.requirements)}, which {distribution} requires, with "
            "every installed distribution pinned to its version"
            + (f"; not installed: {'; '.join(done.held)}" if done.held else ""))
    return unmet_requirements(plan.python, distribution, runner, env), (note,)


def _declared(wheel: Path | None, names: Sequence[str]) -> list[str]:
    """The wheel's `Requires-Dist` entries for `names`, version limits and markers kept;
    a bare name where the wheel says nothing of it."""
    raw = None
    if wheel is not None:
        try:
            raw = read_member(wheel, f"{dist_info_dir(wheel)}/METADATA")
        except (OSError, zipfile.BadZipFile):
            raw = None
    declared: dict[str, str] = {}
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        text = line.split(":", 1)[1].strip()
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            declared.setdefault(canonicalize_name(req.name), text)
    return [declared.get(canonicalize_name(n), n) for n in names]


#: The characters pip puts after `~` when it moves a folder aside during an uninstall
#: (pip/_internal/utils/temp_dir.py, AdjacentTempDirectory.LEADING_CHARS).
_PIP_LEADING = frozenset("-~.=%0123456789")


def pip_leftovers(platlib: Path, top_package: str, distribution: str) -> list[Path]:
    """Folders pip moved aside and could not delete: uninstalling a package whose `.pyd` a
    running Python has loaded (Windows) renames `flashkern` to `~lashkern` (and its
    `.dist-info` alike) and leaves it; every later pip run then prints "Ignoring invalid
    distribution ~lashkern". pip's name is `~`, some of `_PIP_LEADING`, then the original
    name without as many leading characters, or the whole name."""
    dist = re.sub(r"[-_.]+", "_", distribution).lower()
    out = []
    try:
        entries = sorted(platlib.iterdir())
    except OSError:
        return []
    for entry in entries:
        name = entry.name
        if not name.startswith("~") or not entry.is_dir():
            continue
        body = name[1:]
        middle = len(body) - len(body.lstrip("".join(_PIP_LEADING)))
        rest = body[middle:]
        if rest.endswith(".dist-info"):
            original, rest = dist, rest.removesuffix(".dist-info").rsplit("-", 1)[0].lower()
        else:
            original = top_package
        if rest and original.endswith(rest) and \
                (rest == original or middle + 1 + len(rest) == len(original)):
            out.append(entry)
    return out


def _clean_leftovers(folders: Sequence[Path]) -> list[str]:
    """Delete what pip left (the process that held it may be gone by now); say what stays."""
    stuck = []
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            stuck.append(str(folder))
    if not stuck:
        return []
    return [f"pip left {', '.join(stuck)} behind (a running Python had the package loaded "
            "while it was replaced); pip prints \"Ignoring invalid distribution\" until it is "
            "gone: close that Python and delete the folder"]


def _platlib(python: str, runner: Runner, env: Mapping[str, str]) -> Path:
    done = runner.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                      env=env, timeout=60)
    return Path(done.stdout.strip().splitlines()[-1])


# --- the stamp that makes an unchanged re-run install nothing ------------------------------

def _plan_digest(plan: InstallPlan) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([plan.mode, plan.package, str(plan.package_dir), plan.python,
                         plan.version, list(plan.dll_dirs), plan.manifest_name,
                         [[p, list(held)] for p, held in plan.images], plan.rebuild,
                         plan.source, str(plan.tree), [list(j) for j in plan.jit]]).encode())
    h.update(plan.manifest)
    for artifact in plan.artifacts:
        st = artifact.path.stat()
        h.update(f"{artifact.path}:{artifact.relpath}:{st.st_size}:{st.st_mtime_ns}".encode())
    if plan.prebuilt is not None:
        st = plan.prebuilt.stat()
        h.update(f"{plan.prebuilt}:{st.st_size}:{st.st_mtime_ns}".encode())
    init = plan.package_dir / "__init__.py" if plan.package_dir is not None else None
    if plan.mode == "wheel" and init is not None and init.is_file():
        h.update(init.read_bytes())
    return h.hexdigest()


def _read_stamp(work_dir: Path) -> dict[str, object] | None:
    try:
        data = json.loads((work_dir / INSTALL_STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_stamp(work_dir: Path, digest: str, result: InstallResult) -> None:
    payload = {"digest": digest, "location": str(result.location),
               "files": [_file_state(f) for f in result.files]}
    _write_bytes_atomic(work_dir / INSTALL_STAMP, json.dumps(payload, indent=1).encode())


def _file_state(path: Path) -> dict[str, object]:
    try:
        st = path.stat()
        return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                "sha256": _sha256(path)}
    except OSError:  # not where pip was expected to put it: the next run installs again
        return {"path": str(path)}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _still_installed(stamp: Mapping[str, object]) -> tuple[tuple[Path, ...], list[str]]:
    """The files the stamp lists, and the names of those that no longer hold what this build
    folder installed (missing, or other bytes). A file whose size and mtime are as recorded is
    taken as unchanged without reading it (the no-op stays cheap); any other is hashed. A stamp
    from before content was recorded (plain paths) counts as replaced, so it is rewritten."""
    raw = stamp.get("files")
    if not isinstance(raw, list):
        return (), []
    files: list[Path] = []
    replaced: list[str] = []
    for entry in raw:
        if not isinstance(entry, dict):
            path = Path(str(entry))
            files.append(path)
            replaced.append(path.name)
            continue
        path = Path(str(entry.get("path")))
        files.append(path)
        try:
            st = path.stat()
            same = (st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns")
                    ) or (st.st_size == entry.get("size") and _sha256(path) == entry.get("sha256"))
        except OSError:
            same = False
        if not same:
            replaced.append(path.name)
    return tuple(files), replaced

