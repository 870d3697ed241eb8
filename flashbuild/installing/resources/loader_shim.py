"""flashbuild loader shim: makes the DLLs this package's binaries need findable on Windows.

Python >= 3.8 loads an extension with LoadLibraryExW(LOAD_LIBRARY_SEARCH_DEFAULT_DIRS |
LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR): PATH and the current directory are ignored, so the CUDA
runtime's folder must be registered with os.add_dll_directory before the module is
imported (FACTS.md, "Windows DLL loading"). CUDA <= 12 keeps its DLLs in bin, the CUDA 13
installer in bin\\x64, the CUDA 13 PyPI wheel in bin\\x86_64.

The folders were recorded when the package was built; they are hints, resolved again here at
import time. A recorded folder that is gone (the venv was recreated elsewhere, CUDA was
upgraded) is looked for where it would be now: below this environment's site-packages for a
folder that was below site-packages (the nvidia-* wheels, torch\\lib), below %CUDA_PATH% (and
the installer's CUDA_PATH_V* variables) for a toolkit folder. A folder found nowhere is
named in the ImportError of this package's extension modules, instead of only "DLL load
failed".

On Linux the binaries find their libraries through RPATH ($ORIGIN) and the system's folders,
with one exception this file covers: a library only a PyPI CUDA wheel of this environment
holds (`nvidia/cu13/lib/libcublas.so.13`), which `import torch` loads for a torch extension
but nothing loads for a package that opens its own shared libraries (ctypes). PRELOAD names
those files; each is loaded by its path here, before the package's code runs, and the loader
then matches the binaries' DT_NEEDED entries to them by soname (glibc looks among the objects
already loaded before it searches a folder). A recorded file that is gone is looked for below
this environment's site-packages, as a DLL folder is.
This file runs inside the installed package, without flashbuild, so it checks the OS itself.
flashbuild renders DLL_DIRS and PRELOAD when it installs the package; edit the build, not this
file.

It also checks, before the package's first extension import, that a GPU this process can see
can run the GPU code the binaries hold (IMAGES, read from them at install): the failure users
otherwise meet at the first kernel launch, "no kernel image is available for execution on the
device", becomes an ImportError that names the GPU, what the binaries hold and the command that
rebuilds them. The GPUs come from NVML (the driver's libnvidia-ml / nvml.dll through ctypes; no
torch import, no CUDA context). No driver or no GPU: nothing to check. FLASHBUILD_ARCH_CHECK=0
turns the check off.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.machinery
import os
import re
import site
import sys
import warnings
from pathlib import Path
from typing import Any, NamedTuple

#: Absolute folders that may hold the DLLs the binaries need (rendered by flashbuild).
DLL_DIRS: tuple[str, ...] = ()

#: Libraries of this environment's PyPI CUDA wheels the binaries need and would not find
#: (Linux; rendered by flashbuild): absolute paths, loaded in this order.
PRELOAD: tuple[str, ...] = ()

#: Whether the package's binaries link torch's libraries (libc10.so, libtorch_cpu.so) that
#: no loader path of theirs holds (rendered by flashbuild): `import torch` loads them, as
#: the package's callers would have to before importing one of its modules.
IMPORT_TORCH: bool = False

#: The GPU images each binary of the package holds, read from the binaries at install
#: (rendered by flashbuild): its path relative to this folder -> `sm_90a`, `compute_120`, ...
IMAGES: dict[str, tuple[str, ...]] = {}

#: The command that rebuilds the package for another GPU, `{arch}` (and `{source}`) left to
#: fill (rendered).
REBUILD: str = "flashbuild build --arch {arch}"

#: The tree the package was built from, where it was built (rendered). A wheel built elsewhere
#: (a CI runner) names a folder this machine does not have: the command then says so instead.
SOURCE: str = ""

#: The handles os.add_dll_directory returned: a folder stays registered only while its
#: handle is open, so they live as long as the module.
_HANDLES: list[object] = []

#: The sub folders of a toolkit that hold its DLLs, in the order each CUDA puts them.
_TOOLKIT_DLL_DIRS = (("bin", "x64"), ("bin", "x86_64"), ("bin",))


def _parts(folder: str) -> list[str]:
    return [p for p in folder.replace("\\", "/").split("/") if p]


def _is_absolute(folder: str) -> bool:
    # Never a relative folder: that would resolve against the current directory.
    return Path(folder).is_absolute() or (len(folder) > 2 and folder[1] == ":"
                                          and folder[2] in "\\/")


def site_dirs() -> list[Path]:
    """This environment's site-packages folders (a venv's first)."""
    found: dict[str, None] = {}
    for raw in [str(Path(sys.prefix, "Lib", "site-packages")), *site.getsitepackages(),
                *sys.path]:
        if raw and Path(raw).name.lower() == "site-packages":
            found.setdefault(raw, None)
    return [Path(p) for p in found]


def toolkit_roots(env: Any = None) -> list[Path]:
    """CUDA toolkits this machine names: %CUDA_PATH%, then CUDA_PATH_V<major>_<minor>."""
    environ = os.environ if env is None else env
    names = ["CUDA_PATH", *sorted((k for k in environ if k.upper().startswith("CUDA_PATH_V")),
                                  reverse=True)]
    return [Path(environ[n]) for n in names if environ.get(n)]


def alternatives(folder: str, sites: list[Path], toolkits: list[Path]) -> list[Path]:
    """Where a recorded folder that no longer exists would be in this environment."""
    parts = _parts(folder)
    lowered = [p.lower() for p in parts]
    out: list[Path] = []
    if "site-packages" in lowered:
        tail = parts[lowered.index("site-packages") + 1:]
        out += [s.joinpath(*tail) for s in sites]
    if "bin" in lowered:
        out += [root.joinpath(*sub) for root in toolkits for sub in _TOOLKIT_DLL_DIRS]
    return out


def resolve(folders: tuple[str, ...], sites: list[Path], toolkits: list[Path],
            ) -> tuple[list[str], list[str]]:
    """(folders to register, recorded folders found nowhere), each once, in order."""
    use: dict[str, None] = {}
    missing: list[str] = []
    for folder in folders:
        if not _is_absolute(folder):
            continue
        if Path(folder).is_dir():
            use.setdefault(folder, None)
            continue
        found = next((str(p) for p in alternatives(folder, sites, toolkits) if p.is_dir()), None)
        if found is None:
            missing.append(folder)
        else:
            use.setdefault(found, None)
    return list(use), missing


class _Explain(importlib.abc.MetaPathFinder):
    """Adds the missing DLL folders to the ImportError of this package's extension modules."""

    def __init__(self, package: str, missing: list[str]) -> None:
        self.package, self.missing = package, missing

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if not name.startswith(self.package + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            spec.loader = _ExplainingLoader(spec.loader.name, spec.loader.path, self.missing)
        return spec


class _ExplainingLoader(importlib.machinery.ExtensionFileLoader):
    def __init__(self, name: str, path: str, missing: list[str]) -> None:
        super().__init__(name, path)
        self.missing = missing

    def create_module(self, spec: Any) -> Any:
        try:
            return super().create_module(spec)
        except ImportError as exc:
            raise ImportError(
                f"{exc}. The folders this module's DLLs were built against are gone and were "
                f"not found in this environment either: {'; '.join(self.missing)} (looked "
                "below site-packages and %CUDA_PATH%). Install the CUDA toolkit or the "
                "nvidia-* wheels the package was built with, or rebuild it with flashbuild "
                "in this environment.", name=exc.name, path=exc.path) from exc


def _register(folders: tuple[str, ...]) -> list[str]:
    """Register each recorded folder, or where it is now; return the folders registered."""
    if sys.platform != "win32":
        return []
    use, missing = resolve(folders, site_dirs(), toolkit_roots())
    for folder in use:
        _HANDLES.append(os.add_dll_directory(folder))
    if missing and __package__:
        sys.meta_path.insert(0, _Explain(__package__, missing))
    return use


REGISTERED: list[str] = _register(DLL_DIRS)


def _preload(files: tuple[str, ...]) -> list[str]:
    """Load each recorded library (or its copy below this environment's site-packages);
    return the files loaded. One found nowhere is left to the package's own load, whose
    error names it."""
    if sys.platform == "win32" or not files:
        return []
    sites = site_dirs()
    loaded = []
    for recorded in files:
        if not _is_absolute(recorded):
            continue
        name = Path(recorded).name
        places = [Path(recorded),
                  *(folder / name for folder in alternatives(str(Path(recorded).parent),
                                                            sites, []))]
        for place in places:
            if not place.is_file():
                continue
            try:
                _HANDLES.append(ctypes.CDLL(str(place)))
            except OSError:
                continue
            loaded.append(str(place))
            break
    return loaded


def _import_torch() -> bool:
    """`import torch` when the binaries need its libraries; a torch that is not installed is
    left to the module's own load, whose error names the library."""
    if not IMPORT_TORCH:
        return False
    try:
        import torch  # noqa: F401, PLC0415  (loads libc10 and libtorch for the binaries)
    except ImportError:
        return False
    return True


TORCH_IMPORTED: bool = _import_torch()
PRELOADED: list[str] = _preload(PRELOAD)


# --- arch-aware loading ---------------------------------------------------------------------

#: The environment variable that turns the GPU check off (`0`, `off`, `no`, `false`).
CHECK_VARIABLE = "FLASHBUILD_ARCH_CHECK"

_IMAGE = re.compile(r"(sm|compute)_(\d+)([af]?)\Z")


class Gpu(NamedTuple):
    number: int
    """NVML's index (PCI bus order)."""
    name: str
    capability: tuple[int, int]
    uuid: str = ""

    def describe(self) -> str:
        major, minor = self.capability
        return f"GPU {self.number} ({self.name}, compute capability {major}.{minor})"


def image_runs(image: str, capability: tuple[int, int]) -> str | None:
    """How a GPU of `capability` runs one image: `sass` (as it is), `jit` (the driver compiles
    the PTX at the first launch), or None (it cannot).

    SASS for sm_XY runs on X.Z with Z >= Y (CUDA's binary compatibility within a major); an `a`
    (arch-specific) image only on exactly X.Y; an `f` (family) image on X.Z with Z >= Y; PTX
    for compute_XY JITs on any X.Y or newer, its `a`/`f` forms as their SASS does.
    """
    match = _IMAGE.match(image)
    if match is None:
        return None
    kind, code, suffix = match[1], int(match[2]), match[3]
    major, minor = divmod(code, 10)
    if suffix == "a":
        runs = capability == (major, minor)
    elif kind == "sm" or suffix == "f":
        runs = capability[0] == major and capability[1] >= minor
    else:
        runs = capability >= (major, minor)
    if not runs:
        return None
    return "sass" if kind == "sm" else "jit"


def coverage(images: tuple[str, ...], capability: tuple[int, int]) -> str | None:
    """The best way a GPU of `capability` runs a binary holding `images`."""
    ways = {image_runs(image, capability) for image in images}
    return "sass" if "sass" in ways else "jit" if "jit" in ways else None


def _nvml_library() -> Any:
    """The driver's NVML, by absolute path on Windows (never the current directory)."""
    if sys.platform == "win32":
        # Windows matches environment names without case: SYSTEMROOT is %SystemRoot%.
        root = Path(os.environ.get("SYSTEMROOT", "C:\\Windows"))
        programs = Path(os.environ.get("PROGRAMFILES", "C:\\Program Files"))
        names = [str(root / "System32" / "nvml.dll"),
                 str(programs / "NVIDIA Corporation" / "NVSMI" / "nvml.dll")]
    else:
        names = ["libnvidia-ml.so.1"]
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class _NvmlError(Exception):
    pass


def _nvml(status: int) -> None:
    if status != 0:
        raise _NvmlError(status)


def nvml_gpus(*, details: bool = True) -> list[Gpu] | None:
    """Every GPU NVML lists, in NVML's order (PCI bus order); None when NVML cannot be read
    (no NVIDIA driver: nothing to check). `details=False` skips the names and UUIDs (the check
    needs only the compute capabilities until it has something to say).

    nvmlInit_v2, not nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH): that one is five times
    cheaper (2.6 ms against 12.1 ms on an H200, bench/nvml_probe.py) but then lists no GPU at
    all, which would turn the check off without a word."""
    lib = _nvml_library()
    if lib is None:
        return None
    try:
        _nvml(lib.nvmlInit_v2())
    except (AttributeError, _NvmlError):
        return None
    try:
        count = ctypes.c_uint(0)
        _nvml(lib.nvmlDeviceGetCount_v2(ctypes.byref(count)))
        gpus = []
        for number in range(count.value):
            handle = ctypes.c_void_p()
            _nvml(lib.nvmlDeviceGetHandleByIndex_v2(number, ctypes.byref(handle)))
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            _nvml(lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major),
                                                         ctypes.byref(minor)))
            name = ctypes.create_string_buffer(96)
            uuid = ctypes.create_string_buffer(96)
            if details:
                lib.nvmlDeviceGetName(handle, name, 96)
                lib.nvmlDeviceGetUUID(handle, uuid, 96)
            gpus.append(Gpu(number, name.value.decode("utf-8", "replace") or "NVIDIA GPU",
                            (major.value, minor.value), uuid.value.decode("ascii", "replace")))
    except (AttributeError, _NvmlError):
        return None
    finally:
        lib.nvmlShutdown()
    return gpus


