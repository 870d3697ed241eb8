"""Plan and render the GitHub Actions workflow of `flashbuild ci init`.

`plan_workflow` validates everything a matrix job would otherwise find out an hour into a
run — an arch one of the CUDA versions cannot compile, a runner label GitHub does not have, a
recipe that says nothing about where its artifacts install — and returns a `CiPlan`;
`render` fills the data blocks of the template `resources/wheels.yml` (a real workflow that
actionlint checks as it is) with it.

Facts this module holds, and where they come from:
- which CUDA first compiles which arch: `flashbuild.arch` (FACTS.md, "GPU architectures").
- CUDA 13 from PyPI: the `cuda-toolkit` wheels of 13.x hold a complete nvcc; the 12.x
  `nvidia-cuda-nvcc-cu12` wheel holds ptxas and headers only, no nvcc (FACTS.md, "A CUDA
  toolchain from PyPI"; checked again on the 12.9.86 Windows wheel): CUDA 12 comes from
  NVIDIA's network installer.
- torch's cpp_extension refuses an nvcc of another major than torch's CUDA and only warns on
  another minor (FACTS.md, "torch"): a CUDA minor without a torch build of its own takes the
  newest torch build of the same major below it.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from packaging.version import Version

from flashbuild import buildsystems
from flashbuild.arch import ArchSpec, Image
from flashbuild.ci.estimate import (
    JOB_CAP_HOURS,
    RUNNER_VCPUS,
    Units,
    duration,
    job_seconds,
    split_archs,
)
from flashbuild.errors import RecipeError, UsageError
from flashbuild.toolchain_facts import HOST_COMPILERS, INSTALLER_HOST_MSC, PYPI_TOOLKIT_EXTRAS

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.platforms.base import PlatformName
    from flashbuild.recipes.model import Recipe

ToolkitSource = Literal["pypi", "installer"]

TEMPLATE = Path(__file__).resolve().parent / "resources" / "wheels.yml"
DEFAULT_OUTPUT = Path(".github") / "workflows" / "flashbuild.yml"

#: GitHub-hosted x64 runner labels per platform (docs.github.com, "GitHub-hosted runners").
#: windows-2022 ships MSVC 14.44 as its default toolset, which every CUDA from 12.8 on accepts;
#: windows-latest / windows-2025 default to VS 2026 (MSVC 14.5x) and carry 14.44 beside it,
#: which flashbuild selects itself (FACTS.md, "Windows CI runners").
RUNNERS: dict[PlatformName, tuple[str, ...]] = {
    "linux": ("ubuntu-latest", "ubuntu-24.04", "ubuntu-22.04"),
    "windows": ("windows-latest", "windows-2025", "windows-2022"),
}
DEFAULT_RUNNERS: dict[PlatformName, str] = {"linux": "ubuntu-24.04", "windows": "windows-2022"}

#: CUDA releases whose `cuda-toolkit` wheels on PyPI hold a whole nvcc (13.0.0 … 13.5.0 were
#: on PyPI on 2026-11-25). The extras are the compiler's parts; the `nvvm` one is named so pip
#: does not pick a newer NVVM whose PTX this ptxas rejects.
PYPI_CUDA = ("13.0", "13.1", "13.2", "13.3", "13.4", "13.5")
PYPI_EXTRAS = ",".join(PYPI_TOOLKIT_EXTRAS)
#: torch's CUDA headers (ATen/cuda/CUDAContext.h) include cuBLAS, cuSPARSE, cuSOLVER and cuRAND
#: headers. On Linux torch's own wheel depends on those libraries' wheels (headers included);
#: torch's Windows wheel bundles the DLLs only, so the Windows jobs install them.
PYPI_EXTRAS_WINDOWS = PYPI_EXTRAS + ",cublas,cusparse,cusolver,curand"
#: CUDA 12 releases NVIDIA's network installer provides (the patch release to install).
INSTALLER_CUDA: dict[str, str] = {"12.4": "12.4.1", "12.6": "12.6.3", "12.8": "12.8.1",
                                  "12.9": "12.9.1"}
#: CUDA builds torch publishes an index for (download.pytorch.org/whl/cuXYZ).
TORCH_CUDA = ("12.6", "12.8", "12.9", "13.0")
TORCH_INDEX = "https://download.pytorch.org/whl/cu{}"
#: flashbuild itself needs Python 3.11 or later (pyproject's requires-python).
MIN_PYTHON = (3, 11)
#: The Pythons torch publishes wheels for (torch 2.9 through 2.13: cp310 ... cp314 on
#: download.pytorch.org); 3.10 is below flashbuild's own minimum.
TORCH_PYTHONS = ("3.11", "3.12", "3.13", "3.14")
#: GitHub's limit on the jobs one matrix generates (docs.github.com, "Using a matrix for your
#: jobs": "A matrix can generate a maximum of 256 jobs per workflow run").
MAX_MATRIX_JOBS = 256
#: The `_MSC_VER` of the MSVC toolset the Windows images carry (14.44, windows-2022's default
#: and installed beside VS 2026 on windows-2025/latest): a CUDA whose host_config.h rejects
#: it cannot build there (toolchain_facts.HOST_COMPILERS).
RUNNER_MSC_VER = 1944
#: The first CUDA NVIDIA's network installer has for a runner's Ubuntu release (the
#: developer.download.nvidia.com repos/ubuntu2404 repository starts at 12.5).
INSTALLER_FIRST_CUDA: dict[str, str] = {"ubuntu-24.04": "12.5", "ubuntu-latest": "12.5"}


@dataclass(frozen=True, kw_only=True)
class LinuxImage:
    """A container image the Linux legs build in."""

    name: str
    """What `--linux-image` calls it: the manylinux policy it builds for."""
    reference: str
    """The image as the job's `container.image` names it, pinned."""
    gcc: int
    """The GCC major the image compiles with (a CUDA whose nvcc rejects it cannot build)."""

    @property
    def policy(self) -> str:
        """The manylinux policy the legs' wheels are tagged with (`flashbuild repair`)."""
        return self.name

    @property
    def release(self) -> str:
        """The image's tag (`2026.08.15-1`)."""
        return self.reference.split("@", 1)[0].rsplit(":", 1)[-1]


