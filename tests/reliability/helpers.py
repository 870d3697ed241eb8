"""Shared helpers of the reliability suite: a sandbox (a small tree, a recipe beside it and a
sentinel folder beside both), byte-exact snapshots, the CLI run in-process or as a real
process with a time limit, and the ledger every case writes its outcome to.

Each case checks the same things: the exit code, no traceback and no internal error, a
message with what / evidence / fix, the tree byte-identical (or restorable where the case
changes it on purpose), and no file outside the tree touched (the sentinel, and the recipe
folder, compared before and after). The outcome of each case goes to the ledger
(`record`), and `tests/conftest.py` prints the totals at the end of the run: cases, clear
errors, data lost, tree changed, hangs, processes left running, false passes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from typer.testing import CliRunner

from flashbuild.cli import app

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Environment variable naming the folder where cases write their outcome (one JSON file
#: each); set by tests/conftest.py for the whole run.
LEDGER_ENV = "FLASHBUILD_RELIABILITY_LEDGER"
#: Seconds a single flashbuild command may take before the case counts as a hang.
HANG_S = 60.0

MATH = b"int add(int a, int b) {\n    return a + b;\n}\n\nint sub(int a, int b) {\n" \
    b"    return a - b;\n}\n"
README = b"# demo tree\r\nCRLF on purpose.\r\n"
UTIL = b"#pragma once\nint util();\n"
ADD_MUL = """--- a/src/math.cpp
+++ b/src/math.cpp
@@ -5,3 +5,7 @@
 int sub(int a, int b) {
     return a - b;
 }
+
+int mul(int a, int b) {
+    return a * b;
+}
"""
RECIPE = """[recipe]
name = "rel"

[source]
path = "../tree"
sources = ["src/**/*.cpp", "include/*.h"]

[[patch]]
id = "add-mul"
diff = "add_mul.patch"
expect = { hunks = 1 }

[[patch]]
id = "win-note"
transform = "insert-block"
when = { platform = "windows" }
params = { file = "README.md", anchor = "# demo tree", block = "windows build\\n" }

[[patch]]
id = "util-note"
transform = "insert-block"
when = { arch = [">=120"] }
params = { file = "include/util.h", anchor = "#pragma once", block = "// sm_120\\n" }
"""
WIN120 = ("--platform", "windows", "--arch", "sm120")
LINUX90 = ("--platform", "linux", "--arch", "sm_90a")
PATCHED = ("src/math.cpp", "README.md", "include/util.h")
"""Files the recipe changes for WIN120."""


Snapshot = dict[str, tuple[str, bytes]]


def snapshot(folder: Path) -> Snapshot:
    """Every entry under `folder` (symlinks not followed): kind and bytes / link target."""
    out: Snapshot = {}
    if not folder.exists() and not folder.is_symlink():
        return out
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                out[rel] = ("dir", b"")
            elif not path.is_file():
                out[rel] = ("special", b"")  # a FIFO: reading it would block the test
            else:
                out[rel] = ("file", path.read_bytes())
    return out


def files_only(snap: Snapshot, *, skip_state: bool = True) -> dict[str, bytes]:
    return {k: v[1] for k, v in snap.items() if v[0] != "dir"
            and not (skip_state and k.split("/")[0] == ".flashbuild")}


@dataclass
class Outcome:
    code: int
    output: str
    seconds: float
    hang: bool = False

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.output

    @property
    def internal(self) -> bool:
        return "internal error" in self.output

    def clear_error(self) -> bool:
        """One paragraph with what, evidence and fix, a documented code, no traceback; or, from
        `verify`, a report whose failed check carries its evidence and a fix."""
        text = " ".join(self.output.split())
        # verify's report: a check marked `error` and the closing "N check(s) failed".
        failed_check = (" error " in f" {text} "
                        and re.search(r"\b\d+ checks? failed\b", text) is not None)
        return (self.code not in (0, 1) and not self.traceback and not self.internal
                and ("error:" in text or failed_check) and "fix:" in text)


@dataclass
class Sandbox:
    """tmp/tree (the tree), tmp/recipe (recipe + diff), tmp/sentinel (must never change)."""

    base: Path
    tree: Path = field(init=False)
    recipe_dir: Path = field(init=False)
    sentinel: Path = field(init=False)

    def __post_init__(self) -> None:
        self.tree = self.base / "tree"
        self.recipe_dir = self.base / "recipe"
        self.sentinel = self.base / "sentinel"
        for rel, data in (("src/math.cpp", MATH), ("README.md", README),
                          ("include/util.h", UTIL)):
            path = self.tree / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        self.recipe_dir.mkdir()
        (self.recipe_dir / "r.toml").write_text(RECIPE)
        (self.recipe_dir / "add_mul.patch").write_text(ADD_MUL)
        victim = self.sentinel / "victim"
        victim.mkdir(parents=True)
        (victim / "x").write_bytes(b"the user's own file, outside the tree\n")
        (victim / "notes.txt").write_bytes(b"do not touch\n")
        self.pristine = snapshot(self.tree)
        self._outside = self.outside()

    @property
    def recipe(self) -> Path:
        return self.recipe_dir / "r.toml"

    def outside(self) -> tuple[Snapshot, Snapshot]:
        return snapshot(self.sentinel), snapshot(self.recipe_dir)

    def outside_touched(self) -> bool:
        return self.outside() != self._outside

    def patch_args(self, *extra: str) -> list[str]:
        return ["patch", "--recipe", str(self.recipe), "--source", str(self.tree), *extra]

    def cli(self, *args: str, timeout: float = HANG_S) -> Outcome:
        return cli(*args, timeout=timeout)

    def proc(self, *args: str, env: dict[str, str] | None = None,
             timeout: float = HANG_S) -> Outcome:
        return proc(*args, env=env, timeout=timeout, cwd=self.base)

    def journal_path(self) -> Path:
        return self.tree / ".flashbuild" / "journal.json"


class _Hang(Exception):
    pass


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise _Hang in the main thread after `seconds` (in-process runs)."""

    def fire(signum: int, frame: object) -> None:
        raise _Hang

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cli(*args: str, timeout: float = HANG_S) -> Outcome:
    """`flashbuild ARGS` in this process (fast); a run past `timeout` is a hang."""
    start = time.monotonic()
    try:
        with _alarm(timeout):
            result = CliRunner().invoke(app, list(args))
    except _Hang:
        return Outcome(-1, "", time.monotonic() - start, hang=True)
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        output += "Traceback (most recent call last):\n" + "".join(
            traceback.format_exception(result.exception))
    return Outcome(result.exit_code, output, time.monotonic() - start)