def visible_gpus(gpus: list[Gpu], env: Any) -> tuple[list[Gpu], bool]:
    """The GPUs CUDA will show this process, and whether that is certain.

    NVML lists every GPU; CUDA_VISIBLE_DEVICES narrows what CUDA sees, by UUID (`GPU-...`, a
    prefix is enough) or by index. Indices follow NVML's PCI bus order only with
    CUDA_DEVICE_ORDER=PCI_BUS_ID; under CUDA's default (fastest first) an index is certain only
    when every GPU has the same compute capability.
    """
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return gpus, True
    chosen: list[Gpu] = []
    certain = True
    same = len({g.capability for g in gpus}) <= 1
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            break
        if item.startswith(("GPU-", "MIG-")):
            found = [g for g in gpus if g.uuid and g.uuid.startswith(item)]
            if not found:
                certain = False
            chosen += found[:1]
            continue
        try:
            index = int(item)
        except ValueError:
            break  # CUDA stops at the first entry it cannot read
        if index < 0 or index >= len(gpus):
            break
        if env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and not same:
            certain = False
        chosen.append(gpus[index])
    return list(dict.fromkeys(chosen)), certain


class Verdict(NamedTuple):
    error: str | None
    warnings: list[str]


def _arch_name(capability: tuple[int, int]) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def _held(images: tuple[str, ...]) -> str:
    sass = [i for i in images if i.startswith("sm_")]
    ptx = [i for i in images if i.startswith("compute_")]
    parts = [f"{', '.join(sass)} SASS" if sass else "no SASS",
             f"{', '.join(ptx)} PTX" if ptx else "no PTX"]
    return " and ".join(parts)