#: The PyPA manylinux images (pypa/manylinux README: manylinux_2_28 is AlmaLinux 8, glibc
#: 2.28, "Toolchain: GCC 14"; CPython 3.9-3.14 in /opt/python/<python tag>-<abi tag>; git,
#: curl, auditwheel, patchelf and cmake included). Pinned by tag AND digest: the digest makes
#: every run of a workflow use the very same compiler, glibc and Pythons (the tag moves
#: never, `latest` daily), the tag says which release it is; the pair is the one cibuildwheel
#: pins (pypa/cibuildwheel, cibuildwheel/resources/pinned_docker_images.cfg, 2026-08-18).
#: Nothing here can pull from quay.io: the digest was not checked on this machine.
LINUX_IMAGES: dict[str, LinuxImage] = {
    "manylinux_2_28": LinuxImage(
        name="manylinux_2_28", gcc=14,
        reference="quay.io/pypa/manylinux_2_28_x86_64:2026.08.15-1@sha256:"
        "0c87ccb5996dab6c3b7612ee4fda7b80c4ab3c44a86c2541e4a872afdf4f131b"),
}
DEFAULT_LINUX_IMAGE = "manylinux_2_28"
#: `--linux-image none`: the Linux legs run on the runner itself (wheels tagged linux_x86_64,
#: linked against the runner's glibc).
NO_IMAGE = "none"


