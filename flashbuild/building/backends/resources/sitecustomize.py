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

With FLASHBUILD_EXT_LANES=N (N > 1) and several extensions, they are built N at a time, each
in its own `build_temp/ext-K` folder (setuptools' `build_ext --parallel` shares one folder, and
torch writes every extension's build.ninja there: two at once would overwrite each other), and
MAX_JOBS is divided among them. setup.py trees with many small extensions (torch-scatter,
torch-cluster, pytorch-fast-transformers: one ninja run per extension, a few units each)
otherwise leave most cores idle. A build tool the setup.py runs itself (`cmake --build -j 4`)
with fewer jobs than MAX_JOBS gets MAX_JOBS (`raise_jobs`; FLASHBUILD_OWN_JOBS=0 keeps them).

Record mode (FLASHBUILD_RECORD = a JSON file; flashbuild/source/setup_record.py reads it): the
same rewrite, then nothing is compiled or linked. torch writes its build.ninja as usual; the
hook asks `ninja -t compdb` for the compile commands instead of running ninja, records the
commands setuptools would spawn without running them, and stops setup.py there. Meanwhile it
records which environment variables the tree's own files read (file:line), and makes network
calls fail at once (recorded too): record mode runs a tree's setup.py to learn what it builds,
never to fetch anything. With FLASHBUILD_TORCH_CUDA (`13.0`) set as well, a CPU-only torch is
presented to the setup.py as the CUDA build of the same version (`torch.version.cuda`, the
`+cu130` local version): a build needs a CUDA torch, and setup.py files that test for one
(`'cu' in torch.__version__`, `torch.version.cuda.split('.')`) would otherwise record a
configuration no build runs.
"""

from __future__ import annotations

import copy
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import sys

# Not typing.TYPE_CHECKING: this hook runs at the start of every Python process of a build and
# imports nothing it does not use (mypy treats the name as true all the same).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

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


_XCOMPILER = ("-Xcompiler", "--compiler-options")


def host_includes_to_nvcc(flags: list[str]) -> tuple[list[str], list[str]]:
    """(flags with each `-Xcompiler -include,H` made nvcc's own `--pre-include H`, the
    headers so moved). nvcc 13 hands the host compiler its -Xcompiler options in the final
    compile too, whose input (cudafe++'s output) already holds the header's preprocessed
    text: libstdc++'s headers then define `std::__terminate` twice (SpargeAttn#115, its
    `-include,cassert`). nvcc's own option includes it once in each pass."""
    out: list[str] = []
    moved: list[str] = []
    i = 0
    while i < len(flags):
        text = str(flags[i]).strip()
        value = None
        if text in _XCOMPILER and i + 1 < len(flags):
            value, step = str(flags[i + 1]).strip(), 2
        else:
            for option in _XCOMPILER:
                for sep in ("=", " "):
                    if text.startswith(option + sep):
                        value, step = text[len(option) + 1:].strip(), 1
        parts = value.split(",") if value else []
        if len(parts) == 2 and parts[0] == "-include" and parts[1]:
            out += ["--pre-include", parts[1]]
            moved.append(parts[1])
            i += step
            continue
        out.append(flags[i])
        i += 1
    return out, moved


def _has_cuda_sources(ext: object) -> bool:
    sources = getattr(ext, "sources", None) or []
    return any(str(s).endswith(_CUDA_SUFFIXES) for s in sources)


def _declares_cuda(ext: object) -> bool:
    """torch's CUDAExtension links cudart (a CppExtension does not; ROCm builds link
    amdhip64): the setup.py said this extension holds device code."""
    return "cudart" in (getattr(ext, "libraries", None) or [])


#: `-std=c++17`, `--std=gnu++14`, `/std:c++17`, `-std=c++1z`: a C++ standard a flag asks for.
_STD_FLAG = re.compile(r"^(?:--?std=|/std:)(?:c|gnu)\+\+(?P<v>\d[\dxyza]?)$")
_STD_YEARS = {"98": 1998, "03": 2003, "11": 2011, "0x": 2011, "14": 2014, "1y": 2014,
              "17": 2017, "1z": 2017, "20": 2020, "2a": 2020, "23": 2023, "2b": 2023}


def torch_cplusplus() -> int | None:
    """The C++ standard torch's headers require, as the year (2020), read from the check at
    the top of torch/all.h (`__cplusplus < 202002L` -> `#error C++20 or later ...`)."""
    torch = sys.modules.get("torch")  # imported already: BuildExtension is torch's
    origin = getattr(torch, "__file__", None)
    if not origin:
        return None
    header = os.path.join(os.path.dirname(origin), "include", "torch", "csrc", "api",
                          "include", "torch", "all.h")
    try:
        with open(header, encoding="utf-8", errors="replace") as fh:
            text = fh.read(4096)
    except OSError:
        return None
    found = re.search(r"__cplusplus\s*<\s*(\d{4})\d\dL", text)
    return int(found[1]) if found else None


def strip_old_std(flags: list[str], need: int | None) -> tuple[list[str], list[str]]:
    """(flags without a C++ standard older than `need`, the removed flags). A tree that pins
    `-std=c++17` into a build against a torch whose headers `#error` below C++20 cannot
    compile; torch's BuildExtension adds its own standard when none is given."""
    if need is None:
        return flags, []
    kept: list[str] = []
    removed: list[str] = []
    for flag in flags:
        found = _STD_FLAG.match(str(flag).strip())
        year = _STD_YEARS.get(found["v"]) if found else None
        (removed if year is not None and year < need else kept).append(flag)
    return kept, removed


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
    nvcc, pre_included = host_includes_to_nvcc(nvcc)
    need = torch_cplusplus()
    cxx, old_cxx = strip_old_std(cxx, need)
    nvcc, old_nvcc = strip_old_std(nvcc, need)
    ext.extra_compile_args = {  # type: ignore[attr-defined]
        **(args if isinstance(args, dict) else {}),
        "cxx": cxx + cxx_extra,
        "nvcc": nvcc + gencode + nvcc_extra,
    }
    return {"extension": getattr(ext, "name", "?"), "removed": removed, "added": gencode,
            "nvcc_extra": nvcc_extra, "cxx_extra": cxx_extra,
            "std_removed": sorted(set(old_cxx + old_nvcc)), "std_needed": need,
            "pre_included": pre_included}


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
        if raw == "<string>" and isinstance(frame.f_globals.get("__file__"), str):
            # setuptools' PEP 517 backend runs setup.py as `exec(text)` with `__file__` set:
            # the code is the tree's setup.py, its line numbers are the file's.
            raw = frame.f_globals["__file__"]
        if raw.startswith("<") or os.path.basename(raw) in ("os.py", "_collections_abc.py",
                                                            "subprocess.py") \
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

    def getitem(self: object, key: str | bytes) -> str:
        where = _caller_in_tree() if _RECORD_ON[0] else None
        # os.environb is the same type with bytes keys (subprocess reads b"PATH" from it):
        # one name, as text, either way.
        name = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        if where is not None and (name, where) not in seen:
            seen.add((name, where))
            _RECORD["env_reads"].append({"name": name, "where": where})
        return original(self, key)  # type: ignore[arg-type]

    environ_type.__getitem__ = getitem  # type: ignore[method-assign]


def _block_network() -> None:
    """Record mode: every connection and name lookup is refused (local ones too: a setup.py is
    run to learn what it builds) and recorded with the tree's file:line."""
    def note(call: str, target: object) -> None:
        _RECORD["network"].append({"call": call, "target": str(target)[:200],
                                   "where": _caller_in_tree() or "?"})

    _guard_network(allow_local=False,
                   message="network calls are refused while flashbuild records setup.py",
                   note=note)


def _present_cuda(module: object) -> None:
    """Record mode on a CPU-only torch: `torch.version` says the CUDA build of the same torch
    (see the module docstring). Patched right after torch/version.py runs, before
    torch.torch_version reads `__version__` from it."""
    cuda = os.environ.get("FLASHBUILD_TORCH_CUDA", "")
    if not cuda or getattr(module, "cuda", None) is not None or \
            getattr(module, "hip", None) is not None:
        return
    was = str(getattr(module, "__version__", ""))
    now = was.split("+", 1)[0] + "+cu" + cuda.replace(".", "")
    module.cuda = cuda  # type: ignore[attr-defined]
    module.__version__ = now  # type: ignore[attr-defined]
    _RECORD["torch_presented"] = [{"was": was, "now": now, "cuda": cuda}]


def _present_cuda_built(module: object) -> None:
    """The same presentation for `torch.backends.cuda.is_built()`, which a CPU-only torch
    answers False: a setup.py that asks it before reading its FORCE_CUDA-style switch
    (`is_built() and (FORCE_CUDA or is_available())`) would otherwise never read the switch,
    and record mode could not find it."""
    if os.environ.get("FLASHBUILD_TORCH_CUDA") and hasattr(module, "is_built"):
        module.is_built = lambda: True


def _present_gpu(module: object) -> None:
    """Build for the target, not for this machine (FLASHBUILD_TARGET_CC = `9.0`, the first
    target's compute capability): the tree's own files that ask torch.cuda whether a GPU is
    there (`if not torch.cuda.is_available(): raise ...`, `CUDAExtension if
    torch.cuda.is_available() else CppExtension`) are answered as if the target GPU were, and
    its capability is the target's: a build machine, a CI runner, has no GPU or another one.
    Calls from torch or setuptools get the real answers. Each presented answer is reported
    with the tree's file:line, so the build can say so."""
    target = os.environ.get("FLASHBUILD_TARGET_CC", "")
    try:
        major, minor = (int(x) for x in target.split(".", 1))
    except ValueError:
        return
    names = ("is_available", "device_count", "get_device_capability", "current_device",
             "get_device_properties")
    real = {name: getattr(module, name, None) for name in names}
    if any(fn is None for fn in real.values()):
        return
    presented = _PresentedCuda(real, major, minor, target)
    for name in names:
        setattr(module, name, getattr(presented, name))
    if callable(getattr(module, "is_bf16_supported", None)):
        # deepspeed 0.19.8's setup.py:264 asks it after is_available(); torch's own answer
        # opens the device, which raised Error 304 in the contained run on an H200 machine.
        presented.real["is_bf16_supported"] = module.is_bf16_supported  # type: ignore[attr-defined]
        module.is_bf16_supported = presented.is_bf16_supported  # type: ignore[attr-defined]


class _PresentedCuda:
    """The torch.cuda functions `_present_gpu` puts in place: the real ones for callers
    outside the tree, the target's answers for the tree's own files where no GPU is here."""

    def __init__(self, real: dict[str, Any], major: int, minor: int, target: str) -> None:
        self.real = real
        self.major, self.minor, self.target = major, minor, target
        self.said: set[tuple[str, str]] = set()

    def tell(self, call: str, where: str) -> None:
        if (call, where) in self.said:
            return
        self.said.add((call, where))
        record = {"gpu_presented": call, "where": where, "cc": self.target}
        if _recording():
            _RECORD.setdefault("gpu_presented", []).append(record)
        report = os.environ.get("FLASHBUILD_HOOK_REPORT")
        if report:
            with open(report, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    def gpus(self) -> int:
        # The GPUs CUDA can use here. A GPU the process cannot open counts as none: in
        # introspection's contained run on a GPU machine (new namespaces) the driver is there
        # but cudaGetDeviceCount fails (Error 304, "OS call failed"). torch's device_count()
        # may still say 1 (it counts through NVML, which works there) while is_available()
        # asks the CUDA runtime, says False, and current_device() raises: both are asked.
        try:
            if not self.real["is_available"]():
                return 0
            return int(self.real["device_count"]())
        except RuntimeError:
            return 0

    def is_available(self) -> bool:
        where = _caller_in_tree()
        if where is None:
            return bool(self.real["is_available"]())
        try:
            if self.real["is_available"]() and self.gpus() > 0:
                return True
        except RuntimeError:
            pass
        self.tell("torch.cuda.is_available", where)
        return True

    def device_count(self) -> int:
        where = _caller_in_tree()
        if where is None:
            return int(self.real["device_count"]())
        answer = self.gpus()
        if answer:
            return answer
        self.tell("torch.cuda.device_count", where)
        return 1

    def get_device_capability(self, device: object = None) -> tuple[int, int]:
        where = _caller_in_tree()
        if where is None:
            return self.real["get_device_capability"](device)  # type: ignore[no-any-return]
        self.tell("torch.cuda.get_device_capability", where)
        return (self.major, self.minor)

    def current_device(self) -> int:
        where = _caller_in_tree()
        if where is None:
            return self.real["current_device"]()  # type: ignore[no-any-return]
        if self.gpus():
            try:
                return self.real["current_device"]()  # type: ignore[no-any-return]
            except RuntimeError:
                pass  # (a GPU that opens for one question and not the next: none)
        self.tell("torch.cuda.current_device", where)
        return 0

    def is_bf16_supported(self, *args: object, **kwargs: object) -> bool:
        # bfloat16 arithmetic came with compute capability 8.0 (Ampere).
        where = _caller_in_tree()
        if where is None or self.gpus():
            try:
                return bool(self.real["is_bf16_supported"](*args, **kwargs))
            except RuntimeError:
                if where is None:
                    raise
        self.tell("torch.cuda.is_bf16_supported", where)
        return self.major >= 8

    def get_device_properties(self, device: object = None) -> object:
        # natten's shape: `get_device_properties(current_device())`, then `.major`, `.minor`.
        # The target's capability on the properties of the GPU here, if there is one (the
        # real object is read-only), else on a stand-in that says what it is.
        where = _caller_in_tree()
        if where is None:
            return self.real["get_device_properties"](device)
        self.tell("torch.cuda.get_device_properties", where)
        real = None
        if self.gpus():
            try:
                real = self.real["get_device_properties"](device)
            except RuntimeError:
                real = None
        return _TargetProperties(self.major, self.minor, real)


class _TargetProperties:
    """What `torch.cuda.get_device_properties` answers the tree's own files: the target's
    compute capability; every other field the GPU's here, or, without one, a value a build
    script can read (sizes of the smallest GPU of that capability are not known here: 0)."""

    def __init__(self, major: int, minor: int, real: object | None) -> None:
        self.major = major
        self.minor = minor
        self._real = real
        self.name = getattr(real, "name", f"flashbuild build target (compute capability "
                                          f"{major}.{minor})")

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._real, name) if self._real is not None else 0

    def __repr__(self) -> str:
        return f"_TargetProperties(name={self.name!r}, major={self.major}, minor={self.minor})"


#: Programs that compile or link when a setup.py starts them itself (its own build_ext
#: running CMake, as natten's and vllm's do): record mode stops there. A compiler counts only
#: when it is given something to compile or link (torch asks `g++ -dumpfullversion`).
_COMPILERS = ("nvcc", "cl", "gcc", "g++", "cc", "c++", "clang", "clang++")
_MAKERS = ("ninja", "make", "gmake", "nmake", "msbuild")
_SOURCES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".o", ".obj")
#: Arguments that only ask a tool something, or run CMake's portable shell commands.
_ASKS = ("--version", "-version", "-V", "--help", "-h", "-t", "-n", "--dry-run", "-E", "-M",
         "-MM", "--list-gpu-arch", "--list-gpu-code", "--system-information", "-P",
         "--find-package")