def judge(images: dict[str, tuple[str, ...]], gpus: list[Gpu], *, certain: bool = True,
          package: str = "this package", rebuild: str = REBUILD,
          source: str = SOURCE) -> Verdict:
    """What the GPUs can run of each binary: an error when a binary holds no image any of them
    can run (every launch would fail), warnings when some GPUs are left out or only PTX (a
    slow first launch while the driver compiles it) covers one."""
    gpu_code = {path: held for path, held in images.items() if held}
    if not gpus or not gpu_code:
        return Verdict(None, [])
    errors: list[str] = []
    warned: list[str] = []
    for path, held in gpu_code.items():
        ways = {gpu: coverage(held, gpu.capability) for gpu in gpus}
        left_out = [gpu for gpu, way in ways.items() if way is None]
        jit = [gpu for gpu, way in ways.items() if way == "jit"]
        if len(left_out) == len(gpus):
            errors.append(f"{path} holds {_held(held)}, and none of it runs on "
                          f"{'; '.join(g.describe() for g in gpus)}")
        elif left_out:
            warned.append(f"{package}: {path} holds {_held(held)}: no image for "
                          f"{'; '.join(g.describe() for g in left_out)}; kernels launched there "
                          "fail with \"no kernel image is available\"")
        if jit and len(left_out) < len(gpus):
            warned.append(f"{package}: {path} has no SASS for "
                          f"{'; '.join(g.describe() for g in jit)}: the driver compiles its "
                          "PTX at the first launch (slow once, then cached)")
    if not errors:
        return Verdict(None, warned)
    command = rebuild.replace("{arch}", _arch_name(gpus[0].capability))
    if "{source}" in command:
        here = source if source and Path(source).is_dir() else ""
        shown = f'"{here}"' if " " in here else here or f"<the source tree of {package}>"
        command = command.replace("{source}", shown)
    exact = sorted({i for held in gpu_code.values() for i in held if i.endswith("a")})
    suffix_note = (f" An `a` image ({', '.join(exact)}) runs only on exactly its arch."
                   if exact else "")
    paragraph = (
        f"{package} cannot run on this machine's GPU: {'; '.join(errors)}.{suffix_note} Its "
        "kernels would fail at their first launch with \"no kernel image is available for "
        f"execution on the device\". Fix: rebuild it for this GPU, `{command}`"
        f"; or set {CHECK_VARIABLE}=0 to import it anyway.")
    if not certain:
        return Verdict(None, [*warned, paragraph + " (CUDA_VISIBLE_DEVICES names GPUs by index "
                              "and their order is not certain, so this is a warning.)"])
    return Verdict(paragraph, warned)


