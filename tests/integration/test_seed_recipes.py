"""The bundled recipes for the seed trees (recipes/xformers.toml, flashmla.toml, flashrt.toml)
against the pinned upstream trees of ../shared/corpus (beside the repository): each recipe
loads, zero-config picks it for its tree by content, `flashbuild patch` applies it for each of
its platforms/arches and `--revert` restores the tree byte for byte, the Windows-only steps
leave the Linux patch output as it was, one small translation unit of the (patched) tree
compiles with nvcc for sm_120, and a sample of each recipe's Windows units goes through nvcc's
preprocessing as on Windows (emulated: see test_windows_host_pass_emulated for what that proves
and what it cannot). Skips cleanly when the corpus is not there; nothing runs on a GPU."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sysconfig
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.arch import BuildTarget, parse_arch_spec
from flashbuild.building.treecheck import refuse_missing_submodules
from flashbuild.cli import app
from flashbuild.errors import TreeError
from flashbuild.patching.engine import patch_tree, revert_tree
from flashbuild.pipeline.choose import choose_recipe
from flashbuild.recipes.load import load_recipe
from flashbuild.recipes.when import WhenContext
from flashbuild.source.preprocess import (
    LINUX_UNDEFINES,
    MSVC_DEFINES,
    missing_headers,
    parse_dryrun,
)

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
CORPUS = ROOT.parent / "shared" / "corpus"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (CORPUS / "xformers-full.tar.gz").is_file(),
                       reason=f"no corpus at {CORPUS}"),
]

# recipe -> (corpus tree, the platform/arch pairs the recipe is for)
SEEDS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "xformers": ("xformers-full", (("linux", "sm120"), ("windows", "sm120"),
                                   ("linux", "sm_90a"))),
    "flashmla": ("FlashMLA", (("linux", "sm_90a"), ("linux", "sm_100f"), ("linux", "sm120"),
                              ("windows", "sm120"))),
    "flashrt": ("FlashRT", (("linux", "sm_90a"), ("linux", "sm_120a"), ("windows", "sm_120a"))),
}

_SM120 = BuildTarget(parse_arch_spec("sm120"))


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seeds")
    for name in ("xformers-full", "xformers", "FlashMLA", "FlashRT"):
        with tarfile.open(CORPUS / f"{name}.tar.gz") as tar:
            tar.extractall(out, filter="data")
    return out


def _digest(tree: Path) -> dict[str, str]:
    return {p.relative_to(tree).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.rglob("*")) if p.is_file() and ".flashbuild" not in p.parts}


@pytest.mark.parametrize("recipe", sorted(SEEDS))
def test_recipe_checks(recipe: str) -> None:
    res = CliRunner().invoke(app, ["recipe", "check", str(RECIPES / f"{recipe}.toml")])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("recipe", sorted(SEEDS))
def test_zero_config_picks_it_by_content(recipe: str, trees: Path, tmp_path: Path) -> None:
    # Renamed (and moved back after), so only the content can match.
    tree = trees / "renamed"
    (trees / SEEDS[recipe][0]).rename(tree)
    said: list[str] = []
    try:
        chosen = choose_recipe(None, tree, arch=_SM120, platform="linux", installing=True,
                               build_root=tmp_path / "b", say=said.append)
    finally:
        tree.rename(trees / SEEDS[recipe][0])
    assert (chosen.how, chosen.recipe.name) == ("bundled", recipe)
    assert f"`{recipe}`" in said[0]


def test_plain_xformers_clone_is_refused_naming_the_submodule_command(trees: Path) -> None:
    # The bundled recipe matches the plain clone too; the build's tree check refuses it.
    with pytest.raises(TreeError) as err:
        refuse_missing_submodules(trees / "xformers", platform="linux",
                                  archs=parse_arch_spec("sm120").archs)
    assert "git submodule update --init --recursive" in str(err.value.fix)
    refuse_missing_submodules(trees / "xformers-full", platform="linux",
                              archs=parse_arch_spec("sm120").archs)


@pytest.mark.parametrize(("recipe", "platform", "arch"),
                         [(r, p, a) for r, (_, pairs) in sorted(SEEDS.items()) for p, a in pairs])
def test_patch_applies_and_reverts_byte_exactly(recipe: str, platform: str, arch: str,
                                               trees: Path) -> None:
    tree = trees / SEEDS[recipe][0]
    before = _digest(tree)
    runner = CliRunner()
    res = runner.invoke(app, ["patch", "--recipe", str(RECIPES / f"{recipe}.toml"), "--source",
                              str(tree), "--platform", platform, "--arch", arch])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["patch", "--recipe", str(RECIPES / f"{recipe}.toml"), "--source",
                              str(tree), "--revert"])
    assert res.exit_code == 0, res.output
    assert _digest(tree) == before


# recipe, Linux arch -> the steps that apply there (every other step is Windows-only).
LINUX_STEPS: dict[tuple[str, str], tuple[str, ...]] = {
    ("flashmla", "sm_90a"): (), ("flashmla", "sm_100f"): (), ("flashmla", "sm120"): (),
    ("flashrt", "sm_90a"): (), ("flashrt", "sm_120a"): ("fa2-sm120a",),
    ("xformers", "sm120"): (), ("xformers", "sm_90a"): (),
}


@pytest.mark.parametrize(("recipe", "arch"), sorted(LINUX_STEPS))
def test_windows_steps_leave_the_linux_patch_output_unchanged(recipe: str, arch: str,
                                                              trees: Path) -> None:
    # The Windows steps are `when`-gated: on Linux only the listed steps run, and where none
    # does (all of FlashMLA's are Windows-only) the tree stays byte for byte as it was.
    assert {(r, a) for r, (_, pairs) in SEEDS.items() for p, a in pairs if p == "linux"} == \
        set(LINUX_STEPS)
    tree = trees / SEEDS[recipe][0]
    before = _digest(tree)
    report = patch_tree(load_recipe(RECIPES / f"{recipe}.toml"), tree,
                        WhenContext(platform="linux", arch=parse_arch_spec(arch)))
    try:
        after = _digest(tree)
    finally:
        revert_tree(tree)
    assert tuple(s.id for s in report.steps if s.matched) == LINUX_STEPS[recipe, arch]
    if not LINUX_STEPS[recipe, arch]:
        assert after == before


def _torch_includes() -> list[str]:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        pytest.skip("torch is not installed: no headers to compile against")
    inc = Path(spec.origin).parent / "include"
    return [f"-I{inc}", f"-I{inc / 'torch' / 'csrc' / 'api' / 'include'}",
            f"-I{sysconfig.get_paths()['include']}"]


# recipe -> (platform whose patch set is applied, unit, the flags the tree's build gives nvcc
# for sm_120 (FlashRT's CMakeLists: sm_120a), include folders). nvcc's host compiler here is
# gcc: a Windows patch set is checked for its device code and C++ validity, not for MSVC's
# host pass (test_windows_host_pass_emulated preprocesses it as on Windows).
UNITS: dict[str, tuple[str, str, list[str], list[str]]] = {
    "xformers": ("windows", "xformers/csrc/sparse24/sparse24_largest_mask_2d.cu",
                 ["-gencode", "arch=compute_120,code=sm_120", "-std=c++17", "-DHAS_PYTORCH",
                  "-U__CUDA_NO_HALF_OPERATORS__",
                  "-U__CUDA_NO_HALF_CONVERSIONS__", "--extended-lambda",
                  "-D_ENABLE_EXTENDED_ALIGNED_STORAGE", "-DNDEBUG", "-DTORCH_STABLE_ONLY",
                  "-DTORCH_TARGET_VERSION=0x020a000000000000", "-DUSE_CUDA"],
                 ["xformers/csrc", "third_party/cutlass/include",
                  "third_party/cutlass/tools/util/include", "third_party/cutlass/examples"]),
    # The Windows patch set rewrites kerutils' __int128_t helpers, which this file includes.
    "flashmla": ("windows", "csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu",
                 ["-gencode", "arch=compute_120,code=sm_120", "-std=c++20", "-DNDEBUG",
                  "-D_USE_MATH_DEFINES", "-U__CUDA_NO_HALF_OPERATORS__",
                  "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
                  "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr",
                  "--expt-extended-lambda", "--use_fast_math"],
                 ["csrc", "csrc/kerutils/include", "csrc/sm90", "csrc/cutlass/include",
                  "csrc/cutlass/tools/util/include"]),
    # The Windows patch set guards this file's kernel instantiations.
    "flashrt": ("windows", "csrc/kernels/activation.cu",
                ["-gencode", "arch=compute_120a,code=sm_120a", "-std=c++17",
                 "--expt-relaxed-constexpr", "--expt-extended-lambda"],
                ["csrc", "third_party/cutlass/include"]),
}


@pytest.mark.parametrize("recipe", sorted(UNITS))
def test_a_patched_unit_compiles_for_sm120(recipe: str, trees: Path, tmp_path: Path,
                                           cuda_toolkit_root: Path) -> None:
    tree = trees / SEEDS[recipe][0]
    runner = CliRunner()
    res = runner.invoke(app, ["patch", "--recipe", str(RECIPES / f"{recipe}.toml"), "--source",
                              str(tree), "--platform", UNITS[recipe][0], "--arch", "sm_120a"])
    assert res.exit_code == 0, res.output
    _, unit, flags, includes = UNITS[recipe]
    if recipe == "flashrt":  # the unit compiled is the patched one
        assert "!defined(_MSC_VER)" in (tree / unit).read_text(encoding="utf-8")
    if recipe == "flashmla":  # ... and so is the header it includes
        assert "st.shared.v4.b32" in (tree / _KERUTILS_HELPERS).read_text(encoding="utf-8")
    torch = _torch_includes() if recipe != "flashrt" else []
    try:
        done = subprocess.run(
            [str(cuda_toolkit_root / "bin" / "nvcc"), "-c", unit, "-o", str(tmp_path / "u.o"),
             *flags,
             *(f"-I{tree / i}" for i in includes), *torch],
            cwd=tree, capture_output=True, text=True, check=False, timeout=600)
    finally:
        runner.invoke(app, ["patch", "--recipe", str(RECIPES / f"{recipe}.toml"), "--source",
                            str(tree), "--revert"])
    assert done.returncode == 0, done.stderr[-3000:]


_KERUTILS_HELPERS = "csrc/kerutils/include/kerutils/device/sm80/helpers.cuh"

# --- the Windows host pass, emulated ---------------------------------------------------------
# recipe -> (its Windows --arch, the unit flags nvcc gets from the tree's build (as in UNITS),
# include folders, sample: (unit, gencode, the pass run: `host` or the gencode's `device` pass,
# what the unpatched tree's emulated pass reports: a substring of one problem, or "" for none)).
# The sample is each unit a Windows step edits (directly or through the header it includes)
# plus one the steps leave alone. FlashMLA's sm90/sm100 units are run for their own arch's
# device pass: their kernel bodies (and the __int128_t lines in them) exist only there.
_MLA_FLAGS = ["-std=c++20", "-DNDEBUG", "-D_USE_MATH_DEFINES", "--expt-relaxed-constexpr",
              "--expt-extended-lambda"]
_Sample = tuple[tuple[str, str, str, str], ...]
WINDOWS_UNITS: dict[str, tuple[str, list[str], list[str], _Sample]] = {
    "flashrt": ("sm_120a", ["-std=c++17", "--expt-relaxed-constexpr", "--expt-extended-lambda"],
                ["csrc", "third_party/cutlass/include"], (
                    ("csrc/attention/fmha_dispatch.cu", "arch=compute_120a,code=sm_120a",
                     "host", "includes <dlfcn.h>"),
                    # Guarded instantiations: a front-end matter the preprocessor cannot see.
                    ("csrc/kernels/activation.cu", "arch=compute_120a,code=sm_120a", "host",
                     ""),
                    ("csrc/kernels/softmax.cu", "arch=compute_120a,code=sm_120a", "host", ""))),
    "flashmla": ("sm120", _MLA_FLAGS,
                 ["csrc", "csrc/kerutils/include", "csrc/sm90", "csrc/cutlass/include",
                  "csrc/cutlass/tools/util/include"], (
                     ("csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu",
                      "arch=compute_120,code=sm_120", "host",
                      f"{_KERUTILS_HELPERS}:33: __int128_t"),
                     ("csrc/sm90/decode/sparse_fp8/instantiations/v32_persistent_h64.cu",
                      "arch=compute_90a,code=sm_90a", "device",
                      "splitkv_mla.cuh:589: __int128_t"),
                     ("csrc/sm100/decode/head64/instantiations/v32.cu",
                      "arch=compute_100f,code=sm_100f", "device", "kernel.cuh:365: __int128_t"),
                     ("csrc/sm100/prefill/sparse/fwd_for_small_topk/head128/instantiations/"
                      "phase1_decode_k512.cu", "arch=compute_100f,code=sm_100f", "device",
                      "phase1.cuh:250: __int128_t"))),
    # No Windows steps: the tree already builds with MSVC; the emulation must agree.
    "xformers": ("sm120", ["-std=c++17", "-DHAS_PYTORCH", "--extended-lambda", "-DNDEBUG",
                           "-DTORCH_STABLE_ONLY", "-DTORCH_TARGET_VERSION=0x020a000000000000",
                           "-DUSE_CUDA"],
                 ["xformers/csrc", "third_party/cutlass/include",
                  "third_party/cutlass/tools/util/include", "third_party/cutlass/examples"], (
                     ("xformers/csrc/sparse24/sparse24_largest_mask_2d.cu",
                      "arch=compute_120,code=sm_120", "host", ""),)),
}
#: POSIX headers the Windows SDK and CRT do not have: a tree file that includes one stops cl.
POSIX_ONLY = ("dlfcn.h", "unistd.h", "pthread.h", "sys/time.h", "sys/mman.h")
_INT128 = re.compile(r"\b__u?int128(?:_t)?\b")
_MARK = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)$')


def _msvc_problems(output: str, tree: Path, where: str) -> list[str]:
    """What cl.exe would stop on in one emulated pass's output, seen through its line markers:
    a POSIX-only header entered from a tree file, a 128-bit integer type on a tree line."""
    base = str(tree.resolve()) + os.sep
    problems: list[str] = []
    current, number = "", 0
    for text in output.splitlines():
        m = _MARK.match(text)
        if m is not None:
            path = os.path.normpath(m[2].encode("utf-8").decode("unicode_escape"))
            if "1" in m[3].split() and current.startswith(base):
                hit = next((h for h in POSIX_ONLY if path.endswith(os.sep + h)), None)
                if hit is not None:
                    problems.append(f"{where}: {current[len(base):]} includes <{hit}>")
            current, number = path, int(m[1])
            continue
        if current.startswith(base) and (found := _INT128.search(text)):
            problems.append(f"{where}: {current[len(base):]}:{number}: {found[0]}")
        number += 1
    return problems


def _windows_pass(tree: Path, nvcc: Path, unit: str, gencode: str, kind: str,
                   flags: list[str], includes: list[str], stubs: Path) -> list[str]:
    """The `kind` preprocessor pass nvcc runs for `unit` (one of its `--dryrun` commands: the
    host pass, or the device pass of `gencode`), run as flashbuild's scan emulates the Windows
    host pass (source/preprocess.py: Linux and GCC macros undefined, MSVC's defined, the MSVC
    headers this machine lacks stubbed empty), and with `__SIZEOF_INT128__` undefined, as MSVC
    has it. The problems found; empty when none."""
    dry = subprocess.run([str(nvcc), "--dryrun", "-c", str(tree / unit), "-o", os.devnull,
                          "-gencode", gencode, *flags, *includes],
                         cwd=tree, capture_output=True, text=True, check=False, timeout=60)
    passes = parse_dryrun(dry.stdout + "\n" + dry.stderr)
    assert passes, dry.stdout + dry.stderr
    problems: list[str] = []
    for name, code, argv in passes:
        if (code is None) != (kind == "host"):
            continue
        cmd = [*argv, *LINUX_UNDEFINES, *MSVC_DEFINES, "-U__SIZEOF_INT128__",
               f"-idirafter{stubs}"]
        done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False,
                              timeout=300)
        if "No such file or directory" in done.stderr:
            # One dependency run (-M -MG) names every header this machine lacks; the stubs
            # are shared by the passes and units of a recipe, so this runs rarely.
            deps = subprocess.run([*cmd, "-M", "-MG"], cwd=tree, capture_output=True,
                                  text=True, check=False, timeout=300)
            for header in missing_headers(deps.stdout, tree):
                (stubs / header).parent.mkdir(parents=True, exist_ok=True)
                (stubs / header).write_text("", encoding="utf-8")
            done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False,
                                  timeout=300)
        where = f"{unit} [{name}]"
        if done.returncode != 0:
            errors = [ln for ln in done.stderr.splitlines() if "error" in ln] or ["failed"]
            problems.append(f"{where}: preprocessing failed: {errors[0]}")
        problems += _msvc_problems(done.stdout, tree, where)
    return problems


def _emulate(recipe: str, tree: Path, nvcc: Path, stubs: Path) -> dict[str, list[str]]:
    _, flags, includes, sample = WINDOWS_UNITS[recipe]
    incs = [f"-I{tree / i}" for i in includes]
    if recipe != "flashrt":
        incs += _torch_includes()

    def one(i: int) -> list[str]:
        unit, gencode, kind, _ = sample[i]
        return _windows_pass(tree, nvcc, unit, gencode, kind, flags, incs, stubs)

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        found = list(pool.map(one, range(len(sample))))
    return {s[0]: f for s, f in zip(sample, found, strict=True)}


@pytest.mark.parametrize("recipe", sorted(WINDOWS_UNITS))
def test_windows_host_pass_emulated(recipe: str, trees: Path, tmp_path: Path,
                                    cuda_toolkit_root: Path) -> None:
    """The recipe's Windows patch set, through nvcc's preprocessing passes run as on Windows.

    What it proves: with MSVC's predefined macros instead of GCC's and Linux's (as flashbuild's
    scan emulates the Windows host pass), every `#if _WIN32` / `_MSC_VER` / `__CUDA_ARCH__` in
    the tree, CUDA's headers, CUTLASS and CCCL takes its Windows branch, and on that path the
    patched tree (a) preprocesses to the end, (b) includes no POSIX-only header (`<dlfcn.h>`
    …) from its own files, and (c) has no `__int128` type left on any of its own lines: in the
    host pass, and for FlashMLA's sm90/sm100 kernels in the device pass of their own arch (on
    Windows nvcc preprocesses both with cl, and nvcc has 128-bit integers only when the host
    compiler does). The unpatched tree fails where it has such a problem (FlashRT's
    fmha_dispatch.cu includes dlfcn.h; FlashMLA's kerutils and sm90/sm100 kernels use
    `__int128_t`) and passes where it has none (xformers, FlashRT's kernels), so the check is
    not vacuous.

    What it cannot prove (no cl.exe here): that cl.exe and cudafe++ in MSVC mode accept the
    code. The preprocessor is gcc's, the C++ library headers are libstdc++'s, and MSVC's CRT/SDK
    headers (crtdefs.h, windows.h, intrin.h, …) are empty stubs. No C++ is parsed: nvcc's
    preprocessed CUDA (`__declspec(__global__)`, `<<<…>>>`) is not plain C++ for g++
    -fsyntax-only (there is no clang here), and the host .cpp units include Python.h, whose
    Linux pyconfig.h refuses a non-Linux platform. So MSVC's front-end rules stay unchecked:
    FlashRT's kernel instantiations that MSVC rejects pass here before and after patching;
    `test_a_patched_unit_compiles_for_sm120` compiles the Windows patch set with nvcc and gcc
    for device code and C++ validity. Only a Windows runner with MSVC proves the build.
    """
    arch = WINDOWS_UNITS[recipe][0]
    nvcc = cuda_toolkit_root / "bin" / "nvcc"
    tree = trees / SEEDS[recipe][0]
    stubs = tmp_path / "stubs"  # the MSVC headers this machine lacks, empty
    stubs.mkdir()
    before = _emulate(recipe, tree, nvcc, stubs)
    runner = CliRunner()
    res = runner.invoke(app, ["patch", "--recipe", str(RECIPES / f"{recipe}.toml"), "--source",
                              str(tree), "--platform", "windows", "--arch", arch])
    try:
        assert res.exit_code == 0, res.output
        after = _emulate(recipe, tree, nvcc, stubs)
    finally:
        runner.invoke(app, ["patch", "--recipe", str(RECIPES / f"{recipe}.toml"), "--source",
                            str(tree), "--revert"])
    for unit, _gencode, _kind, problem in WINDOWS_UNITS[recipe][3]:
        if problem:
            assert any(problem in p for p in before[unit]), before[unit]
        else:
            assert before[unit] == [], before[unit]
        assert after[unit] == [], after[unit]