def _compiles(program: str, argv: list[str], cwd: str, tree: str) -> bool:
    """Whether a command a setup.py starts would build the tree: CMake's build or install
    step, a make tool, or a compiler given a source of the tree. A compiler probe of a file
    outside the tree (deepspeed's op builders test for libaio with a scratch program) is
    configure-time work and runs."""
    rest = argv[1:]
    if any(a in _ASKS or a.startswith("-dump") for a in rest):
        return False
    if program == "cmake":
        return any(a in ("--build", "--install") for a in rest)
    if program in _MAKERS:
        return True
    if program not in _COMPILERS:
        return False
    sources = [os.path.abspath(os.path.join(cwd, a)) for a in rest
               if a.lower().endswith(_SOURCES)]
    return any(s.startswith(tree + os.sep) for s in sources)


def _program(argv: list[str]) -> str:
    name = os.path.basename(argv[0]).lower() if argv else ""
    return name[:-4] if name.endswith(".exe") else name


def _argv(args: object, shell: bool) -> list[str]:
    if isinstance(args, (str, bytes)):
        import shlex

        text = args.decode(errors="replace") if isinstance(args, bytes) else args
        try:
            words = shlex.split(text)
        except ValueError:
            return []
        if shell:  # `cd dir && cmake --build .`: the command after the last separator counts
            for sep in ("&&", ";", "||"):
                if sep in words:
                    words = words[len(words) - words[::-1].index(sep):]
        return words
    try:
        return [os.fsdecode(a) for a in args]  # type: ignore[attr-defined]
    except TypeError:
        return []


