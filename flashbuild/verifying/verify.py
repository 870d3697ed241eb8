"""`flashbuild verify`: prove an installed module is right for the target GPU.

`verify_install` reads the build manifest, then checks, each to ok / warn / fail with evidence
and a fix: the binaries are readable; the SASS/PTX they carry against the requested archs; the
libraries each needs resolve; per-kernel resources fit the arch's limits; the package imports in
a fresh interpreter and exports what the recipe lists; on a GPU, the package's self-check.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.arch import Arch, ArchSpec, Suffix, Target, parse_arch_spec
from flashbuild.errors import VerifyError
from flashbuild.installing.manifest import MANIFEST_NAME, Manifest
from flashbuild.platforms import Platform, current
from flashbuild.verifying import binaries, resources, runtime
from flashbuild.verifying.fatbin import (
    BinaryFormatError,
    BinaryImages,
    FatbinImage,
    list_images,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from flashbuild.proc import Runner

DEFAULT_PACKAGE = "flashkern"
JIT_COST = ("the driver JIT-compiles PTX at the first launch of each kernel (seconds to minutes "
            "for a large module, cached per user in the CUDA ComputeCache)")


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
class VerifyReport:
    manifest_path: Path
    package: str
    targets: str
    checks: tuple[Check, ...]
    images: dict[str, list[dict[str, object]]] = field(default_factory=dict)

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
        return {"ok": self.ok, "manifest": str(self.manifest_path), "package": self.package,
                "targets": self.targets, "checks": [c.to_json() for c in self.checks],
                "images": self.images}


def find_manifest(path: Path | None = None, *, package: str | None = None) -> Path:
    """The manifest for PATH (file or folder) or for an installed package, found with
    `importlib.util.find_spec` without importing the package."""
    if path is not None:
        candidate = path / MANIFEST_NAME if path.is_dir() else path
        if not candidate.is_file():
            raise VerifyError(f"no build manifest at {candidate}",
                              fix="pass the installed package folder or its "
                              f"{MANIFEST_NAME}, or run `flashbuild build` first")
        return candidate
    name = package or DEFAULT_PACKAGE
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        spec = None
        why = str(exc)
    else:
        why = "" if spec else "not found on sys.path"
    if spec is None or not spec.submodule_search_locations:
        raise VerifyError(
            f"the package `{name}` is not installed in this environment",
            evidence=f"importlib.util.find_spec({name!r}): {why or 'not a package'} "
            f"(Python {sys.executable})",
            fix="run `flashbuild build` (it installs the package), or pass the installed "
            "folder: `flashbuild verify PATH`",
        )
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / MANIFEST_NAME
        if candidate.is_file():
            return candidate
    raise VerifyError(
        f"`{name}` is installed but has no build manifest",
        evidence=f"no {MANIFEST_NAME} in {', '.join(spec.submodule_search_locations)}",
        fix="it was not built by flashbuild; rebuild with `flashbuild build`")


def _check_images(found: BinaryImages, targets: Sequence[Target], subject: str) -> list[Check]:
    checks: list[Check] = []
    have = ", ".join(found.names()) or "no GPU code"
    sass = found.sass
    ptx = found.ptx
    for target in targets:
        arch = target.arch
        if target.sass:
            exact = [i for i in sass if i.arch == arch]
            same_code = [i for i in sass if i.arch.code == arch.code]
            if exact:
                checks.append(Check("images", subject, Status.OK, f"{arch.sm} SASS present",
                                    f"holds {have}"))
            elif same_code:
                checks.append(Check(
                    "images", subject, Status.WARN,
                    f"asked for {arch.sm}, found {same_code[0].name} SASS",
                    f"holds {have}; `a` code runs only on that exact SM and uses its "
                    "arch-specific features",
                    f"rebuild with `--arch {arch.sm}` if the suffix matters"))
            else:
                jit = _ptx_for(ptx, arch)
                note = (f"; only {jit.name} PTX could run there, after JIT ({JIT_COST})"
                        if jit else "")
                checks.append(Check(
                    "images", subject, Status.FAIL,
                    f"asked for {arch.sm}, found no {arch.sm} SASS",
                    f"holds {have}{note}",
                    f"rebuild with `flashbuild build --arch {arch.sm}`; check that the recipe "
                    "passes the arch to CMake (CMAKE_CUDA_ARCHITECTURES) and that no "
                    "hard-coded -gencode overrides it"))
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
            else:
                checks.append(Check("images", subject, Status.OK,
                                    f"{jit.name} PTX present", f"holds {have}"))
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


def verify_install(
    *,
    manifest_path: Path | None = None,
    package: str | None = None,
    targets: ArchSpec | None = None,
    exports: Sequence[str] | None = None,
    run_gpu: bool | None = None,
    bench: bool = False,
    runner: Runner,
    platform: Platform | None = None,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    selfcheck: Sequence[str] = runtime.DEFAULT_SELFCHECK,
    import_module: bool = True,
    gpu_present: Callable[[], bool] = runtime.gpu_present,
) -> VerifyReport:
    """Verify an installed package. `targets` defaults to the manifest's archs, `exports` to
    its exports; `run_gpu=None` runs the GPU self-check when a GPU and torch are present."""
    plat = platform or current()
    environ = dict(os.environ if env is None else env)
    path = find_manifest(manifest_path, package=package)
    manifest = Manifest.load(path)
    folder = path.parent
    pkg = package or folder.name
    spec = targets or parse_arch_spec(manifest.archs)
    if spec.native:
        raise VerifyError("`native` cannot be verified statically",
                          fix="name the arch: `flashbuild verify --arch sm120`")
    checks: list[Check] = []
    images: dict[str, list[dict[str, object]]] = {}
    cache: dict[str, str] | None = None
    any_device_code = False
    limits_checked = 0
    declared: set[tuple[str, int]] = set()
    sass_codes: set[int] = set()
    for artifact in manifest.artifacts:
        result = _artifact_checks(folder / artifact.path, artifact.path, artifact.kind,
                                  spec=spec, manifest=manifest, platform=plat, env=environ,
                                  runner=runner, python=python, cache=cache)
        cache = result.cache
        checks += result.checks
        if result.images is not None:
            images[artifact.path] = result.images
            any_device_code = any_device_code or bool(result.images)
        limits_checked += result.kernels
        declared |= result.declared
        sass_codes |= result.sass_codes
    checks += _missing_declared_checks(manifest, spec, pkg, found=declared,
                                       sass_codes=sass_codes)
    if manifest.artifacts and not any_device_code and not any(
            c.status is Status.FAIL for c in checks):
        checks.append(Check("images", pkg, Status.FAIL, "no installed binary holds GPU code",
                            fix="check that the build compiled the CUDA sources"))
    if limits_checked:
        checks.append(Check("resources", pkg, Status.OK,
                            f"{limits_checked} kernel image(s) checked against the limits of "
                            f"{', '.join(a.sm for a in spec.archs)}"))
    checks += _runtime_checks(pkg, manifest, exports=exports, run_gpu=run_gpu, bench=bench,
                              runner=runner, python=python, env=environ, folder=folder,
                              selfcheck=selfcheck, import_module=import_module,
                              gpu_present=gpu_present, prior=checks)
    return VerifyReport(manifest_path=path, package=pkg, targets=spec.cmake(),
                        checks=tuple(checks), images=images)


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


def _artifact_checks(binary: Path, subject: str, kind: str, *, spec: ArchSpec,
                     manifest: Manifest, platform: Platform, env: dict[str, str],
                     runner: Runner, python: str,
                     cache: dict[str, str] | None) -> _ArtifactResult:
    """Images, dependencies and resources of one installed binary."""
    checks: list[Check] = []
    if not binary.is_file():
        checks.append(Check("binary", subject, Status.FAIL, "the installed file is missing",
                            f"{binary} does not exist (listed in {MANIFEST_NAME})",
                            "reinstall with `flashbuild build`"))
        return _ArtifactResult(checks, None, 0, cache)
    try:
        found = list_images(binary)
        info = binaries.read_link_info(binary)
    except BinaryFormatError as exc:
        checks.append(Check("binary", subject, Status.FAIL,
                            f"{kind} is corrupted: {exc.what}", exc.evidence,
                            exc.fix or "rebuild and reinstall"))
        return _ArtifactResult(checks, None, 0, cache)
    if not found.images:
        checks.append(Check("images", subject, Status.WARN, "holds no GPU code",
                            f"no .nv_fatbin/.nv_fatb section in {binary.name}",
                            "expected for a host-only library; otherwise check the build"))
    else:
        checks += _check_images(found, spec.targets, subject)
    if platform.name != "windows" and cache is None:
        cache = binaries.ld_cache(runner, env)
    deps = binaries.resolve(info, platform=platform, env=env, runner=runner,
                            dll_dirs=[Path(d) for d in manifest.dll_dirs],
                            cache=cache or {},
                            app_dir=binaries.application_dir(python))
    checks += _dep_checks(deps, subject)
    kernels: list[resources.KernelResources] = []
    for image in found.sass:
        try:
            kernels += resources.image_resources(image)
        except BinaryFormatError as exc:
            checks.append(Check("resources", f"{subject} {image.name}", Status.WARN,
                                "compressed: resources unknown", exc.paragraph(),
                                "build with nvcc `--no-compress`"))
    if manifest.ptxas_info:
        kernels += resources.parse_ptxas_info(manifest.ptxas_info)
    declared, declared_checks = _declared_smem_checks(found, kernels, spec=spec,
                                                      manifest=manifest, subject=subject)
    checks += declared_checks
    dynamic = {k.kernel: k.dynamic_smem_bytes for k in manifest.kernel_smem}
    counted = 0
    for target in spec.targets:
        mine = [k for k in kernels
                if k.arch.removeprefix("sm_").rstrip("af") == str(target.arch.code)]
        counted += len(mine)
        for problem in resources.check_limits(mine, target.arch, dynamic_smem=dynamic):
            checks.append(Check("resources", f"{subject} {problem.kernel} ({problem.arch})",
                                Status(problem.severity), problem.what, fix=problem.fix))
    return _ArtifactResult(checks, [i.to_json() for i in found.images], counted, cache,
                           declared=declared,
                           sass_codes=frozenset(i.arch.code for i in found.sass))


def _declared_smem_checks(found: BinaryImages, kernels: Sequence[resources.KernelResources],
                          *, spec: ArchSpec, manifest: Manifest,
                          subject: str) -> tuple[frozenset[tuple[str, int]], list[Check]]:
    """Read the recipe's dynamic-smem symbols from each SASS image and check them against the
    limits of the target archs that image serves. Returns the (kernel, arch code) pairs found,
    so the caller can warn about a symbol no binary holds."""
    symbols = {d.kernel: d.symbol for d in manifest.dynamic_smem_symbols}
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


def _missing_declared_checks(manifest: Manifest, spec: ArchSpec, pkg: str, *,
                             found: set[tuple[str, int]], sass_codes: set[int]) -> list[Check]:
    """A warning for each declared kernel that no cubin of a target arch defines: its
    dynamic shared memory is then unchecked there."""
    checks: list[Check] = []
    for entry in manifest.dynamic_smem_symbols:
        for arch in dict.fromkeys(t.arch for t in spec.targets if t.arch.code in sass_codes):
            if (entry.kernel, arch.code) not in found:
                checks.append(Check(
                    "resources", f"{pkg} {entry.kernel} ({arch.sm})", Status.WARN,
                    f"no {arch.sm} cubin defines `{entry.symbol}`: the dynamic shared memory "
                    f"of {entry.kernel} is unchecked on {arch.sm}",
                    f"the recipe's [verify] dynamic_smem names `{entry.symbol}` for "
                    f"{entry.kernel}",
                    f"define it in the kernel's .cu file: `extern \"C\" __device__ const "
                    f"unsigned int {entry.symbol} = <traits>::kSmemBytes;`, or fix the name "
                    "in the recipe"))
    return checks


def _runtime_checks(pkg: str, manifest: Manifest, *, exports: Sequence[str] | None,
                    run_gpu: bool | None, bench: bool, runner: Runner, python: str,
                    env: dict[str, str], folder: Path, selfcheck: Sequence[str],
                    import_module: bool, gpu_present: Callable[[], bool],
                    prior: Sequence[Check]) -> list[Check]:
    """Import in a fresh interpreter, exports, and the GPU self-check."""
    checks: list[Check] = []
    environ = env
    # Import and exports.
    wanted = list(manifest.exports if exports is None else exports)
    torch_ok = False
    if import_module:
        result = runtime.import_check(pkg, wanted, runner=runner, python=python, env=environ,
                                      search_path=folder.parent)
        torch_ok = result.torch
        if not result.imported:
            checks.append(Check("import", pkg, Status.FAIL,
                                "does not import in a fresh interpreter",
                                result.error or "", _import_fix(prior)))
        else:
            checks.append(Check("import", pkg, Status.OK, f"imports from {result.file}"))
            if result.missing_exports:
                checks.append(Check("exports", pkg, Status.FAIL,
                                    "missing exports: " + ", ".join(result.missing_exports),
                                    f"the recipe lists {', '.join(wanted)}",
                                    "check the bindings and the recipe's `exports`"))
            elif wanted:
                checks.append(Check("exports", pkg, Status.OK,
                                    f"all {len(wanted)} exports present"))
    # GPU self-check.
    want_gpu = run_gpu
    if want_gpu is None:
        want_gpu = gpu_present() and torch_ok
    if want_gpu:
        outcome = runtime.run_selfcheck(pkg, runner=runner, bench=bench, command=selfcheck,
                                        python=python, env=environ, search_path=folder.parent)
        checks += [Check(f.area, f.subject, Status(f.status), f.summary, f.evidence, f.fix)
                   for f in runtime.selfcheck_findings(outcome, pkg, required=run_gpu is True)]
    else:
        checks.append(Check("gpu", pkg, Status.SKIP,
                            "no GPU self-check (no GPU or no torch, or --no-gpu)"))
    return checks


def _dep_checks(deps: Sequence[binaries.Dependency], subject: str) -> list[Check]:
    out: list[Check] = []
    missing = [d for d in deps if d.resolution is binaries.Resolution.MISSING]
    driver = [d for d in deps if d.resolution is binaries.Resolution.DRIVER_MISSING]
    for dep in missing:
        out.append(Check("dependencies", subject, Status.FAIL, f"needs {dep.name}: not found",
                         dep.via,
                         f"install the package that provides {dep.name}, or add its folder "
                         "to the loader shim's DLL folders / the RPATH"))
    for dep in driver:
        out.append(Check("dependencies", subject, Status.WARN,
                         f"{dep.name} (NVIDIA driver) is not installed here",
                         dep.via, "the module loads only on a machine with the NVIDIA driver"))
    if not missing:
        out.append(Check("dependencies", subject, Status.OK,
                         f"{len(deps) - len(driver)} of {len(deps)} libraries resolve",
                         "; ".join(f"{d.name} → {d.path or d.resolution}" for d in deps)))
    return out


def _import_fix(checks: Sequence[Check]) -> str:
    if any(c.area == "dependencies" and c.status is Status.FAIL for c in checks):
        return "a needed library is missing (see the dependency check above)"
    if any(c.area == "binary" and c.status is Status.FAIL for c in checks):
        return "the module is corrupted; rebuild and reinstall it"
    return "run the import by hand in a new shell to see the full error"
