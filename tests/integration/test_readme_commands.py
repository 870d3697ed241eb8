"""Every line of the README's "One example per command" block, run as written, in the README's
order: from a working folder with `../mykernels` beside it (a small tree of the fixtures) and
`../FlashMLA` (the corpus tarball, when it is beside the repository). The lines are read from
the README itself, so a README line that stops working fails here, and a line added to the
README is run without anyone adding it here.

`build` and `verify` lines compile for minutes and install into the running environment: they
run only with FLASHBUILD_README_BUILDS=1 (on the GPU machine: `bash bench/gpu_readme.sh`), and
are listed as skipped otherwise. The scan line exits 11 when the tree has findings a build
would fail on (the command's documented meaning); every other line must exit 0."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CORPUS = ROOT.parent / "shared" / "corpus"
HEAVY = ("build", "verify")
#: The exit codes a line may end with besides 0, by command: scan's 11 is its answer.
ANSWERS = {"scan": {11}}


@dataclass(frozen=True)
class Line:
    text: str
    argv: tuple[str, ...]

    @property
    def command(self) -> str:
        return self.argv[1]


def readme_lines() -> list[Line]:
    """The README's example block: one command per line, comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    head = text.index("## One example per command")
    start = text.index("```bash\n", head) + len("```bash\n")
    block = text[start:text.index("```", start)]
    lines = []
    for raw in block.splitlines():
        argv = tuple(shlex.split(raw, comments=True))
        if argv:
            assert argv[0] == "flashbuild", f"not a flashbuild command in the README: {raw}"
            lines.append(Line(raw.split("#")[0].strip(), argv))
    return lines


LINES = readme_lines()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tmp/work (the working folder), tmp/mykernels, tmp/FlashMLA where the corpus has it."""
    root = tmp_path_factory.mktemp("readme")
    (root / "work").mkdir()
    shutil.copytree(FIXTURES / "scan" / "othertree", root / "mykernels")
    tarball = CORPUS / "FlashMLA.tar.gz"
    if tarball.is_file():
        with tarfile.open(tarball) as tar:
            tar.extractall(root, filter="data")
    return root / "work"


def test_the_readme_block_is_read() -> None:
    commands = {line.command for line in LINES}
    assert {"doctor", "build", "verify", "patch", "scan", "recipe", "ci"} <= commands
    assert len(LINES) >= 10


@pytest.mark.parametrize("line", LINES, ids=[line.text for line in LINES])
def test_a_readme_line_works_as_written(line: Line, sandbox: Path) -> None:
    if line.command in HEAVY and os.environ.get("FLASHBUILD_README_BUILDS") != "1":
        pytest.skip("compiles and installs: FLASHBUILD_README_BUILDS=1 runs it")
    for arg in line.argv:
        if arg.startswith("../FlashMLA") and not (sandbox / arg).exists():
            pytest.skip(f"{arg}: the corpus is not beside the repository ({CORPUS})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    if line.command == "ci":
        # `ci init` pins the jobs' flashbuild to this checkout's remote and commit; a clone
        # has an `origin`, this test's checkout may not: git reads one from the environment.
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "remote.origin.url",
                    "GIT_CONFIG_VALUE_0": "https://example.invalid/flashbuild.git"})
    timeout = 3600 if line.command in HEAVY else 300
    done = subprocess.run([sys.executable, "-m", "flashbuild", *line.argv[1:]], cwd=sandbox,
                          env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    allowed = {0} | ANSWERS.get(line.command, set())
    assert done.returncode in allowed, (
        f"`{line.text}` exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    assert "Traceback" not in done.stdout + done.stderr
    if line.command == "ci":
        # The job checks out the tree alone: the workflow lands in it and names the recipe
        # by its path inside it (issue 28: `-o my.toml` beside the tree exited 2).
        workflow = sandbox.parent / "mykernels" / ".github" / "workflows" / "flashbuild.yml"
        assert "flashbuild.toml" in workflow.read_text(encoding="utf-8")
        assert "flashbuild @ git+https://example.invalid/flashbuild.git@" in \
            workflow.read_text(encoding="utf-8")
