"""flashbuild's build hook for setup.py trees built with torch.utils.cpp_extension.

flashbuild puts the folder holding this file first on PYTHONPATH for the build only, so every
Python process of that build (pip's PEP 517 subprocess running setup.py) imports it at start-up
as `sitecustomize`. It imports nothing heavy: it waits until the tree imports
`torch.utils.cpp_extension`, then wraps `BuildExtension.build_extensions` so that, for every
extension with CUDA sources, before torch renders its build.ninja:

- the tree's own arch flags (`-gencode`, `--generate-code`, `-arch`, `-code`, in every spelling)
  are removed from the nvcc arguments and flashbuild's `-gencode` flags for `--arch` are added:
  only the requested arch is built, whatever the setup.py hard-codes (causal-conv1d, FlashMLA
  and flash-attention list their own archs, and torch then ignores TORCH_CUDA_ARCH_LIST:
  `_get_cuda_arch_flags` returns nothing as soon as any nvcc flag contains "arch");
- the extra nvcc / C++ flags flashbuild computed (the MSVC ones on Windows) are appended;
- `build_temp` is moved to a short folder when flashbuild asks (Windows: torch puts objects
  under `build_temp/<absolute source path>`, past 260 characters for deep trees);
- with FLASHBUILD_PATH_LIMIT set (Windows: 260), the longest object path torch will write is
  computed before anything compiles; past the limit (cl.exe, link.exe and nvcc are not
  long-path aware, whatever LongPathsEnabled says) the build stops with a `too_long` record.

With FLASHBUILD_OFFLINE=1 it turns the network off for the build's Python processes: a
connection to anything but this machine fails at once with an error that says so, instead of
waiting for a resolver or a server (causal-conv1d and flash-attention fetch a prebuilt wheel
unless a switch says otherwise; others clone CUTLASS). Builds are meant to be reproducible
from the tree; the build names what was tried and the switch that avoids it.

It also keeps the version one pip run computes the same in every step (FLASHBUILD_VERSION_FILE):
pip's PEP 517 path runs setup.py once for the metadata and again for the wheel, and a setup.py
whose version falls back to the time (FlashMLA without git: `1.0.0+<timestamp>`) gets two
versions, so pip rejects the wheel ("Built wheel ... is invalid"). The first step records the
version setup() ended up with (after setuptools_scm or versioneer ran); the later ones are given
that one. flashbuild deletes the file before each pip run.

What it changed is appended, one JSON object per extension, to FLASHBUILD_HOOK_REPORT, which
the build reads back. The sitecustomize this file shadows (Debian's, a venv's) still runs.
Settings come from the environment as JSON: FLASHBUILD_GENCODE, FLASHBUILD_NVCC_FLAGS,
FLASHBUILD_CXX_FLAGS, FLASHBUILD_BUILD_TEMP, FLASHBUILD_PATH_LIMIT.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys

_TARGET = "torch.utils.cpp_extension"
_HERE = os.path.dirname(os.path.abspath(__file__))
#: Flags that take the next argument as their value unless written `flag=value`.
_ARCH_FLAGS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code",
               "--gpu-code")
_CUDA_SUFFIXES = (".cu", ".cuh")


def _settings(name: str) -> list[str]:
    raw = os.environ.get(name, "")
    if not raw:
        return []
    value = json.loads(raw)
    return [str(v) for v in value] if isinstance(value, list) else []


def strip_arch_flags(flags: list[str]) -> tuple[list[str], list[str]]:
    """(flags without any arch selection, the removed flags)."""
    kept: list[str] = []
    removed: list[str] = []
    take_next = False
    for flag in flags:
        text = str(flag)
        if take_next:
            removed.append(text)
            take_next = False
            continue
        head = text.split(maxsplit=1)[0] if text.split() else text
        name = head.split("=", 1)[0]
        if name in _ARCH_FLAGS:
            removed.append(text)
            # `-gencode arch=...` in one string, or `-gencode=...`: the value is inside.
            take_next = "=" not in head and len(text.split()) == 1
            continue
        kept.append(text)
    return kept, removed


def _has_cuda_sources(ext: object) -> bool:
    sources = getattr(ext, "sources", None) or []
    return any(str(s).endswith(_CUDA_SUFFIXES) for s in sources)


def _declares_cuda(ext: object) -> bool:
    """torch's CUDAExtension links cudart (a CppExtension does not; ROCm builds link
    amdhip64): the setup.py said this extension holds device code."""
    return "cudart" in (getattr(ext, "libraries", None) or [])


def _rewrite(ext: object) -> dict[str, object]:
    gencode = _settings("FLASHBUILD_GENCODE")
    nvcc_extra = _settings("FLASHBUILD_NVCC_FLAGS")
    cxx_extra = _settings("FLASHBUILD_CXX_FLAGS")
    args = getattr(ext, "extra_compile_args", None)
    if isinstance(args, dict):
        cxx = list(args.get("cxx", []))
        nvcc = list(args.get("nvcc", []))
    else:  # a plain list goes to both compilers in torch's ninja build
        cxx = list(args or [])
        nvcc = list(args or [])
    nvcc, removed = strip_arch_flags(nvcc)
    ext.extra_compile_args = {  # type: ignore[attr-defined]
        **(args if isinstance(args, dict) else {}),
        "cxx": cxx + cxx_extra,
        "nvcc": nvcc + gencode + nvcc_extra,
    }
    return {"extension": getattr(ext, "name", "?"), "removed": removed, "added": gencode,
            "nvcc_extra": nvcc_extra, "cxx_extra": cxx_extra}


def longest_object(sources: list[str], build_temp: str, *, path: object = os.path,
                   obj_ext: str = ".obj") -> str:
    """The longest object path torch writes for `sources`: distutils' `object_filenames` of
    the absolute source (torch makes every source absolute) under the absolute build_temp,
    the drive and leading separator dropped, the suffix replaced by `obj_ext`. `path` is
    `os.path` (ntpath on Windows; tests pass ntpath)."""
    p = path
    root = p.abspath(build_temp)  # type: ignore[attr-defined]
    best = ""
    for src in sources:
        rest = p.splitdrive(p.abspath(src))[1].lstrip("\\/")  # type: ignore[attr-defined]
        obj = p.join(root, p.splitext(rest)[0] + obj_ext)  # type: ignore[attr-defined]
        if len(obj) > len(best):
            best = obj
    return str(best)


def _check_paths(self: object, report: str | None) -> None:
    limit = os.environ.get("FLASHBUILD_PATH_LIMIT")
    if not limit:
        return
    sources = [str(s) for ext in getattr(self, "extensions", [])
               for s in getattr(ext, "sources", [])]
    longest = longest_object(sources, str(getattr(self, "build_temp", "build")))
    # MAX_PATH counts the terminating NUL: 259 characters is the longest path that works.
    if len(longest) < int(limit):
        return
    if report:
        with open(report, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"too_long": longest, "limit": int(limit)}) + "\n")
    raise SystemExit(f"flashbuild: the object file {longest} would have {len(longest)} "
                     f"characters, past the {limit}-character limit of cl.exe and link.exe; "
                     "nothing was compiled")


def _patch(module: object) -> None:
    # CUDA_HOME is the toolkit flashbuild chose. torch computes it at import only when it was
    # built with CUDA: a CPU-only torch leaves it None and every CUDAExtension raises. The
    # build refuses a CPU torch before it starts; flashbuild's own integration tests compile
    # against one (its wheel carries the CUDA headers, not the libraries) and fail at the link.
    if getattr(module, "CUDA_HOME", None) is None and os.environ.get("CUDA_HOME"):
        module.CUDA_HOME = os.environ["CUDA_HOME"]  # type: ignore[attr-defined]
    build_ext = getattr(module, "BuildExtension", None)
    if build_ext is None or getattr(build_ext, "_flashbuild_hooked", False):
        return
    original = build_ext.build_extensions

    def build_extensions(self: object) -> object:
        extensions = getattr(self, "extensions", [])
        records = [_rewrite(ext) for ext in extensions if _has_cuda_sources(ext)]
        # A CUDAExtension with no .cu source compiles no device code at all: no arch to
        # prove, and its wheel fails verify later. Reported, so the build stops here.
        records += [{"extension": getattr(ext, "name", "?"), "no_device_code": True,
                     "sources": [str(s) for s in getattr(ext, "sources", None) or []][:8]}
                    for ext in extensions if _declares_cuda(ext) and not _has_cuda_sources(ext)]
        temp = os.environ.get("FLASHBUILD_BUILD_TEMP")
        if temp:
            self.build_temp = temp  # type: ignore[attr-defined]
        report = os.environ.get("FLASHBUILD_HOOK_REPORT")
        if report:
            with open(report, "a", encoding="utf-8") as fh:
                for record in records:
                    fh.write(json.dumps(record) + "\n")
        _check_paths(self, report)
        return original(self)

    build_ext.build_extensions = build_extensions
    build_ext._flashbuild_hooked = True


def _freeze_version(module: object) -> None:
    """Wrap setuptools' Distribution.run_commands: record the final version the first time,
    hand it over every later time (see the module docstring)."""
    dist_class = getattr(module, "Distribution", None)
    if dist_class is None or getattr(dist_class, "_flashbuild_hooked", False):
        return
    original = dist_class.run_commands

    def run_commands(self: object) -> object:
        path = os.environ.get("FLASHBUILD_VERSION_FILE")
        metadata = getattr(self, "metadata", None)
        version = getattr(metadata, "version", None)
        if path and metadata is not None and version:
            try:
                with open(path, encoding="utf-8") as fh:
                    frozen = fh.read().strip()
            except OSError:
                frozen = ""
            if not frozen:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(str(version))
            elif frozen != str(version):
                metadata.version = frozen
                report = os.environ.get("FLASHBUILD_HOOK_REPORT")
                if report:
                    with open(report, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps({"version_frozen": frozen,
                                             "version_computed": str(version)}) + "\n")
        return original(self)

    dist_class.run_commands = run_commands
    dist_class._flashbuild_hooked = True


_LOCAL = ("localhost", "127.0.0.1", "::1", "")
OFFLINE_MESSAGE = "flashbuild: network access is off during the build"


def _offline() -> None:
    """Refuse connections and name lookups that leave this machine (see the docstring)."""
    import socket

    def local(host: object) -> bool:
        text = host.decode() if isinstance(host, bytes) else str(host)
        return text in _LOCAL or text.startswith("127.")

    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def refuse(what: object) -> OSError:
        return OSError(101, f"{OFFLINE_MESSAGE} (tried {what})")

    def connect(self: socket.socket, address: object) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) \
                and not local(address[0]):
            raise refuse(f"{address[0]}:{address[1]}")
        real_connect(self, address)  # type: ignore[arg-type]

    def connect_ex(self: socket.socket, address: object) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) \
                and not local(address[0]):
            raise refuse(f"{address[0]}:{address[1]}")
        return real_connect_ex(self, address)  # type: ignore[arg-type]

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host is not None and not local(host):
            raise socket.gaierror(-3, f"{OFFLINE_MESSAGE} (tried to look up {host})")
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    socket.socket.connect = connect  # type: ignore[method-assign, assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign, assignment]
    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a module right after it is imported, not before (torch.utils.cpp_extension;
    setuptools.dist)."""

    def __init__(self, target: str, patch: object) -> None:
        self.target = target
        self.patch = patch

    def find_spec(self, name: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != self.target:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        patch = self.patch

        def exec_module(module: object) -> None:
            run(module)  # type: ignore[arg-type]
            patch(module)  # type: ignore[operator]

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _chain() -> None:
    """Run the sitecustomize this file shadows, if there is one."""
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # imported by Python at start-up, not by a test
    if os.environ.get("FLASHBUILD_GENCODE"):
        sys.meta_path.insert(0, _Finder(_TARGET, _patch))
    if os.environ.get("FLASHBUILD_OFFLINE") == "1":
        _offline()
    if os.environ.get("FLASHBUILD_VERSION_FILE"):
        sys.meta_path.insert(0, _Finder("setuptools.dist", _freeze_version))
    _chain()
