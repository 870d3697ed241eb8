"""setup.py record mode: the typed record of one run, read from the file the build hook wrote.

The build (pipeline/introspect.py) runs a copy of the tree's setup.py under flashbuild's build
hook with FLASHBUILD_RECORD set (building/backends/resources/sitecustomize.py and
record_setup.py): torch's BuildExtension writes its build.ninja, the hook asks `ninja -t
compdb` for the compile commands and stops there. Nothing is compiled, nothing downloaded.
This module reads what it recorded:

- the extensions setup.py handed to `build_ext` (name, sources, include dirs, extra args),
- the compile command of every source (from the compdb, or the commands setuptools would have
  spawned when the tree does not use ninja), split into includes, defines, flags and the arch
  flags nvcc gets,
- the environment variables the tree's own files read (name, file:line),
- network calls it attempted (refused at once), and the exception it raised, if any.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

#: The environment variable that turns record mode on (the record file's path).
RECORD_ENV = "FLASHBUILD_RECORD"
#: Set with it (to the toolkit's `13.0`): a CPU-only torch is presented as that CUDA build.
PRESENT_CUDA_ENV = "FLASHBUILD_TORCH_CUDA"

_COMPILED = (".cu", ".cpp", ".cc", ".cxx", ".c")


class RecordError(Exception):
    """The record is missing or unreadable."""


@dataclass(frozen=True)
class EnvRead:
    name: str
    where: str
    """`setup.py:42`: the tree's file and line that read it."""


@dataclass(frozen=True)
class NetworkCall:
    call: str
    target: str
    where: str


@dataclass(frozen=True)
class RaisedError:
    """What ended setup.py when it was not the hook."""

    type: str
    message: str
    where: str
    missing: str = ""
    """A file of the tree, tree-relative, that setup.py failed to open (FileNotFoundError),
    as the run's copy of the tree names it; empty otherwise."""

    def __str__(self) -> str:
        return f"{self.type}: {self.message} ({self.where})"


#: Modules a setup.py imports that come from a distribution of another name, or that a newer
#: release of it dropped: the requirement that brings them back.
_PROVIDERS = {
    # setuptools 82.0.0 removed pkg_resources (its changelog, "Deprecations and Removals").
    "pkg_resources": "setuptools<82",
    "yaml": "PyYAML", "cv2": "opencv-python", "PIL": "Pillow", "skbuild": "scikit-build",
    "git": "GitPython", "Cython": "cython", "google.protobuf": "protobuf",
}


def missing_module_fix(text: str) -> str | None:
    """The fix for a setup.py that stopped on `No module named 'X'`: the requirement to install
    into the Python that builds (flashbuild builds without build isolation, in that Python),
    or None when the text names no missing module."""
    found = re.search(r"No module named '([\w.]+)'", text)
    if found is None:
        return None
    module = found[1]
    requirement, why = module_provider(module)
    return (f"the setup.py imports {module}, which the Python that builds lacks{why}: install "
            f"it there, `python -m pip install \"{requirement}\"`, then build again")


#: A git command a setup.py runs (for its version, most often) that failed because the tree is
#: not a git checkout (git's status 128: "not a git repository"), as Python's
#: CalledProcessError words it.
_GIT_COMMAND = re.compile(r"Command '\[(?P<argv>'git',[^\]]*)\]' returned non-zero exit "
                          r"status (?P<status>\d+)")

#: An exception that names the environment variable it wants (torch-memory-saver 0.0.10:
#: "TMS_CUDA_MAJOR env var must be set for CUDA builds"; "FOO is not set", "FOO is
#: required"); a KeyError of `os.environ["FOO"]` is read with the record's reads
#: (`demanded_variable`).
_DEMANDED_VARIABLE = re.compile(
    r"\b(?P<name>[A-Z][A-Z0-9]*_[A-Z0-9_]+)\b['\"`]?\s+(?:env(?:ironment)?\s+var(?:iable)?\s+)?"
    r"(?:must be set|is not set|is required|is unset|not set)")


def exception_fix(text: str) -> str | None:
    """The fix for a setup.py that raised, where its words name one: a module to install, a
    git checkout it needs, a variable of its own to set; None otherwise."""
    return missing_module_fix(text) or git_checkout_fix(text) or demanded_variable_fix(text)


def git_checkout_fix(text: str) -> str | None:
    """The fix for a setup.py whose `git …` command failed with status 128 (torch-batch-svd's
    version from `git rev-parse --short HEAD`): it needs a git checkout of the project."""
    m = _GIT_COMMAND.search(text)
    if m is None or m["status"] != "128":
        return None
    argv = " ".join(a.strip().strip("'") for a in m["argv"].split(","))
    return (f"setup.py runs `{argv}`, which needs a git checkout of the project and this tree "
            "is none (an archive or a source distribution): build from a clone (`git clone` of "
            "the project at this version), or replace that call in setup.py with a fixed "
            "version")


