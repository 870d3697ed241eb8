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
  under `build_temp/<absolute source path>`, past 260 characters for deep trees).

What it changed is appended, one JSON object per extension, to FLASHBUILD_HOOK_REPORT, which
the build reads back. The sitecustomize this file shadows (Debian's, a venv's) still runs.
Settings come from the environment as JSON: FLASHBUILD_GENCODE, FLASHBUILD_NVCC_FLAGS,
FLASHBUILD_CXX_FLAGS, FLASHBUILD_BUILD_TEMP.

Record mode (FLASHBUILD_RECORD = a JSON file; flashbuild/source/setup_record.py reads it): the
same rewrite, then nothing is compiled or linked. torch writes its build.ninja as usual; the
hook asks `ninja -t compdb` for the compile commands instead of running ninja, records the
commands setuptools would spawn without running them, and stops setup.py there. Meanwhile it
records which environment variables the tree's own files read (file:line), and makes network
calls fail at once (recorded too): record mode runs a tree's setup.py to learn what it builds,
never to fetch anything.
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


# --- record mode ----------------------------------------------------------------------------

_RECORD: dict[str, list[object]] = {"extensions": [], "compdb": [], "spawned": [],
                                    "env_reads": [], "network": []}


#: Recording stops while the record is written (writing it must not record itself).
_RECORD_ON = [True]


class RecordDone(SystemExit):
    """Raised once the build files are written: setup.py stops, nothing compiled."""


def _recording() -> bool:
    return bool(os.environ.get("FLASHBUILD_RECORD"))


def _caller_in_tree() -> str | None:
    """`file:line` of the code that made the call, when it is one of the tree's own files (the
    working folder); None when torch, setuptools or the standard library made it. Frames of
    `os` and `collections.abc` (os.getenv, Mapping.get) are looked through."""
    tree = os.path.abspath(os.getcwd()) + os.sep
    frame = sys._getframe(2)
    while frame is not None:
        raw = frame.f_code.co_filename
        if raw.startswith("<") or os.path.basename(raw) in ("os.py", "_collections_abc.py") \
                or os.path.dirname(os.path.abspath(raw)) == _HERE:
            frame = frame.f_back  # type: ignore[assignment]
            continue
        name = os.path.abspath(raw)
        return f"{os.path.relpath(name, tree[:-1])}:{frame.f_lineno}" \
            if name.startswith(tree) else None
    return None


def _record_env_reads() -> None:
    environ_type = type(os.environ)
    original = environ_type.__getitem__

    seen: set[tuple[str, str]] = set()

    def getitem(self: object, key: str) -> str:
        where = _caller_in_tree() if _RECORD_ON[0] else None
        if where is not None and (key, where) not in seen:
            seen.add((key, where))
            _RECORD["env_reads"].append({"name": key, "where": where})
        return original(self, key)  # type: ignore[arg-type]

    environ_type.__getitem__ = getitem  # type: ignore[method-assign]


def _block_network() -> None:
    import socket  # record mode only: a build's processes import nothing more than before

    def refuse(what: str, target: object) -> None:
        _RECORD["network"].append({"call": what, "target": str(target)[:200],
                                   "where": _caller_in_tree() or "?"})
        raise OSError(101, "network calls are refused while flashbuild records setup.py")

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        refuse("getaddrinfo", host)
        return None

    def connect(self: socket.socket, address: object) -> None:
        if self.family == getattr(socket, "AF_UNIX", None):
            return original_connect(self, address)  # type: ignore[arg-type]
        refuse("connect", address)
        return None

    original_connect = socket.socket.connect
    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
    socket.socket.connect = connect  # type: ignore[method-assign,assignment]


def _compdb(build_directory: str) -> None:
    """The compile commands of torch's build.ninja, from ninja itself."""
    import subprocess
    ninja = "ninja"
    try:
        import ninja as ninja_wheel  # the PyPI wheel flashbuild depends on

        # Both names, so the hook decides nothing about the OS (`ninja.exe` on Windows).
        found = [os.path.join(ninja_wheel.BIN_DIR, name) for name in ("ninja", "ninja.exe")]
        ninja = next((c for c in found if os.path.isfile(c)), ninja)
    except ImportError:
        pass
    done = subprocess.run([ninja, "-t", "compdb"], cwd=build_directory, capture_output=True,
                          text=True, timeout=60, check=False)
    try:
        entries = json.loads(done.stdout) if done.returncode == 0 else []
    except ValueError:
        entries = []
    _RECORD["compdb"].extend(entries)
    _RECORD.setdefault("ninja_files", []).append(os.path.join(build_directory, "build.ninja"))


def _describe(ext: object) -> dict[str, object]:
    args = getattr(ext, "extra_compile_args", None)
    return {"name": getattr(ext, "name", "?"),
            "sources": [str(s) for s in getattr(ext, "sources", None) or []],
            "include_dirs": [str(s) for s in getattr(ext, "include_dirs", None) or []],
            "define_macros": [[str(k), None if v is None else str(v)]
                              for k, v in getattr(ext, "define_macros", None) or []],
            "extra_compile_args": args if isinstance(args, dict) else {"all": list(args or [])},
            "cuda": _has_cuda_sources(ext)}


def write_record(extra: dict[str, object]) -> None:
    path = os.environ.get("FLASHBUILD_RECORD")
    _RECORD_ON[0] = False
    if not path:
        return
    text = json.dumps({**_RECORD, **extra}, default=str)
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(path + ".tmp", path)


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
        records = [_rewrite(ext) for ext in getattr(self, "extensions", [])
                   if _has_cuda_sources(ext)]
        if _recording():
            _RECORD["extensions"] = [_describe(e) for e in getattr(self, "extensions", [])]
            _RECORD["rewrites"] = records  # type: ignore[assignment]
            module._run_ninja_build = (  # type: ignore[attr-defined]
                lambda build_directory, *a, **k: _compdb(build_directory))
            compiler = getattr(self, "compiler", None)
            if compiler is not None:
                # Without ninja torch compiles through spawn: record the command, run nothing.
                compiler.spawn = lambda cmd, *a, **k: _RECORD["spawned"].append(
                    [str(c) for c in cmd])
                compiler.link_shared_object = lambda *a, **k: None
        temp = os.environ.get("FLASHBUILD_BUILD_TEMP")
        if temp:
            self.build_temp = temp  # type: ignore[attr-defined]
        report = os.environ.get("FLASHBUILD_HOOK_REPORT")
        if report:
            with open(report, "a", encoding="utf-8") as fh:
                for record in records:
                    fh.write(json.dumps(record) + "\n")
        result = original(self)
        if _recording():
            raise RecordDone(0)
        return result

    build_ext.build_extensions = build_extensions
    build_ext._flashbuild_hooked = True


class _Finder(importlib.abc.MetaPathFinder):
    """Patches torch.utils.cpp_extension right after it is imported, not before."""

    def find_spec(self, name: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: object) -> None:
            run(module)  # type: ignore[arg-type]
            _patch(module)

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
        sys.meta_path.insert(0, _Finder())
    if _recording():
        _record_env_reads()
        _block_network()
    _chain()
