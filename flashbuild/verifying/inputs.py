"""What `flashbuild verify` looks at: turn PATH or `--package NAME` into a `Subject`.

A subject is the list of binaries to check, the build manifest when there is one (it supplies
the default archs, the loader shim's DLL folders, the exports and the ptxas output), and the
package to import in a fresh interpreter when it can be imported as users will import it:

* PATH = `flashbuild-manifest.json`, or a folder holding one: the manifest's artifacts; the
  folder is imported as a package (what verify did before it read anything else).
* PATH = one binary (`.so`, `.so.N`, `.pyd`, `.dll`): that binary alone, no manifest, no
  import (a module outside its package cannot be imported the way users import it).
* PATH = a folder without a manifest: every binary under it; imported when it is a package
  (holds `__init__.py`).
* PATH = a `.whl`: unpacked into a temp folder (never installed, never imported); a manifest
  inside it is used as for a folder.
* `--package NAME`: an installed import name (or distribution name), found through
  `importlib.util.find_spec` / `importlib.machinery.PathFinder` and `importlib.metadata`
  without importing it in this process. The binaries are the distribution's files (RECORD),
  so an extension installed beside its package (causal-conv1d's top-level
  `causal_conv1d_cuda*.so`) is found too, plus any binary in the package's folder. NAME may
  be a top-level extension module with no package (`rotary_emb`): flashbuild's wheel of such
  a tree keeps its manifest in the `.dist-info` folder, where it is read from.

A binary is "required" when the user or the manifest names it as a module: it must hold GPU
code. Other binaries found by walking a folder, wheel or distribution may be host-only helpers
(a warning); at least one binary of the subject must hold GPU code.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import posixpath
import re
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Literal

from flashbuild.errors import UsageError, VerifyError
from flashbuild.installing.manifest import MANIFEST_NAME, Manifest
from flashbuild.verifying.fatbin_headers import not_regular

if TYPE_CHECKING:
    from collections.abc import Iterator
    from importlib.machinery import ModuleSpec

SubjectKind = Literal["manifest", "binary", "folder", "wheel", "package"]
BinaryKind = Literal["module", "plugin", "library"]
DEFAULT_PACKAGE = "flashkern"

#: Shared libraries and extension modules on Linux and Windows (`libfoo.so.1.2` included).
_BINARY_NAME = re.compile(r"\.(so(\.\d+)*|pyd|dll)$", re.IGNORECASE)
#: Folders never walked: caches and VCS data hold no installed binaries.
_SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn"})


@dataclass(frozen=True)
class Binary:
    """One binary to check."""

    path: Path
    #: Its name in the report: relative to the subject's folder, `/`-separated.
    subject: str
    kind: BinaryKind
    #: Named by the user or as a manifest module: it must hold GPU code.
    required: bool
    #: Listed in the manifest (a missing file is then a failure, not an absence).
    listed: bool = False


@dataclass(frozen=True)
class Subject:
    kind: SubjectKind
    #: What the user named, for the report header (an absolute path or a package name).
    label: str
    binaries: tuple[Binary, ...]
    manifest: Manifest | None = None
    manifest_path: Path | None = None
    #: Import name to import in a fresh interpreter; None when it cannot be imported as users
    #: import it (see `no_import`).
    package: str | None = None
    #: Put on the child's PYTHONPATH (a package folder that is not on sys.path).
    search_path: Path | None = None
    #: Why there is no import check.
    no_import: str = ""
    #: The package has a `selfcheck` module (flashkern's GPU self-check; most packages have
    #: none, and then the self-check runs only when asked for).
    has_selfcheck: bool = False


def _has_selfcheck(*folders: Path) -> bool:
    return any((f / "selfcheck.py").is_file() or (f / "selfcheck" / "__init__.py").is_file()
               for f in folders)


def is_binary_name(name: str) -> bool:
    return _BINARY_NAME.search(name) is not None


def _walk(root: Path) -> list[Path]:
    """Binaries under `root`, sorted, each real file once (a `libx.so -> libx.so.1` link is
    the same library)."""
    found: dict[Path, Path] = {}
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                if entry.name not in _SKIP_DIRS:
                    stack.append(entry)
            elif entry.is_file() and is_binary_name(entry.name):
                found.setdefault(entry.resolve(), entry)
    return sorted(found.values())


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _with_manifest(kind: SubjectKind, label: str, manifest_path: Path, root: Path, *,
                   package: str | None, search_path: Path | None,
                   no_import: str = "") -> Subject:
    manifest = Manifest.load(manifest_path)
    folder = manifest_path.parent
    if kind == "wheel":
        _members_only(manifest, manifest_path, root, label)
    # The manifest names what was installed: exactly those binaries are checked. A path
    # beside the manifest's folder (`../rotary_emb.so`) is shown from the root, not through
    # the folder it left.
    paths = [Path(os.path.normpath(folder / a.path)) for a in manifest.artifacts]
    # A module the build knew holds host code only is checked like a helper library.
    binaries = tuple(Binary(path, _rel(path, root), a.kind,
                            required=a.kind == "module" and a.gpu_code, listed=True)
                     for a, path in zip(manifest.artifacts, paths, strict=True))
    return Subject(kind, label, binaries, manifest, manifest_path, package=package,
                   search_path=search_path, no_import=no_import,
                   has_selfcheck=package is not None and _has_selfcheck(folder))


def _members_only(manifest: Manifest, manifest_path: Path, root: Path, label: str) -> None:
    """A wheel's manifest may name only members of that wheel: `../x.so` (or an absolute
    path) would make verify check a file outside it, next to the temp folder, and pass."""
    folder = manifest_path.parent
    outside = []
    for artifact in manifest.artifacts:
        # `pkg/../x.so` is the wheel's own top-level `x.so` (a module beside its package, or
        # a manifest in .dist-info); `pkg/../../x.so` leaves the wheel.
        rel = posixpath.normpath((folder.relative_to(root) / artifact.path).as_posix())
        if (Path(artifact.path).is_absolute() or PureWindowsPath(artifact.path).is_absolute()
                or not _safe_member(rel)):
            outside.append(artifact.path)
    if outside:
        raise VerifyError(
            f"the {MANIFEST_NAME} in {Path(label).name} names files outside the wheel",
            evidence=f"{(manifest_path.relative_to(root)).as_posix()} lists "
            f"{', '.join(outside[:5])}; a wheel's manifest may name only members of that wheel",
            fix="do not install it; rebuild the wheel from its source tree (`flashbuild build` "
            "writes artifact paths relative to the manifest's folder)")


def _no_binaries(where: str, evidence: str) -> VerifyError:
    return VerifyError(
        f"{where} holds no compiled extension module or shared library",
        evidence=evidence,
        fix="point verify at the built binary (.so/.pyd), the package folder or wheel that "
        "contains it, or `--package NAME` for an installed package; a wheel without one was "
        "built without compiling its extension (check the build log for a skipped "
        "CUDAExtension, e.g. a FORCE_BUILD switch or a prebuilt-wheel download)")


def _folder(path: Path) -> Subject:
    manifest = path / MANIFEST_NAME
    package = path.name if (path / "__init__.py").is_file() else None
    if manifest.is_file():
        return _with_manifest("manifest", str(path), manifest, path,
                              package=package or path.name, search_path=path.parent)
    binaries = tuple(Binary(p, _rel(p, path), "library", required=False) for p in _walk(path))
    if not binaries:
        raise _no_binaries(f"the folder {path}",
                           "no .so, .so.N, .pyd or .dll file under it (and no "
                           f"{MANIFEST_NAME})")
    return Subject("folder", str(path), binaries, package=package,
                   search_path=path.parent if package else None,
                   has_selfcheck=package is not None and _has_selfcheck(path),
                   no_import="" if package else "a folder without __init__.py is not a "
                   "package; verify `--package NAME` to check the import")


def _safe_member(name: str) -> bool:
    parts = PurePosixPath(name.replace("\\", "/")).parts
    return bool(parts) and not name.startswith(("/", "\\")) and ".." not in parts and \
        ":" not in parts[0]


def _bad_wheel(path: Path, why: str) -> VerifyError:
    return VerifyError(
        f"{path.name} is not a readable wheel", evidence=f"{path}: {why}",
        fix="rebuild it (`pip wheel --no-build-isolation --no-deps .`) or download it again; "
        "a truncated file often means an interrupted copy")


@contextlib.contextmanager
def _wheel(path: Path) -> Iterator[Subject]:
    """Unpack the wheel's binaries (and any manifest) into a temp folder: read, not
    installed, so nothing it contains runs."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise _bad_wheel(path, str(exc) or "not a zip archive") from exc
    with archive, tempfile.TemporaryDirectory(prefix="flashbuild-verify-wheel-") as tmp:
        names = [i.filename for i in archive.infolist() if not i.is_dir()]
        if not any(re.fullmatch(r"[^/]+\.dist-info/WHEEL", n) for n in names):
            raise _bad_wheel(path, f"no <name>.dist-info/WHEEL among its {len(names)} "
                             "file(s)" + (f": {', '.join(names[:8])}" if names else ""))
        unsafe = [n for n in names if not _safe_member(n)]
        if unsafe:
            raise VerifyError(f"{path.name} holds paths that leave the wheel",
                              evidence=", ".join(unsafe[:5]),
                              fix="do not install it; rebuild it from its source tree")
        wanted = [n for n in names if is_binary_name(n) or
                  PurePosixPath(n).name == MANIFEST_NAME]
        if not any(is_binary_name(n) for n in wanted):
            raise _no_binaries(f"the wheel {path.name}",
                               f"its {len(names)} file(s): {', '.join(names[:12])}"
                               f"{' …' if len(names) > 12 else ''}")
        root = Path(tmp)
        try:
            for name in wanted:
                archive.extract(name, root)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise _bad_wheel(path, f"cannot unpack it: {exc}") from exc
        why = ("a wheel is read, not installed: install it and run `flashbuild verify "
               "--package NAME` to check the import")
        # Binaries and manifests only: a package-less wheel's manifest in .dist-info too.
        manifests = sorted(root.rglob(MANIFEST_NAME))
        if len(manifests) == 1:
            yield _with_manifest("wheel", str(path), manifests[0], root, package=None,
                                 search_path=None, no_import=why)
        else:
            yield Subject("wheel", str(path), tuple(
                Binary(p, _rel(p, root), "library", required=False) for p in _walk(root)),
                no_import=why)