@dataclass(frozen=True, kw_only=True)
class MatrixEntry:
    """One job of the matrix: a wheel for these coordinates."""

    platform: PlatformName
    """`linux` or `windows`."""
    runner: str
    """The GitHub runner label the job runs on."""
    cuda: str
    """CUDA release as `major.minor`."""
    python: str
    """Python as `3.N`."""
    toolkit: ToolkitSource
    """Where CUDA comes from: PyPI's cuda-toolkit wheels or NVIDIA's network installer."""
    cuda_version: str
    """What that source is given: a pip version (`13.0.*`) or an installer release (`12.9.1`)."""
    cuda_extras: str
    """The cuda-toolkit extras (PyPI only)."""
    torch_index: str
    """The torch index matching the CUDA major ("" when the tree needs no torch)."""
    arch: ArchSpec
    """The targets this job builds: all of `--arch`, or one group of them when the whole
    would not fit the job budget (`estimate.split_archs`)."""
    estimate_s: float = 0.0
    """The estimated compile time of the job on its runner (`estimate.job_seconds`)."""
    image: str = ""
    """The container image the job's steps run in ("" = on the runner itself)."""
    policy: str = ""
    """The manylinux policy its wheel is tagged with after the build ("" = left as built)."""

    @property
    def arch_value(self) -> str:
        """`--arch` as the job passes it: `sm_90a;sm_120`."""
        return arch_value(self.arch)

    @property
    def arch_label(self) -> str:
        """The arch part of the artifact name: `sm90a-sm120`."""
        return arch_label(self.arch)

    def artifact(self) -> str:
        """The artifact name of this job's wheel (the template spells the same)."""
        return f"wheel-{self.platform}-cuda{self.cuda}-py{self.python}-{self.arch_label}"

    def yaml(self) -> str:
        """The entry as one flow-style YAML mapping (the template's matrix block)."""
        fields = {"platform": self.platform, "runner": self.runner, "cuda": self.cuda,
                  "python": self.python, "toolkit": self.toolkit,
                  "cuda-version": self.cuda_version, "cuda-extras": self.cuda_extras,
                  "torch-index": self.torch_index, "arch": self.arch_value,
                  "arch-label": self.arch_label, "image": self.image, "policy": self.policy}
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in fields.items()) + "}"


@dataclass(frozen=True, kw_only=True)
class CiPlan:
    """Everything the template is rendered with."""

    recipe: str
    """The recipe as the workflow names it: a bundled name or a path inside the tree."""
    package: str
    """The recipe's `[install] package` (what verify checks)."""
    arch: ArchSpec
    """The targets of `--arch`, which the jobs build between them."""
    entries: tuple[MatrixEntry, ...]
    """The matrix, one entry per platform x CUDA x Python (one Python for an abi3 wheel) x
    arch group."""
    flashbuild_spec: str
    """What the jobs `pip install` to get flashbuild."""
    torch_spec: str
    """What the jobs `pip install` from the torch index ("" when the tree needs no torch)."""
    cache_key_path: str
    """The workflow's own path in the tree (setup-python's pip cache key)."""
    command: str
    """The `flashbuild ci init` command line that writes this workflow."""

    estimate: Estimate | None = None
    """What the job times were estimated from; None when no estimate was asked for."""

    @property
    def arch_value(self) -> str:
        """`--arch` as given, every target: `sm_90a;sm_120`."""
        return arch_value(self.arch)

    @property
    def arch_groups(self) -> tuple[ArchSpec, ...]:
        """The arch groups the jobs build, in order, each once."""
        return tuple(dict.fromkeys(e.arch for e in self.entries))

    def artifacts(self) -> list[str]:
        return [e.artifact() for e in self.entries]


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """The inputs of the job estimates, for the output and the JSON."""

    units: Units
    """The tree's compile units."""
    unit_seconds: float
    """Core-seconds per CUDA unit per arch (and per host unit)."""
    budget_s: float
    """The compile time a job may take."""
    collapsed: str
    """Why the Python axis collapsed to one wheel ("" when it did not)."""


def arch_value(spec: ArchSpec) -> str:
    """`--arch` as a job passes it: `sm_90a;sm_120`."""
    return ";".join(t.arch.compute if t.image is Image.PTX else
                    t.arch.sm + ("+PTX" if t.image is Image.BOTH else "")
                    for t in spec.targets)


def arch_label(spec: ArchSpec) -> str:
    """The arch part of artifact names: `sm90a-sm120`."""
    return "-".join(t.arch.compute.replace("_", "") if t.image is Image.PTX else
                    t.arch.sm.replace("_", "") + ("ptx" if t.image is Image.BOTH else "")
                    for t in spec.targets)


# --- parsing the options --------------------------------------------------------------------

def split_list(text: str) -> list[str]:
    """`linux,windows`, `3.11 3.12` or `12.9;13.0` → the items, in order, without repeats."""
    return list(dict.fromkeys(t for t in re.split(r"[;,\s]+", text.strip()) if t))


