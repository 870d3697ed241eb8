"""The setuptools backend for real: pip, setuptools, torch's BuildExtension, Ninja and nvcc.

What runs where: on this CPU machine torch is the CPU-only wheel. It carries torch's headers
but not its CUDA libraries, so an extension compiles and then cannot link (`-lc10_cuda`), and
`flashbuild build` itself refuses a CPU torch before it starts (the first test). The other
tests skip that refusal (monkeypatched) to drive the real build as far as it goes: the build
hook must have replaced the setup.py's hard-coded gencode list, torch's generated build.ninja
and the object file must hold sm_90a only. On a machine with a CUDA torch (the GPU machine)
the same test links and installs. They skip when torch is not installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from flashbuild.arch import parse_arch_spec
from flashbuild.building.backends import setuptools as st
from flashbuild.errors import BuildError, FlashbuildError
from flashbuild.verifying.fatbin import list_images

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed")]

SETUP = """import os
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

ext = [CUDAExtension(
    name="tinyext._C",
    sources=["csrc/scale.cu"],
    extra_compile_args={{"cxx": ["-O2"],
                        "nvcc": ["-O2", "-gencode", "arch=compute_80,code=sm_80",
                                 "-gencode=arch=compute_86,code=sm_86", "--threads", "2"]}},
)]
{extra}
setup(name="tinyext", version="0.1", packages=["tinyext"], ext_modules=ext,
      cmdclass={{"build_ext": BuildExtension}})
