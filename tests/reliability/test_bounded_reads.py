"""Reads of files a recipe names, bounded (issue 27): `recipe check /dev/zero` and
`block_file = "/dev/zero"` ate 7.4 GB, and a FIFO hung. A recipe and a `block_file` are read
as regular files of at most 16 MiB; anything else is exit 4 with one paragraph."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from flashbuild.platforms.files import read_regular
from tests.reliability.helpers import WIN120, judge

if TYPE_CHECKING:
    from tests.reliability.helpers import Sandbox

RECIPE_ERROR = 4
QUICK_S = 20.0
"""Well above the few seconds a refusal takes, well below a read of /dev/zero."""

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"),
                                reason="FIFOs and /dev/zero are POSIX")


def _special(box: Sandbox, kind: str) -> Path:
    if kind == "fifo":
        fifo = box.base / "pipe"
        os.mkfifo(fifo)
        return fifo
    return Path("/dev/zero")


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_recipe_check_refuses_a_device_or_fifo(box: Sandbox, kind: str) -> None:
    out = box.cli("recipe", "check", str(_special(box, kind)), timeout=QUICK_S)
    judge(f"recipe check of a {kind}", box, out, code=RECIPE_ERROR, tree=box.pristine,
          say="not a regular file")


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_block_file_refuses_a_device_or_fifo(box: Sandbox, kind: str) -> None:
    recipe = box.recipe_dir / "b.toml"
    recipe.write_text('[recipe]\nname = "b"\n[source]\npath = "../tree"\n[[patch]]\nid = "i"\n'
                      'transform = "insert-block"\nparams = { file = "README.md", anchor = '
                      f'"# demo tree", block_file = "{_special(box, kind)}" }}\n')
    box._outside = box.outside()
    out = box.cli("patch", "--recipe", str(recipe), "--source", str(box.tree), *WIN120,
                  timeout=QUICK_S)
    judge(f"block_file of a {kind}", box, out, code=RECIPE_ERROR, tree=box.pristine,
          say="not a regular file")


def test_an_oversized_file_is_refused_after_limit_bytes(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(OSError, match="over"):
        read_regular(big, 1024)
    assert read_regular(big, 2048) == b"x" * 2048