def parse_platforms(text: str) -> tuple[PlatformName, ...]:
    out: list[PlatformName] = []
    for item in split_list(text):
        name = item.lower()
        if name == "linux":
            out.append("linux")
        elif name == "windows":
            out.append("windows")
        else:
            raise UsageError(f"`--platform {text}` names `{item}`, which is not a platform "
                             "flashbuild builds for",
                             fix="use linux, windows or linux,windows")
    if not out:
        raise UsageError("`--platform` is empty", fix="use linux, windows or linux,windows")
    return tuple(out)


def parse_runners(items: Sequence[str], platforms: Sequence[PlatformName]
                  ) -> dict[PlatformName, str]:
    """`--runner windows=windows-latest` (repeatable) over the defaults, each label checked."""
    chosen = {p: DEFAULT_RUNNERS[p] for p in platforms}
    known = ", ".join(f"{p}: {' '.join(RUNNERS[p])}" for p in RUNNERS)
    for item in items:
        platform, sep, label = item.partition("=")
        platform = platform.strip().lower()
        label = label.strip()
        if not sep or platform not in RUNNERS or not label:
            raise UsageError(f"`--runner {item}` is not PLATFORM=LABEL",
                             evidence=f"known labels: {known}",
                             fix="write e.g. `--runner windows=windows-latest`")
        name: PlatformName = "linux" if platform == "linux" else "windows"
        if label not in RUNNERS[name]:
            other = next((p for p in RUNNERS if label in RUNNERS[p]), None)
            raise UsageError(
                f"`{label}` is not a GitHub-hosted {name} runner label flashbuild knows",
                evidence=(f"it is a {other} runner; " if other else "") + f"known labels: "
                f"{known}",
                fix=f"pick one of {', '.join(RUNNERS[name])} for {name}; for a self-hosted or "
                "larger runner, write the workflow with a known label and edit `runner:` in "
                "its matrix (and actionlint's config) by hand")
        if name in chosen:
            chosen[name] = label
    return chosen


def parse_versions(text: str, what: str) -> list[str]:
    """`12.9,13.0` → ["12.9", "13.0"]; each `major.minor`."""
    items = split_list(text)
    if not items:
        raise UsageError(f"`--{what}` is empty", fix=f"name at least one {what} version")
    for item in items:
        if not re.fullmatch(r"\d+\.\d+", item):
            raise UsageError(f"`--{what} {text}` names `{item}`, which is not a major.minor "
                             "version", fix=f"write e.g. `--{what} "
                             f"{'12.9,13.0' if what == 'cuda' else '3.11,3.12'}`")
    return items


# --- the plan -------------------------------------------------------------------------------

def check_arch_against_cuda(spec: ArchSpec, cudas: Sequence[str]) -> None:
    """Every target must compile with every CUDA of the matrix (FACTS.md's table, held by
    flashbuild.arch): one paragraph for the first pair that cannot."""
    if spec.native:
        raise UsageError("`--arch native` means the GPUs of this machine, and CI runners have "
                         "none", fix="name the targets, e.g. `--arch '90a;120'`")
    for cuda in cudas:
        release = Version(cuda)
        for target in spec.targets:
            arch = target.arch
            first = arch.first_cuda()
            removed = arch.removed_in()
            if release < first:
                raise UsageError(
                    f"{arch.sm} cannot be built with CUDA {cuda}, which the matrix names",
                    evidence=f"CUDA {first} is the first whose nvcc compiles {arch.sm}",
                    fix=f"drop {cuda} from --cuda (use {first} or later) or drop {arch.sm} "
                    "from --arch")
            if removed is not None and release >= removed:
                raise UsageError(
                    f"{arch.sm} cannot be built with CUDA {cuda}, which the matrix names",
                    evidence=f"CUDA {removed} removed {arch.sm} from nvcc",
                    fix=f"build {arch.sm} with a CUDA before {removed} or drop it from --arch")


def toolkit_for(cuda: str, platform: PlatformName) -> tuple[ToolkitSource, str, str]:
    """Where a job gets CUDA `cuda` from: (source, version to ask for, extras)."""
    if cuda in PYPI_CUDA:
        return ("pypi", f"{cuda}.*",
                PYPI_EXTRAS_WINDOWS if platform == "windows" else PYPI_EXTRAS)
    if cuda in INSTALLER_CUDA:
        return "installer", INSTALLER_CUDA[cuda], ""
    raise UsageError(
        f"CUDA {cuda} is not one flashbuild ci can install on a runner",
        evidence=f"PyPI's cuda-toolkit wheels with nvcc: {', '.join(PYPI_CUDA)}; NVIDIA's "
        f"installer: {', '.join(INSTALLER_CUDA)}",
        fix="pick CUDA versions from those lists")


