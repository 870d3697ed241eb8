"""What a scikit-build-core tree's pyproject.toml tells its build (read, never executed).

A tree builds with scikit-build-core when its `[build-system] build-backend` is
`scikit_build_core.build` (or another entry point of that package). Its CMake configure then
gets, besides the CMakeLists.txt's own defaults, what `[tool.scikit-build]` says:
`cmake.define` (a table: strings, booleans, lists, or `{env = ..., default = ...}`),
`cmake.args`, `cmake.source-dir`, `cmake.build-type`, `build.targets`, `wheel.packages`,
`wheel.install-dir`, `build-dir`, `wheel.py-api`, and the `[[tool.scikit-build.overrides]]`
whose `if` matches this machine. flashbuild reads the same settings, so introspection
configures the CMake project as pip would build it (a `MYLIB_BACKEND = "cuda"` define whose
CMake default is `cpu` chooses the CUDA build), not as a bare CMake project.

The names and their meaning are scikit-build-core's (docs/configuration.md,
https://scikit-build-core.readthedocs.io/en/latest/configuration.html, "Configuring CMake
arguments and defines", "Overrides"). What flashbuild does not evaluate (an override
condition it does not know, a define it cannot render) is listed in `unsupported`, so the
build can say so instead of silently differing from pip's.
"""

from __future__ import annotations

