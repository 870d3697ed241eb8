"""The pristine csrc/ tree with real CMake + Ninja + nvcc (compile only, no GPU needed):
it builds for sm_90a, a pristine sm_120 build stops at the arch allow-list's #error, and the
host-template instantiation in norm.cu is what resolves fusion.cu's call (deleting it leaves
an undefined symbol in the module, which import would report).

One sm_90a configure and build of a copy of csrc is shared by the file: the tests that edit the
copy rebuild it incrementally (Ninja recompiles the files they changed), and the copy is put
back byte for byte after each of them."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pybind11
import pytest
from elftools.elf.elffile import ELFFile

from flashbuild.proc import Completed, ProcessRunner

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
VENV_BIN = Path(sys.executable).parent
HOST_TEMPLATE_LINE = (
    "template void launch_rms_norm<__half>(__half*, const __half*, const __half*, int64_t, "
    "int64_t, float, cudaStream_t);\n"
)
# Itanium mangling of fk::launch_rms_norm<__half>(...).
HOST_TEMPLATE_SYMBOL = "_ZN2fk15launch_rms_normI6__halfEEvPT_PKS2_S5_llfP11CUstream_st"


@dataclass(frozen=True)
class Build:
    configure: Completed
    compile: Completed | None
    out_dir: Path

    @property
    def ok(self) -> bool:
        return self.configure.ok and self.compile is not None and self.compile.ok

    @property
    def log(self) -> str:
        return self.configure.output + "\n" + (self.compile.output if self.compile else "")

    def module(self) -> Path:
        found = sorted(self.out_dir.glob("_C*.so"))
        assert found, f"no module in {self.out_dir}:\n{self.log[-3000:]}"
        return found[0]


@pytest.fixture(scope="module")
def cuda_root(cuda_toolkit_root: Path) -> Path:
    """FLASHBUILD_TEST_CUDA_ROOT if set, else the toolkit the other integration tests use
    (the PyPI one of this interpreter, shaped for CMake), so a fresh machine runs this too."""
    env = os.environ.get("FLASHBUILD_TEST_CUDA_ROOT")
    return Path(env) if env else cuda_toolkit_root


CMAKE = str(VENV_BIN / "cmake") if (VENV_BIN / "cmake").exists() else "cmake"


def cmake_configure(src: Path, work: Path, archs: str, cuda_root: Path) -> Completed:
    ninja = str(VENV_BIN / "ninja") if (VENV_BIN / "ninja").exists() else "ninja"
    return ProcessRunner().run(
        [CMAKE, "-S", src, "-B", work / "build", "-G", "Ninja",
         f"-DCMAKE_MAKE_PROGRAM={ninja}",
         f"-DCMAKE_CUDA_COMPILER={cuda_root / 'bin' / 'nvcc'}",
         f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
         f"-DFLASHKERN_OUTPUT_DIR={work / 'out'}",
         f"-DPython_EXECUTABLE={sys.executable}",
         f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"],
        timeout=300, check=False)


def cmake_build(src: Path, work: Path, archs: str, cuda_root: Path) -> Build:
    configure = cmake_configure(src, work, archs, cuda_root)
    if not configure.ok:
        return Build(configure, None, work / "out")
    return rebuild(work, configure)


def rebuild(work: Path, configure: Completed) -> Build:
    """`cmake --build` in a configured `work/build`: Ninja compiles what changed."""
    compiled = ProcessRunner().run([CMAKE, "--build", work / "build", "-j2"], timeout=600,
                                   check=False)
    return Build(configure, compiled, work / "out")


def dynsym_undefined(path: Path) -> set[str]:
    with path.open("rb") as fh:
        section = ELFFile(fh).get_section_by_name(".dynsym")
        assert section is not None
        return {s.name for s in section.iter_symbols() if s["st_shndx"] == "SHN_UNDEF"}


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@dataclass(frozen=True)
class Workspace:
    """`root/csrc` (a copy of csrc), configured and built for sm_90a in `root/build`."""

    root: Path
    pristine: Build  # the first build; its out_dir is a copy no later build writes to
    files: dict[str, bytes]  # the copy's files as built

    @property
    def src(self) -> Path:
        return self.root / "csrc"


@pytest.fixture(scope="module")
def workspace(cuda_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("csrc-90a")
    shutil.copytree(CSRC, root / "csrc", ignore=shutil.ignore_patterns(
        "build*", "*.so", "__pycache__", ".flashbuild", "flashbuild-manifest.json"))
    build = cmake_build(root / "csrc", root, "90a-real", cuda_root)
    if build.out_dir.is_dir():
        shutil.copytree(build.out_dir, root / "pristine-out")
    return Workspace(root=root, pristine=Build(build.configure, build.compile,
                                               root / "pristine-out"),
                     files=_files(root / "csrc"))


@pytest.fixture(scope="module")
def sm90_build(workspace: Workspace) -> Build:
    return workspace.pristine


@pytest.fixture
def edited_workspace(workspace: Workspace) -> Iterator[tuple[Workspace, Callable[[], Build]]]:
    """The shared copy for a test that edits it, with a rebuild of the shared build folder.
    Afterwards every file is written back as it was (with a new mtime, so the next rebuild
    compiles it again) and whatever the test added is removed."""
    assert workspace.pristine.ok, workspace.pristine.log[-4000:]
    assert _files(workspace.src) == workspace.files, "a test left the shared copy edited"
    try:
        yield workspace, lambda: rebuild(workspace.root, workspace.pristine.configure)
    finally:
        for path in sorted(workspace.src.rglob("*"), reverse=True):
            rel = path.relative_to(workspace.src).as_posix()
            if path.is_dir() and not path.is_symlink():
                if not any(name.startswith(rel + "/") for name in workspace.files):
                    shutil.rmtree(path)
            elif rel not in workspace.files:
                path.unlink()
        for rel, data in workspace.files.items():
            path = workspace.src / rel
            if not path.is_file() or path.read_bytes() != data:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)


@pytest.mark.heavy
def test_pristine_tree_builds_for_sm90a(sm90_build: Build) -> None:
    assert sm90_build.ok, sm90_build.log[-4000:]
    assert "flashkern: sm90 sources ON" in sm90_build.configure.output
    assert sm90_build.module().is_file()
    plugin = sm90_build.out_dir / "libflashkern_attn.so"
    assert plugin.is_file()
    with plugin.open("rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        assert dynsym is not None
        exported = {s.name for s in dynsym.iter_symbols() if s["st_shndx"] != "SHN_UNDEF"}
    assert {"fk_attn_forward", "fk_attn_abi_version", "fk_attn_name"} <= exported
    # The module resolves fusion.cu's call to the host template inside itself.
    assert HOST_TEMPLATE_SYMBOL not in dynsym_undefined(sm90_build.module())


def test_pristine_tree_fails_for_sm120(cuda_root: Path, tmp_path: Path) -> None:
    configure = cmake_configure(CSRC, tmp_path, "120-real", cuda_root)
    assert configure.ok, configure.output[-4000:]
    assert "flashkern: sm90 sources OFF" in configure.output
    # The build stops at softmax_tiled.cu's object, which the module links: build that object
    # (the full build compiled most of the other files first, about a minute, before it got
    # there and stopped with the same error).
    obj = "CMakeFiles/_C.dir/arch/softmax_tiled.cu.o"
    ninja = (tmp_path / "build" / "build.ninja").read_text(encoding="utf-8")
    link = next(line for line in ninja.splitlines()
                if line.startswith("build ") and "_C." in line.split(":")[0]
                and "LINKER" in line)
    assert obj in link.split(), link
    compiled = ProcessRunner().run([CMAKE, "--build", tmp_path / "build", "--target", obj],
                                   timeout=600, check=False)
    build = Build(configure, compiled, tmp_path / "out")
    assert not build.ok
    assert "flashkern: unsupported __CUDA_ARCH__" in build.log
    assert "softmax_tiled.cu" in build.log


@pytest.mark.heavy
def test_deleting_the_host_template_instantiation_breaks_the_link(
        sm90_build: Build, edited_workspace: tuple[Workspace, Callable[[], Build]]) -> None:
    workspace, build_again = edited_workspace
    norm = workspace.src / "kernels" / "norm.cu"
    text = norm.read_text()
    assert text.count(HOST_TEMPLATE_LINE) == 1
    norm.write_text(text.replace(HOST_TEMPLATE_LINE, ""))
    build = build_again()
    # A shared module links with undefined symbols on Linux; the loader then refuses it at
    # import ("undefined symbol: ..."). The symbol table shows that without a GPU.
    assert build.ok, build.log[-4000:]
    assert HOST_TEMPLATE_SYMBOL in dynsym_undefined(build.module())
    assert HOST_TEMPLATE_SYMBOL not in dynsym_undefined(sm90_build.module())


@pytest.mark.heavy
def test_remove_mode_keeps_the_host_instantiation_another_file_needs(
        edited_workspace: tuple[Workspace, Callable[[], Build]]) -> None:
    """The explicit-instantiations transform in `remove` mode, run for real on csrc: every
    kernel instantiation goes, the host template fusion.cu calls stays, and the built module
    still defines that symbol (checked in its symbol table, as `nm` would)."""
    import json
    import subprocess

    workspace, build_again = edited_workspace
    src = workspace.src
    recipe = workspace.root / "remove.toml"
    recipe.write_text(
        '[recipe]\nname = "csrc-remove"\n\n[source]\npath = "csrc"\n'
        'sources = ["**/*.cu", "**/*.cuh", "**/*.cpp", "**/*.h"]\n\n'
        '[[patch]]\nid = "remove-instantiations"\ntransform = "explicit-instantiations"\n'
        'params = { files = ["kernels/*.cu"], mode = "remove" }\n', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "flashbuild", "patch", "--recipe", str(recipe), "--json"],
        capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    sites = [site for step in report["steps"] for site in step["sites"]]
    kept = [site for site in sites if site["action"] == "keep"]
    assert kept and all("launch_rms_norm" in site["snippet"] for site in kept)
    assert any(site["action"] == "edit" for site in sites)
    norm = (src / "kernels" / "norm.cu").read_text()
    assert HOST_TEMPLATE_LINE in norm
    assert "template __global__ void rms_norm_kernel<float, 1>" not in norm

    build = build_again()
    assert build.ok, build.log[-4000:]
    # The module is stripped (pybind11 strips Release builds), so read the built object's
    # symbol table, as `nm` would: norm.cu.o defines the instantiation fusion.cu calls ...
    objects = sorted((workspace.root / "build").rglob("norm.cu.o"))
    assert objects, "norm.cu.o not found in the build folder"
    with objects[0].open("rb") as fh:
        symtab = ELFFile(fh).get_section_by_name(".symtab")
        assert symtab is not None
        defined = {s.name for s in symtab.iter_symbols() if s["st_shndx"] != "SHN_UNDEF"}
    assert HOST_TEMPLATE_SYMBOL in defined
    # ... and the linked module does not ask the loader for it.
    assert HOST_TEMPLATE_SYMBOL not in dynsym_undefined(build.module())