def torch_index_for(cuda: str) -> str:
    """The torch index for CUDA `cuda`: its own build, else the newest one of the same major
    below it (torch warns on a minor mismatch, refuses only another major)."""
    release = Version(cuda)
    usable = [v for v in TORCH_CUDA
              if Version(v).major == release.major and Version(v) <= release]
    if not usable:
        raise UsageError(
            f"no torch build for CUDA {release.major} at or below {cuda} is known",
            evidence=f"torch publishes builds for CUDA {', '.join(TORCH_CUDA)}, and "
            "torch.utils.cpp_extension refuses an nvcc of another major than torch's",
            fix=f"pick CUDA versions from {', '.join(TORCH_CUDA)} (or later minors of them)")
    best = max(usable, key=Version)
    return TORCH_INDEX.format(best.replace(".", ""))


def check_pythons(pythons: Sequence[str]) -> None:
    for python in pythons:
        major, minor = (int(p) for p in python.split("."))
        if (major, minor) < MIN_PYTHON:
            raise UsageError(
                f"Python {python} cannot run flashbuild in a job",
                evidence="flashbuild needs Python "
                f"{'.'.join(map(str, MIN_PYTHON))} or later (its own requires-python), and "
                "each job builds with the Python it installs flashbuild into",
                fix="build wheels for Python 3.11 and later")
        if python not in TORCH_PYTHONS:
            raise UsageError(
                f"Python {python} has no torch wheels to build against",
                evidence=f"torch publishes wheels for Python {', '.join(TORCH_PYTHONS)}, and "
                "a job installs torch (or its toolchain) for the Python it builds with",
                fix=f"pick Python versions from {', '.join(TORCH_PYTHONS)}")


def check_runner_cuda(platform: PlatformName, runner: str, cuda: str,
                      source: ToolkitSource) -> None:
    """A (runner, CUDA) pair the runner can install and build with, refused at `ci init`
    rather than an hour into the run."""
    if platform == "windows":
        row = HOST_COMPILERS.get((Version(cuda).major, Version(cuda).minor)) or \
            INSTALLER_HOST_MSC.get(cuda)
        end = row.msc_end if row is not None else 0
        start = row.msc_min if row is not None else 0
        if not start <= RUNNER_MSC_VER < end:
            window = (f"CUDA {cuda}'s nvcc accepts _MSC_VER {start} to {end - 1}" if end else
                      f"flashbuild knows no MSVC window of CUDA {cuda}")
            raise UsageError(
                f"CUDA {cuda} cannot build on the Windows runner {runner}",
                evidence=f"the runner's MSVC toolset is 14.44 (_MSC_VER {RUNNER_MSC_VER}); "
                f"{window}",
                fix="drop it from --cuda for Windows: CUDA 12.6 and later accept MSVC 14.44")
    first = INSTALLER_FIRST_CUDA.get(runner)
    if source == "installer" and first is not None and Version(cuda) < Version(first):
        raise UsageError(
            f"CUDA {cuda} cannot be installed on the runner {runner}",
            evidence=f"NVIDIA's network installer for that Ubuntu release starts at CUDA "
            f"{first}",
            fix=f"use CUDA {first} or later, or `--runner linux=ubuntu-22.04`")


def parse_linux_image(text: str) -> LinuxImage | None:
    """`--linux-image manylinux_2_28` (the default) or `none` (the runner itself)."""
    name = text.strip().lower()
    if name == NO_IMAGE:
        return None
    if name not in LINUX_IMAGES:
        raise UsageError(f"`--linux-image {text}` is not an image flashbuild ci knows",
                         evidence=f"known: {', '.join([*LINUX_IMAGES, NO_IMAGE])}",
                         fix=f"use {DEFAULT_LINUX_IMAGE} (wheels PyPI accepts) or {NO_IMAGE} "
                         "(build on the runner, wheels tagged linux_x86_64)")
    return LINUX_IMAGES[name]