def _check_arch(images: dict[str, tuple[str, ...]], env: Any = None) -> Verdict | None:
    environ = os.environ if env is None else env
    if not images or environ.get(CHECK_VARIABLE, "1").strip().lower() in (
            "0", "off", "no", "false"):
        return None
    # Compute capabilities first (all the verdict needs); names and UUIDs only when
    # CUDA_VISIBLE_DEVICES names GPUs by UUID or there is something to say (each query costs).
    by_uuid = "GPU-" in environ.get("CUDA_VISIBLE_DEVICES", "") or "MIG-" in environ.get(
        "CUDA_VISIBLE_DEVICES", "")
    listed = nvml_gpus(details=by_uuid)
    if not listed:
        return None
    gpus, certain = visible_gpus(listed, environ)
    package = __package__ or "this package"
    verdict = judge(images, gpus, certain=certain, package=package, rebuild=REBUILD)
    if (verdict.error or verdict.warnings) and not by_uuid:
        named = nvml_gpus(details=True)
        if named:
            gpus, certain = visible_gpus(named, environ)
            verdict = judge(images, gpus, certain=certain, package=package, rebuild=REBUILD)
    for text in verdict.warnings:
        warnings.warn(text, RuntimeWarning, stacklevel=3)
    if verdict.error is not None:
        raise ImportError(verdict.error)
    return verdict