def _cmake_build_dir(argv: list[str], cwd: str) -> str:
    """The build folder of a CMake configure command: `-B dir`, `-Bdir`, else the folder it
    runs in."""
    for i, arg in enumerate(argv):
        if arg == "-B" and i + 1 < len(argv):
            return os.path.join(cwd, argv[i + 1])
        if arg.startswith("-B") and len(arg) > 2:
            return os.path.join(cwd, arg[2:])
    return cwd


#: The build tools a setup.py may run itself, whose `-j` says how many units at a time.
_JOBS_TOOLS = ("cmake", "ninja", "make", "gmake")


def raise_jobs(argv: list[str], jobs: int) -> tuple[list[str], str]:
    """`argv` with a parallelism below `jobs` raised to it, and the value it had ("" when
    nothing changed). A setup.py that runs CMake itself picks its own `-j` (natten 0.21.7:
    `cmake --build DIR -j <cores // 4>`, 4 on 16 cores, its default for memory), and MAX_JOBS,
    flashbuild's plan from cores and free memory, never reaches it. `-jN`, `-j N`,
    `--parallel N`, `--parallel=N`, also after cmake's `--` (the native tool's own); never
    `-j1`."""
    if not argv or _program(argv) not in _JOBS_TOOLS or jobs < 1:
        return argv, ""
    if _program(argv) == "cmake" and "--build" not in argv[1:]:
        return argv, ""
    out = list(argv)
    old = ""
    for i in range(1, len(out)):
        arg = out[i]
        at, value, spell = -1, "", ""
        if arg in ("-j", "--parallel") and i + 1 < len(out) and out[i + 1].isdigit():
            at, value, spell = i + 1, out[i + 1], "{}"
        elif arg.startswith("-j") and arg[2:].isdigit():
            at, value, spell = i, arg[2:], "-j{}"
        elif arg.startswith("--parallel=") and arg[11:].isdigit():
            at, value, spell = i, arg[11:], "--parallel={}"
        # `-j1` is left alone: a tree that asks for one job at a time may have a build that
        # is not safe to run in parallel; a cap of 2 or more is a choice of how many.
        if at >= 0 and 1 < int(value) < jobs:
            out[at] = spell.format(jobs)
            old = old or value
    return (out, old) if old else (argv, "")