def check_image_cuda(image: LinuxImage, cuda: str) -> None:
    """A CUDA whose nvcc rejects the image's GCC cannot build there (host_config.h's
    `__GNUC__ > G` test, toolchain_facts.HOST_COMPILERS)."""
    release = Version(cuda)
    row = HOST_COMPILERS.get((release.major, release.minor)) or INSTALLER_HOST_MSC.get(cuda)
    if row is not None and image.gcc > row.gcc_max:
        raise UsageError(
            f"CUDA {cuda} cannot build in the {image.name} image",
            evidence=f"the image compiles with GCC {image.gcc}; CUDA {cuda}'s nvcc accepts "
            f"GCC {row.gcc_max} at most",
            fix=f"use CUDA 12.8 or later on Linux, or `--linux-image {NO_IMAGE}` to build on "
            "the runner (wheels tagged linux_x86_64, which PyPI refuses)")


def check_value(what: str, value: str) -> str:
    """A value the workflow carries in a comment or a YAML string: a newline would end the
    comment (and inject YAML), and `${{` would be evaluated as an expression on the runner."""
    bad = next((c for c in value if c in "\n\r\x85\u2028\u2029" or ord(c) < 0x20
                or ord(c) == 0x7F), None)
    if bad is not None or "${{" in value:
        shown = repr(bad) if bad is not None else "`${{`"
        raise UsageError(
            f"{what} holds {shown}, which flashbuild does not write into a workflow",
            evidence=f"the value: {value!r}; a line break would end the YAML comment or "
            "string it sits in, and `${{` is a GitHub Actions expression the runner would "
            "evaluate",
            fix=f"pass {what} on one line without `${{{{`")
    return value


def check_package(package: str) -> None:
    """The package verify imports must be an import name (`a.b`, each part an identifier)."""
    if not all(part.isidentifier() and part.isascii() for part in package.split(".")):
        raise RecipeError(
            f"the recipe's `[install] package = {package!r}` is not an import name",
            evidence="each job runs `flashbuild verify --package` on it, which imports it",
            fix="name the package as Python imports it (letters, digits and _, dotted "
            "for a subpackage), e.g. `causal_conv1d` rather than `causal-conv1d`")


def check_matrix_size(jobs: int, platforms: int, cudas: int, pythons: int,
                      groups: int = 1) -> None:
    if jobs > MAX_MATRIX_JOBS:
        split = f" x {groups} arch groups" if groups > 1 else ""
        raise UsageError(
            f"the matrix has {jobs} jobs ({platforms} platform(s) x {cudas} CUDA x "
            f"{pythons} Python{split}), more than GitHub runs from one matrix",
            evidence=f"GitHub Actions generates at most {MAX_MATRIX_JOBS} jobs per matrix",
            fix="split it: write one workflow per platform or per CUDA group (-o "
            ".github/workflows/flashbuild-linux.yml with --platform linux, and so on), each "
            f"at most {MAX_MATRIX_JOBS} jobs")


def recipe_reference(recipe: Recipe, tree: Path, bundled: Path) -> str:
    """How the workflow names the recipe: a bundled recipe by name; a recipe file by its path
    inside the tree (the job has the tree's checkout and nothing else)."""
    file = recipe.file.resolve() if recipe.file is not None else None
    if file is None or file.parent == bundled.resolve():
        return file.stem if file is not None else recipe.name
    try:
        return file.relative_to(tree).as_posix()
    except ValueError:
        raise UsageError(
            f"the recipe {file} is outside the tree {tree}",
            evidence="a job checks out the tree's repository and nothing else, so it cannot "
            "read a recipe file from elsewhere",
            fix=f"copy the recipe into the tree (e.g. {tree / '.github' / file.name}), commit "
            "it, and pass that path to --recipe") from None


def require_install(recipe: Recipe) -> str:
    if recipe.install is None:
        raise RecipeError(
            f"the recipe `{recipe.name}` has no [install] table",
            evidence="every job installs the wheel it built and verifies the installed "
            "package, and the wheel's package comes from `[install] package` and "
            "`package_dir` (or its `top_level` modules)"
            + (f" ({recipe.file})" if recipe.file else ""),
            fix="add `[install]` with `package = \"<import name>\"` and `package_dir = "
            "\"<its folder in the tree>\"` to the recipe (`top_level = [\"<module>\"]` for "
            "a tree whose extension modules have no package)")
    return recipe.install.name


