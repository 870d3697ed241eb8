"""What a pinned install refuses to try (flashbuild/detect/pinned.py), with pip stood in:
torch and its kin, a distribution whose module another installed one provides (pip would
write over its files), versions pip cannot pin, and an attempt that failed before."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild.detect import pinned
from tests.unit.pip_fakes import PipWorld

if TYPE_CHECKING:
    from pathlib import Path


def test_torch_is_never_installed() -> None:
    world = PipWorld({"numpy": "2.1.0"})
    done = pinned.install_pinned("python", ["torch>=2.7"], world, {})
    assert not done.ok and "never installs torch" in done.error
    assert world.installs() == []


def test_the_rest_is_installed_beside_what_is_held_back() -> None:
    """torchsparse requires torchvision, rootpath and backports.cached_property: torchvision is
    torch's kin and stays out, the other two go in (before, nothing did, and its import
    stopped at `No module named 'rootpath'`)."""
    world = PipWorld({"numpy": "2.1.0"})
    done = pinned.install_pinned("python", ["torchvision", "rootpath", "scipy"], world, {})
    assert done.ok and done.requirements == ("rootpath", "scipy")
    assert len(done.held) == 1 and "torchvision: flashbuild never installs" in done.held[0]
    (argv,) = world.installs()
    assert "torchvision" not in argv and {"rootpath", "scipy"} <= set(argv)


def test_a_module_another_distribution_provides_is_not_written_over() -> None:
    """torch's own `pytorch-triton` provides the module `triton`: pip check calls `triton`
    missing for a tree that requires it, and installing it would overwrite those files."""
    world = PipWorld({"torch": "2.11.0", "pytorch-triton": "3.5.0"},
                     modules={"pytorch-triton": "triton"})
    done = pinned.install_pinned("python", ["triton>=3"], world, {})
    assert not done.ok and "`triton` is already provided by pytorch-triton" in done.error
    assert world.installs() == []


def test_versions_pip_cannot_pin_are_left_out_of_the_constraints(tmp_path: Path) -> None:
    world = PipWorld({"distro-info": "1.1build1", "numpy": "2.1.0"})
    have = pinned.installed("python", world, {})
    assert have is not None and have.pins == ("numpy==2.1.0",)


def test_an_attempt_that_failed_is_not_made_again(tmp_path: Path) -> None:
    memo = tmp_path / "memo.json"
    world = PipWorld({"numpy": "2.1.0"}, refuse=True, refusal="ERROR: offline")
    first = pinned.install_pinned("python", ["scipy"], world, {}, memo=memo)
    again = pinned.install_pinned("python", ["scipy"], world, {}, memo=memo)
    assert not first.ok and not again.ok and len(world.installs()) == 1
    assert "failed before" in again.error and "offline" in again.error
    # Anything else installed since: a new attempt.
    world.installed["pandas"] = "2.0.0"
    pinned.install_pinned("python", ["scipy"], world, {}, memo=memo)
    assert len(world.installs()) == 2