def demanded_variable(text: str, reads: Sequence[str] = ()) -> str | None:
    """The environment variable an exception says must be set, or None. A KeyError quoting
    a name counts when `reads` (the variables the record saw read) holds it:
    `os.environ["FOO"]` with FOO unset."""
    m = _DEMANDED_VARIABLE.search(text)
    if m is not None:
        return m["name"]
    key = re.match(r"KeyError: '(?P<name>[A-Za-z_][A-Za-z0-9_]*)'", text)
    return key["name"] if key is not None and key["name"] in reads else None


#: A variable named for the CUDA release the build links against (`TMS_CUDA_MAJOR`,
#: `CUDA_MAJOR_VERSION`, `MY_CUDA_VERSION`), and the placeholder that gives it. The name must
#: end there: `CUDA_VERSION_MINOR` or `CUDA_MAJOR_ARCH` is another value, and `CU_VERSION`
#: is PyTorch's builders' `cu128` spelling, which neither placeholder is.
_TOOLKIT_VARIABLES = (
    (re.compile(r"(^|_)CUDA_?(VER(SION)?_?)?MAJOR(_?VER(SION)?)?$|(^|_)CU_?MAJOR$"),
     "{cuda_major}"),
    (re.compile(r"(^|_)CUDA_?VER(SION)?$"), "{cuda_version}"),
)


def toolkit_value(name: str) -> str | None:
    """The recipe placeholder for a variable named for the CUDA release (`{cuda_major}` for
    TMS_CUDA_MAJOR, `{cuda_version}` for CUDA_VERSION), or None for any other name."""
    for pattern, placeholder in _TOOLKIT_VARIABLES:
        if pattern.search(name.upper()):
            return placeholder
    return None


def demanded_variable_fix(text: str) -> str | None:
    """The fix for a setup.py that raised because a variable of its own is unset: that
    variable, by name, in [[build.env]]; None when the text names none."""
    name = demanded_variable(text)
    if name is None:
        return None
    return (f"setup.py asks for {name} in the environment: set it in [[build.env]] "
            f"(`set = {{ {name} = \"…\" }}`) to the value the project's build scripts or "
            "docs give; flashbuild drafts no value it cannot confirm")


def module_provider(module: str) -> tuple[str, str]:
    """The requirement that brings `module` back (`_PROVIDERS`, else the module's top name,
    which is most distributions' name) and why in words (` (setuptools 82 removed …)`)."""
    top = module.partition(".")[0]
    requirement = _PROVIDERS.get(module) or _PROVIDERS.get(top) or top
    why = " (setuptools 82 removed pkg_resources)" if module == "pkg_resources" else ""
    return requirement, why


@dataclass(frozen=True)
class CompileCommand:
    """One source's compile command, split."""

    source: str
    """As the command names it (absolute, inside the copy the record ran in)."""
    compiler: str
    includes: tuple[str, ...]
    defines: tuple[str, ...]
    arch_flags: tuple[str, ...]
    """`-gencode=arch=…,code=…`, `-arch=…`, `-code=…` as nvcc gets them."""
    flags: tuple[str, ...]
    """Everything else but `-c`, `-o <obj>` and the source."""

    @property
    def language(self) -> str:
        return "CUDA" if self.source.endswith((".cu", ".cuh")) else \
            "C" if self.source.endswith(".c") else "CXX"


@dataclass(frozen=True)
class OwnBuild:
    """A build tool the setup.py started itself (its own build_ext running cmake, ninja, make
    or a compiler), where record mode stopped it before anything compiled."""

    argv: tuple[str, ...]
    where: str
    """The tree's `file:line` that started it."""
    cmake_reply: str = ""
    """A folder holding the File API reply of the CMake configure it ran first (the hook
    copied `<its build dir>/.cmake/api/v1/reply` there); "" when there was none."""
    configure: tuple[str, ...] = ()
    """That configure's command line."""

    @property
    def command(self) -> str:
        return " ".join(self.argv[:8]) + (" …" if len(self.argv) > 8 else "")


@dataclass(frozen=True)
class RecordedExtension:
    name: str
    sources: tuple[str, ...]
    include_dirs: tuple[str, ...]
    cuda: bool


@dataclass(frozen=True)
class SetupRecord:
    """One record-mode run of setup.py."""

    stopped: bool
    """True when the hook stopped setup.py after torch wrote its build files (the normal end)."""
    extensions: tuple[RecordedExtension, ...]
    commands: tuple[CompileCommand, ...]
    env_reads: tuple[EnvRead, ...]
    network: tuple[NetworkCall, ...]
    exception: RaisedError | None
    replaced_arch_flags: tuple[str, ...] = ()
    """The arch flags of the setup.py that the build hook replaced with `--arch`'s."""
    argv_options: tuple[EnvRead, ...] = ()
    """Command-line options the tree's code looked for in sys.argv (`--cuda_ext`), where."""
    own_build: OwnBuild | None = None
    """Set when setup.py started a build tool itself (record mode stopped there)."""
    torch_presented: tuple[str, str] | None = None
    """(installed, presented) torch versions when a CPU-only torch was presented to setup.py
    as the CUDA build a real build needs (`2.13.0+cpu`, `2.13.0+cu130`); None otherwise."""

    def env_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.name for r in self.env_reads))