def plan_arch_groups(spec: ArchSpec, units: Units, *, vcpus: int, unit_seconds: float,
                     budget_s: float) -> tuple[ArchSpec, ...]:
    """`spec` as one group when one job builds it within `budget_s`, else split in order into
    the fewest groups that each fit (one wheel per group: see docs/ci.md, "Jobs that fit the
    6-hour cap"). Refused, with how to split otherwise, when one arch alone does not fit."""
    sizes = split_archs(len(spec.targets), units, vcpus=vcpus, unit_seconds=unit_seconds,
                        budget_s=budget_s)
    if sizes is None:
        one = job_seconds(units, 1, vcpus=vcpus, unit_seconds=unit_seconds)
        raise UsageError(
            f"one arch of this tree alone is estimated at {duration(one)} of compile on a "
            f"{vcpus}-vCPU GitHub runner, more than the {budget_s / 3600:g} h a job may take",
            evidence=f"{units.how}; {unit_seconds:.0f} core-seconds per unit per arch "
            f"(flashbuild/ci/estimate.py: the slowest build measured), over min({vcpus} vCPUs, "
            f"{units.cuda + units.host} units); GitHub cancels a hosted job after "
            f"{JOB_CAP_HOURS:g} h, and one arch per job is already the finest split",
            fix="build fewer units per job (leave extensions or kernels out with the tree's "
            "own switches, one workflow per set), or run on a bigger runner (edit `runner:` "
            "and pass --unit-seconds scaled to its cores), or pass --unit-seconds from a "
            "measured build of this tree, or --max-job-hours up to 6")
    groups: list[ArchSpec] = []
    start = 0
    for size in sizes:
        groups.append(ArchSpec(targets=spec.targets[start:start + size]))
        start += size
    return tuple(groups)


def plan_workflow(*, recipe: Recipe, recipe_ref: str, arch: ArchSpec,
                  platforms: Sequence[PlatformName], cudas: Sequence[str],
                  pythons: Sequence[str], runners: Mapping[PlatformName, str],
                  flashbuild_spec: str, torch: str | None, cache_key_path: str,
                  command: str, units: Units | None = None, unit_seconds: float = 0.0,
                  budget_s: float = 0.0,
                  linux_image: LinuxImage | None = LINUX_IMAGES[DEFAULT_LINUX_IMAGE]
                  ) -> CiPlan:
    """Check the matrix and return what the template is rendered with. With `units` (the
    tree's compile units), each job's compile time is estimated at `unit_seconds` per unit
    and arch, a job over `budget_s` is split by arch group, and an abi3 wheel is built once
    for every Python. Linux jobs build in `linux_image` (None: on the runner itself) and tag
    their wheel with its policy."""
    package = require_install(recipe)
    check_package(package)
    for what, value in (("--torch", torch or ""), ("--flashbuild-spec", flashbuild_spec),
                        ("the recipe path", recipe_ref), ("the workflow path", cache_key_path)):
        check_value(what, value)
    spec = arch  # parsed once, by the command (ci/command.py)
    check_arch_against_cuda(spec, cudas)
    check_pythons(pythons)
    needs_torch = buildsystems.get(recipe.build.backend).needs_torch_to_build or torch is not None
    groups: tuple[ArchSpec, ...] = (spec,)
    estimate: Estimate | None = None
    wheel_pythons = list(pythons)
    if units is not None:
        groups = plan_arch_groups(spec, units, vcpus=RUNNER_VCPUS, unit_seconds=unit_seconds,
                                  budget_s=budget_s)
        collapsed = ""
        if units.abi3 and len(pythons) > 1:
            # An abi3 wheel installs on its Python and every later one: build it with the
            # oldest of the matrix.
            wheel_pythons = [min(pythons, key=Version)]
            collapsed = (f"{units.abi3}: one wheel per job, built with Python "
                         f"{wheel_pythons[0]}, serves Python {', '.join(pythons)}")
        estimate = Estimate(units=units, unit_seconds=unit_seconds, budget_s=budget_s,
                            collapsed=collapsed)
    entries: list[MatrixEntry] = []
    for platform in platforms:
        for cuda in cudas:
            source, version, extras = toolkit_for(cuda, platform)
            check_runner_cuda(platform, runners[platform], cuda, source)
            image = linux_image if platform == "linux" else None
            if image is not None:
                check_image_cuda(image, cuda)
            index = torch_index_for(cuda) if needs_torch else ""
            seconds = {g: job_seconds(units, len(g.targets), unit_seconds=unit_seconds,
                                      vcpus=RUNNER_VCPUS) if units is not None else 0.0
                       for g in groups}
            entries.extend(
                MatrixEntry(platform=platform, runner=runners[platform], cuda=cuda,
                            python=python, toolkit=source, cuda_version=version,
                            cuda_extras=extras, torch_index=index, arch=group,
                            estimate_s=seconds[group],
                            image=image.reference if image is not None else "",
                            policy=image.policy if image is not None else "")
                for python in wheel_pythons for group in groups)
    check_matrix_size(len(entries), len(platforms), len(cudas), len(wheel_pythons),
                      len(groups))
    torch_spec = ""
    if needs_torch:
        # `--torch 2.9.1` pins that release; `--torch ">=2.9,<2.10"` is a specifier as it is.
        torch_spec = "torch" + (f"=={torch}" if torch and torch[0].isdigit() else torch or "")
    return CiPlan(recipe=recipe_ref, package=package, arch=spec, entries=tuple(entries),
                  flashbuild_spec=flashbuild_spec, torch_spec=torch_spec,
                  cache_key_path=cache_key_path, command=command, estimate=estimate)


