"""The build manifest written beside an installed module (`flashbuild-manifest.json`).

The build stage writes it through `Manifest(...).write(folder)`; `flashbuild verify` reads it
with `Manifest.load(path)`, which validates every key and raises a VerifyError naming the bad
one, so nothing past this module sees a raw dict.

`dynamic_smem_symbols` carries the recipe's `[verify] dynamic_smem`: the device constants from
which verify reads, per cubin, the dynamic shared memory each kernel requests on that arch (no
cubin attribute records it; the host picks it at launch).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from flashbuild import platforms
from flashbuild.arch import BuildTarget, parse_arch_spec
from flashbuild.errors import UsageError, VerifyError

if TYPE_CHECKING:
    from pathlib import Path

MANIFEST_NAME = "flashbuild-manifest.json"
SCHEMA_VERSION = 1

ArtifactKind = Literal["module", "plugin"]


@dataclass(frozen=True, kw_only=True)
class Toolkit:
    root: str
    """CUDA toolkit root used for the build."""
    version: str
    """Its version, e.g. `13.0`."""


@dataclass(frozen=True, kw_only=True)
class HostCompiler:
    kind: str
    """`msvc`, `gcc` or `clang`."""
    version: str
    path: str


@dataclass(frozen=True, kw_only=True)
class PatchRecord:
    id: str
    """Patch or transform id from the recipe."""
    sha256: str


@dataclass(frozen=True, kw_only=True)
class Artifact:
    path: str
    """Relative to the manifest's folder, `/`-separated."""
    kind: ArtifactKind
    gpu_code: bool = True
    """The build compiled device code into it. False for a module the build knows holds
    host code only (a setup.py's CppExtension beside its CUDA ones, such as torch_cluster's
    `_version_cpu`): verify then accepts it without GPU code instead of failing it."""


@dataclass(frozen=True, kw_only=True)
class BinaryImages:
    path: str
    """A binary of the package that holds GPU code, as its `artifacts` entry names it."""
    sass: tuple[str, ...] = ()
    """Its SASS images (`sm_90a`, `sm_120`), read from the binary at build time."""
    ptx: tuple[str, ...] = ()
    """Its PTX images (`compute_120`)."""

    @property
    def images(self) -> tuple[str, ...]:
        return (*self.sass, *self.ptx)


@dataclass(frozen=True, kw_only=True)
class KernelSmem:
    kernel: str
    """Kernel name (plain, like `rms_norm_kernel`, or mangled)."""
    dynamic_smem_bytes: int
    """Dynamic shared memory the host code requests at launch."""


@dataclass(frozen=True, kw_only=True)
class DynamicSmemSymbol:
    kernel: str
    """Kernel name, as the recipe's `[verify] dynamic_smem` key (`softmax_tiled`)."""
    symbol: str
    """`extern "C" __device__` constant whose initial value, per cubin, is the dynamic shared
    memory the kernel requests on that cubin's arch; verify reads it from the binary."""