def _own_build_jobs() -> None:
    """Build mode: a build tool the setup.py runs itself with fewer jobs than MAX_JOBS runs
    with MAX_JOBS (`raise_jobs`), said in the hook report. FLASHBUILD_OWN_JOBS=0 keeps the
    tree's value."""
    import subprocess

    real_init = subprocess.Popen.__init__

    def init(self: object, args: object, *rest: object, **kwargs: object) -> None:
        jobs = os.environ.get("MAX_JOBS", "")
        if jobs.isdigit() and isinstance(args, (list, tuple)) and not kwargs.get("shell"):
            argv = _argv(args, False)
            new, old = raise_jobs(argv, int(jobs))
            if old:
                args = new
                report = os.environ.get("FLASHBUILD_HOOK_REPORT")
                if report:
                    record = {"jobs_raised": " ".join(argv[:3]), "from": old, "to": jobs,
                              "where": _caller_in_tree() or "?"}
                    with open(report, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(record) + "\n")
        real_init(self, args, *rest, **kwargs)  # type: ignore[call-overload]

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]


def _stop_own_builds() -> None:
    """Record mode: a setup.py that runs a build tool itself (its own build_ext calling
    cmake, ninja, make or a compiler) must not compile here. A CMake configure may run, with
    File API queries written into its build folder first and FetchContent kept offline; at
    the first command that would compile (`cmake --build`, ninja, nvcc, ...) the reply is
    copied next to the record and setup.py is stopped, as torch's build.ninja stops it."""
    import subprocess

    real_init = subprocess.Popen.__init__
    real_system = os.system
    state: dict[str, str] = {}
    tree = os.path.abspath(os.getcwd())  # the recorder runs in the tree's copy

    def decide(argv: list[str], cwd: str) -> list[str]:
        program = _program(argv)
        if not _RECORD_ON[0] or len(argv) < 2:
            return argv  # (a compiler run bare prints its banner: no compile)
        compiles = _compiles(program, argv, cwd, tree)
        if program == "cmake" and not compiles and not any(
                a in _ASKS or a.startswith("-dump") for a in argv[1:]):
            build_dir = _cmake_build_dir(argv, cwd)
            query = os.path.join(build_dir, ".cmake", "api", "v1", "query")
            os.makedirs(query, exist_ok=True)
            for name in ("codemodel-v2", "cache-v2", "toolchains-v1"):
                open(os.path.join(query, name), "a").close()
            state["build_dir"] = build_dir
            _RECORD.setdefault("cmake_configure", []).append(
                {"argv": argv[:80], "cwd": cwd, "build_dir": build_dir})
            return [*argv, "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"]
        if compiles:
            reply = ""
            if state.get("build_dir"):
                import shutil

                src = os.path.join(state["build_dir"], ".cmake", "api", "v1", "reply")
                # A build folder of its own beside the record, holding the reply only (the
                # setup.py's may be a temporary folder it deletes on exit).
                own = os.path.join(os.path.dirname(os.environ["FLASHBUILD_RECORD"]),
                                   "own-cmake")
                if os.path.isdir(src):
                    shutil.rmtree(own, ignore_errors=True)
                    shutil.copytree(src, os.path.join(own, ".cmake", "api", "v1", "reply"))
                    reply = own
            _RECORD["own_build"] = [{"argv": argv[:80], "cwd": cwd,
                                     "where": _caller_in_tree() or "?",
                                     "cmake_reply": reply}]
            raise RecordDone(0)
        return argv

    def init(self: object, args: object, *rest: object, **kwargs: object) -> None:
        argv = _argv(args, bool(kwargs.get("shell")))
        cwd = kwargs.get("cwd") or (rest[8] if len(rest) > 8 else None) or os.getcwd()
        new = decide(argv, os.fsdecode(cwd))  # type: ignore[arg-type]
        if new is not argv and not kwargs.get("shell") and not isinstance(args, (str, bytes)):
            args = new
        real_init(self, args, *rest, **kwargs)  # type: ignore[call-overload]

    def system(command: object) -> int:
        decide(_argv(command, True), os.getcwd())
        return real_system(command)  # type: ignore[arg-type]

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
    os.system = system


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
    # Commands taken without ninja name their sources relative to setup.py's folder.
    text = json.dumps({**_RECORD, "cwd": os.getcwd(), **extra}, default=str)
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
        extensions = getattr(self, "extensions", [])
        records = [_rewrite(ext) for ext in extensions if _has_cuda_sources(ext)]
        # A CUDAExtension with no .cu source compiles no device code at all: no arch to
        # prove, and its wheel fails verify later. Reported, so the build stops here.
        records += [{"extension": getattr(ext, "name", "?"), "no_device_code": True,
                     "sources": [str(s) for s in getattr(ext, "sources", None) or []][:8]}
                    for ext in extensions if _declares_cuda(ext) and not _has_cuda_sources(ext)]
        if _recording():
            _RECORD["extensions"] = [_describe(e) for e in getattr(self, "extensions", [])]
            _RECORD["rewrites"] = records  # type: ignore[assignment]
            module._run_ninja_build = (  # type: ignore[attr-defined]
                lambda build_directory, *a, **k: _compdb(build_directory))
            compiler = getattr(self, "compiler", None)
            if compiler is not None:
                # Without ninja torch compiles through the compiler object's `spawn`
                # (setuptools < 80) or `call` (newer): record the command, run nothing.
                def note_command(cmd: list[object], *a: object, **k: object) -> None:
                    _RECORD["spawned"].append([str(c) for c in cmd])

                compiler.spawn = note_command
                compiler.call = note_command
                compiler.link_shared_object = lambda *a, **k: None
        temp = os.environ.get("FLASHBUILD_BUILD_TEMP")
        if temp:
            self.build_temp = temp  # type: ignore[attr-defined]
        report = os.environ.get("FLASHBUILD_HOOK_REPORT")
        if report:
            with open(report, "a", encoding="utf-8") as fh:
                for record in records:
                    fh.write(json.dumps(record) + "\n")
        _check_paths(self, report)
        _ninja_back_on(self, module, report)
        _start_lanes(self, build_ext, extensions, report)
        result = original(self)
        if _recording():
            raise RecordDone(0)
        return result

    one = getattr(build_ext, "build_extension", None)

    def build_extension(self: object, ext: object) -> object:
        lanes = getattr(self, "_flashbuild_lanes", None)
        assert one is not None  # (only installed when there is one to wrap)
        if not lanes:
            return one(self, ext)
        # Built beside others: its own command object (setuptools swaps `self.compiler` for
        # a Library while it builds one) and its own build_temp, so its build.ninja and
        # objects are its own.
        mine = copy.copy(self)
        mine.build_temp = os.path.join(  # type: ignore[attr-defined]
            str(self.build_temp), f"ext-{lanes.get(id(ext), 0)}")  # type: ignore[attr-defined]
        return one(mine, ext)

    build_ext.build_extensions = build_extensions
    if one is not None:
        build_ext.build_extension = build_extension
    build_ext._flashbuild_hooked = True


