"""The loader shim: rendered from a real template, inserted between markers idempotently,
removable byte for byte; on Windows it registers only absolute folders that exist."""

from __future__ import annotations

import ast
import json
import os
import runpy
import sys
from typing import TYPE_CHECKING

import pytest

from flashbuild.installing import shim
from flashbuild.installing.manifest import BinaryImages, Manifest
from flashbuild.installing.resources import loader_shim

if TYPE_CHECKING:
    from pathlib import Path

INIT = '"""pkg docs."""\n\nfrom __future__ import annotations\n\nfrom pkg._C import f\n'


def test_render_is_valid_python_with_data(tmp_path: Path) -> None:
    text = shim.render(["C:\\CUDA\\v13.0\\bin\\x64", "/opt/cuda/lib64"], package="pkg")
    tree = ast.parse(text)
    data = next(t for t in tree.body if isinstance(t, ast.AnnAssign)
                and isinstance(t.target, ast.Name) and t.target.id == "DLL_DIRS")
    assert data.value is not None
    assert ast.literal_eval(data.value) == ("C:\\CUDA\\v13.0\\bin\\x64", "/opt/cuda/lib64")
    assert text.startswith("# Rendered by flashbuild")
    assert "DLL_DIRS: tuple[str, ...] = ()" in shim.render([], package="pkg")


def test_shim_does_nothing_on_linux(tmp_path: Path) -> None:
    path = tmp_path / "s.py"
    path.write_text(shim.render([str(tmp_path)], package="pkg"))
    if sys.platform == "win32":  # pragma: no cover - exercised by the Windows CI job
        pytest.skip("Linux behaviour")
    module = runpy.run_path(str(path))
    assert module["REGISTERED"] == [] and module["_HANDLES"] == []