@dataclass(frozen=True, kw_only=True)
class Manifest:
    schema_version: int = SCHEMA_VERSION
    flashbuild: str
    """flashbuild version that built it."""
    recipe: str
    platform: str
    """`linux` or `windows`."""
    archs: tuple[str, ...]
    """The build's target, typed (`BuildTarget.names()`): `("sm_90a", "sm_120+PTX")`.
    Manifests written before it held `ArchSpec.cmake()` text (`90a-real;120`): read into
    the names here."""
    toolkit: Toolkit
    host_compiler: HostCompiler
    patches: tuple[PatchRecord, ...] = ()
    flags: dict[str, Any] = field(default_factory=dict)
    artifacts: tuple[Artifact, ...] = ()
    dll_dirs: tuple[str, ...] = ()
    """Folders the loader shim registers on Windows."""
    preload: tuple[str, ...] = ()
    """Libraries of the environment's PyPI CUDA wheels the loader shim loads first (Linux):
    the binaries need them and would not find them otherwise."""
    import_torch: bool = False
    """Whether the package's binaries link torch's libraries (libc10, libtorch_cpu) that no
    loader path of theirs holds (Linux): the loader shim imports torch first, which loads
    them, as a caller of a torch extension would have to."""
    exports: tuple[str, ...] = ()
    """Names the recipe says the package exports (`rms_norm`, `_C.built_archs`)."""
    kernel_smem: tuple[KernelSmem, ...] = ()
    """Dynamic shared memory per kernel as fixed numbers, the same on every arch."""
    dynamic_smem_symbols: tuple[DynamicSmemSymbol, ...] = ()
    """Per-arch dynamic shared memory declared in the binary (from the recipe's
    `[verify] dynamic_smem`): verify reads each symbol from every cubin and checks it against
    that arch's per-block limit, so a 160 KB request on sm_120 fails without a GPU."""
    ptxas_info: str | None = None
    """`-Xptxas -v` output captured at build time."""
    kernels: tuple[str, ...] = ()
    """The recipe's `[verify] kernels`: names verify looks for (as substrings of the mangled
    names) in the symbol tables of every target arch's cubins."""
    binaries: tuple[BinaryImages, ...] = ()
    """Per binary, the GPU images it holds: what the loader shim compares with the GPUs
    present before the first extension import, and what `doctor --packages` reads."""
    top_level: tuple[str, ...] = ()
    """Modules installed by their own top-level name (`rotary_emb`, causal-conv1d's
    `causal_conv1d_cuda`), not inside the package: verify looks an export whose first part
    is one of them up on that module."""
    torch_version: str = ""
    """The torch the build compiled against (`2.13.0+cu130`; empty when none): verify compares
    it with the torch installed, since c10/at symbols change between torch releases."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.ptxas_info is None:
            del data["ptxas_info"]
        for key in ("kernels", "binaries", "top_level", "torch_version", "preload",
                    "import_torch"):
            if not data[key]:
                del data[key]  # manifests written before the field existed stay byte-equal
        for artifact in data["artifacts"]:
            if artifact["gpu_code"]:
                del artifact["gpu_code"]  # the same: only a host-only module says so
        return data

    def dump(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    def write(self, folder: Path) -> Path:
        """Write `flashbuild-manifest.json` into `folder` atomically; returns its path."""
        target = folder / MANIFEST_NAME
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(self.dump(), encoding="utf-8")
        platforms.current().replace(tmp, target)
        return target

    @classmethod
    def load(cls, path: Path) -> Manifest:
        """Read and validate a manifest file (or the manifest inside a folder)."""
        if path.is_dir():
            path = path / MANIFEST_NAME
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise VerifyError(
                f"no build manifest at {path}",
                evidence="flashbuild writes flashbuild-manifest.json beside every module it "
                "installs",
                fix="build and install with `flashbuild build`, or pass the folder that holds "
                "the manifest",
            ) from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _bad(path, f"it is not readable JSON ({exc})") from exc
        return cls.from_json(raw, where=path)

    @classmethod
    def from_json(cls, raw: object, *, where: Path | str = "manifest") -> Manifest:
        r = _Reader(raw, str(where), "")
        version = r.integer("schema_version")
        if version != SCHEMA_VERSION:
            raise _bad(where, f"schema_version is {version}; this flashbuild reads "
                       f"{SCHEMA_VERSION}")
        tk = r.obj("toolkit")
        hc = r.obj("host_compiler")
        manifest = cls(
            schema_version=version,
            flashbuild=r.text("flashbuild"),
            recipe=r.text("recipe"),
            platform=r.text("platform", choices=("linux", "windows")),
            archs=r.arch_names("archs"),
            toolkit=Toolkit(root=tk.text("root"), version=tk.text("version")),
            host_compiler=HostCompiler(kind=hc.text("kind"), version=hc.text("version"),
                                       path=hc.text("path")),
            patches=tuple(PatchRecord(id=p.text("id"), sha256=p.text("sha256"))
                          for p in r.objs("patches", required=False)),
            flags=r.mapping("flags", required=False),
            artifacts=tuple(Artifact(path=a.text("path"), kind=a.text(
                "kind", choices=("module", "plugin")),  # type: ignore[arg-type]
                gpu_code=a.flag("gpu_code", default=True))
                for a in r.objs("artifacts")),
            dll_dirs=r.strs("dll_dirs", required=False),
            preload=r.strs("preload", required=False),
            import_torch=r.flag("import_torch", default=False),
            exports=r.strs("exports", required=False),
            kernel_smem=tuple(KernelSmem(kernel=k.text("kernel"),
                                         dynamic_smem_bytes=k.integer("dynamic_smem_bytes"))
                              for k in r.objs("kernel_smem", required=False)),
            dynamic_smem_symbols=tuple(
                DynamicSmemSymbol(kernel=d.text("kernel"), symbol=d.text("symbol"))
                for d in r.objs("dynamic_smem_symbols", required=False)),
            ptxas_info=r.opt_str("ptxas_info"),
            kernels=r.strs("kernels", required=False),
            binaries=tuple(BinaryImages(path=b.text("path"), sass=b.strs("sass"),
                                        ptx=b.strs("ptx"))
                           for b in r.objs("binaries", required=False)),
            top_level=r.strs("top_level", required=False),
            torch_version=r.opt_str("torch_version") or "",
        )
        for artifact in manifest.artifacts:
            if not _inside(artifact.path):
                raise _bad(where, f"artifact path {artifact.path!r} leaves the package folder")
        for name in manifest.top_level:
            # A module name: it reaches the import check's command line as one.
            if not name.isidentifier():
                raise _bad(where, f"top_level entry {name!r} is not a module name")
        r.no_extra()
        return manifest


def _inside(path: str) -> bool:
    """An artifact path the manifest may name: inside the package folder, or elsewhere in the
    site-packages that holds it (one leading `..`): `../causal_conv1d_cuda.so`, a setup.py's
    top-level extension module next to its package; `../lib/libggml-base.so`, a library a
    scikit-build-core wheel installs at the top of site-packages (llama-cpp-python 0.3.36's
    CMake installs its libraries both there and into `llama_cpp/lib`)."""
    parts = path.replace("\\", "/").split("/")
    if path.startswith(("/", "\\")) or (len(parts[0]) == 2 and parts[0][1] == ":"):
        return False
    if parts[0] == ".." and len(parts) >= 2:
        parts = parts[1:]
    return all(p not in ("", ".", "..") for p in parts)


def _bad(where: Path | str, why: str) -> VerifyError:
    return VerifyError(f"the build manifest {where} is invalid", evidence=why,
                       fix="rebuild with `flashbuild build` to rewrite it")


_KEYS = {"schema_version", "flashbuild", "recipe", "platform", "archs", "toolkit",
         "host_compiler", "patches", "flags", "artifacts", "dll_dirs", "preload", "import_torch",
         "exports", "kernel_smem", "dynamic_smem_symbols", "ptxas_info", "kernels", "binaries",
         "top_level", "torch_version"}


class _Reader:
    """Typed access to one JSON object with errors that name the key path."""

    def __init__(self, raw: object, where: str, prefix: str) -> None:
        if not isinstance(raw, dict):
            raise _bad(where, f"{prefix or 'the document'} is not a JSON object")
        self.raw: dict[str, object] = raw
        self.where = where
        self.prefix = prefix

    def _get(self, key: str, required: bool = True) -> object:
        if key not in self.raw:
            if required:
                raise _bad(self.where, f"key {self.prefix}{key} is missing")
            return None
        return self.raw[key]

    def text(self, key: str, choices: tuple[str, ...] = ()) -> str:
        value = self._get(key)
        if not isinstance(value, str):
            raise _bad(self.where, f"{self.prefix}{key} must be a string, not {value!r}")
        if choices and value not in choices:
            raise _bad(self.where, f"{self.prefix}{key} is {value!r}; expected one of "
                       f"{', '.join(choices)}")
        return value

    def flag(self, key: str, *, default: bool) -> bool:
        value = self._get(key, required=False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise _bad(self.where, f"{self.prefix}{key} must be true or false, not {value!r}")
        return value

    def opt_str(self, key: str) -> str | None:
        return None if self._get(key, required=False) is None else self.text(key)

    def integer(self, key: str) -> int:
        value = self._get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise _bad(self.where, f"{self.prefix}{key} must be a non-negative integer, "
                       f"not {value!r}")
        return value

    def obj(self, key: str) -> _Reader:
        return _Reader(self._get(key), self.where, f"{self.prefix}{key}.")

    def objs(self, key: str, required: bool = True) -> list[_Reader]:
        value = self._get(key, required)
        if value is None:
            return []
        if not isinstance(value, list):
            raise _bad(self.where, f"{self.prefix}{key} must be a list")
        return [_Reader(v, self.where, f"{self.prefix}{key}[{i}].") for i, v in enumerate(value)]

    def arch_names(self, key: str) -> tuple[str, ...]:
        """The target's names; an older manifest's CMake text (`90a-real;120`) as names."""
        value = self._get(key, True)
        if isinstance(value, str):
            try:
                return tuple(BuildTarget(parse_arch_spec(value)).names())
            except UsageError as exc:
                raise _bad(self.where, f"{self.prefix}{key}: {exc.what}") from None
        return self.strs(key)

    def strs(self, key: str, required: bool = True) -> tuple[str, ...]:
        value = self._get(key, required)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _bad(self.where, f"{self.prefix}{key} must be a list of strings")
        return tuple(value)

    def mapping(self, key: str, required: bool = True) -> dict[str, Any]:
        value = self._get(key, required)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _bad(self.where, f"{self.prefix}{key} must be an object")
        return dict(value)

    def no_extra(self) -> None:
        extra = sorted(set(self.raw) - _KEYS)
        if extra:
            hints = [f"{k} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(
                k, sorted(_KEYS), n=1)) else k for k in extra]
            raise _bad(self.where, "unknown key(s): " + ", ".join(hints))