def _find_spec(name: str) -> ModuleSpec | None:
    """The spec of `name` without importing anything: `importlib.util.find_spec` imports the
    parents of a dotted name, so those are walked with PathFinder instead."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)
        for part in rest:
            if spec is None or not spec.submodule_search_locations:
                return None
            spec = importlib.machinery.PathFinder.find_spec(
                f"{spec.name}.{part}", list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return None
    return spec


def _distributions(name: str) -> list[importlib.metadata.Distribution]:
    """Distributions that provide the import name `name` (or are named `name`)."""
    top = name.split(".", maxsplit=1)[0]
    dist_names = _packages_distributions().get(top, [])
    out: list[importlib.metadata.Distribution] = []
    for dist_name in [*dist_names, name]:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            dist = importlib.metadata.distribution(dist_name)
            if all(d.metadata["Name"] != dist.metadata["Name"] for d in out):
                out.append(dist)
    return out


def _packages_distributions() -> dict[str, list[str]]:
    """importlib.metadata.packages_distributions(), except that one distribution with a
    damaged RECORD or top_level.txt (anywhere in the environment) is left out instead of
    failing the whole lookup; asked for by name, it gets its own paragraph (`_dist_files`)."""
    out: dict[str, list[str]] = {}
    for dist in importlib.metadata.distributions():
        try:
            text = dist.read_text("top_level.txt")
            tops = ([n.strip() for n in text.splitlines() if n.strip()] if text else
                    # What the standard library infers: top folders of .py files.
                    list(dict.fromkeys(f.parts[0] if len(f.parts) > 1 else
                                       f.with_suffix("").name
                                       for f in dist.files or [] if f.suffix == ".py")))
        except (UnicodeError, csv.Error, ValueError, OSError):
            continue
        for top in tops:
            out.setdefault(top, []).append(dist.metadata["Name"])
    return out


def _dist_files(dist: importlib.metadata.Distribution) -> list[importlib.metadata.PackagePath]:
    """The distribution's RECORD, or one paragraph when it is not readable (garbage bytes,
    UTF-16, a NUL) instead of an internal error."""
    try:
        return list(dist.files or [])
    except (UnicodeError, csv.Error, ValueError, OSError) as exc:
        name = dist.metadata["Name"] or "?"
        where = getattr(dist, "_path", None)
        raise VerifyError(
            f"the file list (RECORD) of the installed distribution {name} is unreadable",
            evidence=f"{where}/RECORD: {type(exc).__name__}: {exc}" if where else
            f"RECORD: {type(exc).__name__}: {exc}",
            fix=f"reinstall it (`pip install --force-reinstall {name}`, or `flashbuild build` "
            "for a tree you build); RECORD is UTF-8 CSV written by pip, so a damaged one means "
            "the install was interrupted or edited by hand") from exc


def _dist_binaries(dist: importlib.metadata.Distribution) -> list[Path]:
    return [Path(str(dist.locate_file(f))) for f in _dist_files(dist)
            if is_binary_name(f.name)]


def _top_level(dist: importlib.metadata.Distribution) -> str | None:
    try:
        text = dist.read_text("top_level.txt")
    except UnicodeError:
        text = None  # a damaged top_level.txt: fall back to the RECORD below
    names = [n.strip() for n in (text or "").splitlines() if n.strip()]
    if not names:
        names = [f.parts[0] for f in _dist_files(dist)
                 if len(f.parts) == 2 and f.name == "__init__.py"]
    packages = [n for n in names if not n.startswith("_")]
    return next(iter(packages or names), None)


def _package(name: str) -> Subject:
    spec = _find_spec(name)
    dists = _distributions(name)
    import_name = name
    if spec is None and dists:
        # A distribution name (`causal-conv1d`): import its top-level package.
        top = _top_level(dists[0])
        spec = _find_spec(top) if top else None
        import_name = top or name
    if spec is None:
        raise VerifyError(
            f"the package `{name}` is not installed in this environment",
            evidence=f"importlib.util.find_spec({name!r}) found nothing and no installed "
            f"distribution provides it (Python {sys.executable})",
            fix="install it (`flashbuild build`, or `pip install` its wheel) into the Python "
            "environment flashbuild runs in, or pass its folder or wheel: `flashbuild verify "
            "PATH`")
    folders = [Path(f) for f in (spec.submodule_search_locations or [])]
    for folder in folders:
        if (folder / MANIFEST_NAME).is_file():
            return _with_manifest("package", name, folder / MANIFEST_NAME, folder,
                                  package=import_name, search_path=folder.parent)
    # Top-level modules (`rotary_emb`, with no package; torch-memory-saver's beside its
    # pure-Python package): flashbuild put the manifest in the distribution's .dist-info.
    for dist in dists:
        meta = next((f for f in _dist_files(dist) if f.name == MANIFEST_NAME and
                     len(f.parts) == 2 and f.parts[0].endswith(".dist-info")), None)
        located = Path(str(dist.locate_file(meta))) if meta is not None else None
        if located is not None and located.is_file():
            return _with_manifest("package", name, located, located.parent.parent,
                                  package=import_name, search_path=None)
    paths: list[Path] = []
    for dist in dists:
        paths += _dist_binaries(dist)
    for folder in folders:
        paths += _walk(folder)
    if spec.origin and is_binary_name(spec.origin):
        paths.append(Path(spec.origin))
    unique = list({p.resolve(): p for p in paths if p.is_file()}.values())
    if not unique:
        where = ", ".join(str(f) for f in folders) or str(spec.origin)
        raise _no_binaries(f"the package `{name}`",
                           f"looked in {where}" + "".join(
                               f" and the files of the distribution {d.metadata['Name']}"
                               for d in dists))
    root = folders[0].parent if folders else Path(str(spec.origin)).parent
    return Subject("package", name, tuple(
        Binary(p, _rel(p, root), "library", required=False) for p in sorted(unique)),
        package=import_name, has_selfcheck=_has_selfcheck(*folders))


@contextlib.contextmanager
def open_subject(path: Path | None = None, *, package: str | None = None) -> Iterator[Subject]:
    """The subject for PATH (file, folder, wheel) or an installed `package` (default
    flashkern). A wheel's temp folder lives until the context ends."""
    if path is None:
        yield _package(package or DEFAULT_PACKAGE)
        return
    # Relative paths are made absolute here, once: the import check runs from a neutral temp
    # folder, where a relative search path would point nowhere (issue 12).
    path = path.absolute()
    if not path.exists():
        raise UsageError(f"{path} does not exist",
                         evidence=f"the PATH argument, made absolute from {Path.cwd()}",
                         fix="name an existing .so/.pyd, package folder, wheel or "
                         f"{MANIFEST_NAME}, or use `--package NAME`")
    mode = path.stat().st_mode
    if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        # Before any open(): a FIFO named `.so` blocks a reader forever, /dev/zero never ends.
        raise not_regular(path, mode)
    if path.is_dir():
        yield _folder(path)
    elif path.suffix.lower() == ".whl":
        with _wheel(path) as subject:
            yield subject
    elif path.name == MANIFEST_NAME or path.suffix.lower() == ".json":
        yield _with_manifest("manifest", str(path), path, path.parent,
                             package=path.parent.name, search_path=path.parent.parent)
    else:
        yield Subject("binary", str(path), (Binary(path, path.name, "library", required=True),),
                      no_import="a single binary is not imported (outside its package it "
                      "does not load the way users load it); verify the package folder or "
                      "`--package NAME` to check the import")