def test_shim_registers_absolute_existing_folders(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The Windows path of the template, run here with add_dll_directory recorded."""
    calls: list[str] = []
    monkeypatch.setattr(sys, "platform", "win32")
    def add_dll_directory(path: str) -> object:
        calls.append(path)
        return object()

    monkeypatch.setattr(os, "add_dll_directory", add_dll_directory, raising=False)
    path = tmp_path / "s.py"
    path.write_text(shim.render([str(tmp_path), str(tmp_path / "missing"), "relative\\bin"],
                                package="pkg"))
    module = runpy.run_path(str(path))
    assert calls == [str(tmp_path)]  # not the missing one, never a relative (cwd) one
    assert module["REGISTERED"] == [str(tmp_path)] and len(module["_HANDLES"]) == 1


def test_dll_dirs_filters(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    got = shim.dll_dirs([tmp_path / "bin", tmp_path / "nope", "bin", tmp_path / "bin"])
    assert got == (str(tmp_path / "bin"),)
    assert shim.dll_dirs(["C:\\CUDA\\bin", "rel"], must_exist=False) == ("C:\\CUDA\\bin",)


def test_insert_after_docstring_and_future_and_idempotent() -> None:
    once = shim.insert(INIT)
    lines = once.splitlines()
    assert lines.index(shim.BEGIN) > lines.index("from __future__ import annotations")
    assert lines.index(shim.END) < lines.index("from pkg._C import f")
    assert shim.insert(once) == once
    assert shim.has_block(once) and not shim.has_block(INIT)
    ast.parse(once)


def test_remove_restores_bytes_crlf() -> None:
    crlf = INIT.replace("\n", "\r\n")
    inserted = shim.insert(crlf)
    assert "\r\n" + shim.BEGIN + "\r\n" in inserted and "\n\n" not in inserted.replace("\r\n", "")
    assert shim.remove(inserted) == crlf
    assert shim.remove(shim.insert(INIT)) == INIT
    assert shim.remove(INIT) == INIT


def test_empty_init_and_install_uninstall(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    shim.install_shim(pkg, ["/x"], package="pkg")
    text = (pkg / "__init__.py").read_text()
    assert text.startswith(shim.BEGIN)
    mtime = (pkg / "__init__.py").stat().st_mtime_ns
    shim.install_shim(pkg, ["/x"], package="pkg")  # unchanged: not rewritten
    assert (pkg / "__init__.py").stat().st_mtime_ns == mtime
    shim.uninstall_shim(pkg)
    assert (pkg / "__init__.py").read_text() == ""
    assert not (pkg / "_flashbuild_shim.py").exists()


def test_unterminated_block_is_an_error() -> None:
    from flashbuild.errors import InstallError

    with pytest.raises(InstallError):
        shim.remove(shim.BEGIN + "\nimport x\n")


@pytest.mark.parametrize("init", ['"""Docstring without a final newline."""',
                                  "from __future__ import annotations"])
def test_insert_into_init_without_final_newline_is_idempotent_and_removable(init: str) -> None:
    once = shim.insert(init)
    assert shim.has_block(once)
    assert shim.insert(once) == once
    assert shim.BEGIN not in shim.remove(once)
    assert shim.remove(once).rstrip("\n") == init
    compile(once, "__init__.py", "exec")


def test_folders_for_imports_finds_wheel_dll_folders_by_name(tmp_path: Path) -> None:
    from flashbuild.installing.shim import folders_for_imports

    site = tmp_path / "site-packages"
    cudart = site / "nvidia" / "cu13" / "bin" / "x86_64"
    torch_lib = site / "torch" / "lib"
    unrelated = site / "nvidia" / "cublas" / "bin"
    for folder, name in ((cudart, "cudart64_13.dll"), (torch_lib, "c10.dll"),
                         (unrelated, "cublas64_13.dll")):
        folder.mkdir(parents=True)
        (folder / name).write_bytes(b"MZ")
    found = folders_for_imports(["CUDART64_13.dll", "c10.dll", "KERNEL32.dll"], [site])
    assert set(found) == {cudart, torch_lib}
    assert folders_for_imports([], [site]) == []


# --- arch-aware loading: the rule and the verdict (the NVML path runs in
# tests/integration/test_arch_check.py against a stand-in library) ---------------------------

RTX_5090 = loader_shim.Gpu(0, "NVIDIA GeForce RTX 5090", (12, 0))
H100 = loader_shim.Gpu(1, "NVIDIA H100", (9, 0))


@pytest.mark.parametrize(("image", "capability", "way"), [
    ("sm_90a", (9, 0), "sass"),
    ("sm_90a", (12, 0), None),     # `a`: exactly its arch
    ("sm_90", (9, 0), "sass"),
    ("sm_80", (8, 6), "sass"),     # SASS runs on later minors of its major
    ("sm_86", (8, 0), None),
    ("sm_90", (12, 0), None),      # never across majors
    ("sm_120", (12, 1), "sass"),   # an RTX 5090 build on a GB10
    ("sm_120a", (12, 1), None),
    ("sm_100f", (10, 3), "sass"),  # `f`: the family
    ("sm_100f", (12, 0), None),
    ("compute_90", (12, 0), "jit"),
    ("compute_120", (9, 0), None),
    ("compute_90a", (9, 0), "jit"),
    ("compute_90a", (10, 0), None),
    ("compute_100f", (10, 3), "jit"),
    ("compute_100f", (12, 0), None),
    ("lto_90", (9, 0), None),
])
def test_what_a_gpu_runs(image: str, capability: tuple[int, int], way: str | None) -> None:
    assert loader_shim.image_runs(image, capability) == way


def test_no_image_for_the_gpu_is_the_paragraph() -> None:
    verdict = loader_shim.judge({"_C.so": ("sm_90a",)}, [RTX_5090], package="flashkern",
                                rebuild="flashbuild build '/my tree' --arch {arch}")
    assert verdict.warnings == []
    assert verdict.error == (
        "flashkern cannot run on this machine's GPU: _C.so holds sm_90a SASS and no PTX, and "
        "none of it runs on GPU 0 (NVIDIA GeForce RTX 5090, compute capability 12.0). An `a` "
        "image (sm_90a) runs only on exactly its arch. Its kernels would fail at their first "
        "launch with \"no kernel image is available for execution on the device\". Fix: rebuild "
        "it for this GPU, `flashbuild build '/my tree' --arch sm_120`; or set "
        "FLASHBUILD_ARCH_CHECK=0 to import it anyway.")


def test_covered_jit_partial_and_uncertain() -> None:
    assert loader_shim.judge({"_C.so": ("sm_120", "compute_120")}, [RTX_5090]).error is None
    assert loader_shim.judge({"_C.so": ("sm_120",)}, [RTX_5090]).warnings == []
    jit = loader_shim.judge({"_C.so": ("sm_90a", "compute_90")}, [RTX_5090])
    assert jit.error is None and "compiles its PTX at the first launch" in jit.warnings[0]
    partial = loader_shim.judge({"_C.so": ("sm_90a",)}, [H100, RTX_5090])
    assert partial.error is None and len(partial.warnings) == 1
    assert "no image for GPU 0 (NVIDIA GeForce RTX 5090" in partial.warnings[0]
    unsure = loader_shim.judge({"_C.so": ("sm_90a",)}, [RTX_5090], certain=False)
    assert unsure.error is None and "is not certain" in unsure.warnings[-1]
    # Host-only helpers and no GPU at all: nothing to judge.
    assert loader_shim.judge({"helper.so": ()}, [RTX_5090]) == loader_shim.Verdict(None, [])
    assert loader_shim.judge({"_C.so": ("sm_90a",)}, []) == loader_shim.Verdict(None, [])
    # Any binary that runs nowhere refuses the package, although another one runs.
    mixed = loader_shim.judge({"_C.so": ("sm_120",), "_attn.so": ("sm_90a",)}, [RTX_5090])
    assert mixed.error is not None and "_attn.so holds sm_90a" in mixed.error
    assert "_C.so" not in mixed.error


def test_visible_devices() -> None:
    gpus = [RTX_5090._replace(uuid="GPU-aaaa"), H100._replace(uuid="GPU-bbbb")]
    assert loader_shim.visible_gpus(gpus, {}) == (gpus, True)
    assert loader_shim.visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": ""}) == ([], True)
    assert loader_shim.visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": "-1"}) == ([], True)
    assert loader_shim.visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-bb"}) == (gpus[1:], True)
    assert loader_shim.visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": "1"}) == (gpus[1:], False)
    assert loader_shim.visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": "1",
                                           "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == (gpus[1:], True)
    # CUDA stops at the first entry it cannot use.
    assert loader_shim.visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": "0,7,1",
                                           "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == (gpus[:1], True)
    same = [RTX_5090, RTX_5090._replace(number=1)]
    assert loader_shim.visible_gpus(same, {"CUDA_VISIBLE_DEVICES": "1"}) == (same[1:], True)


def test_render_images_and_rebuild_round_trip(tmp_path: Path) -> None:
    text = shim.render([], package="pkg", images={"_C.so": ("sm_90a", "compute_90"),
                                                  "../top_cuda.so": ("sm_120",)},
                       rebuild="flashbuild build '/t {x}' --arch {arch}")
    path = tmp_path / "s.py"
    path.write_text(text)
    module = runpy.run_path(str(path), run_name="rendered")
    assert module["IMAGES"] == {"_C.so": ("sm_90a", "compute_90"), "../top_cuda.so": ("sm_120",)}
    assert module["REBUILD"] == "flashbuild build '/t {x}' --arch {arch}"
    plain = shim.render([], package="pkg")
    assert "IMAGES: dict[str, tuple[str, ...]] = {}" in plain


def test_manifest_keeps_the_images_per_binary() -> None:
    raw = {"schema_version": 1, "flashbuild": "0", "recipe": "r", "platform": "linux",
           "archs": "90a-real", "toolkit": {"root": "/c", "version": "13.0"},
           "host_compiler": {"kind": "gcc", "version": "12", "path": "/g"},
           "artifacts": [{"path": "_C.so", "kind": "module"}],
           "binaries": [{"path": "_C.so", "sass": ["sm_90a"], "ptx": ["compute_90"]}]}
    manifest = Manifest.from_json(raw)
    assert manifest.binaries == (BinaryImages(path="_C.so", sass=("sm_90a",),
                                              ptx=("compute_90",)),)
    assert manifest.binaries[0].images == ("sm_90a", "compute_90")
    assert Manifest.from_json(json.loads(manifest.dump())) == manifest
    del raw["binaries"]
    assert "binaries" not in Manifest.from_json(raw).to_json()  # older manifests stay as they were


def test_nvml_is_loaded_by_its_full_path_on_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never a bare `nvml.dll` (the search would include the current folder): System32, then
    the NVSMI folder of older drivers; no library, no check."""
    tried: list[str] = []

    def refuse(name: str) -> object:
        tried.append(name)
        raise OSError(126, "not found")

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(loader_shim.ctypes, "CDLL", refuse)
    monkeypatch.setenv("SYSTEMROOT", "C:\\Windows")
    monkeypatch.setenv("PROGRAMFILES", "C:\\Program Files")
    assert loader_shim.nvml_gpus() is None
    assert [t.replace("\\", "/") for t in tried] == [
        "C:/Windows/System32/nvml.dll",
        "C:/Program Files/NVIDIA Corporation/NVSMI/nvml.dll"]
    assert loader_shim._check_arch({"_C.pyd": ("sm_90a",)}, env={}) is None


def test_the_fix_names_the_tree_only_where_it_exists(tmp_path: Path) -> None:
    """A wheel imported on another machine than the one that built it (a CI runner's tree):
    the command says which tree to build instead of naming a folder that is not there."""
    tree = tmp_path / "my tree"
    tree.mkdir()
    rebuild = "flashbuild build {source} --arch {arch}"
    here = loader_shim.judge({"_C.so": ("sm_90a",)}, [RTX_5090], package="pkg",
                             rebuild=rebuild, source=str(tree))
    assert here.error is not None
    assert f'`flashbuild build "{tree}" --arch sm_120`' in here.error
    gone = loader_shim.judge({"_C.so": ("sm_90a",)}, [RTX_5090], package="pkg",
                             rebuild=rebuild, source="/home/runner/work/pkg")
    assert gone.error is not None
    assert "`flashbuild build <the source tree of pkg> --arch sm_120`" in gone.error
    text = shim.render([], package="pkg", images={"_C.so": ("sm_90a",)}, rebuild=rebuild,
                       source="/home/runner/work/pkg")
    path = tmp_path / "s.py"
    path.write_text(text)
    module = runpy.run_path(str(path), run_name="rendered")
    assert module["SOURCE"] == "/home/runner/work/pkg" and module["REBUILD"] == rebuild