ARCH_VERDICT: Verdict | None = _check_arch(IMAGES)


# --- extensions the package compiles at run time, built ahead of time -----------------------

#: The names the package's own `torch.utils.cpp_extension.load(name=...)` asks for that
#: flashbuild built ahead of time (rendered): the name -> the built module's dotted name.
JIT: dict[str, str] = {}

#: The environment variable that turns the answer off (`0`, `off`, `no`, `false`): the package
#: then compiles its kernels at run time, as upstream.
PREBUILT_VARIABLE = "FLASHBUILD_PREBUILT"


def _answer_jit(built: dict[str, str], env: Any = None) -> bool:
    """Answer the package's load() of those names with the built module: `flashbuild build`
    compiled them for the package's arch, and compiling them again at import needs nvcc and
    a host compiler where the package runs. Other names reach torch's load as before. Runs
    before the package's own modules, so their `from torch.utils.cpp_extension import load`
    takes this one."""
    environ = os.environ if env is None else env
    if not built or environ.get(PREBUILT_VARIABLE, "1").strip().lower() in (
            "0", "off", "no", "false"):
        return False
    try:
        import importlib  # noqa: PLC0415

        import torch.utils.cpp_extension as cpp  # noqa: PLC0415
    except ImportError:
        return False
    real = cpp.load
    # Another flashbuild package answered first: one stand-in for both.
    known = {**getattr(real, "_flashbuild_jit", {}), **built}
    real = getattr(real, "_flashbuild_real", real)

    def load(name: str, *args: Any, **kwargs: Any) -> Any:
        dotted = known.get(name)
        if dotted is None:
            return real(name, *args, **kwargs)
        module = importlib.import_module(dotted)
        # Also importable by the name it was loaded as, as torch's load() left it while it
        # imported through `imp.load_dynamic` (exllama's `from exllama_ext import q4_matmul`
        # after its load()); a module of that name already imported is kept.
        sys.modules.setdefault(name, module)
        return module

    load._flashbuild_jit = known  # type: ignore[attr-defined]
    load._flashbuild_real = real  # type: ignore[attr-defined]
    cpp.load = load
    return True


JIT_ANSWERED: bool = _answer_jit(JIT)
