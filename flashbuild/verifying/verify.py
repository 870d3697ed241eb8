"""`flashbuild verify`: prove a binary, folder, wheel or installed package is right for the
target GPU — built by flashbuild or not.

`verify_install` opens the subject (`inputs.open_subject`: the binaries, the build manifest
when there is one, the package to import), then checks, each to ok / warn / fail with evidence
and a fix: the binaries are readable; the arch proof per binary (the SASS/PTX it carries
against the requested archs: every target's SASS present and, with `strict_arch`, no SASS or
PTX for any other arch); the recipe's kernels are in the target's cubins; the libraries each
needs resolve; per-kernel resources fit the arch's limits; the package imports in a fresh
interpreter and exports what the recipe lists; on a GPU, the package's self-check.

Targets come from `--arch`, else the manifest's archs; with neither the images are listed and
not judged.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from flashbuild.arch import Arch, ArchSpec, BuildTarget, Suffix, Target, satisfies
from flashbuild.errors import FlashbuildError, VerifyError
from flashbuild.installing.manifest import MANIFEST_NAME
from flashbuild.installing.resources import loader_shim
from flashbuild.installing.shim import SHIM_MODULE
from flashbuild.platforms import Platform, current
from flashbuild.source.setup_record import module_provider
from flashbuild.toolchain_facts import WHEEL_DLL_SUBDIRS
from flashbuild.verifying import abi, binaries, placeholders, resources, runtime
from flashbuild.verifying.fatbin import (
    BinaryFormatError,
    BinaryImages,
    FatbinImage,
    UnknownCodecError,
    list_images,
)
from flashbuild.verifying.inputs import DEFAULT_PACKAGE, Binary, Subject, open_subject

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from flashbuild.installing.resources.loader_shim import Gpu
    from flashbuild.proc import Runner

__all__ = ["DEFAULT_PACKAGE", "ArchProof", "Check", "Status", "VerifyReport", "verify_install"]

JIT_COST = ("the driver JIT-compiles PTX at the first launch of each kernel (seconds to minutes "
            "for a large module, cached per user in the CUDA ComputeCache)")
#: Libraries of torch itself: a module that needs one is a torch extension, loaded after
#: `import torch` has loaded them (and, through torch's RPATH, the PyPI CUDA libraries).


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    """One verdict."""

    area: str
    subject: str
    status: Status
    summary: str
    evidence: str = ""
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {"area": self.area, "subject": self.subject, "status": str(self.status),
                "summary": self.summary, "evidence": self.evidence, "fix": self.fix}


@dataclass(frozen=True)
class ArchProof:
    """What one binary carries against the targets: image names, the targets it lacks and
    the images for archs nobody asked for."""

    subject: str
    path: str
    kind: str
    format: str
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    #: Target images it lacks (`sm_120`, or `compute_120` for a PTX target).
    missing: tuple[str, ...] = ()
    #: SASS / PTX for archs that are not targets (PTX of a target's compute_ is not extra).
    extra: tuple[str, ...] = ()
    #: Whether it holds a fatbinary with at least one image.
    gpu_code: bool = False
    #: False when the binary could not be read.
    readable: bool = True

    def to_json(self) -> dict[str, object]:
        return {"subject": self.subject, "path": self.path, "kind": self.kind,
                "format": self.format, "readable": self.readable, "gpu_code": self.gpu_code,
                "sass": list(self.sass), "ptx": list(self.ptx), "missing": list(self.missing),
                "extra": list(self.extra)}


@dataclass(frozen=True)
class VerifyReport:
    manifest_path: Path | None
    package: str
    targets: str
    checks: tuple[Check, ...]
    images: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    #: What was verified: manifest, binary, folder, wheel or package, and its path or name.
    subject_kind: str = "manifest"
    subject: str = ""
    strict_arch: bool = True
    binaries: tuple[ArchProof, ...] = ()
    #: Per binary and target arch: the kernels read and which are placeholders.
    placeholders: tuple[placeholders.PlaceholderKernels, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(c.status is Status.FAIL for c in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status is Status.FAIL)

    @property
    def warnings(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status is Status.WARN)

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "kind": self.subject_kind, "subject": self.subject,
                "manifest": str(self.manifest_path) if self.manifest_path else None,
                "package": self.package, "targets": self.targets,
                "strict_arch": self.strict_arch,
                "binaries": [b.to_json() for b in self.binaries],
                "placeholders": [p.to_json() for p in self.placeholders],
                "checks": [c.to_json() for c in self.checks], "images": self.images}


def arch_proof(found: BinaryImages, targets: Sequence[Target], *, subject: str,
               kind: str = "library") -> ArchProof:
    """The arch proof of one binary: which target images it lacks and which it has for no
    target. A SASS image counts for a target by `arch.satisfies`, the rule the build's arch
    check uses (sm_90a SASS does not count for sm_90); PTX counts for a PTX target when a GPU
    of that arch can JIT it."""
    codes = {t.arch.code for t in targets}
    missing: list[str] = []
    for target in targets:
        arch = target.arch
        if target.sass and not any(satisfies(i.arch, arch) for i in found.sass):
            missing.append(arch.sm)
        if target.ptx and _ptx_for(found.ptx, arch) is None:
            missing.append(arch.compute)
    extra = [i.name for i in found.images if targets and i.arch.code not in codes]
    return ArchProof(
        subject=subject, path=str(found.path), kind=kind, format=found.format,
        sass=tuple(dict.fromkeys(i.name for i in found.sass)),
        ptx=tuple(dict.fromkeys(i.name for i in found.ptx)),
        missing=tuple(dict.fromkeys(missing)), extra=tuple(dict.fromkeys(extra)),
        gpu_code=bool(found.images))


def _check_images(found: BinaryImages, targets: Sequence[Target], subject: str, *,
                  strict: bool = True, unreadable: Collection[str] = ()) -> list[Check]:
    """The image checks of one binary; an image in `unreadable` is not reported present (its
    own failure says why)."""
    checks: list[Check] = []
    have = ", ".join(found.names()) or "no GPU code"
    sass = found.sass
    ptx = found.ptx
    for target in targets:
        arch = target.arch
        if target.sass:
            exact = [i for i in sass if satisfies(i.arch, arch)]
            same_code = [i for i in sass if i.arch.code == arch.code]
            if exact:
                if any(i.name not in unreadable for i in exact):
                    checks.append(Check("images", subject, Status.OK,
                                        f"{arch.sm} SASS present", f"holds {have}"))
            elif same_code:
                # The build's arch check refuses this same binary (arch.satisfies): a
                # variant is not the arch asked for, nor the reverse.
                checks.append(Check(
                    "images", subject, Status.FAIL,
                    f"asked for {arch.sm}, found {same_code[0].name} SASS",
                    f"holds {have}; `a` code runs only on that exact SM and uses its "
                    "arch-specific features, `f` code on its family; build and verify take "
                    "only the variant asked for",
                    f"verify with `--arch {same_code[0].name}` if the variant is what you "
                    f"want (a recipe says so with `[build] arch_suffix`), else rebuild with "
                    f"`--arch {arch.sm}`"))
            else:
                jit = _ptx_for(ptx, arch)
                note = (f"; only {jit.name} PTX could run there, after JIT ({JIT_COST})"
                        if jit else "")
                checks.append(Check(
                    "images", subject, Status.FAIL,
                    f"asked for {arch.sm}, found no {arch.sm} SASS",
                    f"holds {have}{note}",
                    f"rebuild with `flashbuild build --arch {arch.sm}`; check that the recipe "
                    "passes the arch to the build (CMAKE_CUDA_ARCHITECTURES, "
                    "TORCH_CUDA_ARCH_LIST) and that no hard-coded -gencode overrides it"))
        if target.ptx:
            jit = _ptx_for(ptx, arch)
            if jit is None:
                checks.append(Check(
                    "images", subject, Status.FAIL,
                    f"asked for {arch.compute} PTX, found none that a {arch.dotted} GPU can "
                    "JIT-compile", f"holds {have}",
                    f"rebuild with `flashbuild build --arch {arch.compute}`"))
            elif not target.sass:
                checks.append(Check(
                    "images", subject, Status.WARN,
                    f"{arch.dotted} has PTX only ({jit.name})",
                    f"holds {have}; {JIT_COST}",
                    f"add SASS: `flashbuild build --arch {arch.sm}` (or `{arch.dotted}+PTX`)"))
            elif jit.name not in unreadable:
                checks.append(Check("images", subject, Status.OK,
                                    f"{jit.name} PTX present", f"holds {have}"))
    codes = {t.arch.code for t in targets}
    extra = list(dict.fromkeys(i.name for i in found.images if targets and
                               i.arch.code not in codes))
    if extra:
        asked = ", ".join(dict.fromkeys(t.arch.sm for t in targets))
        checks.append(Check(
            "images", subject, Status.FAIL if strict else Status.WARN,
            f"extra archs (not asked for): {', '.join(extra)}",
            f"asked for {asked}; holds {have}. Each extra arch costs compile time and binary "
            "size, and SASS for another arch proves the build ignored the requested one "
            "(a hard-coded -gencode list)",
            "build only the target: `flashbuild build --arch ...` (it takes control of the "
            "tree's arch list), or pass --no-strict-arch to accept a multi-arch binary"
            if strict else "build only the target to drop them"))
    ptx_ok = [i.name for i in ptx if i.arch.code in codes and not any(
        t.ptx and t.arch.code == i.arch.code for t in targets)]
    if ptx_ok:
        checks.append(Check("images", subject, Status.OK,
                            f"also holds {', '.join(dict.fromkeys(ptx_ok))} PTX (the target's "
                            "own compute arch: allowed)", f"holds {have}"))
    return checks


def _ptx_for(ptx: Sequence[FatbinImage], arch: Arch) -> FatbinImage | None:
    """The newest PTX image a GPU of `arch` can JIT: plain PTX of the same or an older
    compute capability; `a` PTX only for that exact arch; `f` PTX for the family."""
    best: FatbinImage | None = None
    for image in ptx:
        code, suffix = image.arch.code, image.arch.suffix
        fits = (code == arch.code if suffix is Suffix.ARCH else
                (code // 10 == arch.code // 10 and code <= arch.code)
                if suffix is Suffix.FAMILY else code <= arch.code)
        if fits and (best is None or code > best.arch.code):
            best = image
    return best




@dataclass(frozen=True)
class Expectations:
    """What the recipe says the binaries hold: from the manifest, or from `--recipe` /
    arguments for a binary built without flashbuild."""

    exports: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    #: kernel → `extern "C"` device constant holding its dynamic shared memory per arch.
    dynamic_smem: Mapping[str, str] = field(default_factory=dict)
    #: kernel → fixed dynamic shared memory bytes.
    kernel_smem: Mapping[str, int] = field(default_factory=dict)
    dll_dirs: tuple[Path, ...] = ()
    #: The wheel libraries the loader shim loads before the package's binaries (Linux).
    preload: tuple[Path, ...] = ()
    ptxas_info: str | None = None
    #: Modules installed by their own top-level name: an export `mod.name` whose `mod` is one
    #: of them is looked up on that module, not on the package.
    top_level: tuple[str, ...] = ()


def _expectations(subject: Subject, *, exports: Sequence[str] | None,
                  kernels: Sequence[str] | None,
                  dynamic_smem: Mapping[str, str] | None,
                  top_level: Sequence[str] = ()) -> Expectations:
    m = subject.manifest
    return Expectations(
        top_level=tuple(dict.fromkeys([*top_level, *(m.top_level if m else ())])),
        exports=tuple(exports if exports is not None else m.exports if m else ()),
        kernels=tuple(kernels if kernels is not None else m.kernels if m else ()),
        dynamic_smem=dict(dynamic_smem if dynamic_smem is not None else
                          {d.kernel: d.symbol for d in m.dynamic_smem_symbols} if m else {}),
        kernel_smem={k.kernel: k.dynamic_smem_bytes for k in m.kernel_smem} if m else {},
        dll_dirs=tuple(Path(d) for d in m.dll_dirs) if m else (),
        # Only a loader shim beside the manifest loads them (an install without a package,
        # or one whose shim is gone, loads nothing first).
        preload=tuple(Path(f) for f in m.preload) if m and subject.manifest_path and (
            subject.manifest_path.parent / f"{SHIM_MODULE}.py").is_file() else (),
        ptxas_info=m.ptxas_info if m else None)


def verify_install(
    *,
    path: Path | None = None,
    manifest_path: Path | None = None,
    package: str | None = None,
    targets: ArchSpec | None = None,
    exports: Sequence[str] | None = None,
    kernels: Sequence[str] | None = None,
    dynamic_smem: Mapping[str, str] | None = None,
    top_level: Sequence[str] = (),
    strict_arch: bool = True,
    allow_placeholders: bool = False,
    run_gpu: bool | None = None,
    bench: bool = False,
    runner: Runner,
    platform: Platform | None = None,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    selfcheck: Sequence[str] = runtime.DEFAULT_SELFCHECK,
    import_module: bool = True,
    gpu_present: Callable[[], bool] = runtime.gpu_present,
    gpus_here: Callable[[Mapping[str, str]], list[Gpu] | None] = runtime.visible_gpus,
    preloaded_dirs: Sequence[Path] | None = None,
    policy: str | None = None,
) -> VerifyReport:
    """Verify PATH (a binary, folder, wheel or manifest; `manifest_path` is its older name)
    or an installed `package`. `targets` defaults to the manifest's archs; `exports`,
    `kernels` and `dynamic_smem` to the manifest's (the recipe's `[verify]`); `run_gpu=None`
    runs the GPU self-check when a GPU and torch are present; `top_level` names modules
    installed by their own name (the recipe's `[install] top_level`, added to the
    manifest's). `strict_arch` fails a binary
    holding images for archs that are not targets (else they are a warning).
    `allow_placeholders` makes "most kernels of a target are placeholders" a warning (all of
    them still fails). `policy` (`manylinux_2_28`) bounds the glibc/libstdc++ symbol
    versions of each ELF binary; a wheel's own platform tag is its policy by default."""
    with open_subject(path or manifest_path, package=package) as subject:
        return _verify(subject, targets=targets, strict=strict_arch,
                       allow_placeholders=allow_placeholders, run_gpu=run_gpu,
                       bench=bench, runner=runner, platform=platform or current(),
                       env=dict(os.environ if env is None else env), python=python,
                       selfcheck=selfcheck, import_module=import_module,
                       gpu_present=gpu_present, gpus_here=gpus_here,
                       preloaded=(environment_lib_dirs() if preloaded_dirs is None
                                  else tuple(preloaded_dirs)),
                       expect=_expectations(subject, exports=exports, kernels=kernels,
                                            dynamic_smem=dynamic_smem, top_level=top_level),
                       policy=policy)


def _wheel_tag(subject: Subject) -> str | None:
    """The platform tag of a wheel's file name (PEP 427: the last dash-separated field)."""
    name = Path(subject.label).name
    if subject.kind != "wheel" or not name.endswith(".whl"):
        return None
    return name.removesuffix(".whl").rsplit("-", 1)[-1].split(".")[0]


def _abi_checks(subject: Subject, policy: str | None) -> list[Check]:
    """The manylinux checks: each ELF binary's symbol versions against `policy`, else the
    wheel's manylinux tag; a linux_* tag is a warning (PyPI refuses it)."""
    checks: list[Check] = []
    tag = _wheel_tag(subject)
    if tag is not None and (warning := abi.platform_tag_warning(tag)) is not None:
        checks.append(Check("abi", Path(subject.label).name, Status.WARN, warning,
                            fix="build in a manylinux image (or pass --policy to check)"))
    name = policy or (tag if tag is not None and tag.startswith("manylinux") else None)
    if name is None:
        return checks
    rules = abi.policy_named(name)
    for binary in subject.binaries:
        if not binary.path.name.endswith(".so") and ".so." not in binary.path.name:
            continue
        lines = abi.violations(binary.path, rules)
        checks.append(Check(
            "abi", binary.path.name, Status.FAIL if lines else Status.OK,
            (f"needs symbol versions newer than {rules.name}" if lines else
             f"symbol versions within {rules.name}"),
            evidence="; ".join(lines),
            fix="build in the policy's manylinux image" if lines else ""))
    return checks


#: Asks the target interpreter for its torch without importing it (importlib.metadata reads the
#: dist-info only: milliseconds, where `import torch` takes seconds).
_TORCH_PROBE = (
    "import importlib.metadata as m, json\n"
    "try:\n"
    "    d = m.distribution('torch')\n"
    "    print(json.dumps({'version': d.version, 'lib': str(d.locate_file('torch/lib'))}))\n"
    "except m.PackageNotFoundError:\n"
    "    print('{}')\n")


@dataclass(frozen=True)
class InstalledTorch:
    """The torch of the interpreter verify inspects."""

    version: str
    lib_dir: Path


def installed_torch(runner: Runner, python: str, env: Mapping[str, str]) -> InstalledTorch | None:
    """The torch the target `python` has, or None (no torch, or the probe failed)."""
    try:
        done = runner.run([python, "-P", "-c", _TORCH_PROBE], env=env, timeout=30, check=False)
        data = json.loads(done.stdout.strip().splitlines()[-1]) if done.ok else {}
    except (FlashbuildError, ValueError, IndexError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("version"), str):
        return None
    return InstalledTorch(version=data["version"], lib_dir=Path(str(data.get("lib", ""))))


_SEVERITY = {"ok": Status.OK, "note": Status.OK, "error": Status.FAIL}


def _finding(subject: str, finding: abi.Finding) -> Check:
    summary = ("note: " if finding.severity == "note" else "") + finding.summary
    return Check("abi", subject, _SEVERITY[finding.severity], summary, finding.evidence,
                 finding.fix)


def _is_elf_module(path: Path) -> bool:
    return path.name.endswith(".so") or ".so." in path.name


def _torch_checks(subject: Subject, *, runner: Runner, python: str,
                  env: Mapping[str, str]) -> list[Check]:
    """The torch the module was built against (the manifest's record, and the c10::/at::
    symbols it imports) against the torch of the target interpreter."""
    built = subject.manifest.torch_version if subject.manifest else ""
    elves = [b.path for b in subject.binaries if _is_elf_module(b.path)]
    if not built and not elves:
        return []
    torch = installed_torch(runner, python, env)
    if torch is None:
        return []
    checks: list[Check] = []
    if built:
        checks.append(_finding(subject.package or Path(subject.label).name,
                               abi.torch_version_finding(built, torch.version)))
    libs = abi.torch_lib_files(torch.lib_dir)
    if not libs:
        return checks
    for path in elves:
        missing = abi.missing_torch_symbols(path, libs)
        if missing:
            shown = abi.demangle(missing[:5], runner)
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            checks.append(Check(
                "abi", path.name, Status.FAIL,
                f"imports {len(missing)} c10/at symbol(s) torch {torch.version} lacks",
                evidence="; ".join(shown) + more,
                fix=f"rebuild against the installed torch {torch.version} "
                "(`flashbuild build`), or install the torch it was built with"))
    return checks


def _cxx_runtime_checks(subject: Subject) -> list[Check]:
    """A module linked against torch with a private, static copy of libstdc++ (abi.
    private_cxx_runtime): it imports, and the first exception thrown across it crashes."""
    checks: list[Check] = []
    for binary in subject.binaries:
        if not _is_elf_module(binary.path):
            continue
        evidence = abi.private_cxx_runtime(binary.path)
        if evidence:
            checks.append(Check(
                "abi", binary.path.name, Status.FAIL,
                "links libstdc++ statically beside torch's libraries: a C++ exception thrown "
                "across it (TORCH_CHECK, pybind11) crashes the process",
                evidence=evidence,
                fix="rebuild with compilers that link libstdc++ as a shared library (check "
                "CXX, and CUDAHOSTCXX for a CMake build with CUDA sources, whose library "
                "folders join the link: a g++ wrapper with its own -B folder or "
                "-static-libstdc++ does not), e.g. `CXX=/usr/bin/g++ "
                "CUDAHOSTCXX=/usr/bin/g++ flashbuild build …`"))
    return checks


def _wheel_abi(subject: Subject) -> str | None:
    """The ABI tag of a wheel's file name (PEP 427: the second-last field, `abi3`)."""
    name = Path(subject.label).name
    if subject.kind != "wheel" or not name.endswith(".whl"):
        return None
    fields = name.removesuffix(".whl").split("-")
    return fields[-2] if len(fields) >= 5 else None


def _stable_abi_checks(subject: Subject) -> list[Check]:
    """abi3 where claimed: a `*.abi3.so` importing CPython symbols outside the limited API,
    and a .pyd's imports (debug runtime, VC++ runtime, python3X.dll in an abi3 wheel)."""
    checks: list[Check] = []
    abi3_wheel = _wheel_abi(subject) == "abi3"
    for binary in subject.binaries:
        path = binary.path
        if ".abi3." in path.name and _is_elf_module(path):
            bad = abi.abi3_violations(path)
            if bad:
                checks.append(Check(
                    "abi", path.name, Status.FAIL,
                    "claims abi3 but imports symbols outside the limited API",
                    evidence=", ".join(bad[:8]) + (" ..." if len(bad) > 8 else ""),
                    fix="use only the limited API (PEP 384) or drop the abi3 tag"))
        elif path.suffix.lower() == ".pyd":
            dlls = abi.pe_imports(path)
            checks += [_finding(path.name, f)
                       for f in abi.pe_findings(path.name, dlls, abi3=abi3_wheel)]
    return checks


def _verify(subject: Subject, *, targets: ArchSpec | None, strict: bool,
            allow_placeholders: bool = False, run_gpu: bool | None, bench: bool,
            runner: Runner, platform: Platform, env: dict[str, str], python: str,
            selfcheck: Sequence[str], import_module: bool, gpu_present: Callable[[], bool],
            gpus_here: Callable[[Mapping[str, str]], list[Gpu] | None],
            preloaded: Sequence[Path], expect: Expectations,
            policy: str | None = None) -> VerifyReport:
    manifest = subject.manifest
    spec = targets or (BuildTarget.from_names(manifest.archs).spec if manifest else None)
    if spec is not None and spec.native:
        raise VerifyError("`native` cannot be verified statically",
                          fix="name the arch: `flashbuild verify --arch sm120`")
    pkg = subject.package or Path(subject.label).name
    if subject.kind == "binary":
        # One named file that is no binary at all: one paragraph, not a report around it.
        list_images(subject.binaries[0].path)
        binaries.read_link_info(subject.binaries[0].path)
    checks: list[Check] = []
    images: dict[str, list[dict[str, object]]] = {}
    proofs: list[ArchProof] = []
    cache: dict[str, str] | None = None
    any_device_code = False
    limits_checked = 0
    declared: set[tuple[str, int]] = set()
    sass_codes: set[int] = set()
    names_by_code: dict[int, set[str]] = {}
    bodies: list[placeholders.PlaceholderKernels] = []
    held: dict[str, tuple[str, ...]] = {}
    if spec is None:
        checks.append(Check("images", pkg, Status.SKIP,
                            "no target arch: images listed, not judged",
                            "no --arch given and no build manifest to take the archs from",
                            "pass the GPU you build for: `--arch sm120`"))
    for binary in subject.binaries:
        result = _artifact_checks(binary, spec=spec, strict=strict, expect=expect,
                                  platform=platform, env=env, runner=runner, python=python,
                                  cache=cache, preloaded=preloaded,
                                  outside=_outside(binary, subject))
        cache = result.cache
        checks += result.checks
        if result.proof is not None:
            proofs.append(result.proof)
        if result.images is not None:
            images[binary.subject] = result.images
            any_device_code = any_device_code or bool(result.images)
        limits_checked += result.kernels
        declared |= result.declared
        sass_codes |= result.sass_codes
        for code, names in result.names_by_code.items():
            names_by_code.setdefault(code, set()).update(names)
        bodies += result.placeholders
        held[binary.subject] = result.image_names
    if spec is not None:
        checks += _missing_declared_checks(expect, spec, pkg, found=declared,
                                           sass_codes=sass_codes)
    checks += _kernel_checks(expect.kernels, spec, pkg, names_by_code)
    checks += _placeholder_checks(bodies, spec, pkg, allow_most=allow_placeholders)
    if limits_checked and spec is not None:
        checks.append(Check("resources", pkg, Status.OK,
                            f"{limits_checked} kernel image(s) checked against the limits of "
                            f"{', '.join(a.sm for a in spec.archs)}"))
    if subject.package is not None:
        checks = _beside_the_package([*checks, *_runtime_checks(
            subject.package, expect, run_gpu=run_gpu, bench=bench, runner=runner,
            python=python, env=env, search_path=subject.search_path, selfcheck=selfcheck,
            import_module=import_module, gpu_present=gpu_present, gpus_here=gpus_here,
            held=held, prior=checks, has_selfcheck=subject.has_selfcheck,
            plugins=_plugins_only(subject))], subject)
    else:
        checks += _not_importable(subject, pkg, expect, run_gpu=run_gpu)
    if subject.binaries and not any_device_code:
        checks += _no_device_code(subject, pkg, failed=any(c.status is Status.FAIL
                                                            for c in checks))
    checks += _abi_checks(subject, policy)
    checks += _stable_abi_checks(subject)
    checks += _torch_checks(subject, runner=runner, python=python, env=env) + \
        _cxx_runtime_checks(subject)
    return VerifyReport(manifest_path=subject.manifest_path, package=pkg,
                        targets=spec.cmake() if spec else "none given",
                        checks=tuple(checks), images=images, subject_kind=subject.kind,
                        subject=subject.label, strict_arch=strict, binaries=tuple(proofs),
                        placeholders=tuple(bodies))


def _no_device_code(subject: Subject, pkg: str, *, failed: bool) -> list[Check]:
    """The package-level check when no binary holds GPU code: a failure, unless the build
    recorded that the tree compiles none (a CUDAExtension of C++ that calls cuSOLVER, in a
    tree without a .cu file: every module of the manifest host code only), or another check
    already failed."""
    modules = [a for a in subject.manifest.artifacts if a.kind == "module"] \
        if subject.manifest is not None else []
    if modules and not any(a.gpu_code for a in modules):
        return [Check("images", pkg, Status.WARN, "no binary holds GPU code, as the build "
                      "recorded: the tree compiles no device code",
                      f"the manifest marks {', '.join(a.path for a in modules)} host code only",
                      "nothing to do: no part of it depends on the arch")]
    if failed:
        return []
    return [Check("images", pkg, Status.FAIL, "no binary holds GPU code",
                  f"none of {', '.join(b.subject for b in subject.binaries)} has a "
                  ".nv_fatbin / .nv_fatb section",
                  "check that the build compiled the CUDA sources")]


def _outside(binary: Binary, subject: Subject) -> bool:
    """Whether `binary` is a shared library the manifest lists outside its package's folder
    (`../lib/libx.so`). Never an extension module (a top-level module beside its package is
    one the package's users import), never the binaries of an install without a package (its
    manifest lives in the `.dist-info` folder)."""
    manifest = subject.manifest_path
    return (binary.kind != "module" and manifest is not None
            and not manifest.parent.name.endswith(".dist-info")
            and not binary.path.resolve().is_relative_to(manifest.parent.resolve()))


def _outside_the_package(subject: Subject) -> frozenset[str]:
    """The binaries a manifest lists outside its package's folder."""
    return frozenset(b.subject for b in subject.binaries if _outside(b, subject))


def _beside_the_package(checks: list[Check], subject: Subject) -> list[Check]:
    """A library the wheel installs beside the package, outside its folder (a CMake install
    rule's copy in `site-packages/lib`: llama-cpp-python's wheel holds each library twice) is
    not what the package loads: once the package has imported cleanly, such a copy whose
    libraries would not resolve is a warning, not a failure of the build. Before a clean
    import, nothing says which copy the package loads, and the failure stands."""
    if subject.manifest_path is None or not any(
            c.area == "import" and c.status is Status.OK for c in checks):
        return checks
    outside = _outside_the_package(subject)
    return [replace(c, status=Status.WARN,
                    summary=f"{c.summary} (a copy outside the package, which imported "
                    "without it)",
                    fix=f"{c.fix}; or ignore it: nothing the package imports loads it by this "
                    "path") if c.area == "dependencies" and c.status is Status.FAIL and
            c.subject in outside else c for c in checks]


def _plugins_only(subject: Subject) -> tuple[str, ...]:
    """The manifest's binaries when every one is a plugin: shared libraries the package loads
    itself (ctypes), no extension module, so no Python name of theirs to look up."""
    listed = [b for b in subject.binaries if b.listed]
    if not listed or any(b.kind != "plugin" for b in listed):
        return ()
    return tuple(b.path.name for b in listed)


def _not_importable(subject: Subject, pkg: str, expect: Expectations, *,
                    run_gpu: bool | None) -> list[Check]:
    """A binary or a wheel is not imported: say so, and what it leaves unchecked."""
    checks = [Check("import", pkg, Status.SKIP, "import not checked", subject.no_import)]
    if expect.exports:
        checks.append(Check("exports", pkg, Status.SKIP,
                            f"{len(expect.exports)} export(s) not checked (no import)"))
    # The self-check imports the package: asked for explicitly, its absence is a warning.
    checks.append(Check("gpu", pkg, Status.WARN if run_gpu else Status.SKIP,
                        "no GPU self-check: nothing importable to run it on",
                        subject.no_import))
    return checks


def environment_lib_dirs() -> tuple[Path, ...]:
    """Library folders of this environment that `import torch` loads from before a torch
    extension: torch's `lib` and the PyPI `nvidia/*` wheels' `lib` / `bin` folders. Found
    through find_spec, without importing anything."""
    dirs: list[Path] = []
    torch = importlib.util.find_spec("torch")
    if torch is not None and torch.submodule_search_locations:
        dirs += [Path(f) / "lib" for f in torch.submodule_search_locations]
    nvidia = importlib.util.find_spec("nvidia")
    for folder in (nvidia.submodule_search_locations or []) if nvidia else []:
        for sub in sorted(Path(folder).glob("*")):
            dirs += [sub.joinpath(*parts) for parts in WHEEL_DLL_SUBDIRS]
    return tuple(d for d in dirs if d.is_dir())


def _with_preloaded(deps: Sequence[binaries.Dependency],
                    preloaded: Sequence[Path]) -> tuple[binaries.Dependency, ...]:
    """A torch extension needs libc10 / libtorch*, which are not on any search path of its
    own: `import torch` (which its package runs first) loads them, and the CUDA libraries
    through torch's RPATH, so the loader matches them by name. Resolve such a missing library
    from those folders, saying so; for a module that is not a torch extension nothing
    changes."""
    if not any(binaries.TORCH_LIB.match(d.name) for d in deps):
        return tuple(deps)
    out: list[binaries.Dependency] = []
    for dep in deps:
        if dep.resolution is binaries.Resolution.MISSING:
            hit = next((folder / dep.name for folder in preloaded
                        if (folder / dep.name).is_file()), None)
            if hit is not None:
                out.append(binaries.Dependency(dep.name, binaries.Resolution.FOUND, str(hit),
                                               "loaded by `import torch` before the module"))
                continue
        out.append(dep)
    return tuple(out)


@dataclass(frozen=True)
class _ArtifactResult:
    checks: list[Check]
    images: list[dict[str, object]] | None
    kernels: int
    cache: dict[str, str] | None
    #: (kernel, arch code) pairs whose declared dynamic shared memory was read.
    declared: frozenset[tuple[str, int]] = frozenset()
    #: Arch codes of the SASS images the binary holds.
    sass_codes: frozenset[int] = frozenset()
    proof: ArchProof | None = None
    #: Kernel (mangled) names per SASS arch code, from the cubins' symbol tables.
    names_by_code: Mapping[int, frozenset[str]] = field(default_factory=dict)
    #: The kernels of each target arch's cubins, real or placeholder.
    placeholders: tuple[placeholders.PlaceholderKernels, ...] = ()
    #: `sm_120`, `compute_120`: every image the binary holds, as the loader shim names them.
    image_names: tuple[str, ...] = ()


def _artifact_checks(binary: Binary, *, spec: ArchSpec | None, strict: bool,
                     expect: Expectations, platform: Platform, env: dict[str, str],
                     runner: Runner, python: str, cache: dict[str, str] | None,
                     preloaded: Sequence[Path], outside: bool = False) -> _ArtifactResult:
    """Images, dependencies and resources of one binary."""
    checks: list[Check] = []
    subject = binary.subject
    if not binary.path.is_file():
        checks.append(Check("binary", subject, Status.FAIL, "the installed file is missing",
                            f"{binary.path} does not exist (listed in {MANIFEST_NAME})",
                            "reinstall with `flashbuild build`"))
        return _ArtifactResult(checks, None, 0, cache)
    try:
        found = list_images(binary.path)
        info = binaries.read_link_info(binary.path)
    except BinaryFormatError as exc:
        checks.append(Check("binary", subject, Status.FAIL,
                            f"{binary.kind} is corrupted: {exc.what}", exc.evidence,
                            exc.fix or "rebuild and reinstall"))
        return _ArtifactResult(checks, None, 0, cache, proof=ArchProof(
            subject, str(binary.path), binary.kind, "unknown", readable=False))
    targets = spec.targets if spec is not None else ()
    kernels, names_by_code, damaged, unreadable, bodies = _read_images(found, targets,
                                                                        subject)
    # An image that cannot be read is no image for the proof either (`missing` in --json).
    usable = replace(found, images=tuple(i for i in found.images if i.name not in unreadable))
    proof = arch_proof(usable, targets, subject=subject, kind=binary.kind)
    if not found.images:
        if binary.required:
            checks.append(Check(
                "images", subject, Status.FAIL, "holds no GPU code",
                f"no .nv_fatbin/.nv_fatb section in {binary.path.name}"
                + (f"; asked for {', '.join(proof.missing)}" if proof.missing else ""),
                "check that the build compiled the CUDA sources for the target (a module "
                "built without nvcc, or its .cu files left out)"))
        else:
            checks.append(Check("images", subject, Status.WARN, "host-only: holds no GPU code",
                                f"no .nv_fatbin/.nv_fatb section in {binary.path.name}",
                                "expected for a helper library; otherwise check the build"))
    else:
        checks += _check_images(found, targets, subject, strict=strict,
                                unreadable=unreadable)
    if platform.name != "windows" and cache is None:
        cache = binaries.ld_cache(runner, env)
    deps = binaries.resolve(info, platform=platform, env=env, runner=runner,
                            dll_dirs=list(expect.dll_dirs), cache=cache or {},
                            app_dir=binaries.application_dir(python))
    deps = binaries.with_shim_preload(deps, expect.preload)  # empty without a shim
    checks += _dep_checks(_with_preloaded(deps, preloaded), subject,
                          own_folder=binary.path.parent if outside else None)
    checks += damaged
    if expect.ptxas_info:
        kernels += resources.parse_ptxas_info(expect.ptxas_info)
    declared, declared_checks = ((frozenset(), []) if spec is None else _declared_smem_checks(
        found, kernels, spec=spec, symbols=expect.dynamic_smem, subject=subject))
    checks += declared_checks
    counted = 0
    for target in targets:
        ours = [k for k in kernels
                if k.arch.removeprefix("sm_").rstrip("af") == str(target.arch.code)]
        counted += len(ours)
        for problem in resources.check_limits(ours, target.arch,
                                              dynamic_smem=expect.kernel_smem):
            checks.append(Check("resources", f"{subject} {problem.kernel} ({problem.arch})",
                                Status(problem.severity), problem.what, fix=problem.fix))
    return _ArtifactResult(checks, [i.to_json() for i in found.images], counted, cache,
                           declared=declared,
                           sass_codes=frozenset(i.arch.code for i in found.sass),
                           proof=proof,
                           names_by_code={c: frozenset(n) for c, n in names_by_code.items()},
                           placeholders=bodies,
                           image_names=tuple(dict.fromkeys(i.name for i in found.images)))


def _read_images(found: BinaryImages, targets: Sequence[Target], subject: str) -> tuple[
        list[resources.KernelResources], dict[int, set[str]], list[Check], set[str],
        tuple[placeholders.PlaceholderKernels, ...]]:
    """Read every SASS image (its kernels' resources; for a target arch also whether each
    kernel is a placeholder) and each PTX image a target would JIT, before the image checks:
    an image a target needs that cannot be read is not `present`. Returns the kernels, kernel
    names per arch code, the checks for unreadable images, their names and the kernel bodies
    per target image."""
    kernels: list[resources.KernelResources] = []
    names_by_code: dict[int, set[str]] = {}
    codes = {t.arch.code for t in targets}
    damaged: list[Check] = []
    unreadable: set[str] = set()
    bodies: dict[str, list[placeholders.KernelBody]] = {}
    for unit, image in enumerate(found.sass):
        try:
            # Decompressed once for both readers.
            cubin = image.data()
            mine = resources.cubin_resources(cubin, arch=image.name)
        except UnknownCodecError as exc:
            damaged.append(Check("resources", f"{subject} {image.name}", Status.WARN,
                                "compressed: resources unknown", exc.paragraph(),
                                "build with nvcc `--no-compress`"))
            continue
        except BinaryFormatError as exc:
            damaged.append(_unreadable(image, exc, subject, needed=image.arch.code in codes))
            unreadable.add(image.name)
            continue
        kernels += mine
        names_by_code.setdefault(image.arch.code, set()).update(k.name for k in mine)
        if image.arch.code in codes:
            try:
                bodies.setdefault(image.name, []).extend(
                    placeholders.read_cubin(cubin, arch=image.arch, name=image.name,
                                            unit=unit))
            except BinaryFormatError as exc:
                damaged.append(Check("kernels", f"{subject} {image.name}", Status.WARN,
                                     "kernel bodies not read", exc.paragraph(),
                                     exc.fix or "rebuild the module"))
    damaged += _ptx_readable(found, targets, subject, unreadable)
    read = tuple(placeholders.PlaceholderKernels(found.path, name, tuple(mine))
                 for name, mine in bodies.items())
    return kernels, names_by_code, damaged, unreadable, read


def _unreadable(image: FatbinImage, exc: BinaryFormatError, subject: str, *,
                needed: bool) -> Check:
    """A damaged GPU image (it cannot be decompressed, is over the size cap or is no cubin):
    a failure when a target needs it (listing it would be a false pass: the driver cannot load
    it either), a warning for an image of another arch."""
    return Check("images" if needed else "resources", f"{subject} {image.name}",
                 Status.FAIL if needed else Status.WARN,
                 f"the {image.name} image is unreadable" + (
                     ": the target arch has no usable GPU code" if needed else ""),
                 f"{exc.what}: {exc.evidence}" if exc.evidence else exc.what,
                 exc.fix or "rebuild and reinstall the module")


def _ptx_readable(found: BinaryImages, targets: Sequence[Target], subject: str,
                  unreadable: set[str]) -> list[Check]:
    """Decompress (capped) each PTX image a PTX target would JIT, so a damaged one fails."""
    checks: list[Check] = []
    for image in dict.fromkeys(j for t in targets if t.ptx
                               if (j := _ptx_for(found.ptx, t.arch)) is not None):
        try:
            image.data()
        except UnknownCodecError:
            continue
        except BinaryFormatError as exc:
            checks.append(_unreadable(image, exc, subject, needed=True))
            unreadable.add(image.name)
    return checks


def _kernel_checks(wanted: Sequence[str], spec: ArchSpec | None, pkg: str,
                   names_by_code: Mapping[int, set[str]]) -> list[Check]:
    """The recipe's `[verify] kernels`, each a substring of a mangled kernel name, looked for
    in the cubins of every target arch that has SASS (all SASS archs without targets). A
    target without SASS already failed the arch proof; an unreadable cubin warned."""
    if not wanted:
        return []
    codes = sorted({t.arch.code for t in spec.targets} if spec else set(names_by_code))
    codes = [c for c in codes if c in names_by_code]
    if not codes:
        return [Check("kernels", pkg, Status.WARN,
                      f"{len(wanted)} kernel name(s) not checked: no readable cubin"
                      + (" of a target arch" if spec else ""),
                      "the kernels are read from the symbol tables of the SASS images",
                      "build SASS for the target (not PTX only); with nvcc "
                      "`--no-compress` if the images use a codec flashbuild cannot read")]
    checks: list[Check] = []
    for code in codes:
        names = names_by_code[code]
        missing = [w for w in wanted if not any(w in n for n in names)]
        where = f"sm_{code}"
        if missing:
            shown = ", ".join(sorted(names)[:12]) + (" …" if len(names) > 12 else "")
            checks.append(Check(
                "kernels", f"{pkg} ({where})", Status.FAIL,
                f"kernels missing from the {where} cubins: {', '.join(missing)}",
                f"{len(names)} kernel(s) found: {shown or 'none'}",
                "check that the sources defining them are compiled for this arch (not "
                "excluded by a patch or an #if on __CUDA_ARCH__), or fix the names in the "
                "recipe's [verify] kernels (substrings of the mangled names)"))
        else:
            checks.append(Check("kernels", f"{pkg} ({where})", Status.OK,
                                f"all {len(wanted)} listed kernels present in the {where} "
                                "cubins"))
    return checks


_SHOWN = 5


def _placeholder_checks(bodies: Sequence[placeholders.PlaceholderKernels],
                        spec: ArchSpec | None, pkg: str, *,
                        allow_most: bool = False) -> list[Check]:
    """Per target arch, across every binary (placeholders.arch_placeholders): every kernel read
    a placeholder (its body for the arch only traps) fails; every kernel of most compiled units
    fails too, unless `allow_most` (the library calls only its other kernels on this arch);
    some warns; none is an info line. Kernels of an arch whose encodings are not checked are
    counted `not read`."""
    checks: list[Check] = []
    for arch in dict.fromkeys(t.arch for t in spec.targets if t.sass) if spec else ():
        mine = [b for b in bodies if parse_arch_name(b.arch) == arch.code]
        kernels = [k for b in mine for k in b.kernels]
        if not kernels:
            continue
        where = f"{pkg} ({arch.sm})"
        summed = placeholders.arch_placeholders(mine)
        if not summed.judged:
            checks.append(Check("kernels", where, Status.SKIP,
                                f"{len(kernels)} kernel body(ies) not read",
                                kernels[0].why))
            continue
        dummies, judged = summed.placeholders, summed.judged
        per_binary = "; ".join(
            f"{b.binary.name}: {len(b.placeholders)} of {len(b.kernels)}"
            for b in mine if b.placeholders)
        shown = ", ".join(k.short for k in dummies[:_SHOWN]) + (
            f", … ({len(dummies) - _SHOWN} more)" if len(dummies) > _SHOWN else "")
        meaning = (f"its body for {arch.sm} only traps: an `#if __CUDA_ARCH__` branch this arch "
                   "takes, so the kernel dies at launch")
        written_for = (f"build for the arch the kernels are written for, or use the tree's own "
                       f"support for {arch.sm} (a branch, release or fork that implements it)")
        units = (f"in {summed.dead_units} of the {summed.units} compiled units that define "
                 "kernels every kernel traps")
        verdict = summed.verdict
        if verdict is placeholders.Verdict.ALL:
            checks.append(Check(
                "kernels", where, Status.FAIL,
                f"all {len(dummies)} kernel(s) read are placeholders on {arch.sm}: {shown}",
                f"{meaning} ({per_binary})", written_for))
        elif verdict is placeholders.Verdict.MOST and not allow_most:
            checks.append(Check(
                "kernels", where, Status.FAIL,
                f"{len(dummies)} of {len(judged)} kernel(s) are placeholders on {arch.sm}, "
                f"{units}: {shown}",
                f"{meaning} ({per_binary}); the units that run hold the other "
                f"{len(judged) - len(dummies)} kernel(s)",
                f"{written_for}; if the library calls only its other kernels on {arch.sm}, "
                "pass --allow-placeholders"))
        elif dummies:
            checks.append(Check(
                "kernels", where, Status.WARN,
                f"{len(dummies)} of {len(judged)} kernel(s) are placeholders on {arch.sm}: "
                f"{shown}", f"{meaning} ({per_binary}; {units})",
                f"do not call them on {arch.sm}, or build for the arch they are written for"))
        else:
            checks.append(Check("kernels", where, Status.OK,
                                f"{len(judged)} kernel(s) read on {arch.sm}: none is a "
                                "trap-only placeholder"))
    return checks


def parse_arch_name(name: str) -> int:
    """The SM code of an image name: 120 for `sm_120a`."""
    return int(name.removeprefix("sm_").rstrip("af"))


def _declared_smem_checks(found: BinaryImages, kernels: Sequence[resources.KernelResources],
                          *, spec: ArchSpec, symbols: Mapping[str, str],
                          subject: str) -> tuple[frozenset[tuple[str, int]], list[Check]]:
    """Read the recipe's dynamic-smem symbols from each SASS image and check them against the
    limits of the target archs that image serves. Returns the (kernel, arch code) pairs found,
    so the caller can warn about a symbol no binary holds."""
    if not symbols:
        return frozenset(), []
    checks: list[Check] = []
    seen: set[tuple[str, int]] = set()
    for image in found.sass:
        targets = [t.arch for t in spec.targets if t.arch.code == image.arch.code]
        if not targets:
            continue
        try:
            declared = resources.image_declared_smem(image, symbols)
        except BinaryFormatError as exc:
            checks.append(Check("resources", f"{subject} {image.name}", Status.WARN,
                                "declared dynamic shared memory unreadable", exc.paragraph(),
                                exc.fix or "rebuild the module"))
            continue
        mine = [k for k in kernels
                if k.arch.removeprefix("sm_").rstrip("af") == str(image.arch.code)]
        for item in declared:
            seen.add((item.kernel, image.arch.code))
            for arch in targets:
                problem = resources.check_declared_smem(item, arch, kernels=mine)
                if problem is not None:
                    checks.append(Check("resources", f"{subject} {item.kernel} ({item.arch})",
                                        Status.FAIL, problem.what, problem.evidence,
                                        problem.fix))
                else:
                    limit = arch.max_smem_per_block()
                    checks.append(Check(
                        "resources", f"{subject} {item.kernel} ({item.arch})", Status.OK,
                        f"requests {item.bytes} B of dynamic shared memory; {arch.sm} allows "
                        f"{limit if limit is not None else 'an unknown amount of'} B",
                        f"`{item.symbol}` in {item.section}"))
    return frozenset(seen), checks


def _missing_declared_checks(expect: Expectations, spec: ArchSpec, pkg: str, *,
                             found: set[tuple[str, int]], sass_codes: set[int]) -> list[Check]:
    """A warning for each declared kernel that no cubin of a target arch defines: its
    dynamic shared memory is then unchecked there."""
    checks: list[Check] = []
    for kernel, symbol in sorted(expect.dynamic_smem.items()):
        for arch in dict.fromkeys(t.arch for t in spec.targets if t.arch.code in sass_codes):
            if (kernel, arch.code) not in found:
                checks.append(Check(
                    "resources", f"{pkg} {kernel} ({arch.sm})", Status.WARN,
                    f"no {arch.sm} cubin defines `{symbol}`: the dynamic shared memory "
                    f"of {kernel} is unchecked on {arch.sm}",
                    f"the recipe's [verify] dynamic_smem names `{symbol}` for {kernel}",
                    f"define it in the kernel's .cu file: `extern \"C\" __device__ const "
                    f"unsigned int {symbol} = <traits>::kSmemBytes;`, or fix the name "
                    "in the recipe"))
    return checks


def _runtime_checks(pkg: str, expect: Expectations, *, run_gpu: bool | None, bench: bool,
                    runner: Runner, python: str, env: dict[str, str],
                    search_path: Path | None, selfcheck: Sequence[str], import_module: bool,
                    gpu_present: Callable[[], bool], prior: Sequence[Check],
                    gpus_here: Callable[[Mapping[str, str]], list[Gpu] | None] = (
                        lambda env: None),
                    held: Mapping[str, tuple[str, ...]] | None = None,
                    has_selfcheck: bool = True, plugins: Sequence[str] = ()) -> list[Check]:
    """Import in a fresh interpreter, exports, and the GPU self-check (by default only for a
    package that has one: `python -m PKG.selfcheck` of any other package fails to start).
    `plugins`: the package's binaries when all are shared libraries it loads itself (ctypes);
    then there are no exports to check, and the report says so."""
    checks: list[Check] = []
    wanted = list(expect.exports)
    torch_ok = False
    if import_module:
        result = runtime.import_check(pkg, wanted, runner=runner, python=python, env=env,
                                      search_path=search_path, top_level=expect.top_level)
        torch_ok = result.torch
        here = _not_importable_here(pkg, result) if not result.imported and \
            not gpu_present() else None
        if here is not None:
            checks.append(here)
        elif not result.imported:
            needed = _missing_dependency(result.error or "", pkg, expect.top_level)
            checks.append(Check(
                "import", pkg, Status.FAIL, "does not import in a fresh interpreter" + (
                    f": it imports `{needed}`, which is not installed in this Python"
                    if needed else ""),
                result.error or "",
                _missing_module_fix(needed, pkg, python) if needed else _import_fix(prior)))
        else:
            checks.append(Check("import", pkg, Status.OK, f"imports from {result.file}"
                                + (" (after `import torch`, as a top-level torch extension "
                                   "module needs)" if result.torch_first else "")))
            if result.missing_exports:
                reasons = sorted({why for why in result.why.values()})
                checks.append(Check("exports", pkg, Status.FAIL,
                                    "missing exports: " + ", ".join(result.missing_exports),
                                    f"the recipe lists {', '.join(wanted)}"
                                    + (f"; top-level modules: {', '.join(expect.top_level)}"
                                       if expect.top_level else "")
                                    + "".join(f"; importing them raised {why}"
                                              for why in reasons[:2]),
                                    "the module that holds them does not import: fix what "
                                    "the error names (a library its loader cannot find), "
                                    "then verify again" if reasons else
                                    "check the bindings and the recipe's `exports`"))
            elif wanted:
                checks.append(Check("exports", pkg, Status.OK,
                                    f"all {len(wanted)} exports present"))
            elif plugins:
                what = "is a shared library" if len(plugins) == 1 else "are shared libraries"
                checks.append(Check("exports", pkg, Status.SKIP,
                                    f"no Python exports to check: {', '.join(plugins)} "
                                    f"{what} the package loads itself (ctypes), not an "
                                    "extension module",
                                    "its kernels and dependencies are checked above; name "
                                    "kernels in [verify] kernels to look for them"))
    # GPU self-check.
    want_gpu = run_gpu
    own = has_selfcheck or tuple(selfcheck) != runtime.DEFAULT_SELFCHECK
    if want_gpu is None and not own:
        checks.append(Check("gpu", pkg, Status.SKIP,
                            f"no GPU self-check: `{pkg}` has no selfcheck module",
                            "verify runs `python -m PKG.selfcheck --json` (flashkern's "
                            "contract); run the package's own tests on the GPU"))
        return checks
    why_not = ""
    if want_gpu is None:
        gpu = gpu_present()
        want_gpu = gpu and torch_ok
        why_not = ("no NVIDIA GPU on this machine" if not gpu else
                   "torch is not installed in the Python that imports the package"
                   if import_module else
                   "the package was not imported")
    cannot = _gpus_cannot_run(held or {}, gpus_here(env), pkg) if want_gpu else None
    if cannot is not None:
        # A build for another GPU (sm_120 verified on an H100): the self-check would only meet
        # the loader shim's refusal. Asked for by default, that is a skip, not a failure of
        # a correct build; asked for with --gpu, the GPU check cannot be done here.
        checks.append(Check("gpu", pkg, Status.FAIL if run_gpu else Status.SKIP,
                            "no GPU self-check: no GPU here can run this build", cannot,
                            "run `flashbuild verify` on a GPU the build targets (the checks "
                            "above hold without one)"))
        return checks
    if want_gpu:
        outcome = runtime.run_selfcheck(pkg, runner=runner, bench=bench, command=selfcheck,
                                        python=python, env=env, search_path=search_path)
        checks += [Check(f.area, f.subject, Status(f.status), f.summary, f.evidence, f.fix)
                   for f in runtime.selfcheck_findings(outcome, pkg, required=run_gpu is True)]
    else:
        checks.append(Check("gpu", pkg, Status.SKIP,
                            f"no GPU self-check: {why_not or '--no-gpu was given'}"))
    return checks


def _gpus_cannot_run(held: Mapping[str, tuple[str, ...]], gpus: list[Gpu] | None,
                     package: str) -> str | None:
    """Why the visible GPUs cannot run the binaries' images (the loader shim's own rule,
    `judge`), or None when they can, or when there is no GPU or nothing to judge."""
    images = {name: found for name, found in held.items() if found}
    if not gpus or not images:
        return None
    return loader_shim.judge(images, gpus, package=package).error


def _dep_checks(deps: Sequence[binaries.Dependency], subject: str, *,
                own_folder: Path | None = None) -> list[Check]:
    """`own_folder`: the folder of a library installed outside the package (beside it in
    site-packages). A library it needs that lies in that same folder, which its RUNPATH does
    not name, is how a CMake install rule leaves a C/C++ SDK (`lib/` with its `cmake/` and
    `pkgconfig/` files): its consumers put the folder on their loader path. A warning, not a
    failure of the package."""
    out: list[Check] = []
    missing = [d for d in deps if d.resolution is binaries.Resolution.MISSING]
    sdk = [d for d in missing if own_folder is not None and (own_folder / d.name).is_file()]
    if own_folder is not None:
        missing = [d for d in missing if d not in sdk]
        out += [Check("dependencies", subject, Status.WARN,
                      f"needs {d.name}, which lies beside it and its RUNPATH does not name: a "
                      "copy outside the package, for C/C++ consumers who put its folder on "
                      "the loader path", d.via,
                      "nothing to do for the package; a program that loads this copy needs "
                      f"{own_folder} on its loader path") for d in sdk]
    driver = [d for d in deps if d.resolution is binaries.Resolution.DRIVER_MISSING]
    # A delay-loaded DLL that is nowhere lets the module import; the first call into it
    # fails. Not a failure of the import, not "resolved" either.
    delayed = [d for d in deps if d.resolution is binaries.Resolution.DELAYED_MISSING]
    for dep in missing:
        out.append(Check("dependencies", subject, Status.FAIL, f"needs {dep.name}: not found",
                         dep.via,
                         f"install the package that provides {dep.name}, or add its folder "
                         "to the loader shim's DLL folders / the RPATH"))
    for dep in driver:
        out.append(Check("dependencies", subject, Status.WARN,
                         f"{dep.name} (NVIDIA driver) is not installed here",
                         dep.via, "the module loads only on a machine with the NVIDIA driver"))
    for dep in delayed:
        out.append(Check("dependencies", subject, Status.WARN,
                         f"delay-loaded {dep.name} is not found: the module imports, the first "
                         "call that needs it fails", dep.via,
                         f"install the package that provides {dep.name}, or add its folder "
                         "to the loader shim's DLL folders"))
    if not missing:
        resolved = len(deps) - len(driver) - len(delayed) - len(sdk)
        out.append(Check("dependencies", subject, Status.OK,
                         f"{resolved} of {len(deps)} libraries resolve",
                         "; ".join(f"{d.name} → {d.path or d.resolution}" for d in deps)))
    return out


def _missing_dependency(error: str, pkg: str, top_level: Sequence[str]) -> str | None:
    """The module another distribution provides that the import stopped at (`No module named
    'torch_scatter'` for torch_sparse), or None: a missing module of the package itself (its
    extension module not installed) is the build's to answer for."""
    found = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", error)
    if found is None:
        return None
    module = found[1]
    own = {pkg.split(".", maxsplit=1)[0], *(m.split(".")[0] for m in top_level)}
    return None if module.split(".")[0] in own else module


#: The Linux loader's words for a driver library that is not installed.
_DRIVER_ABSENT = re.compile(r"\b(libcuda\.so\.1|libnvidia-ml\.so\.1): cannot open shared "
                            r"object file")
#: torch's words when code asks it for a GPU where there is none (its lazy CUDA init).
_NO_GPU_FOR_TORCH = re.compile(r"Found no NVIDIA driver on your system|No CUDA GPUs are "
                               r"available|CUDA driver initialization failed")


def _not_importable_here(pkg: str, result: runtime.ImportResult) -> Check | None:
    """The warning for an import that cannot succeed on a machine without a GPU, however
    right the build; None for any other failure."""
    driver = _DRIVER_ABSENT.search(result.error or "")
    if driver is not None:
        # The binaries link the driver's own library (CUDA::cuda_driver).
        return Check(
            "import", pkg, Status.WARN, f"not imported here: it loads {driver[1]}, the "
            "NVIDIA driver's library, which this machine does not have",
            result.error or "", "verify on a machine with the NVIDIA driver to check the "
            "import (the checks above hold without it)")
    if _NO_GPU_FOR_TORCH.search(result.error or ""):
        # Its own code asks torch for the GPU as it is imported (torchsparse's backends.py
        # reads the device's capability).
        return Check(
            "import", pkg, Status.WARN, "not imported here: importing it asks torch for a "
            f"GPU{f' ({result.at})' if result.at else ''}, and this machine has none",
            result.error or "", "verify on a machine with an NVIDIA GPU to check the import "
            "(the checks above hold without it)")
    return None


def _missing_module_fix(needed: str, package: str, python: str) -> str:
    """The install for a module the package's import did not find: the requirements the
    package's own metadata declares and this Python lacks (megablocks declares stanford-stk,
    whose module is `stk`), else the distribution the module's name suggests."""
    declared = _declared_missing(package) if python == sys.executable else []
    if declared:
        shown = " ".join(f'"{r}"' for r in declared)
        return (f"{package.partition('.')[0]} declares {', '.join(declared)}, not installed: "
                f"install {'it' if len(declared) == 1 else 'them'} into this Python (`{python} "
                f"-m pip install {shown}`), then verify again")
    requirement, why = module_provider(needed)
    return (f"install it into this Python (`{python} -m pip install \"{requirement}\"`, if "
            f"that is the distribution that provides `{needed}`){why}, then verify again; if "
            f"`{needed}` is a module this tree builds, the install left it out")


def _declared_missing(package: str) -> list[str]:
    """The requirements the installed distribution of `package` declares (Requires-Dist, its
    markers evaluated here, extras left out) that no installed distribution meets; empty
    when the package has no distribution or needs nothing missing."""
    top = package.partition(".")[0]
    try:
        dists = importlib.metadata.packages_distributions().get(top, [])
    except (OSError, ValueError):
        return []
    installed = {canonicalize_name(d.metadata["Name"] or "") for d in
                 importlib.metadata.distributions()}
    out: list[str] = []
    for dist in dict.fromkeys(dists):
        try:
            required = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in required:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if canonicalize_name(req.name) not in installed:
                out.append(req.name)
    return list(dict.fromkeys(out))


def _import_fix(checks: Sequence[Check]) -> str:
    if any(c.area == "dependencies" and c.status is Status.FAIL for c in checks):
        return "a needed library is missing (see the dependency check above)"
    if any(c.area == "binary" and c.status is Status.FAIL for c in checks):
        return "the module is corrupted; rebuild and reinstall it"
    return "run the import by hand in a new shell to see the full error"
