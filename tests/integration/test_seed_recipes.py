"""The bundled recipes for the seed trees (recipes/xformers.toml, flashmla.toml, flashrt.toml)
against the pinned upstream trees of ../shared/corpus (beside the repository): each recipe
loads, zero-config picks it for its tree by content, `flashbuild patch` applies it for each of
its platforms/arches and `--revert` restores the tree byte for byte, and one small translation
unit of the (patched) tree compiles with nvcc for sm_120. Skips cleanly when the corpus is not
there; nothing runs on a GPU."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sysconfig
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.arch import parse_arch_spec
from flashbuild.building.treecheck import refuse_missing_submodules
from flashbuild.cli import app
from flashbuild.errors import TreeError
from flashbuild.pipeline.choose import choose_recipe

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
        chosen = choose_recipe(None, tree, arch="sm120", platform="linux", installing=True,
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
# host pass.
UNITS: dict[str, tuple[str, str, list[str], list[str]]] = {
    "xformers": ("windows", "xformers/csrc/sparse24/sparse24_largest_mask_2d.cu",
                 ["-gencode", "arch=compute_120,code=sm_120", "-std=c++17", "-DHAS_PYTORCH",
                  "-U__CUDA_NO_HALF_OPERATORS__",
                  "-U__CUDA_NO_HALF_CONVERSIONS__", "--extended-lambda",
                  "-D_ENABLE_EXTENDED_ALIGNED_STORAGE", "-DNDEBUG", "-DTORCH_STABLE_ONLY",
                  "-DTORCH_TARGET_VERSION=0x020a000000000000", "-DUSE_CUDA"],
                 ["xformers/csrc", "third_party/cutlass/include",
                  "third_party/cutlass/tools/util/include", "third_party/cutlass/examples"]),
    "flashmla": ("linux", "csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu",
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
