"""Outputs over the tree just read (issue 22): `recipe init --source T -o T/setup.py` and
`scan T --sarif T/setup.py` wrote over the tree's own file, exit 0. An existing file inside
the tree is refused (exit 2, one paragraph, the tree byte-identical) unless `--force`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.reliability.helpers import judge, snapshot

if TYPE_CHECKING:
    from tests.reliability.helpers import Sandbox

USAGE = 2


def _args(box: Sandbox, command: str, out: str) -> list[str]:
    if command == "scan":
        return ["scan", str(box.tree), "--sarif", out]
    return ["recipe", "init", "--source", str(box.tree), "-o", out]


@pytest.mark.parametrize("command", ["scan", "init"])
@pytest.mark.parametrize("victim", ["src/math.cpp", "README.md"])
def test_an_existing_file_of_the_tree_is_refused(box: Sandbox, command: str,
                                                 victim: str) -> None:
    out = box.cli(*_args(box, command, str(box.tree / victim)))
    judge(f"output over the tree: {command} -> {victim}", box, out, code=USAGE,
          tree=box.pristine, say="would overwrite a file of the tree being read")
    assert "--force" in out.output


@pytest.mark.parametrize("command", ["scan", "init"])
def test_a_link_outside_the_tree_pointing_into_it_is_refused(box: Sandbox,
                                                             command: str) -> None:
    link = box.base / "out.toml"
    link.symlink_to(box.tree / "src" / "math.cpp")
    out = box.cli(*_args(box, command, str(link)))
    judge(f"output over the tree through a link: {command}", box, out, code=USAGE,
          tree=box.pristine, say="is a link to it")
    link.unlink()


@pytest.mark.parametrize("command", ["scan", "init"])
def test_a_new_file_in_the_tree_or_force_is_written(box: Sandbox, command: str) -> None:
    fresh = box.tree / "out.txt"
    out = box.cli(*_args(box, command, str(fresh)))
    assert out.code in (0, 11) and fresh.is_file(), out.output  # 11: scan found blockers
    fresh.unlink()
    assert snapshot(box.tree) == box.pristine
    out = box.cli(*_args(box, command, str(box.tree / "README.md")), "--force")
    assert out.code in (0, 11), out.output
    assert (box.tree / "README.md").read_bytes() != box.pristine["README.md"][1]