def _plain_build_ext(module: object) -> None:
    """A setup.py whose extensions setuptools' own build_ext compiles (a plain `Extension` of
    C++ that links the CUDA runtime, torch-memory-saver's). Building: each extension goes to
    the hook report marked `plain`, with whether it has a .cu source (the backend decides
    from that and the tree whether the build is host code only). Record mode: the compiler's
    commands are noted, nothing runs or links, and setup.py is stopped after the last one,
    as torch's BuildExtension is above; without this the first compiler command would be
    taken for a build tool of the tree's own, which leaves nothing to read."""
    base = getattr(module, "build_ext", None)
    if base is None or getattr(base, "_flashbuild_plain", False):
        return
    original = base.build_extensions

    def build_extensions(self: object) -> object:
        # torch's BuildExtension (a subclass) is recorded by its own hook, which lands here
        # through super(): pass it on.
        if getattr(type(self), "_flashbuild_hooked", False):
            return original(self)
        extensions = getattr(self, "extensions", [])
        report = os.environ.get("FLASHBUILD_HOOK_REPORT")
        if not _recording():
            if report:
                with open(report, "a", encoding="utf-8") as fh:
                    for ext in extensions:
                        fh.write(json.dumps({
                            "extension": getattr(ext, "name", "?"), "plain": True,
                            "no_device_code": not _has_cuda_sources(ext),
                            "sources": [str(s) for s in getattr(ext, "sources", None)
                                        or []][:8]}) + "\n")
            return original(self)
        _RECORD["extensions"] = [_describe(e) for e in extensions]

        def note_command(cmd: list[object], *a: object, **k: object) -> None:
            _RECORD["spawned"].append([str(c) for c in cmd])

        # `shlib_compiler`: the one setuptools compiles a `Library` extension with.
        for compiler in (getattr(self, "compiler", None), getattr(self, "shlib_compiler", None)):
            if compiler is not None:
                compiler.spawn = note_command
                compiler.call = note_command
                compiler.link_shared_object = lambda *a, **k: None
        try:
            original(self)
        except Exception:
            # What the tree's build_ext does with a module that was never linked (copies it,
            # runs patchelf on it) fails here; the commands are what record mode came for.
            if not _RECORD["spawned"]:
                raise
        raise RecordDone(0)

    base.build_extensions = build_extensions
    base._flashbuild_plain = True


