"""CMake checks, on the tree-sitter-cmake parse (PyPI `tree-sitter-cmake`).

Per file: the MSVC flag block (FB190), DLL outputs (FB191), `dl` linked by name (FB192),
exact-string arch gates (FB152); and the facts the tree-wide pass needs: every source, folder
or glob the file names with the `if()` gates around it, and whether it defines NOMINMAX.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tree_sitter_cmake
from tree_sitter import Language, Node, Parser

from flashbuild.scanning.checks_lang import std_year
from flashbuild.scanning.facts import (
    TREE_DEFINES,
    ArchFallbackFacts,
    ArchLiteralFacts,
    DllOutputFacts,
    MsvcFlagsFacts,
)
from flashbuild.scanning.findings import (
    Category,
    FileReport,
    FileText,
    Finding,
    Fix,
    ScanTarget,
    Severity,
    source_line,
)
from flashbuild.scanning.gates import (
    BuildGates,
    Gate,
    Mention,
    arch_literal,
    gate_from_words,
    same_generation,
)
from flashbuild.scanning.proposals import EditCall, ProposedStep
from flashbuild.toolchain_facts import MSVC_HOST_FLAGS, ZC_PREPROCESSOR

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from flashbuild.arch import Arch

#: The flags MSVC builds of CUDA code need (toolchain_facts says which CUDA needs which).
MSVC_FLAGS = (ZC_PREPROCESSOR, *MSVC_HOST_FLAGS)
SOURCE_SUFFIX = re.compile(r"\.(cu|cuh|cpp|cc|cxx|c|h|hpp)$|[*?]")
DEFINE_COMMANDS = frozenset({"add_compile_definitions", "target_compile_definitions",
                             "add_definitions", "add_compile_options", "target_compile_options"})


@functools.cache
def _parser() -> Parser:
    return Parser(Language(tree_sitter_cmake.language()))


@dataclass(frozen=True)
class Command:
    name: str
    args: tuple[str, ...]
    node: Node
    gates: tuple[Gate, ...]


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _args(node: Node) -> tuple[str, ...]:
    lst = next((c for c in node.children if c.type == "argument_list"), None)
    if lst is None:
        return ()
    out = []
    for arg in lst.children:
        if arg.type == "argument":
            out.append(_text(arg).strip('"'))
    return tuple(out)


_ON = frozenset({"ON", "TRUE", "YES", "1", "Y"})


def _commands(node: Node, gates: tuple[Gate, ...],
              aliases: dict[str, Gate | None] | None = None) -> Iterator[Command]:
    """Every command with the gates that must hold for it to run (if/elseif/else chains).

    A switch set ON under one readable gate and tested later (`if(GPU_ARCH STREQUAL "100")
    set(ENABLE_SM100 ON) … if(ENABLE_SM100)`) stands for that gate: `aliases` carries it, so
    the later `if` is judged by the arch the first one names."""
    if aliases is None:
        aliases = {}
    for child in node.children:
        if child.type == "normal_command":
            name = _text(child.children[0]).lower()
            args = _args(child)
            if name == "set" and len(args) >= 2 and args[1].upper() in _ON:
                _remember(aliases, args[0], gates)
            yield Command(name, args, child, gates)
        elif child.type == "if_condition":
            prior: list[Gate] = []
            current: Gate | None = None
            for part in child.children:
                if part.type in ("if_command", "elseif_command"):
                    words = _args(part)
                    text = " ".join(words)
                    current = _alias_gate(words, aliases) or \
                        gate_from_words(text, words, negated=False)
                    yield Command(part.type.removesuffix("_command"), words, part, gates)
                elif part.type == "else_command":
                    current = None
                elif part.type == "body":
                    inner = (*gates, *prior, *([current] if current else []))
                    yield from _commands(part, inner, aliases)
                    if current is not None:
                        prior.append(Gate(text=f"not ({current.text})", archs=current.archs,
                                          platform=current.platform,
                                          negated=not current.negated))
        elif child.type in ("foreach_loop", "function_def", "macro_def", "while_loop",
                            "block_def", "body"):
            yield from _commands(child, gates, aliases)


def _remember(aliases: dict[str, Gate | None], var: str, gates: tuple[Gate, ...]) -> None:
    """`set(var ON)` under `gates`: an alias when exactly one readable gate decides it and no
    other `set(var ON)` does otherwise; None (not an alias) from then on."""
    judged = [g for g in gates if g.archs or g.platform]
    if var in aliases and (aliases[var] is None or not judged or aliases[var] != judged[-1]):
        aliases[var] = None
    elif var not in aliases:
        aliases[var] = judged[0] if len(judged) == 1 and len(gates) == 1 else None


def _alias_gate(words: Sequence[str], aliases: dict[str, Gate | None]) -> Gate | None:
    names = [w for w in words if w.upper() != "NOT"]
    if len(names) != 1 or not aliases.get(names[0]):
        return None
    gate = aliases[names[0]]
    assert gate is not None
    negate = sum(1 for w in words if w.upper() == "NOT") % 2 == 1
    return Gate(text=f"{' '.join(words)} (set ON under `{gate.text}`)", archs=gate.archs,
                platform=gate.platform, negated=gate.negated != negate)


def _pos(node: Node) -> tuple[int, int]:
    return node.start_point[0] + 1, node.start_point[1] + 1


def _snippet(file: FileText, line: int) -> str:
    return source_line(file.text, line)


def check_cmake(file: FileText, target: ScanTarget) -> FileReport:
    report = FileReport(file.path)
    tree = _parser().parse(file.text.encode("utf-8"))
    commands = list(_commands(tree.root_node, ()))
    mentions = _mentions(file, commands)
    defines: set[str] = set()
    for cmd in commands:
        if cmd.name in DEFINE_COMMANDS:
            for arg in cmd.args:
                name = re.sub(r"^[-/]D", "", arg).split("=")[0]
                if name in TREE_DEFINES:
                    defines.add(name)
    report.facts["mentions"] = mentions
    report.facts["defines"] = sorted(defines)
    report.facts["standards"] = _standards(file, commands)
    report.facts["find_packages"] = sorted({
        a for cmd in commands if cmd.name in _FIND_COMMANDS for a in cmd.args[:3]})
    report.facts["libraries"] = _libraries(commands)
    if target.platform == "windows":
        report.findings += _msvc_block(file, commands)
        report.findings += _dll_outputs(file, commands)
        report.findings += _hardcoded_dl(file, commands)
        report.findings += _gcc_warning_flags(file, commands, target)
    report.findings += _strequal_gates(file, commands, target)
    report.findings += _arch_from_gpu(file, commands)
    report.findings += _standard_below_torch(file, commands)
    report.findings += _arch_define_with_suffix(file, commands, target)
    return report


_FIND_COMMANDS = frozenset({"find_package", "find_path", "find_library", "find_file"})
_STANDARD_VARS = {"CMAKE_CXX_STANDARD": "CXX", "CMAKE_CUDA_STANDARD": "CUDA",
                  "CXX_STANDARD": "CXX", "CUDA_STANDARD": "CUDA"}
_FEATURE = re.compile(r"^(cxx|cuda)_std_(\d+)$")
_FLAG_VARS = {"CMAKE_CXX_FLAGS": "CXX", "CMAKE_CUDA_FLAGS": "CUDA"}
_PROPERTY_COMMANDS = frozenset({"set", "set_target_properties", "set_property",
                                "set_source_files_properties"})


def _standards(file: FileText, commands: Sequence[Command]) -> list[tuple[str, int, str]]:
    """(language, year, file:line) of each C++ standard the file asks for: `set(CMAKE_CXX_
    STANDARD 17)`, a target's `CXX_STANDARD` property, `target_compile_features(… cxx_std_17)`,
    a `-std=`/`/std:` option (FB114 reads them when no configured build says)."""
    out: list[tuple[str, int, str]] = []
    for cmd in commands:
        where = f"{file.path}:{_pos(cmd.node)[0]}"
        args = list(cmd.args)
        if cmd.name in _PROPERTY_COMMANDS:
            for key, value in itertools.pairwise(args):
                lang = _STANDARD_VARS.get(key)
                if lang and value.isdigit():
                    out.append((lang, _year(value), where))
        if cmd.name == "target_compile_features":
            for arg in args:
                m = _FEATURE.match(arg)
                if m:
                    out.append(("CUDA" if m[1] == "cuda" else "CXX", _year(m[2]), where))
        if cmd.name in ("add_compile_options", "target_compile_options") or (
                cmd.name == "set" and args and args[0] in _FLAG_VARS):
            found = std_year(args)
            if found:
                lang = _FLAG_VARS.get(args[0], "CUDA" if any(
                    "COMPILE_LANGUAGE:CUDA" in a for a in args) else "any")
                out.append((lang, found[0], where))
    return out


def _year(value: str) -> int:
    """`17` -> 2017, `98` -> 1998 (CMake's CXX_STANDARD values)."""
    n = int(value)
    return 1900 + n if n >= 90 else 2000 + n


#: `add_library` and FindCUDA's `cuda_add_library` (trees older than CMake's CUDA language,
#: libKMCUDA's): `NAME SHARED|MODULE|STATIC …`.
ADD_LIBRARY = frozenset({"add_library", "cuda_add_library"})
#: Commands that make a loadable library: a Python module or a plugin.
_LIBRARY_COMMANDS = ADD_LIBRARY | {"pybind11_add_module", "nanobind_add_module",
                                   "python_add_library", "python3_add_library"}


def _libraries(commands: Sequence[Command]) -> list[tuple[str, str, tuple[Gate, ...]]]:
    """(target, kind, gates) of each shared/module library the file defines: `module` for
    Python extension modules, `shared` for plain shared libraries."""
    out: list[tuple[str, str, tuple[Gate, ...]]] = []
    for cmd in commands:
        if cmd.name not in _LIBRARY_COMMANDS or not cmd.args:
            continue
        if cmd.name in ADD_LIBRARY:
            if "SHARED" in cmd.args[1:3]:
                out.append((cmd.args[0], "shared", cmd.gates))
            elif "MODULE" in cmd.args[1:3]:
                out.append((cmd.args[0], "module", cmd.gates))
        else:
            out.append((cmd.args[0], "module", cmd.gates))
    return out


#: `-Xcompiler -Wno-foo` (also `=`, comma lists, SHELL: forms): cl.exe reads `-W…` as a
#: warning level; `-Wall`, `-W0…4` and `-WX` are cl's own.
_XCOMPILER_W = re.compile(r"-Xcompiler[\s=]+(?:\S*,)?(-W(?!all\b|[0-4]\b|X\b)[A-Za-z][\w=-]*)")
_COMPILER_TESTS = re.compile(r"COMPILER_ID|MSVC|WIN32|UNIX|PLATFORM_ID|CMAKE_HOST_WIN32")


def _gcc_warning_flags(file: FileText, commands: Sequence[Command],
                       target: ScanTarget) -> list[Finding]:
    """FB193: a GCC `-W…` flag forwarded to the host compiler with no compiler test around
    it, in a command the target's configuration runs."""
    out: list[Finding] = []
    for cmd in commands:
        if cmd.name not in DEFINE_COMMANDS and cmd.name not in ("set", "string", "list"):
            continue
        text = " ".join(cmd.args)
        m = _XCOMPILER_W.search(text)
        if m is None or _COMPILER_TESTS.search(text) or \
                any(g.platform is not None for g in cmd.gates) or \
                any(g.holds(target.platform, target.archs) is False for g in cmd.gates):
            continue
        line = cmd.node.start_point[0] + 1 + _text(cmd.node)[:_text(cmd.node).find(
            m[1])].count("\n") if m[1] in _text(cmd.node) else _pos(cmd.node)[0]
        out.append(Finding(
            rule="FB193", category=Category.CMAKE, path=file.path, line=line, col=1,
            severity=Severity.ERROR,
            message=f"`-Xcompiler {m[1]}` reaches cl.exe on Windows, which reads it as a "
            "warning level and stops with D8021 'invalid numeric argument'",
            evidence=f"{cmd.name}({cmd.args[0] if cmd.args else ''} …) passes it with no "
            "compiler or platform test around it"
            + (f" (under {' and '.join(g.text for g in cmd.gates)})" if cmd.gates else ""),
            snippet=_snippet(file, line),
            fix=Fix(manual=f"give {m[1]} to GCC/Clang only: `$<$<NOT:$<CXX_COMPILER_ID:MSVC>>:"
                    f"-Xcompiler={m[1]}>` or an `if(NOT MSVC)` block")))
    return out


#: The torch release whose headers first `#error` below C++20 outside MSVC (torch/all.h:
#: `__cplusplus < 202002L`); 2.13's ask for C++17 (both read from their wheels' headers).
TORCH_NEEDS_CXX20 = "2.14"
_STANDARD_SET = frozenset({"CMAKE_CXX_STANDARD", "CMAKE_CUDA_STANDARD"})


def _standard_below_torch(file: FileText, commands: Sequence[Command]) -> list[Finding]:
    """FB195: `set(CMAKE_CXX_STANDARD 17)` (or CUDA's) in a CMakeLists.txt that finds torch:
    the compile of any unit that includes torch's headers stops at their `#error` with torch
    2.14 and later (torchmcubes 0.1.0 with torch 2.14.1). The drafted step raises it to 20
    for those torch releases only (`when = { torch = ">=2.14" }`)."""
    if not any(cmd.name == "find_package" and cmd.args and cmd.args[0] == "Torch"
               for cmd in commands):
        return []
    lines = file.text.splitlines()
    out: list[Finding] = []
    for cmd in commands:
        if cmd.name != "set" or len(cmd.args) < 2 or cmd.args[0] not in _STANDARD_SET or \
                not cmd.args[1].isdigit() or _year(cmd.args[1]) >= 2020:
            continue
        line, col = _pos(cmd.node)
        old = lines[line - 1]
        value = cmd.args[1]
        new = re.sub(rf"\b{cmd.args[0]}(\s+){value}\b", rf"{cmd.args[0]}\g<1>20", old, count=1)
        anchor = old.strip()
        step = None if new == old or "\\" in anchor or '"""' in anchor else ProposedStep(
            id=f"cxx20-for-torch-{cmd.args[0].lower().replace('_', '-')}",
            transform="replace-block",
            description=f"{file.path}:{line} pins C++{value}; torch {TORCH_NEEDS_CXX20} and "
            "later need C++20 (scan FB195)",
            params={"file": file.path, "anchor": anchor, "block": new},
            when={"torch": f">={TORCH_NEEDS_CXX20}.0.dev0"})
        out.append(Finding(
            rule="FB195", category=Category.CMAKE, path=file.path, line=line, col=col,
            severity=Severity.WARNING,
            message=f"{cmd.args[0]} is {value} in a project that finds torch: torch "
            f"{TORCH_NEEDS_CXX20} and later stop its units with \"C++20 or later compatible "
            "compiler is required to use PyTorch\"",
            evidence=f"set({cmd.args[0]} {value}) and find_package(Torch) in {file.path}",
            snippet=_snippet(file, line),
            fix=Fix(manual=f"set({cmd.args[0]} 20) when building against torch "
                    f"{TORCH_NEEDS_CXX20} or later", step=EditCall(step=step))))
    return out


#: An arch flag built from a variable: `-arch sm_${V}`, `arch=compute_${V},code=sm_${V}`.
_ARCH_FLAG_VAR = re.compile(r"\b(?:sm|compute)_\$\{(\w+)\}")
_DASH_D = re.compile(r"-D(?P<name>\w+)=\$\{(?P<var>\w+)\}")
_DEFINITION = re.compile(r"(?:^|-D)(?P<name>\w+)=\$\{(?P<var>\w+)\}")


def _arch_define_with_suffix(file: FileText, commands: Sequence[Command],
                             target: ScanTarget) -> list[Finding]:
    """FB196: the arch variable of the nvcc flags (`-arch sm_${CUDA_ARCH}`) also given to
    C/C++ as a define (`-DCUDA_ARCH=${CUDA_ARCH}`), for a target spelled with a suffix:
    `-DCUDA_ARCH=90a` is no number, and the tree's `#if CUDA_ARCH < 60` stops the compile
    (libKMCUDA 6.2.3). The drafted step gives C/C++ the number and leaves the suffix in the
    arch flag, so the build still makes the requested SASS; a numeric arch is unchanged.

    Only defines that reach the compilers count: a definitions command, or a `-D` in a
    variable of compiler flags (`set(CMAKE_CXX_FLAGS …)`, `list(APPEND CUDA_NVCC_FLAGS …)`).
    A `-D` given to CMake itself (ExternalProject_Add's CMAKE_ARGS, `execute_process` of
    cmake, try_compile) or naming a `CMAKE_` variable sets a cache entry, not a C macro."""
    suffixed = [t.arch for t in target.spec.targets if t.arch.suffix]
    arch_vars = set(_ARCH_FLAG_VAR.findall(file.text))
    if not suffixed or not arch_vars:
        return []
    lines = file.text.split("\n")  # numbered as tree-sitter numbers rows: by "\n" alone
    found: dict[int, tuple[Command, list[tuple[str, str]]]] = {}
    for cmd in commands:
        if cmd.name in DEFINE_COMMANDS:
            pattern = _DEFINITION
        elif _sets_flags(cmd):
            pattern = _DASH_D
        else:
            continue
        for arg in cmd.args:
            for m in pattern.finditer(arg):
                if m["var"] in arch_vars and not m["name"].startswith("CMAKE_"):
                    uses = found.setdefault(_pos(cmd.node)[0], (cmd, []))[1]
                    if (m["name"], m["var"]) not in uses:
                        uses.append((m["name"], m["var"]))
    return [_arch_define_finding(file, cmd, lines, uses=uses, suffixed=suffixed)
            for cmd, uses in found.values()]


#: `set(VAR …)`, `list(APPEND VAR …)`, `string(APPEND VAR …)` of a flags variable.
_FLAGS_VAR = re.compile(r"FLAGS|OPTIONS", re.I)


def _sets_flags(cmd: Command) -> bool:
    if cmd.name == "set" and cmd.args:
        return bool(_FLAGS_VAR.search(cmd.args[0]))
    if cmd.name in ("list", "string") and len(cmd.args) >= 2 and \
            cmd.args[0].upper() in ("APPEND", "PREPEND"):
        return bool(_FLAGS_VAR.search(cmd.args[1]))
    return False


def _arch_define_finding(file: FileText, cmd: Command, lines: list[str], *,
                         uses: Sequence[tuple[str, str]], suffixed: Sequence[Arch]) -> Finding:
    line, col = _pos(cmd.node)
    name, var = uses[0]
    used = [f"{n}=${{{v}}}" for n, v in uses]
    row = next((n for n in range(line, min(cmd.node.end_point[0] + 1, len(lines)) + 1)
                if used[0] in lines[n - 1]), line)
    old = lines[row - 1].removesuffix("\r")
    indent = old[:len(old) - len(old.lstrip())]
    new = old
    for n, v in uses:
        new = new.replace(f"{n}=${{{v}}}", f"{n}=${{{v}_NUMBER}}")
    numbers = "".join(f'{indent}string(REGEX REPLACE "[a-z]+$" "" {v}_NUMBER "${{{v}}}")\n'
                      for v in dict.fromkeys(v for _n, v in uses))
    anchor = old.strip()
    # The step rewrites the command's first line only: a `string()` put before a later line
    # would land inside the command. Identical lines (the same define under two branches)
    # are one step with its count.
    same = sum(ln.removesuffix("\r").strip() == anchor for ln in lines)
    step = None if row != line or new == old or "\\" in old or '"""' in old else ProposedStep(
        id=f"arch-number-for-{name.lower().replace('_', '-')}-"
           f"{re.sub(r'[^a-z0-9]+', '-', file.path.lower()).strip('-')}-"
           f"{hashlib.sha256(anchor.encode('utf-8')).hexdigest()[:8]}",
        transform="replace-block",
        description=f"{file.path}:{line} gives C/C++ the arch variable {var} as {name}, "
        "which the target's suffix makes no number (scan FB196)",
        params={"file": file.path, "anchor": anchor, "block": numbers + new,
                **({"expect": same} if same > 1 else {})},
        when={"platform": ["linux", "windows"]})
    example = suffixed[0]
    return Finding(
        rule="FB196", category=Category.ARCH_SELECTION, path=file.path, line=row, col=col,
        severity=Severity.WARNING,
        message=f"{var}, the arch variable of the nvcc flags, also reaches C/C++ as "
        f"`{name}={example.code}{example.suffix}` for {example.sm}: with the suffix it is no "
        f"number, and an `#if {name} < …` stops the compile",
        evidence=f"`{used[0]}` at line {row}; `sm_${{{var}}}` in an arch flag of {file.path}",
        snippet=_snippet(file, row),
        fix=Fix(manual=f"give C/C++ the number: `string(REGEX REPLACE \"[a-z]+$\" \"\" "
                f"{var}_NUMBER \"${{{var}}}\")` and `{name}=${{{var}_NUMBER}}`; the arch flag "
                "keeps the suffix", step=EditCall(step=step)))


def _arch_from_gpu(file: FileText, commands: Sequence[Command]) -> list[Finding]:
    """FB194: an arch variable taken from `nvidia-smi` at configure time, with a fixed value
    when there is no GPU to ask."""
    probe = next((c for c in commands if c.name == "execute_process" and
                  any("nvidia-smi" in a for a in c.args)), None)
    if probe is None:
        return []
    out: list[Finding] = []
    for cmd in commands:
        if cmd.name != "set" or len(cmd.args) < 2 or "ARCH" not in cmd.args[0].upper() or \
                not cmd.gates or arch_literal(cmd.args[1]) is None:
            continue
        line, col = _pos(cmd.node)
        var, value = cmd.args[0], cmd.args[1]
        out.append(Finding(
            rule="FB194", category=Category.ARCH_SELECTION, path=file.path, line=line, col=col,
            severity=Severity.WARNING,
            message=f"{var} comes from the build machine's GPU (nvidia-smi at line "
            f"{_pos(probe.node)[0]}) and is `{value}` when there is none: the build targets "
            "whatever GPU the build box has, not the one it will run on",
            evidence=f"execute_process(COMMAND nvidia-smi …) at line {_pos(probe.node)[0]}; "
            f"set({var} {value}) under `{cmd.gates[-1].text}`",
            snippet=_snippet(file, line),
            fix=Fix(manual=f"pass -D{var}=<the target's arch> (a recipe's [build] cmake "
                    "defines; `flashbuild build --arch` sets it when the recipe names the "
                    "variable)"),
            facts=ArchFallbackFacts(variable=var, fallback=value)))
        break
    return out


_VAR = re.compile(r"^\$\{(\w+)\}$")
TARGET_COMMANDS = frozenset({"add_library", "add_executable", "target_sources",
                             "cuda_add_library", "pybind11_add_module", "python_add_library"})


def _mentions(file: FileText, commands: Sequence[Command]) -> list[Mention]:
    """Sources the file compiles, with the gates on the way: `set(SRCS a.cu)` then
    `if(…) list(APPEND MOD ${SRCS}) endif()` then `add_library(x ${MOD})` gives `a.cu` under
    that `if`. Variables never used through `${}` count as compiled (a file the scan cannot
    follow must not hide findings)."""
    lists: dict[str, list[Mention]] = {}
    used: set[str] = set()
    out: list[Mention] = []

    def expand(args: Sequence[str], cmd: Command) -> list[Mention]:
        line = _pos(cmd.node)[0]
        items: list[Mention] = []
        for arg in args:
            var = _VAR.match(arg)
            if var:
                used.add(var[1])
                items += [Mention(m.text, m.build_file, m.line, (*cmd.gates, *m.gates))
                          for m in lists.get(var[1], [])]
            elif SOURCE_SUFFIX.search(arg):
                items.append(Mention(arg, file.path, line, cmd.gates))
        return items

    for cmd in commands:
        if not cmd.args:
            continue
        if cmd.name == "set":
            lists[cmd.args[0]] = expand(cmd.args[1:], cmd)
        elif cmd.name == "list" and len(cmd.args) > 2 and cmd.args[0] in ("APPEND", "PREPEND"):
            lists.setdefault(cmd.args[1], []).extend(expand(cmd.args[2:], cmd))
        elif cmd.name in TARGET_COMMANDS:
            shared = cmd.args[0] if cmd.name == "add_library" and "SHARED" in cmd.args else ""
            out += [Mention(m.text, m.build_file, m.line, m.gates, shared)
                    for m in expand(cmd.args[1:], cmd)]
        elif cmd.name == "add_subdirectory":
            out.append(Mention(cmd.args[0] + "/", file.path, _pos(cmd.node)[0], cmd.gates))
        elif cmd.name == "file" and cmd.args[0] in ("GLOB", "GLOB_RECURSE") and len(cmd.args) > 2:
            lists[cmd.args[1]] = expand([a for a in cmd.args[2:] if a != "CONFIGURE_DEPENDS"],
                                        cmd)
    for var, items in lists.items():
        if var not in used:
            out += items
    return out


def _msvc_block(file: FileText, commands: Sequence[Command]) -> list[Finding]:
    project = next((c for c in commands if c.name == "project"), None)
    uses_cuda = any(
        (c.name == "project" and "CUDA" in c.args) or
        (c.name == "enable_language" and "CUDA" in c.args) for c in commands)
    if project is None or not uses_cuda:
        return []
    msvc_text = " ".join(" ".join(c.args) for c in commands
                         if any(g.platform == "windows" and not g.negated for g in c.gates)
                         or any("MSVC" in a for a in c.args))
    missing = [f for f in MSVC_FLAGS if f.lower() not in msvc_text.lower()]
    if not missing:
        return []
    has_block = any(c.name in ("if", "elseif") and "MSVC" in c.args for c in commands)
    line, col = _pos(project.node)
    what = ("its if(MSVC) block lacks " if has_block else "there is no if(MSVC) block with ")
    return [Finding(
        rule="FB190", category=Category.CMAKE, path=file.path, line=line, col=col,
        severity=Severity.WARNING,
        message=f"CUDA project built with MSVC: {what}{' '.join(missing)}",
        evidence=f"project() enables CUDA; flags given for MSVC: "
        f"{', '.join(f for f in MSVC_FLAGS if f not in missing) or 'none'}",
        snippet=_snippet(file, line),
        fix=Fix(manual="add `if(MSVC) add_compile_options($<$<COMPILE_LANGUAGE:CXX>:"
                + ";".join(missing) + ">) endif()` (and the same through -Xcompiler for CUDA); "
                "`flashbuild build` passes them itself"),
        facts=MsvcFlagsFacts(missing=tuple(missing)))]


def _dll_outputs(file: FileText, commands: Sequence[Command]) -> list[Finding]:
    shared = {c.args[0] for c in commands if c.name == "add_library" and len(c.args) > 1
              and c.args[1] == "SHARED"}

    def on_windows(cmd: Command) -> bool:
        return not any(g.platform is not None and not g.archs and g.holds("windows", ()) is False
                       for g in cmd.gates)

    def properties(cmd: Command) -> tuple[tuple[str, ...], list[str]]:
        if cmd.name == "set_target_properties" and "PROPERTIES" in cmd.args:
            at = cmd.args.index("PROPERTIES")
            return cmd.args[:at], list(cmd.args[at + 1:])
        if cmd.name == "set_property" and cmd.args[:1] == ("TARGET",) and \
                "PROPERTY" in cmd.args:
            at = cmd.args.index("PROPERTY")
            return cmd.args[1:at], list(cmd.args[at + 1:at + 3])
        return (), []
    # Where the DLL goes is any RUNTIME_OUTPUT_DIRECTORY (per configuration too) set for the
    # target on Windows, anywhere in the file, or the global CMAKE_RUNTIME_OUTPUT_DIRECTORY.
    runtime_for_all = any(c.name == "set" and c.args[:1] == ("CMAKE_RUNTIME_OUTPUT_DIRECTORY",)
                          and on_windows(c) for c in commands)
    runtime: set[str] = set()
    for cmd in commands:
        targets, props = properties(cmd)
        if on_windows(cmd) and any(k.startswith("RUNTIME_OUTPUT_DIRECTORY")
                                   for k in props[0::2]):
            runtime.update(targets)
    out: list[Finding] = []
    reported: set[str] = set()
    for cmd in commands:
        targets, props = properties(cmd)
        keys = props[0::2]
        if "LIBRARY_OUTPUT_DIRECTORY" not in keys or not on_windows(cmd) or runtime_for_all:
            continue
        at = keys.index("LIBRARY_OUTPUT_DIRECTORY") * 2 + 1
        value = props[at] if len(props) > at else ""
        if not value:
            continue  # an unset (`set_property(… PROPERTY LIBRARY_OUTPUT_DIRECTORY)`)
        for tgt in targets:
            if tgt not in shared or tgt in runtime or tgt in reported:
                continue  # MODULE libraries (.pyd) are LIBRARY outputs on Windows too
            reported.add(tgt)
            line, col = _pos(cmd.node)
            out.append(Finding(
                rule="FB191", category=Category.CMAKE, path=file.path, line=line, col=col,
                severity=Severity.WARNING,
                message=f"the Windows DLL of SHARED library `{tgt}` will not land in "
                f"{value}",
                evidence="LIBRARY_OUTPUT_DIRECTORY is set, RUNTIME_OUTPUT_DIRECTORY is "
                "not (for this target, on Windows, in this file); on Windows a SHARED "
                "library's DLL is a RUNTIME output",
                snippet=_snippet(file, line),
                fix=Fix(manual=f"also set RUNTIME_OUTPUT_DIRECTORY {value} on `{tgt}`"),
                facts=DllOutputFacts(target=tgt)))
    return out


def _hardcoded_dl(file: FileText, commands: Sequence[Command]) -> list[Finding]:
    out = []
    for cmd in commands:
        if cmd.name == "target_link_libraries" and any(a in ("dl", "-ldl") for a in cmd.args[1:]):
            if any(g.platform == "posix" and not g.negated for g in cmd.gates):
                continue
            line, col = _pos(cmd.node)
            out.append(Finding(
                rule="FB192", category=Category.CMAKE, path=file.path, line=line, col=col,
                severity=Severity.ERROR, message="links `dl`, which does not exist on Windows",
                evidence=f"target_link_libraries({' '.join(cmd.args)})",
                snippet=_snippet(file, line),
                fix=Fix(manual="link ${CMAKE_DL_LIBS} instead of dl")))
    return out


def _strequal_gates(file: FileText, commands: Sequence[Command],
                    target: ScanTarget) -> list[Finding]:
    out: list[Finding] = []
    conds = [c for c in commands if c.name in ("if", "elseif")]
    named = {lit[0] for c in conds for a in c.args if (lit := arch_literal(a))}
    for cmd in conds:
        args = cmd.args
        # `STREQUAL "120" OR … STREQUAL "120a"`: a gate that also names the target's exact
        # spelling accepts it; its other comparisons do not turn it off.
        spelled = {lit for a in args if (lit := arch_literal(a))}
        for i, word in enumerate(args):
            if word != "STREQUAL" or i == 0 or i + 1 >= len(args):
                continue
            left, right = args[i - 1], args[i + 1]
            lit = arch_literal(right) or arch_literal(left)
            var = left if arch_literal(right) else right
            if lit is None or "ARCH" not in var.upper():
                continue
            code, suffix = lit
            for arch in target.archs:
                why = ""
                if code == arch.code and suffix != arch.suffix.value and \
                        (arch.code, arch.suffix.value) in spelled:
                    continue
                if code == arch.code and suffix == arch.suffix.value and \
                        _single_arch_spelled_both_ways(file, var, spelled, code):
                    continue
                if code == arch.code and _picks_suffix(cmd, var):
                    continue
                if code == arch.code:
                    why = (f"`{arch.code}{arch.suffix}` is not the string `{code}{suffix}`"
                           if suffix != arch.suffix.value else
                           f"true only while {var} is exactly `{code}{suffix}`: a suffix "
                           f"(`{code}a`) or a second arch (`90a;{code}`) turns it off")
                elif same_generation(code, arch.code) and arch.code not in named:
                    why = (f"names {code}, a sibling of {arch.sm}, and no gate in this file "
                           f"names {arch.code}")
                if why:
                    line, col = _pos(cmd.node)
                    out.append(Finding(
                        rule="FB152", category=Category.ARCH_GATING, path=file.path,
                        line=line, col=col, severity=Severity.WARNING,
                        message=f"arch gate `{left} STREQUAL {right}` is false for {arch.sm}"
                        if (code, suffix) != (arch.code, arch.suffix.value) else
                        f"arch gate `{left} STREQUAL {right}` holds for {arch.sm} only while "
                        f"{var} names nothing else",
                        evidence=why, snippet=_snippet(file, line),
                        fix=Fix(manual=f"test membership instead, e.g. `if(\"{arch.code}"
                                f"{arch.suffix}\" IN_LIST CMAKE_CUDA_ARCHITECTURES)` or a "
                                "MATCHES on the numeric code"),
                        facts=ArchLiteralFacts(literal=f"{code}{suffix}")))
                    break
    return out


def _single_arch_spelled_both_ways(file: FileText, var: str, spelled: set[tuple[int, str]],
                                   code: int) -> bool:
    """The gate names `code` with and without a suffix (`"120" OR "120a"`), and `var` holds
    one arch (the file pastes it into one `compute_${var}` flag): no spelling of the target
    is left out, and no list can hold a second arch."""
    spellings = {s for c, s in spelled if c == code}
    return len(spellings) > 1 and re.search(
        rf"(?:compute|sm)_\$\{{{re.escape(var)}\}}", file.text) is not None


def _picks_suffix(cmd: Command, var: str) -> bool:
    """An `if()` whose branch only appends a suffix to `var` (`compute_${var}a`) while its
    `else()` uses `${var}` as is: a suffixed value takes the else branch and ends with the same
    flag, so the exact match does no harm."""
    chain = cmd.node.parent
    if chain is None or chain.type != "if_condition":
        return False
    parts = list(chain.children)
    try:
        at = next(i for i, p in enumerate(parts) if p.id == cmd.node.id)
    except StopIteration:
        return False
    body = parts[at + 1] if at + 1 < len(parts) and parts[at + 1].type == "body" else None
    other = next((parts[i + 1] for i, p in enumerate(parts)
                  if p.type == "else_command" and i + 1 < len(parts)
                  and parts[i + 1].type == "body"), None)
    if body is None or other is None:
        return False
    ref = re.escape(f"${{{var}}}")
    return re.search(ref + r"[af]\b", _text(body)) is not None and \
        re.search(ref + r"(?![af]\b)", _text(other)) is not None and \
        re.sub(ref + r"[af]\b", f"${{{var}}}", _text(body)).strip() == _text(other).strip()


# --- tree-wide facts ---------------------------------------------------------------------

@dataclass(frozen=True)
class TreeGates:
    """`BuildGates` bound to nothing: `compiled_for(path, target)`."""

    gates: BuildGates

    def compiled_for(self, path: str, target: ScanTarget) -> Any:
        return self.gates.compiled_for(path, target.platform, target.archs)

    def shared_library(self, path: str) -> str | None:
        return self.gates.shared_library(path)


def build_gates(reports: Sequence[FileReport]) -> TreeGates:
    mentions = tuple(m for r in reports for m in r.facts.get("mentions", ()))
    return TreeGates(BuildGates(mentions))


def tree_defines(reports: Sequence[FileReport]) -> frozenset[str]:
    return frozenset(d for r in reports for d in r.facts.get("defines", ()))