"""
# No torch headers: the compile stays small; the module's init symbol is what Python needs.
KERNEL = """extern "C" __global__ void tiny_scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
"""
RECIPE = """[recipe]
name = "tinyext"
[source]
path = "."
[build]
backend = "setuptools"
[[build.env]]
set = { TINYEXT_ARCHS = "{arch_numbers}" }
[install]
package = "tinyext"
package_dir = "tinyext"
"""


def _tree(root: Path, extra: str = "") -> Path:
    tree = root / "tinyext"
    (tree / "csrc").mkdir(parents=True)
    (tree / "tinyext").mkdir()
    (tree / "setup.py").write_text(SETUP.format(extra=extra))
    (tree / "csrc" / "scale.cu").write_text(KERNEL)
    (tree / "tinyext" / "__init__.py").write_text('"""tinyext."""\n')
    (tree / "tiny.toml").write_text(RECIPE)
    return tree


def _run_build(tree: Path, cuda: Path, build_dir: Path) -> None:
    from flashbuild.pipeline.command import run_build

    run_build(recipe=str(tree / "tiny.toml"), source=None, arch="sm_90a", cuda=cuda,
              platform=None, jobs_text="2", launcher_text="none", install_text="wheel",
              build_dir=build_dir, as_json=True)


def test_a_cpu_only_torch_is_refused_before_anything_is_staged(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = _tree(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "flashbuild", "build", "--recipe", str(tree / "tiny.toml"),
         "--arch", "sm_90a", "--cuda", str(cuda_toolkit_root), "--build-dir",
         str(tmp_path / "b"), "--json"], capture_output=True, text=True, check=False,
        timeout=600)
    torch_cuda = subprocess.run([sys.executable, "-c", "import torch; print(torch.version.cuda)"],
                                capture_output=True, text=True, check=False).stdout.strip()
    if torch_cuda not in ("", "None"):
        pytest.skip("torch here is a CUDA build")
    assert done.returncode == 3, done.stderr
    doc = json.loads(done.stdout)
    assert "CPU-only" in doc["what"] and "torch.version.cuda is None" in doc["evidence"]
    assert not (tmp_path / "b" / "src").exists(), "nothing may be staged before the refusal"


def test_the_hard_coded_gencode_list_is_replaced_by_the_requested_arch(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path)
    build_dir = tmp_path / "b"
    try:
        _run_build(tree, cuda_toolkit_root, build_dir)
        linked = True
    except BuildError as exc:  # the CPU-only torch has no libc10_cuda to link
        assert "c10_cuda" in str(exc) + exc.evidence or "torch_cuda" in exc.evidence, exc
        linked = False
    mirror = build_dir / "src"
    hook = [json.loads(line) for line in
            (build_dir / "logs" / "hook.jsonl").read_text().splitlines()]
    assert hook[0]["extension"] == "tinyext._C"
    assert hook[0]["removed"] == ["-gencode", "arch=compute_80,code=sm_80",
                                  "-gencode=arch=compute_86,code=sm_86"]
    ninja = next((mirror / "build").rglob("build.ninja")).read_text()
    assert "sm_90a" in ninja and "sm_80" not in ninja and "sm_86" not in ninja
    objects = list((mirror / "build").rglob("scale.o"))
    assert objects, "nvcc did not compile the source"
    assert [i.name for i in list_images(objects[0]).sass] == ["sm_90a"]
    assert (tree / "setup.py").read_text() == SETUP.format(extra=""), "the tree was changed"
    if linked:  # a CUDA torch: the wheel was installed with the shim
        assert (build_dir / "dist").is_dir()


def test_the_build_runs_the_setup_py_once(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `pip wheel` ran it twice, for the metadata (`dist_info`) and for the wheel, each run
    # importing torch (about 3.5 s of CPU here); the backend's build_wheel hook alone runs it
    # once. A recipe build does no record run.
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    runs = tmp_path / "runs.txt"
    tree = _tree(tmp_path, extra=f"import sys\nopen({str(runs)!r}, 'a').write(sys.argv[1] + '\\n')")
    with contextlib.suppress(BuildError):  # the CPU-only torch has no libc10_cuda to link
        _run_build(tree, cuda_toolkit_root, tmp_path / "b")
    assert runs.read_text().split() == ["bdist_wheel"]


def test_a_setup_py_that_turns_ninja_off_is_built_with_ninja_and_told(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`BuildExtension(use_ninja=False)` (torch-points-kernels) compiles one unit at a time:
    the build turns ninja back on, so torch writes its build.ninja and compiles MAX_JOBS
    units at a time, and the hook reports it for the build's note. Relative include folders
    are made absolute first, as they resolved without ninja."""
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    # ... with a relative include folder, as torch-points-kernels has: setuptools resolved it
    # from the setup.py's folder, torch's ninja runs in the build folder.
    tree = _tree(tmp_path, extra=(
        "ext[0].include_dirs.append('csrc/inc')\n"
        "ext[0].extra_compile_args['nvcc'] += ['-Icsrc/more']\n"
        "_Base = BuildExtension\n\n\n"
        "class BuildExtension(_Base):\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        super().__init__(*args, use_ninja=False, **kwargs)\n"))
    for folder, header in (("inc", "tiny.h"), ("more", "more.h")):
        (tree / "csrc" / folder).mkdir()
        (tree / "csrc" / folder / header).write_text("#define TINY_FACTOR 1\n")
    (tree / "csrc" / "scale.cu").write_text('#include "tiny.h"\n#include "more.h"\n' + KERNEL)
    build_dir = tmp_path / "b"
    with contextlib.suppress(BuildError):  # the CPU-only torch has no libc10_cuda to link
        _run_build(tree, cuda_toolkit_root, build_dir)
    hook = [json.loads(line) for line in
            (build_dir / "logs" / "hook.jsonl").read_text().splitlines()]
    assert {"ninja_turned_on": True} in hook, hook
    built = build_dir / "src" / "build"
    assert list(built.rglob("build.ninja")), "torch compiled without ninja"
    assert list(built.rglob("scale.o")), "nvcc did not compile"
    request = SimpleNamespace(arch=parse_arch_spec("sm_90a"))
    notes = st._hook_notes(hook, request, None)  # type: ignore[arg-type]
    assert any("use_ninja=False" in n and "FLASHBUILD_SETUP_NINJA=0" in n for n in notes)