def proc(*args: str, env: dict[str, str] | None = None, timeout: float = HANG_S,
         cwd: Path | None = None) -> Outcome:
    """`python -m flashbuild ARGS` as a real process (exit codes of kills, true stderr)."""
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "flashbuild", *args],
                              env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout,
                              capture_output=True, text=True, check=False)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Outcome(-1, str(out), time.monotonic() - start, hang=True)
    return Outcome(done.returncode, done.stdout + done.stderr, time.monotonic() - start)


def record(case: str, *, clear_error: bool | None, data_lost: bool, tree_changed: bool,
           hang: bool, left_running: bool = False, false_pass: bool = False,
           internal: bool = False) -> None:
    """Write one case's outcome to the ledger (a no-op when no ledger is set).
    `left_running`: a process flashbuild started outlived it; `false_pass`: exit 0 where
    the case expects a failure (a build for another arch, a damaged binary); `internal`: a
    traceback or an internal error."""
    folder = os.environ.get(LEDGER_ENV)
    if not folder:
        return
    path = Path(folder) / f"{uuid.uuid4().hex}.json"
    path.write_text(json.dumps({"case": case, "clear_error": clear_error,
                                "data_lost": data_lost, "tree_changed": tree_changed,
                                "hang": hang, "left_running": left_running,
                                "false_pass": false_pass, "internal": internal}))


def totals(folder: Path) -> dict[str, int]:
    """Sum of the ledger: cases, clear errors (of the cases that expect an error), data lost,
    tree changed, hangs, processes left running, false passes, internal errors."""
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    return {
        "cases": len(rows),
        "error cases": sum(1 for r in rows if r["clear_error"] is not None),
        "clear errors": sum(1 for r in rows if r["clear_error"]),
        "data lost": sum(1 for r in rows if r["data_lost"]),
        "tree changed": sum(1 for r in rows if r["tree_changed"]),
        "hangs": sum(1 for r in rows if r["hang"]),
        "left running": sum(1 for r in rows if r.get("left_running")),
        "false passes": sum(1 for r in rows if r.get("false_pass")),
        "internal errors": sum(1 for r in rows if r.get("internal")),
    }


def _record_and_check(case: str, out: Outcome, *, code: int, say: str, lost: bool,
                      changed: bool) -> None:
    """Write the case to the ledger, then assert its exit code, a clear error when non-zero,
    no traceback or internal error, and `say` in the message."""
    clear = out.clear_error() if code != 0 else None
    record(case, clear_error=clear, data_lost=lost, tree_changed=changed, hang=out.hang,
           false_pass=code != 0 and out.code == 0,
           internal=out.traceback or out.internal or out.code == 1)
    assert not out.hang, f"{case}: no answer within {HANG_S:g} s"
    assert out.code == code, f"{case}: exit {out.code}, expected {code}\n{out.output}"
    assert not out.traceback and not out.internal, out.output
    if code != 0:
        assert clear, f"{case}: not a clear error (what, evidence, fix):\n{out.output}"
    if say:
        assert say in " ".join(out.output.split()), out.output


def judge_outcome(case: str, out: Outcome, *, code: int, say: str = "") -> None:
    """`judge` for a case with no tree (verify of a hostile binary or wheel): record it and
    assert exit `code`, a clear error when non-zero, no traceback, `say` in the message."""
    _record_and_check(case, out, code=code, say=say, lost=False, changed=False)


def judge(case: str, box: Sandbox, out: Outcome, *, code: int,
          tree: Snapshot | None = None, lost: bool = False, say: str = "") -> None:
    """Record the case and assert on it: exit `code`; when non-zero, a clear error; the tree
    equal to `tree` (None: not compared); nothing outside the tree touched; `lost`: the case
    found bytes gone that flashbuild did not write. `say`: a phrase the message must hold."""
    changed = tree is not None and snapshot(box.tree) != tree
    lost = lost or box.outside_touched()
    _record_and_check(case, out, code=code, say=say, lost=lost, changed=changed)
    assert not changed, f"{case}: the tree changed:\n{out.output}"
    assert not lost, f"{case}: bytes outside the tree (or not flashbuild's) were lost"
