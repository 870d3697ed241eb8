"""`-Xcompiler -include,H` in a setup.py's nvcc flags (SpargeAttn's `-include,cassert`): with
CUDA 13 the host compiler reads the header twice and libstdc++ stops with "redefinition of
'void std::__terminate()'" (SpargeAttn#115). The build hook makes it nvcc's own
`--pre-include H`, which compiles. Real nvcc, one small unit each way."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchload import load

pytestmark = pytest.mark.integration

HOOK = Path(__file__).resolve().parents[2] / "flashbuild" / "building" / "backends" / \
    "resources" / "sitecustomize.py"
UNIT = "#include <cstdio>\n__global__ void k(int* x) { assert(x); x[0] = 1; }\n"


def _hook() -> ModuleType:
    return load("fb_hook_host_include", HOOK)


@pytest.mark.parametrize("flags", [
    ["-O3", "-Xcompiler", "-include,cassert", "--use_fast_math"],
    ["-O3", "-Xcompiler=-include,cassert"],
    ["--compiler-options", "-include,cassert"],
])
def test_the_flag_pair_becomes_nvccs_own_option(flags: list[str]) -> None:
    out, moved = _hook().host_includes_to_nvcc(flags)
    assert moved == ["cassert"]
    assert "--pre-include" in out and out[out.index("--pre-include") + 1] == "cassert"
    assert not any("-include," in f for f in out)


def test_other_host_options_stay() -> None:
    flags = ["-Xcompiler", "-fopenmp", "-Xcompiler", "-include,a.h,-O3"]
    assert _hook().host_includes_to_nvcc(flags) == (flags, [])


def test_nvcc_compiles_the_rewritten_flags_and_not_the_original(tmp_path: Path,
                                                                cuda_toolkit_root: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("no host compiler (g++)")
    nvcc = cuda_toolkit_root / "bin" / "nvcc"
    version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                             check=False).stdout
    (tmp_path / "k.cu").write_text(UNIT, encoding="utf-8")
    original = ["-Xcompiler", "-include,cassert"]
    rewritten, _moved = _hook().host_includes_to_nvcc(original)

    def compile_with(flags: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(nvcc), "-c", "k.cu", "-o", "k.o", "-arch=sm_90a", *flags],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              check=False)
    done = compile_with(rewritten)
    assert done.returncode == 0, done.stderr[-2000:]
    if "release 13." in version:
        failed = compile_with(original)
        assert failed.returncode != 0 and "__terminate" in failed.stderr