import os
import platform as _platform
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from flashbuild.errors import TreeError

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The build backends of scikit-build-core (`scikit_build_core.build` is the documented one;
#: `scikit_build_core.setuptools.build_meta` is its setuptools plugin, not CMake-driven here).
BACKEND = "scikit_build_core.build"


@dataclass(frozen=True)
class Host:
    """What override conditions are evaluated against (this machine, by default)."""

    platform_system: str = sys.platform
    platform_machine: str = _platform.machine()
    python_version: str = f"{sys.version_info.major}.{sys.version_info.minor}"
    implementation_name: str = sys.implementation.name
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    state: str = "wheel"


@dataclass(frozen=True)
class SkbuildSettings:
    """`[tool.scikit-build]` after the overrides that match, typed."""

    project: str
    """`[project] name` (scikit-build-core passes it as SKBUILD_PROJECT_NAME)."""
    version: str
    """`[project] version`, or "0.0" when it is dynamic."""
    requires: tuple[Requirement, ...] = ()
    """`[build-system] requires`: what must be installed for a build without isolation."""
    source_dir: str = "."
    """`cmake.source-dir`: the folder of the top CMakeLists.txt, relative to the pyproject."""
    defines: dict[str, str] = field(default_factory=dict)
    """`cmake.define`, each value as CMake gets it (`TRUE`/`FALSE`, lists joined by `;`)."""
    args: tuple[str, ...] = ()
    """`cmake.args`."""
    build_type: str = "Release"
    targets: tuple[str, ...] = ()
    """`build.targets` (or the older `cmake.targets`)."""
    wheel_packages: tuple[str, ...] | None = None
    """`wheel.packages`; None = scikit-build-core's default search (`src/<name>`,
    `python/<name>`, `<name>`)."""
    install_dir: str = ""
    """`wheel.install-dir`: where CMake's install() lands below the wheel's platlib."""
    build_dir: str = ""
    """`build-dir` as the pyproject gives it (flashbuild passes its own)."""
    py_api: str = ""
    """`wheel.py-api` (`cp39`: an abi3 wheel)."""
    overrides: tuple[str, ...] = ()
    """The overrides applied, one line each (`if platform-system = "linux"`)."""
    unsupported: tuple[str, ...] = ()
    """What flashbuild did not evaluate, one line each."""

    def package_names(self) -> tuple[str, ...]:
        """The import names of the packages the wheel ships (the last path element of each
        `wheel.packages` entry, or the project name's import form)."""
        if self.wheel_packages is not None:
            return tuple(PurePath(p).name for p in self.wheel_packages)
        return (re.sub(r"[-.]+", "_", self.project).lower(),)


def read_pyproject(tree: Path) -> dict[str, Any] | None:
    """The parsed pyproject.toml at the top of `tree`; None when there is none. A file that is
    not TOML raises TreeError (its build could not run either)."""
    path = tree / "pyproject.toml"
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TreeError(f"{path} is not valid TOML", evidence=str(exc),
                        fix="fix the pyproject.toml: pip could not build the tree either") from exc


def build_requirements(tree: Path) -> tuple[Requirement, ...]:
    """`[build-system] requires` of the tree's pyproject.toml (any backend): what pip's build
    isolation would install. None there, no file, or a file that is not TOML: nothing; a
    string that is no PEP 508 requirement is left out."""
    try:
        data = read_pyproject(tree)
    except TreeError:
        return ()
    system = data.get("build-system") if data else None
    found = []
    for text in system.get("requires", []) if isinstance(system, dict) else []:
        try:
            found.append(Requirement(str(text)))
        except InvalidRequirement:
            continue
    return tuple(found)


def is_skbuild(tree: Path) -> bool:
    """The tree's pyproject names scikit-build-core as its build backend."""
    try:
        data = read_pyproject(tree)
    except TreeError:
        return False
    return data is not None and _backend(data).startswith(BACKEND)


def _backend(data: Mapping[str, Any]) -> str:
    system = data.get("build-system")
    backend = system.get("build-backend") if isinstance(system, dict) else None
    return backend.strip() if isinstance(backend, str) else ""


def read_settings(tree: Path, host: Host | None = None) -> SkbuildSettings:
    """`[tool.scikit-build]` of the tree's pyproject, with the overrides that match `host`."""
    data = read_pyproject(tree)
    path = tree / "pyproject.toml"
    if data is None or not _backend(data).startswith(BACKEND):
        raise TreeError(f"{tree} is not a scikit-build-core project",
                        evidence=f"{path}: no `[build-system] build-backend = \"{BACKEND}\"`",
                        fix="build it with the cmake or setuptools backend")
    host = host or Host()
    project = _table(data, "project")
    tool = data.get("tool", {}).get("scikit-build", {})
    if not isinstance(tool, dict):
        raise TreeError(f"{path}: [tool.scikit-build] is not a table", evidence=repr(tool)[:200],
                        fix="fix the pyproject.toml")
    unsupported: list[str] = []
    settings = {k: v for k, v in tool.items() if k != "overrides"}
    applied: list[str] = []
    overrides = tool.get("overrides", [])
    for i, override in enumerate(overrides if isinstance(overrides, list) else []):
        if not isinstance(override, dict):
            continue
        condition = override.get("if", {})
        matched, why = _matches(condition if isinstance(condition, dict) else {}, host)
        if why:
            unsupported.append(f"overrides[{i}]: {why}")
        if not matched:
            continue
        inherit = override.get("inherit", {})
        body = {k: v for k, v in override.items() if k not in ("if", "inherit")}
        settings = _merge(settings, body, inherit if isinstance(inherit, dict) else {})
        applied.append(f"overrides[{i}] (if {_describe(condition)})")
    cmake = _table(settings, "cmake")
    build = _table(settings, "build")
    wheel = _table(settings, "wheel")
    defines: dict[str, str] = {}
    for name, value in _table(cmake, "define").items():
        rendered = _define_value(value, host.env)
        if rendered is None:
            unsupported.append(f"cmake.define.{name} = {value!r}: not a value flashbuild can "
                               "render (string, boolean, list or {env, default})")
            continue
        defines[str(name)] = rendered
    requires: list[Requirement] = []
    system = data.get("build-system", {})
    for text in system.get("requires", []) if isinstance(system, dict) else []:
        try:
            requires.append(Requirement(str(text)))
        except InvalidRequirement:
            unsupported.append(f"build-system.requires {text!r}: not a PEP 508 requirement")
    packages = wheel.get("packages")
    if isinstance(packages, dict):  # {"import/name" = "source/folder"}
        packages = list(packages.values())
    targets = build.get("targets", cmake.get("targets", []))
    return SkbuildSettings(
        project=str(project.get("name", tree.name)),
        version=str(project.get("version", "0.0")),
        requires=tuple(requires),
        source_dir=str(cmake.get("source-dir", ".") or "."),
        defines=defines,
        args=tuple(str(a) for a in _list(cmake.get("args"))),
        build_type=str(cmake.get("build-type", "Release")),
        targets=tuple(str(t) for t in _list(targets)),
        wheel_packages=tuple(str(p) for p in packages) if isinstance(packages, list) else None,
        install_dir=str(wheel.get("install-dir", "")),
        build_dir=str(settings.get("build-dir", "")),
        py_api=str(wheel.get("py-api", "")),
        overrides=tuple(applied),
        unsupported=tuple(unsupported))


def _table(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    if isinstance(value, list):
        return value
    if isinstance(value, str) and value:
        return [value]
    return []


def _define_value(value: object, env: Mapping[str, str]) -> str | None:
    """A `cmake.define` value as scikit-build-core hands it to CMake."""
    if isinstance(value, dict) and "env" in value:
        found = env.get(str(value["env"]))
        default = value.get("default")
        return found or (None if default is None else _define_value(default, env))
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return ";".join(str(v) for v in value)
    return None


def _merge(base: dict[str, Any], body: Mapping[str, Any],
           inherit: Mapping[str, Any]) -> dict[str, Any]:
    """`body` (an override's settings, dotted keys or nested tables) laid over `base`;
    `inherit` says per key whether lists and tables are appended, prepended or replaced."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, value in _flatten(body).items():
        mode = _dig(inherit, key.split("."))
        _set(out, key.split("."), value, mode if isinstance(mode, str) else "none")
    return out


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys for nested tables, except the value tables (`cmake.define`, `wheel.packages`
    given as a table), which are merged as a whole."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and full not in ("cmake.define", "wheel.packages"):
            out.update(_flatten(value, f"{full}."))
        else:
            out[full] = value
    return out


def _dig(table: Mapping[str, Any], keys: list[str]) -> object:
    node: object = table
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _set(out: dict[str, Any], keys: list[str], value: object, mode: str) -> None:
    node = out
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
        node[key] = child = dict(child)
        node = child
    last = keys[-1]
    old = node.get(last)
    if mode in ("append", "prepend") and isinstance(old, list) and isinstance(value, list):
        node[last] = old + value if mode == "append" else value + old
    elif mode in ("append", "prepend") and isinstance(old, dict) and isinstance(value, dict):
        node[last] = {**old, **value} if mode == "append" else {**value, **old}
    else:
        node[last] = value


#: Override conditions taking a regex against a host value.
_REGEX = {"platform-system": "platform_system", "platform-machine": "platform_machine",
          "implementation-name": "implementation_name"}


def _matches(condition: Mapping[str, Any], host: Host) -> tuple[bool, str]:
    """Whether an override's `if` holds on `host` (all conditions; `if.any`: one of them),
    and what flashbuild could not evaluate (such a condition counts as not matching)."""
    results: list[bool] = []
    unknown: list[str] = []
    for key, value in condition.items():
        if key == "any" and isinstance(value, dict):
            inner = [_one(k, v, host) for k, v in value.items()]
            unknown += [k for (k, _v), r in zip(value.items(), inner, strict=True) if r is None]
            results.append(any(r is True for r in inner))
            continue
        result = _one(key, value, host)
        if result is None:
            unknown.append(key)
        results.append(result is True)
    why = (f"condition(s) {', '.join(unknown)} not evaluated by flashbuild (taken as false)"
           if unknown else "")
    return bool(results) and all(results), why


def _one(key: str, value: object, host: Host) -> bool | None:
    """One override condition on `host`; None when flashbuild does not evaluate it."""
    result: bool | None = None
    if key in _REGEX and isinstance(value, str):
        result = re.match(value, getattr(host, _REGEX[key])) is not None
    elif key == "python-version" and isinstance(value, str):
        try:
            result = Version(host.python_version) in SpecifierSet(value)
        except (InvalidSpecifier, InvalidVersion):
            result = None
    elif key == "state" and isinstance(value, str):
        result = re.match(value, host.state) is not None
    elif key == "env" and isinstance(value, dict):
        result = _env_matches(value, host.env)
    return result


def _env_matches(wanted: Mapping[str, object], env: Mapping[str, str]) -> bool | None:
    """`if.env.NAME`: a boolean (set to a truthy value, or not) or a regex on the value."""
    checks = []
    for name, want in wanted.items():
        got = env.get(str(name))
        if isinstance(want, bool):
            checks.append(_truthy(got) == want)
        elif isinstance(want, str):
            checks.append(got is not None and re.match(want, got) is not None)
        else:
            return None
    return all(checks)


def _truthy(value: str | None) -> bool:
    """scikit-build-core's truthy environment value: `true`, `on`, `yes`, `y`, `t` (any
    case) or a number above 0."""
    text = (value or "").strip().lower()
    if text in ("true", "on", "yes", "y", "t"):
        return True
    try:
        return float(text) > 0
    except ValueError:
        return False


def _describe(condition: object) -> str:
    if not isinstance(condition, dict):
        return "?"
    return ", ".join(f"{k} = {v!r}" for k, v in condition.items())
