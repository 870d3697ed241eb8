"""A typed model of CMake's File API replies (codemodel-v2, cache-v2), and one small loader.

How it is used (FACTS.md, "Reading what a build does without compiling"): `write_queries()`
puts empty query files into `<build>/.cmake/api/v1/query/` before CMake configures; after
`cmake -S … -B <build>` the replies are in `<build>/.cmake/api/v1/reply/`, where the newest
`index-*.json` names the others. `load_reply()` turns them into frozen dataclasses: every
target this configuration defines with its sources and compile groups (language, includes,
defines, flag fragments, each with the CMake file and line it came from) and the cache
variables. A configure that failed at generate time leaves only an `error-*.json`: then
`load_reply` raises `FileApiError` saying so.

Modelled on scikit-build-core's `file_api/` (a model of the reply, one converter); only the
fields flashbuild reads are kept. Nothing here runs CMake.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The replies flashbuild asks for.
QUERIES = ("codemodel-v2", "cache-v2", "toolchains-v1")


class FileApiError(Exception):
    """The replies are missing or unreadable (the message says which and why)."""


def api_dir(build_dir: Path) -> Path:
    return build_dir / ".cmake" / "api" / "v1"


def write_queries(build_dir: Path) -> None:
    """The shared stateless queries: an empty file per object kind (CMake >= 3.14)."""
    query = api_dir(build_dir) / "query"
    query.mkdir(parents=True, exist_ok=True)
    for name in QUERIES:
        (query / name).touch()


@dataclass(frozen=True)
class Origin:
    """Where CMake says a setting came from: the command and its file:line."""

    command: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line} ({self.command})" if self.command else \
            f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Setting:
    """One include folder, define or flag fragment of a compile group."""

    value: str
    origin: Origin | None = None
    system: bool = False
    """An include given as `-isystem` (third-party headers)."""


@dataclass(frozen=True)
class CompileGroup:
    """Sources a target compiles with one set of flags."""

    language: str
    """`CUDA`, `CXX`, `C`."""
    sources: tuple[str, ...]
    """Paths as CMake lists them (relative to the top source folder when inside it)."""
    includes: tuple[Setting, ...]
    defines: tuple[Setting, ...]
    fragments: tuple[Setting, ...]
    """Compile flags, as CMake hands them to the compiler (one fragment may hold several)."""
    standard: str = ""


@dataclass(frozen=True)
class Target:
    """A target this configuration defines (imported targets are left out)."""

    name: str
    type: str
    """`MODULE_LIBRARY`, `SHARED_LIBRARY`, `STATIC_LIBRARY`, `OBJECT_LIBRARY`, `EXECUTABLE`,
    `INTERFACE_LIBRARY`, `UTILITY`."""
    sources: tuple[str, ...]
    groups: tuple[CompileGroup, ...]
    artifacts: tuple[str, ...]
    """Paths of what it builds, relative to the build folder unless absolute."""
    defined_at: Origin | None
    """The command that created it (`add_library`, `pybind11_add_module`, …)."""
    source_dir: str
    """The folder of the CMakeLists.txt that defines it, relative to the top source folder."""
    dependencies: tuple[str, ...] = ()
    """Names of the targets it depends on."""


@dataclass(frozen=True)
class CacheEntry:
    name: str
    value: str
    type: str
    """`STRING`, `BOOL`, `PATH`, `FILEPATH`, `INTERNAL`, `STATIC`, `UNINITIALIZED`."""
    help: str = ""


@dataclass(frozen=True)
class Reply:
    """What one configure said: its targets and its cache."""

    source_dir: Path
    build_dir: Path
    targets: tuple[Target, ...]
    cache: tuple[CacheEntry, ...]
    cmake_version: str = ""

    def target(self, name: str) -> Target | None:
        return next((t for t in self.targets if t.name == name), None)

    def cache_value(self, name: str) -> str | None:
        return next((e.value for e in self.cache if e.name == name), None)


def load_reply(build_dir: Path) -> Reply:
    """Read the newest reply index and the objects it names."""
    reply = api_dir(build_dir) / "reply"
    indexes = sorted(reply.glob("index-*.json")) if reply.is_dir() else []
    if not indexes:
        errors = sorted(reply.glob("error-*.json")) if reply.is_dir() else []
        if errors:
            raise FileApiError(f"CMake wrote no codemodel ({errors[-1].name}: no build "
                               "system was generated)")
        raise FileApiError(f"no File API reply in {reply} (were the queries written before "
                           "the configure?)")
    index = _json(indexes[-1])
    objects = {o.get("kind"): o for o in index.get("objects", []) if isinstance(o, dict)}
    if "codemodel" not in objects:
        raise FileApiError(f"{indexes[-1].name} names no codemodel reply")
    codemodel = _json(reply / objects["codemodel"]["jsonFile"])
    paths = codemodel.get("paths", {})
    source_dir = Path(paths.get("source", ""))
    targets: list[Target] = []
    configurations = codemodel.get("configurations", [])
    for entry in configurations[0].get("targets", []) if configurations else []:
        data = _json(reply / entry["jsonFile"])
        if data.get("imported"):
            continue
        targets.append(_target(data))
    cache: tuple[CacheEntry, ...] = ()
    if "cache" in objects:
        cache = tuple(CacheEntry(name=str(e.get("name", "")), value=str(e.get("value", "")),
                                 type=str(e.get("type", "")), help=_help(e))
                      for e in _json(reply / objects["cache"]["jsonFile"]).get("entries", []))
    version = index.get("cmake", {}).get("version", {}).get("string", "")
    return Reply(source_dir=source_dir, build_dir=Path(paths.get("build", str(build_dir))),
                 targets=tuple(targets), cache=cache, cmake_version=str(version))


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FileApiError(f"cannot read {path.name}: {exc}") from exc
    if not isinstance(data, dict):
        raise FileApiError(f"{path.name} is not a JSON object")
    return data


def _help(entry: dict[str, Any]) -> str:
    for prop in entry.get("properties", []):
        if prop.get("name") == "HELPSTRING":
            return str(prop.get("value", ""))
    return ""


def _origins(data: dict[str, Any]) -> list[Origin | None]:
    """The backtrace graph's nodes as origins (node index -> its command, file and line).

    A node in a file outside the project (FindPython's `add_library` inside
    `pybind11_add_module`) is replaced by the innermost caller in the project's own files:
    the File API writes those relative to the top source folder, others absolute."""
    graph = data.get("backtraceGraph", {})
    files, commands = graph.get("files", []), graph.get("commands", [])
    nodes = graph.get("nodes", [])
    out: list[Origin | None] = []
    for node in nodes:
        chosen = node
        while Path(files[chosen["file"]]).is_absolute() and \
                isinstance(chosen.get("parent"), int) and "line" in nodes[chosen["parent"]]:
            chosen = nodes[chosen["parent"]]
        if "line" not in chosen:
            out.append(None)
            continue
        cmd = chosen.get("command")
        out.append(Origin(command=commands[cmd] if isinstance(cmd, int) else "",
                          file=files[chosen["file"]], line=int(chosen["line"])))
    return out


def _at(origins: list[Origin | None], index: object) -> Origin | None:
    return origins[index] if isinstance(index, int) and 0 <= index < len(origins) else None


def _target(data: dict[str, Any]) -> Target:
    origins = _origins(data)
    sources = [str(s.get("path", "")) for s in data.get("sources", [])]
    groups = []
    for g in data.get("compileGroups", []):
        groups.append(CompileGroup(
            language=str(g.get("language", "")),
            sources=tuple(sources[i] for i in g.get("sourceIndexes", []) if i < len(sources)),
            includes=tuple(Setting(str(i.get("path", "")), _at(origins, i.get("backtrace")),
                                   bool(i.get("isSystem"))) for i in g.get("includes", [])),
            defines=tuple(Setting(str(d.get("define", "")), _at(origins, d.get("backtrace")))
                          for d in g.get("defines", [])),
            fragments=tuple(Setting(str(f.get("fragment", "")),
                                    _at(origins, f.get("backtrace")))
                            for f in g.get("compileCommandFragments", [])),
            standard=str(g.get("languageStandard", {}).get("standard", ""))))
    deps = []
    for dep in data.get("dependencies", []):
        # ids are `name::@hash`
        deps.append(str(dep.get("id", "")).split("::@", 1)[0])
    return Target(
        name=str(data.get("name", "")), type=str(data.get("type", "")), sources=tuple(sources),
        groups=tuple(groups),
        artifacts=tuple(str(a.get("path", "")) for a in data.get("artifacts", [])),
        defined_at=_at(origins, data.get("backtrace")),
        source_dir=str(data.get("paths", {}).get("source", ".")),
        dependencies=tuple(deps))