# --- rendering ------------------------------------------------------------------------------

_BLOCK = re.compile(r"^(?P<indent>[ \t]*)# >>> (?P<name>[\w-]+)\n(?P<body>.*?)"
                    r"^[ \t]*# <<< (?P=name)\n", re.MULTILINE | re.DOTALL)


def render(plan: CiPlan, template: str | None = None) -> str:
    """The template with its data blocks (`# >>> name` … `# <<< name`) replaced."""
    text = template if template is not None else TEMPLATE.read_text(encoding="utf-8")
    # One pip cache per leg: the OS, Python, CUDA and torch index of the job, and this file
    # (which pins what is installed). In an expression a `'` is written twice.
    quoted = plan.cache_key_path.replace("'", "''")
    prefix = ("pip-${{ runner.os }}-py${{ matrix.python }}-cuda${{ matrix.cuda }}-"
              "${{ matrix.torch-index }}-${{ hashFiles('" + quoted + "') }}-")
    blocks = {
        "header": ["#   " + plan.command],
        "env": [f"FLASHBUILD_SPEC: {_scalar(plan.flashbuild_spec)}",
                f"FLASHBUILD_RECIPE: {_scalar(plan.recipe)}",
                f"FLASHBUILD_PACKAGE: {_scalar(plan.package)}",
                f"TORCH_SPEC: {_scalar(plan.torch_spec)}"],
        "matrix": ["- " + e.yaml() for e in plan.entries],
        "cache-key": [f"key: {prefix}${{{{ github.run_id }}}}",
                      f"restore-keys: {prefix}"],
    }
    seen: list[str] = []

    def fill(match: re.Match[str]) -> str:
        name, indent = match["name"], match["indent"]
        seen.append(name)
        if name == "header":  # a comment block: its lines carry their own `#`
            return "".join(line + "\n" for line in blocks[name])
        return "".join(indent + line + "\n" for line in blocks[name])

    out = _BLOCK.sub(fill, text)
    missing = sorted(set(blocks) - set(seen))
    if missing:  # the template and this function disagree: a bug in flashbuild
        raise AssertionError(f"template {TEMPLATE} lacks the data block(s) {missing}")
    return out


def _scalar(value: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset YAML reads the same)."""
    return json.dumps(value, ensure_ascii=False)


def command_line(*, recipe: str, arch: str, platforms: Sequence[str], cudas: Sequence[str],
                 pythons: Sequence[str], runners: Mapping[PlatformName, str],
                 extra: Sequence[str] = ()) -> str:
    """The `flashbuild ci init` line the header records (only non-default runners)."""
    words = ["flashbuild", "ci", "init", "--recipe", recipe, "--arch", arch,
             "--platform", ",".join(platforms), "--cuda", ",".join(cudas),
             "--python", ",".join(pythons)]
    for platform, label in runners.items():
        if label != DEFAULT_RUNNERS[platform]:
            words += ["--runner", f"{platform}={label}"]
    return shlex.join([*words, *extra])