def test_a_setup_py_that_needs_a_visible_gpu_builds_for_the_target(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: the setup.py's own `torch.cuda.is_available()` (run by pip's PEP 517
    backend, where setup.py is exec'd text) is answered for the target and its capability is
    --arch's, so the build compiles instead of stopping at pip's metadata step."""
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path, extra=(
        "import torch\n"
        "if not torch.cuda.is_available():\n"
        "    raise RuntimeError('CPU version is not implemented')\n"
        "assert torch.cuda.get_device_capability() == (9, 0)\n"))
    build_dir = tmp_path / "b"
    with contextlib.suppress(BuildError):  # the CPU-only torch has no libc10_cuda to link
        _run_build(tree, cuda_toolkit_root, build_dir)
    hook = [json.loads(line) for line in
            (build_dir / "logs" / "hook.jsonl").read_text().splitlines()]
    asked = {(r["gpu_presented"], r["where"]) for r in hook if "gpu_presented" in r}
    assert ("torch.cuda.is_available", "setup.py:13") in asked, hook
    assert ("torch.cuda.get_device_capability", "setup.py:15") in asked, hook
    assert list((build_dir / "src" / "build").rglob("scale.o")), "nvcc did not compile"


def test_a_setup_py_that_downloads_during_the_build_is_named(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    # As causal-conv1d's bdist_wheel does unless its FORCE_BUILD switch is set (a closed
    # loopback port stands in for GitHub: the fetch fails at once, as it does offline).
    fetch = ("import urllib.request\n"
             "if os.environ.get('TINYEXT_ARCHS') == '90':\n"
             "    print('Guessing wheel URL: http://127.0.0.1:9/tinyext.whl')\n"
             "    urllib.request.urlopen('http://127.0.0.1:9/tinyext.whl', timeout=5)\n")
    tree = _tree(tmp_path, extra=fetch)
    with pytest.raises(FlashbuildError) as err:
        _run_build(tree, cuda_toolkit_root, tmp_path / "b")
    assert err.value.exit_code == 6
    assert "tried to download" in str(err.value)
    assert "Guessing wheel URL" in err.value.evidence
    assert "FORCE_BUILD" in err.value.fix


def test_a_wheel_without_any_extension_module_is_an_error(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path, extra="ext = []  # as a SKIP_CUDA_BUILD switch would\n")
    with pytest.raises(BuildError) as err:
        _run_build(tree, cuda_toolkit_root, tmp_path / "b")
    assert "without any extension module" in str(err.value)
    assert not list((tmp_path / "b").glob("flashbuild-install.json")), "nothing installed"
    shutil.rmtree(tmp_path / "b")


def test_a_cuda_extension_without_device_code_is_an_error(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDAExtension whose sources hold no .cu file used to build "compiled 0 step(s)",
    exit 0, with no arch proof (its wheel then failed verify)."""
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path, extra=(
        "open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'csrc', 'host.cpp'),"
        " 'w').write('int host_only() { return 1; }\\n')\n"
        "ext[0].sources = ['csrc/host.cpp']  # as a glob that matched no .cu would\n"))
    with pytest.raises(BuildError) as err:
        _run_build(tree, cuda_toolkit_root, tmp_path / "b")
    text = str(err.value)
    assert "declares `tinyext._C` a CUDA extension" in text, text
    assert "compiled no device code" in text and "csrc/host.cpp" in err.value.evidence
    assert "CppExtension" in err.value.fix


def test_several_extensions_build_side_by_side_each_in_its_own_folder(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With eight jobs the hook builds two extensions at once (FLASHBUILD_EXT_LANES=2), each
    with its own build_temp: two build.ninja files, both for --arch, both objects compiled
    (setuptools' own `--parallel` writes both into one folder, one build.ninja over the
    other)."""
    from flashbuild.pipeline.command import run_build

    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path, extra=(
        "ext.append(CUDAExtension(name='tinyext._D', sources=['csrc/shift.cu'],\n"
        "                         extra_compile_args={'nvcc': ['-O2']}))\n"))
    (tree / "csrc" / "shift.cu").write_text(KERNEL.replace("tiny_scale", "tiny_shift"))
    build_dir = tmp_path / "b"
    with contextlib.suppress(BuildError):  # the CPU-only torch has no libc10_cuda to link
        run_build(recipe=str(tree / "tiny.toml"), source=None, arch="sm_90a",
                  cuda=cuda_toolkit_root, platform=None, jobs_text="8", launcher_text="none",
                  install_text="wheel", build_dir=build_dir, as_json=True)
    hook = [json.loads(line) for line in
            (build_dir / "logs" / "hook.jsonl").read_text().splitlines()]
    assert {"extension_lanes": 2, "max_jobs_each": "4"} in hook, hook
    ninjas = sorted((build_dir / "src" / "build").rglob("build.ninja"))
    assert [n.parent.name for n in ninjas] == ["ext-0", "ext-1"], ninjas
    for ninja in ninjas:
        assert "sm_90a" in ninja.read_text(), ninja
    assert list((build_dir / "src" / "build").rglob("scale.o"))
    assert list((build_dir / "src" / "build").rglob("shift.o"))
