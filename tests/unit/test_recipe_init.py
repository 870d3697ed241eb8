"""`flashbuild recipe init`: the draft loads, and its steps match the scan."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.recipes.load import parse_recipe

ROOT = Path(__file__).resolve().parents[2]


def _draft(tmp_path: Path, tree: str, platform: str, arch: str) -> tuple[str, Path]:
    out = tmp_path / "recipe.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--source", str(ROOT / tree),
                                   "--platform", platform, "--arch", arch, "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out.read_text(encoding="utf-8"), out


def test_csrc_draft_windows_sm120(tmp_path: Path) -> None:
    text, out = _draft(tmp_path, "csrc", "windows", "sm120")
    recipe = parse_recipe(text, out)
    steps = {s.id: s for s in recipe.patch}
    assert [s.transform for s in recipe.patch] == [
        "explicit-instantiations", "dynamic-loading", "macro-edit", "macro-edit",
        "insert-block"]
    assert steps["msvc-instantiations"].expect.sites == 56
    assert steps["msvc-instantiations"].when.platform == ("windows",)
    assert steps["sm120-traits"].when.arch == ("sm_120",)
    assert "TiledSoftmaxTraits<1200>" in steps["sm120-traits"].params.block
    assert "99 * 1024" in steps["sm120-traits"].params.block
    assert "# TODO: FB190" in text and "# TODO: FB182" in text
    assert recipe.source_root() == (ROOT / "csrc").resolve()
    res = CliRunner().invoke(app, ["recipe", "check", str(out)])
    assert res.exit_code == 0, res.output


def test_othertree_draft(tmp_path: Path) -> None:
    text, out = _draft(tmp_path, "tests/fixtures/scan/othertree", "windows", "sm120")
    recipe = parse_recipe(text, out)
    by_transform = {s.transform: s for s in recipe.patch}
    inst = by_transform["explicit-instantiations"]
    assert inst.params.files == ("src/kernels/gemv.cu",) and inst.expect.sites == 2
    assert by_transform["exclude-sources"].params.globs == ("src/kernels/mma_sm120.cu",)
    for rule in ("FB110", "FB111", "FB112", "FB120", "FB121", "FB130", "FB152", "FB153",
                 "FB180", "FB182", "FB190", "FB191", "FB192"):
        assert f"# TODO: {rule}" in text, rule
