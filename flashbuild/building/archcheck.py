"""What a configured build really compiles for, read from its generated Ninja file.

`--arch` reaches a tree in many ways (CMAKE_CUDA_ARCHITECTURES, a project variable such as
`GPU_ARCH`, TORCH_CUDA_ARCH_LIST, a gencode list in setup.py), and a tree can ignore all of
them: a CMakeLists that sets its own `CUDA_ARCHITECTURES` from `nvidia-smi` or a default of 89
configures without complaint and builds the wrong code. So after configure (CMake) or after the
build (torch's `build/temp*/build.ninja`) flashbuild reads the arch flags every nvcc command
carries and compares the SASS they ask for with `--arch`: a difference is an error before the
binary is installed, never a silent wrong build.

nvcc also reads flags from its own environment, which no build.ninja shows: it adds
`NVCC_PREPEND_FLAGS` and `NVCC_APPEND_FLAGS` to every command line (CUDA Toolkit docs, "NVCC
environment variables"), and `NVCC_CCBIN` picks the host compiler when the command line names
none. Whether they come from the recipe's `[[build.env]]` or the user's shell, they are part of
the proof: their arch flags are read with the same parser as build.ninja's and join the build's
own (`environment_flags`); arch flags in them that --arch does not ask for are refused with
the variable named (`check`), and a host compiler other than the one flashbuild judged is
refused (`check_host_compiler`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.arch import ArchSpec, BuildTarget, Suffix, Target
from flashbuild.errors import BuildError
from flashbuild.source.nvccflags import ArchFlags, first_arch_option, read_arch_flags

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

#: The variables nvcc adds to every command line it runs.
NVCC_FLAG_VARS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")


def environment_flags(env: Mapping[str, str], recipe_env: Mapping[str, str]) -> ArchFlags:
    """The arch flags nvcc reads from `env` (the build's whole environment); each evidence
    line names the variable and where it came from (`recipe_env`: the recipe's
    `[[build.env]]`, else the user's environment)."""
    flags = ArchFlags()
    for name in NVCC_FLAG_VARS:
        value = env.get(name, "")
        found = read_arch_flags([value])
        if not found.found:
            continue
        where = "the recipe's [[build.env]]" if name in recipe_env else "your environment"
        flags.sass |= found.sass
        flags.ptx |= found.ptx
        flags.wide |= found.wide
        flags.lines.append(f"{name}={value} (from {where})")
    return flags


def merged(*parts: ArchFlags) -> ArchFlags:
    out = ArchFlags()
    for part in parts:
        out.sass |= part.sass
        out.ptx |= part.ptx
        out.wide |= part.wide
        out.lines += part.lines
    return out


def ninja_arch_flags(build_ninja: Path) -> ArchFlags:
    """The arch flags of every nvcc command a generated build.ninja runs, including those of
    the scripts it runs for FindCUDA's `cuda_add_library` (`findcuda_script_lines`)."""
    try:
        text = build_ninja.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ArchFlags()
    lines = text.splitlines()
    return read_arch_flags([*lines, *findcuda_script_lines(lines)])


#: A build.ninja command that runs one of FindCUDA's per-source scripts:
#: `cmake -D build_configuration:STRING=Release ... -P <dir>/T_generated_k.cu.o.Release.cmake`.
_FINDCUDA_RUN = re.compile(r"-P\s+(?P<script>\S+_generated_\S+\.cmake)(?:\s|$)")
_FINDCUDA_CONFIG = re.compile(r"-D\s*build_configuration:STRING=(?P<config>\w*)")
#: At most this many scripts are read (one per .cu file of a FindCUDA target).
FINDCUDA_SCRIPTS = 400


def findcuda_script_lines(ninja_lines: Sequence[str]) -> list[str]:
    """The nvcc flags of the FindCUDA scripts `ninja_lines` run, as command-line text.

    FindCUDA (`cuda_add_library`, CMake's legacy CUDA support) compiles each .cu by a custom
    command that runs a generated script with `cmake -P`; the script, not build.ninja, holds
    the flags nvcc gets: `set(CUDA_NVCC_FLAGS -arch sm_61 ...)`, `set(nvcc_flags ...)` and
    `set(CUDA_NVCC_FLAGS_<CONFIG> ...)` for the configuration the command names (libKMCUDA
    6.2.3 writes `-arch sm_${CUDA_ARCH}` with a default of 61 there, which CMAKE_CUDA_ARCHITECTURES
    does not change). CMake lists (`a;b`) become spaces."""
    scripts: dict[str, str] = {}
    for line in ninja_lines:
        run = _FINDCUDA_RUN.search(line)
        if run is None or run["script"] in scripts or len(scripts) >= FINDCUDA_SCRIPTS:
            continue
        named = _FINDCUDA_CONFIG.search(line)
        scripts[run["script"]] = named["config"].upper() if named else ""
    names = ("CUDA_NVCC_FLAGS", "nvcc_flags")
    out: list[str] = []
    for script, config in scripts.items():
        wanted = (*names, f"CUDA_NVCC_FLAGS_{config}") if config else names
        try:
            text = Path(script).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            setting = re.match(r"\s*set\(\s*(\w+)\s+(.*)\)", line.split("#", 1)[0])
            if setting and setting[1] in wanted:
                value = setting[2].replace(";", " ").strip()
                out.append(f"{Path(script).name}: {setting[1]} = {value}")
    return out


def expected_sass(spec: ArchSpec) -> set[str]:
    return {t.arch.sm for t in spec.targets if t.sass}


def check(flags: ArchFlags, spec: ArchSpec, *, where: Path, fix: str,
          extra_evidence: str = "", env_flags: ArchFlags | None = None) -> None:
    """Raise BuildError when the compiled SASS differs from `--arch`'s. `env_flags`: what
    nvcc's environment adds (`environment_flags`): an arch --arch does not ask for there is
    its own error, naming the variable; the rest joins the build's flags."""
    want = expected_sass(spec)
    if env_flags is not None and env_flags.found and want:
        _check_environment(env_flags, spec, want)
        flags = merged(flags, env_flags)
    if not flags.found or not want:
        return
    missing = sorted(BuildTarget(spec).missing(flags.sass))  # arch.satisfies, as verify
    extra = sorted(flags.sass - want)
    if not (missing or extra or flags.wide):
        return
    variants = variant_of_request(spec, flags)
    if variants is not None:
        raise _variant_error(spec, variants, flags, where=where,
                             extra_evidence=extra_evidence)
    parts = []
    if missing:
        parts.append(f"lacks {', '.join(missing)}")
    if extra:
        parts.append(f"also builds {', '.join(extra)}")
    if flags.wide:
        parts.append(f"lets nvcc choose (-arch={', '.join(sorted(flags.wide))})")
    sample = "\n".join(_shorten(line) for line in flags.lines[:3])
    raise BuildError(
        f"the build does not compile for --arch {spec.label}: it {'; '.join(parts)}",
        evidence=f"{where} asks nvcc for SASS {', '.join(sorted(flags.sass)) or 'none'}"
        + (f" and PTX {', '.join(sorted(flags.ptx))}" if flags.ptx else "")
        + f":\n{sample}" + (f"\n{extra_evidence}" if extra_evidence else ""),
        fix=fix,
        details={"requested": sorted(want), "sass": sorted(flags.sass),
                 "ptx": sorted(flags.ptx), "file": str(where)},
    )


def variant_of_request(spec: ArchSpec, flags: ArchFlags) -> ArchSpec | None:
    """--arch as the build compiles it when the only difference is a suffix the tree adds
    itself (`--arch sm_120`, every nvcc command `sm_120a`: FlashRT appends `a` to GPU_ARCH),
    else None. Then the fix is one `--arch`, not a variable to hand the arch to."""
    if flags.wide:
        return None
    want = expected_sass(spec)
    extra = flags.sass - want
    suffixes: dict[str, Suffix] = {}
    for sm in want - flags.sass:
        found = [s for s in (Suffix.ARCH, Suffix.FAMILY) if f"{sm}{s}" in extra]
        if len(found) != 1:
            return None
        suffixes[sm] = found[0]
    if not suffixes or extra != {f"{sm}{s}" for sm, s in suffixes.items()}:
        return None
    return ArchSpec(tuple(
        Target(replace(t.arch, suffix=suffixes[t.arch.sm]), t.image)
        if t.arch.sm in suffixes else t for t in spec.targets))


def _variant_error(spec: ArchSpec, built: ArchSpec, flags: ArchFlags, *, where: Path,
                   extra_evidence: str) -> BuildError:
    changed = [t.arch for t in built.targets if t not in spec.targets]
    suffix = changed[0].suffix
    runs = "; ".join(
        f"{a.sm} SASS runs only on compute capability {a.major}.{a.minor} GPUs"
        if a.suffix is Suffix.ARCH else
        f"{a.sm} SASS runs on compute capability {a.major}.{a.minor} and later {a.major}.x GPUs"
        for a in changed)
    kind = "arch-specific" if suffix is Suffix.ARCH else "family"
    sample = "\n".join(_shorten(line) for line in flags.lines[:3])
    return BuildError(
        f"the build compiles {built.label}, not --arch {spec.label}: the tree adds the "
        f"`{suffix}` ({kind} variant) itself",
        evidence=f"{where} asks nvcc for SASS {', '.join(sorted(flags.sass))}:\n{sample}"
        + (f"\n{extra_evidence}" if extra_evidence else "")
        + f"\n{runs}. A recipe for such a tree says so with `[build] arch_suffix = "
        f"\"{suffix}\"`, and --arch {spec.argument} then builds as {built.argument}",
        fix=f"build with `--arch {built.argument}`",
        details={"requested": sorted(expected_sass(spec)), "sass": sorted(flags.sass),
                 "ptx": sorted(flags.ptx), "file": str(where), "arch": built.argument},
    )


def _check_environment(env_flags: ArchFlags, spec: ArchSpec, want: set[str]) -> None:
    extra = sorted(env_flags.sass - want)
    if not (extra or env_flags.wide):
        return
    names = sorted({line.split("=", 1)[0] for line in env_flags.lines})
    what = ", ".join(extra) if extra else f"-arch={', '.join(sorted(env_flags.wide))}"
    raise BuildError(
        f"nvcc's environment adds {what} to a build for --arch {spec.label}: "
        f"{' and '.join(names)} carry arch flags, which nvcc adds to every command line "
        "where no build file shows them",
        evidence="\n".join(env_flags.lines),
        fix=f"remove the -gencode/-arch/-code flags from {' and '.join(names)} (the recipe's "
        "[[build.env]], or `unset` it in your shell): flashbuild hands --arch to the build "
        "itself; to build several archs, name them all in --arch (e.g. '90a;120')",
        details={"requested": sorted(want), "sass": sorted(env_flags.sass),
                 "variables": names},
    )


def check_host_compiler(env: Mapping[str, str], recipe_env: Mapping[str, str], *,
                        chosen: str, which: Callable[[str], str | None],
                        user_value: str | None) -> None:
    """NVCC_CCBIN in the build's environment must name the host compiler flashbuild judged
    (`chosen`, its path; empty when flashbuild activates MSVC itself). The user's own
    NVCC_CCBIN is what doctor probed on Linux (detect/compilers.py), so it passes there; one
    the recipe sets, or any on an MSVC host, must resolve to `chosen`."""
    value = env.get("NVCC_CCBIN", "")
    if not value:
        return
    from_recipe = "NVCC_CCBIN" in recipe_env
    if not from_recipe and chosen and value == user_value:
        return
    found = which(value)
    if found and chosen and _same_file(found, chosen):
        return
    where = "the recipe's [[build.env]]" if from_recipe else "your environment"
    raise BuildError(
        f"NVCC_CCBIN makes nvcc use the host compiler `{value}`, not the one flashbuild "
        f"checked ({chosen or 'the MSVC toolset it activates'})",
        evidence=f"NVCC_CCBIN={value} (from {where}) resolves to {found or 'nothing on PATH'}; "
        "nvcc reads it when its command line names no -ccbin, so the compiler's version was "
        "never checked against nvcc's supported window",
        fix=("set NVCC_CCBIN in your shell before running flashbuild (doctor then checks that "
             "compiler), or remove it from the recipe's [[build.env]]" if chosen else
             "unset NVCC_CCBIN: flashbuild activates an MSVC toolset inside nvcc's window "
             "itself"),
        details={"NVCC_CCBIN": value, "resolved": found, "checked": chosen},
    )


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).samefile(b)
    except OSError:
        return a == b


def _shorten(line: str, width: int = 240) -> str:
    """The arch part of a long command line, with a little context."""
    at = first_arch_option(line)
    if at is None or len(line) <= width:
        return line
    start = max(0, at - 40)
    return ("… " if start else "") + line[start:start + width] + " …"