_ARCH_OPTS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code",
              "--gpu-code")


def split_command(argv: list[str], source: str) -> CompileCommand:
    """Includes, defines, arch flags and the rest of one compiler command line."""
    includes: list[str] = []
    defines: list[str] = []
    arch: list[str] = []
    flags: list[str] = []
    i = 1
    while i < len(argv):
        tok = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        name = tok.split("=", 1)[0]
        if tok in ("-I", "-isystem", "-D", "-o") or (name in _ARCH_OPTS and "=" not in tok):
            target = {"-I": includes, "-isystem": includes, "-D": defines, "-o": None}.get(
                tok, arch)
            if target is not None:
                target.append(nxt if target is not arch else f"{tok}={nxt}")
            i += 2
            continue
        if tok.startswith("-I"):
            includes.append(tok[2:])
        elif tok.startswith("-isystem") and len(tok) > len("-isystem"):
            includes.append(tok[len("-isystem"):])
        elif tok.startswith("-D"):
            defines.append(tok[2:])
        elif name in _ARCH_OPTS:
            arch.append(tok)
        elif tok not in ("-c", source) and not tok.startswith("-o"):
            flags.append(tok)
        i += 1
    return CompileCommand(source=source, compiler=argv[0] if argv else "",
                          includes=tuple(includes), defines=tuple(defines),
                          arch_flags=tuple(arch), flags=tuple(flags))


def _commands(data: dict[str, Any]) -> list[CompileCommand]:
    out: list[CompileCommand] = []
    for entry in data.get("compdb", []):
        if not isinstance(entry, dict) or not str(entry.get("file", "")).endswith(_COMPILED):
            continue
        try:
            argv = shlex.split(str(entry.get("command", "")))
        except ValueError:
            continue
        source = str(entry.get("file", ""))
        if not PurePosixPath(source).is_absolute():
            source = str(PurePosixPath(str(entry.get("directory", ""))) / source)
        out.append(split_command(argv, source))
    cwd = PurePosixPath(str(data.get("cwd", "")))
    for argv in data.get("spawned", []):
        srcs = [str(a) for a in argv if str(a).endswith(_COMPILED) and "-c" in argv]
        if srcs:
            command = split_command([str(a) for a in argv], srcs[-1])
            if not PurePosixPath(srcs[-1]).is_absolute() and cwd.is_absolute():
                command = dataclasses.replace(command, source=str(cwd / srcs[-1]))
            out.append(command)
    return out


def parse_record(data: dict[str, Any]) -> SetupRecord:
    exts = tuple(RecordedExtension(
        name=str(e.get("name", "?")), sources=tuple(str(s) for s in e.get("sources", [])),
        include_dirs=tuple(str(s) for s in e.get("include_dirs", [])),
        cuda=bool(e.get("cuda"))) for e in data.get("extensions", []) if isinstance(e, dict))
    raw = data.get("exception")
    exception = RaisedError(type=str(raw.get("type", "")), message=str(raw.get("message", "")),
                            where=str(raw.get("where", "?")),
                            missing=str(raw.get("missing") or "")) if isinstance(raw, dict) \
        else None
    removed: list[str] = []
    for rewrite in data.get("rewrites", []) or []:
        removed += [str(r) for r in rewrite.get("removed", [])] if isinstance(rewrite,
                                                                              dict) else []
    shown = next((t for t in data.get("torch_presented", []) or [] if isinstance(t, dict)),
                 None)
    own = next((o for o in data.get("own_build", []) or [] if isinstance(o, dict)), None)
    configure = next((c for c in reversed(data.get("cmake_configure", []) or [])
                      if isinstance(c, dict)), {})
    return SetupRecord(
        own_build=OwnBuild(argv=tuple(str(a) for a in own.get("argv", [])),
                           where=str(own.get("where", "?")),
                           cmake_reply=str(own.get("cmake_reply", "") or ""),
                           configure=tuple(str(a) for a in configure.get("argv", [])))
        if own is not None else None,
        torch_presented=(str(shown.get("was", "")), str(shown.get("now", "")))
        if shown is not None else None,
        stopped=bool(data.get("stopped")), extensions=exts, commands=tuple(_commands(data)),
        env_reads=tuple(EnvRead(str(r.get("name", "")), str(r.get("where", "?")))
                        for r in data.get("env_reads", []) if isinstance(r, dict)),
        network=tuple(NetworkCall(str(n.get("call", "")), str(n.get("target", "")),
                                  str(n.get("where", "?")))
                      for n in data.get("network", []) if isinstance(n, dict)),
        exception=exception, replaced_arch_flags=tuple(removed),
        argv_options=tuple(EnvRead(str(r.get("name", "")), str(r.get("where", "?")))
                           for r in data.get("argv_options", []) or [] if isinstance(r, dict)))


def load_record(path: Path) -> SetupRecord:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"no readable record at {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise RecordError(f"{path} is not a JSON object")
    return parse_record(data)
