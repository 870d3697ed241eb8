"""One target per command (arch.BuildTarget, issue 26 item 4): `build TREE`, `recipe init` and
`scan` parse `--arch` once at their edge and pass it down typed; build and verify share one
rule for `a` / `f` variants (arch.satisfies)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import flashbuild.arch as arch_mod
from flashbuild.arch import Arch, BuildTarget, Origin, Suffix, parse_arch_spec, satisfies
from flashbuild.cli import app

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MINIKERN = FIXTURES / "build" / "minikern"


class _Stop(Exception):
    """Raised where the build would look for a compiler: the target is resolved by then."""


def _stop_recording(seen: list[Any], key: str) -> Callable[..., None]:
    """A stand-in for the step after target resolution: keeps its `key` argument in `seen`,
    then stops the command."""

    def stop(*_a: object, **k: object) -> None:
        seen.append(k[key])
        raise _Stop

    return stop


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every `parse_arch_spec` call, wherever a module imported it by name."""
    calls: list[str] = []
    original = arch_mod.parse_arch_spec

    def counted(text: str) -> Any:
        calls.append(text)
        return original(text)

    monkeypatch.setattr(arch_mod, "parse_arch_spec", counted)  # `arch.parse_arch_spec(...)`
    for name, module in list(sys.modules.items()):
        if (name == "flashbuild" or name.startswith("flashbuild.")) and \
                getattr(module, "parse_arch_spec", None) is original:
            monkeypatch.setattr(module, "parse_arch_spec", counted)
    return calls


@pytest.fixture
def _no_introspection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Introspection configures CMake; unit tests fall back to static reading (test_choose)."""
    from flashbuild.pipeline import introspect, recipe_init
    from flashbuild.source.treemodel import Introspection

    def nothing(*_a: object, **_k: object) -> Introspection:
        return Introspection(None, "unit test: nothing is run")

    monkeypatch.setattr(introspect, "introspect_for_draft", nothing)
    monkeypatch.setattr(recipe_init, "introspect_for_draft", nothing)
    monkeypatch.setattr(introspect, "introspect", nothing)


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "mk"
    shutil.copytree(MINIKERN, tree)
    (tree / "minikern.toml").unlink()
    return tree


@pytest.mark.usefixtures("_no_introspection")
def test_build_tree_parses_the_target_once(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Imported first so that the counter replaces every module's name for the parser.
    import flashbuild.pipeline.command as command
    import flashbuild.pipeline.introspect
    import flashbuild.scanning.draft  # noqa: F401

    seen: list[Any] = []

    monkeypatch.setattr(command, "choose_toolkit", _stop_recording(seen, "targets"))
    calls = _count_parses(monkeypatch)
    res = CliRunner().invoke(app, ["build", str(_tree(tmp_path)), "--arch", "sm_90a",
                                   "--build-dir", str(tmp_path / "b")])
    assert seen, res.output  # the build reached the toolkit (the CLI reports _Stop)
    assert calls == ["sm_90a"]
    assert seen == [(Arch(9, 0, Suffix.ARCH),)]


@pytest.mark.usefixtures("_no_introspection")
def test_recipe_init_parses_the_target_once(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import flashbuild.pipeline.recipe_init  # noqa: F401

    calls = _count_parses(monkeypatch)
    out = tmp_path / "r.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(_tree(tmp_path)),
                                   "--arch", "sm_90a", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.is_file() and calls == ["sm_90a"]


@pytest.mark.usefixtures("_no_introspection")
def test_scan_parses_the_target_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flashbuild.pipeline.scan  # noqa: F401

    calls = _count_parses(monkeypatch)
    res = CliRunner().invoke(app, ["scan", str(_tree(tmp_path)), "--platform", "linux",
                                   "--arch", "sm_90a"])
    assert res.exit_code in (0, 11), res.output
    assert calls == ["sm_90a"]


def test_a_target_says_where_it_came_from_and_round_trips_as_names() -> None:
    target = BuildTarget(parse_arch_spec("sm_90a;compute_120;sm_100+PTX"), Origin.FLAG)
    assert target.names() == ["sm_90a", "sm_100+PTX", "compute_120"]
    back = BuildTarget.from_names(target.names())
    assert back.spec == target.spec and back.origin is Origin.MANIFEST


def test_the_variant_rule_is_exact() -> None:
    """`sm_120a` SASS does not satisfy `sm_120`, nor the reverse; a recipe's arch_suffix makes
    the target itself `sm_120a`, which its SASS then satisfies."""
    plain = BuildTarget(parse_arch_spec("sm_120"))
    assert not plain.accepts(["sm_120a"]) and plain.missing(["sm_120a"]) == ["sm_120"]
    assert plain.accepts(["sm_120"])
    variant = plain.with_spec(plain.spec.with_suffix(Suffix.ARCH))
    assert variant.accepts(["sm_120a"]) and not variant.accepts(["sm_120"])
    assert not BuildTarget(parse_arch_spec("sm_120+PTX")).accepts(["sm_120"])
    assert BuildTarget(parse_arch_spec("sm_120+PTX")).accepts(["sm_120"], ["compute_120"])
    assert satisfies(Arch(10, 0, Suffix.FAMILY), Arch(10, 0, Suffix.FAMILY))
    assert not satisfies(Arch(10, 0, Suffix.FAMILY), Arch(10, 0))


def _build_accepts(arch: str, sass: list[str]) -> bool:
    from flashbuild.building import archcheck
    from flashbuild.errors import BuildError
    from flashbuild.source.nvccflags import read_arch_flags

    flags = read_arch_flags([f"FLAGS = -gencode arch=compute_{s[3:]},code={s}" for s in sass])
    try:
        archcheck.check(flags, parse_arch_spec(arch), where=Path("build.ninja"), fix="x")
    except BuildError:
        return False
    return True


def _verify_accepts(arch: str, sass: list[str]) -> bool:
    from flashbuild.verifying.fatbin import BinaryImages, FatbinImage, ImageKind
    from flashbuild.verifying.verify import Status, _check_images

    images = tuple(FatbinImage(ImageKind.SASS, parse_arch_spec(s).archs[0], False, 1, 1, 0, 0)
                   for s in sass)
    found = BinaryImages(Path("_C.so"), "elf", images)
    checks = _check_images(found, parse_arch_spec(arch).targets, "_C.so")
    return not any(c.status is Status.FAIL for c in checks)


@pytest.mark.parametrize(("arch", "sass", "accepted"), [
    ("sm_120", ["sm_120"], True),
    ("sm_120", ["sm_120a"], False),  # a tree that adds the `a` itself: arch_suffix, or --arch
    ("sm_120a", ["sm_120a"], True),  # ... sm_120a, which then both take
    ("sm_120a", ["sm_120"], False),
    ("sm_100a", ["sm_100f"], False),
    ("sm_100f", ["sm_100f"], True),
    ("sm_90a;sm_120", ["sm_90a", "sm_120"], True),
    ("sm_90a;sm_120", ["sm_90", "sm_120"], False),
])
def test_build_and_verify_agree_on_variants(arch: str, sass: list[str],
                                            accepted: bool) -> None:
    assert BuildTarget(parse_arch_spec(arch)).accepts(sass) is accepted
    assert _build_accepts(arch, sass) is accepted
    assert _verify_accepts(arch, sass) is accepted