class _JitCaptured(BaseException):
    """Raised by the stand-in of torch.utils.cpp_extension.load once it has the call's
    arguments: the file stops there, before it uses the module it asked for. Not an
    Exception: a tree's `try: load(...) except Exception:` fallback must not catch it."""


def jit_specs(files: list[str], cwd: str) -> tuple[list[dict[str, object]], list[str]]:
    """Run each file (tree-relative) with torch.utils.cpp_extension.load answered by a stand-in
    that keeps the call's arguments and stops the file: the extensions a tree compiles at run
    time (exllama's `load(name="exllama_ext", sources=[...])` at import), as the file computes
    them here. Returns the calls and, per file that made none, why."""
    import inspect
    import runpy

    import torch.utils.cpp_extension as cpp

    specs: list[dict[str, object]] = []
    problems: list[str] = []
    real = cpp.load
    signature = inspect.signature(real)

    def capture(*args: object, **kwargs: object) -> object:
        called.add(current[0])
        # By position or by name, as this torch's load() takes them (its positional order
        # has changed: extra_sycl_cflags came in before extra_ldflags).
        try:
            given = dict(signature.bind_partial(*args, **kwargs).arguments)
        except TypeError as exc:
            problems.append(f"{current[0]}: its load() call does not fit this torch's: {exc}")
            raise _JitCaptured from None
        if given.get("is_python_module") is False or given.get("is_standalone"):
            problems.append(f"{current[0]}: its load() builds a library or program, not a "
                            "Python module (is_python_module=False / is_standalone)")
            raise _JitCaptured
        specs.append({"name": str(given.get("name")),
                      "sources": _listed(given.get("sources"), cwd),
                      "cflags": _listed(given.get("extra_cflags")),
                      "cuda_cflags": _listed(given.get("extra_cuda_cflags")),
                      "ldflags": _listed(given.get("extra_ldflags")),
                      "include_dirs": _listed(given.get("extra_include_paths"), cwd),
                      "with_cuda": given.get("with_cuda"), "file": current[0]})
        raise _JitCaptured

    current = [""]
    called: set[str] = set()
    cpp.load = capture
    try:
        for rel in files:
            current[0] = rel
            before = len(specs)
            try:
                runpy.run_path(os.path.join(cwd, rel), run_name="__flashbuild_jit__")
            except _JitCaptured:
                pass
            except Exception as exc:  # the tree's code, before its load() call
                problems.append(f"{rel}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if len(specs) == before and rel not in called:
                problems.append(f"{rel}: ran to its end without calling "
                                "torch.utils.cpp_extension.load (a call inside a function "
                                "runs only when the package calls it)")
    finally:
        cpp.load = real
    return specs, problems


def _listed(value: object, cwd: str | None = None) -> list[str]:
    """A load() argument as a list of strings; paths inside `cwd` made relative to it."""
    items = [value] if isinstance(value, (str, os.PathLike)) else list(value or [])  # type: ignore[call-overload]
    out = [os.fspath(v) for v in items]
    return out if cwd is None else [_inside(v, cwd) for v in out]


def _inside(path: str, cwd: str) -> str:
    """`path` relative to `cwd` when it lies inside it, else as it is."""
    if not os.path.isabs(path):
        return path
    try:
        inside = os.path.commonpath([os.path.abspath(path), cwd]) == cwd
    except ValueError:  # another drive (Windows)
        return path
    return os.path.relpath(path, cwd) if inside else path


def jit_package(rel: str, cwd: str) -> str:
    """The dotted package a tree-relative file lives in: its folders up to the first without
    an `__init__.py` (`src/aqlm/inference_kernels/x.py` -> `aqlm.inference_kernels`)."""
    parts: list[str] = []
    folder = os.path.dirname(rel)
    while folder and os.path.isfile(os.path.join(cwd, folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return ".".join(parts)


def _distinct_objects(sources: list[str], name: str, cwd: str) -> list[str]:
    """load() names a CUDA source's object `x.cuda.o`, so `x.cpp` and `x.cu` side by side
    (aqlm's cuda_kernel.cpp and .cu) build; setuptools would write both to `x.o`. Each CUDA
    source that shares its folder and stem with another source is compiled through a
    one-line file in the build folder that includes it (its own includes still resolve from
    its folder), named `x.cuda.cu`."""
    stems = [os.path.splitext(os.path.normpath(s))[0] for s in sources]
    out = []
    for index, (source, stem) in enumerate(zip(sources, stems, strict=True)):
        if not source.endswith(".cu") or stems.count(stem) < 2:
            out.append(source)
            continue
        # One folder per source: two such pairs in two folders get two wrappers.
        folder = os.path.join(os.environ.get("FLASHBUILD_BUILD_TEMP") or
                              os.path.join(cwd, "build"), "flashbuild-jit", name, str(index))
        os.makedirs(folder, exist_ok=True)
        wrapper = os.path.join(folder, os.path.basename(stem) + ".cuda.cu")
        target = os.path.abspath(os.path.join(cwd, source)).replace("\\", "/")
        text = f'#include "{target}"\n'
        try:
            with open(wrapper, encoding="utf-8") as fh:
                same = fh.read() == text
        except OSError:
            same = False
        if not same:  # (rewritten, it would compile again on every build)
            with open(wrapper, "w", encoding="utf-8") as fh:
                fh.write(text)
        out.append(wrapper)
    return out


def _jit_setup(module: object) -> None:
    """FLASHBUILD_JIT names the tree's files that compile an extension at run time
    (`[build] jit` of the recipe): setup() gets those extensions as its own, built ahead of
    time like any CUDAExtension (the arch flags are --arch's, as for every extension), each in
    the package of the file that loads it, under the name it loads (`exllama.exllama_ext`).
    The installed loader shim answers that load() with the built module. What each file
    gave is written to the hook report; a file that gave nothing is reported, not guessed."""
    real = getattr(module, "setup", None)
    if real is None or getattr(real, "_flashbuild_jit", False):
        return
    files = [str(f) for f in json.loads(os.environ.get("FLASHBUILD_JIT", "[]"))]

    def setup(*args: object, **kwargs: object) -> object:
        cwd = os.path.abspath(os.getcwd())
        specs, problems = jit_specs(files, cwd)
        from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

        added = []
        for spec in list(specs):
            package = jit_package(str(spec["file"]), cwd)
            shadowed = os.path.join(cwd, os.path.dirname(str(spec["file"])), str(spec["name"]))
            if os.path.isfile(shadowed + ".py") or \
                    os.path.isfile(os.path.join(shadowed, "__init__.py")):
                # A built `pkg/foo.so` would be imported instead of the tree's `pkg/foo.py`
                # (extension modules come first), or the package `pkg/foo/` instead of it. A
                # folder without `__init__.py` (exllama's `exllama_ext/` of sources) loses to
                # the module.
                problems.append(f"{spec['file']}: its load() name `{spec['name']}` is also a "
                                "module of that package; the built module would hide it")
                specs.remove(spec)
                continue
            dotted = f"{package}.{spec['name']}" if package else str(spec["name"])
            sources = _distinct_objects(list(spec["sources"]),  # type: ignore[call-overload]
                                        str(spec["name"]), cwd)
            cuda = spec["with_cuda"] if spec["with_cuda"] is not None else any(
                str(s).endswith((".cu", ".cuh")) for s in sources)
            make: Any = CUDAExtension if cuda else CppExtension
            added.append(make(dotted, sources, include_dirs=spec["include_dirs"],
                              extra_compile_args={"cxx": spec["cflags"],
                                                  "nvcc": spec["cuda_cflags"]},
                              extra_link_args=spec["ldflags"]))
            spec["module"] = dotted
        kwargs["ext_modules"] = [*(kwargs.get("ext_modules") or []), *added]  # type: ignore[misc]
        cmdclass = dict(kwargs.get("cmdclass") or {})  # type: ignore[call-overload]
        if added:
            cmdclass.setdefault("build_ext", BuildExtension)
        kwargs["cmdclass"] = cmdclass
        report = os.environ.get("FLASHBUILD_HOOK_REPORT")
        if report:
            with open(report, "a", encoding="utf-8") as fh:
                for spec in specs:
                    fh.write(json.dumps({"jit": spec["name"], "module": spec["module"],
                                         "file": spec["file"]}) + "\n")
                for problem in problems:
                    fh.write(json.dumps({"jit_problem": problem}) + "\n")
        return real(*args, **kwargs)

    setup._flashbuild_jit = True  # type: ignore[attr-defined]
    module.setup = setup  # type: ignore[attr-defined]


def _ninja_back_on(command: object, module: object, report: str | None) -> None:
    """A setup.py that turns ninja off (`BuildExtension(use_ninja=False)`, torch-points-
    kernels) compiles its units one after another through setuptools: 21 units took more than
    900 s on a 64-core machine. The build turns it back on where ninja is there (torch then
    compiles them MAX_JOBS at a time; the objects are the same) and says so;
    FLASHBUILD_SETUP_NINJA=0 in the recipe's [[build.env]] keeps the setup.py's choice.
    Record mode leaves it: it reads the commands either way."""
    if _recording() or getattr(command, "use_ninja", True) is not False or \
            os.environ.get("FLASHBUILD_SETUP_NINJA") == "0":
        return
    available = getattr(module, "is_ninja_available", None)
    if available is None or not available():
        return
    # Without ninja, setuptools compiles from the setup.py's folder, where relative include
    # folders resolve; torch's ninja runs from the build folder (it makes the sources
    # absolute, not the include folders): torch-points-kernels' `include_dirs=["cuda/
    # include"]` would no longer be found. They are made absolute first, as they resolved.
    for ext in getattr(command, "extensions", None) or []:
        dirs = getattr(ext, "include_dirs", None)
        if isinstance(dirs, list):
            ext.include_dirs = [d if os.path.isabs(d) else os.path.abspath(d) for d in dirs]
        args = getattr(ext, "extra_compile_args", None)
        if isinstance(args, dict):
            ext.extra_compile_args = {k: _absolute_includes(v) for k, v in args.items()}
        elif isinstance(args, list):
            ext.extra_compile_args = _absolute_includes(args)
    command.use_ninja = True  # type: ignore[attr-defined]
    command.force = True  # type: ignore[attr-defined]  # (what torch sets with ninja on)
    if report:
        with open(report, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"ninja_turned_on": True}) + "\n")


def _absolute_includes(args: object) -> object:
    """`-Idir` / `-I dir` / `-isystem dir` with a relative folder, made absolute from here."""
    if not isinstance(args, list):
        return args
    out: list[object] = []
    take = False
    for given in args:
        arg = given
        if take and isinstance(arg, str) and not os.path.isabs(arg):
            arg = os.path.abspath(arg)
        take = arg in ("-I", "-isystem")
        if isinstance(arg, str) and arg.startswith("-I") and len(arg) > 2 and \
                not os.path.isabs(arg[2:]):
            arg = "-I" + os.path.abspath(arg[2:])
        out.append(arg)
    return out


def _start_lanes(command: object, hooked: type, extensions: list[object],
                 report: str | None) -> None:
    """Have setuptools build the extensions `_extension_lanes` at a time (its `parallel`),
    MAX_JOBS divided among them; `build_extension` gives each its own build_temp."""
    lanes = _extension_lanes(command, hooked)
    if lanes <= 1:
        return
    command.parallel = lanes  # type: ignore[attr-defined]
    jobs = os.environ.get("MAX_JOBS", "")
    if jobs.isdigit():
        os.environ["MAX_JOBS"] = str(max(1, -(-int(jobs) // lanes)))
    command._flashbuild_lanes = {  # type: ignore[attr-defined]
        id(e): k for k, e in enumerate(extensions)}
    if report:
        with open(report, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"extension_lanes": lanes,
                                 "max_jobs_each": os.environ.get("MAX_JOBS")}) + "\n")


def _extension_lanes(command: object, hooked: type) -> int:
    """How many extensions to build at once: FLASHBUILD_EXT_LANES, at most one per extension;
    1 in record mode, and when the tree's own command class replaces `build_extension` (its
    code might write into the shared build_temp)."""
    try:
        wanted = int(os.environ.get("FLASHBUILD_EXT_LANES", "1"))
    except ValueError:
        return 1
    count = len(getattr(command, "extensions", None) or [])
    own = False
    for klass in type(command).__mro__:
        if klass is hooked:
            break
        own = own or "build_extension" in klass.__dict__
    if _recording() or own or getattr(command, "parallel", None) or \
            getattr(hooked, "build_extension", None) is None:
        return 1
    return max(1, min(wanted, count))


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
    _guard_network(allow_local=True, message=OFFLINE_MESSAGE)


def _guard_network(*, allow_local: bool, message: str,
                   note: Callable[[str, object], None] | None = None) -> None:
    """Make socket connections and name lookups fail at once with `message` (the builds'
    offline switch and record mode): IPv4/IPv6 only, loopback allowed when `allow_local`;
    `note` hears of each refused call first."""
    import socket

    def allowed(host: object) -> bool:
        text = host.decode() if isinstance(host, bytes) else str(host)
        return allow_local and (text in _LOCAL or text.startswith("127."))

    def refuse(call: str, target: object) -> OSError:
        if note is not None:
            note(call, target)
        return OSError(101, f"{message} (tried {target})")

    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def inet(sock: socket.socket, address: object) -> bool:
        return sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple)

    def connect(self: socket.socket, address: object) -> None:
        if inet(self, address) and not allowed(address[0]):  # type: ignore[index]
            raise refuse("connect", f"{address[0]}:{address[1]}")  # type: ignore[index]
        real_connect(self, address)  # type: ignore[arg-type]

    def connect_ex(self: socket.socket, address: object) -> int:
        if inet(self, address) and not allowed(address[0]):  # type: ignore[index]
            raise refuse("connect", f"{address[0]}:{address[1]}")  # type: ignore[index]
        return real_connect_ex(self, address)  # type: ignore[arg-type]

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host is not None and not allowed(host):
            err = refuse("getaddrinfo", host)
            raise socket.gaierror(-3, err.strerror)
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
    if os.environ.get("FLASHBUILD_TARGET_CC"):
        sys.meta_path.insert(0, _Finder("torch.cuda", _present_gpu))
    if os.environ.get("FLASHBUILD_VERSION_FILE"):
        sys.meta_path.insert(0, _Finder("setuptools.dist", _freeze_version))
    if not _recording() and os.environ.get("FLASHBUILD_OWN_JOBS", "1") != "0":
        _own_build_jobs()
    if _recording() or os.environ.get("FLASHBUILD_HOOK_REPORT"):
        sys.meta_path.insert(0, _Finder("setuptools.command.build_ext", _plain_build_ext))
    if os.environ.get("FLASHBUILD_JIT"):
        sys.meta_path.insert(0, _Finder("setuptools", _jit_setup))
    if _recording():
        _record_env_reads()
        _block_network()
        _stop_own_builds()
        if os.environ.get("FLASHBUILD_TORCH_CUDA"):
            sys.meta_path.insert(0, _Finder("torch.version", _present_cuda))
            sys.meta_path.insert(0, _Finder("torch.backends.cuda", _present_cuda_built))
    _chain()
