"""Compile-check drafted code steps (`recipe init --compile-check`).

For each step that edits code (`macro-edit`, `insert-block`), one translation unit it touches
(the edited file when it is compiled, else the first compiled source that includes it) is
compiled with nvcc for the target as the tree is and with the whole draft applied, on a
mirror of the tree (links to the real files, the planned contents of the edited ones). Steps
are checked together because they often need each other (an allow-list and the traits it
admits). The verdict goes into the draft:

* `ok`: it compiles as is and with the draft;
* `fixed`: it fails as is and compiles with the draft (the draft fixes what the scan found);
* `fails`: it does not compile with the draft: the draft marks the step REVIEW;
* `unchecked`: it fails before for want of includes (a header the tree does not hold, such as
  torch's), or no nvcc was found, so nothing can be said.

The host compiler is whatever nvcc uses on this machine (gcc on Linux), so a Windows draft is
checked for its device code and C++ validity, not for MSVC's host pass.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.arch import Arch
    from flashbuild.proc import Completed, Runner

Status = Literal["ok", "fixed", "fails", "unchecked"]
_COMPILED = (".cu", ".cpp", ".cc", ".cxx")
_MISSING_INCLUDE = re.compile(r"cannot open source file|No such file or directory|"
                              r"fatal error C1083", re.IGNORECASE)
TIMEOUT_S = 600.0


@dataclass(frozen=True)
class StepEdit:
    """What one drafted step writes: tree-relative path → new text."""

    step_id: str
    transform: str
    changes: Mapping[str, str]


@dataclass(frozen=True)
class Verdict:
    step_id: str
    status: Status
    unit: str
    """The translation unit compiled ("" when none)."""
    detail: str

    def comment(self, nvcc: str, arch: str) -> str:
        if self.status == "ok":
            return f"compile-checked: {self.unit} compiles with {nvcc} for {arch} as is and " \
                "with the drafted steps"
        if self.status == "fixed":
            return f"compile-checked: {self.unit} fails as is and compiles with the drafted " \
                f"steps ({nvcc}, {arch})"
        if self.status == "fails":
            return f"REVIEW: compile-check failed: {self.unit} does not compile with the " \
                f"drafted steps ({nvcc}, {arch}): {self.detail}"
        return f"not compile-checked: {self.detail}"


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error" in line.lower():
            return line.strip()[:200]
    return (text.strip().splitlines() or ["(no output)"])[-1][:200]


def _unit_for(path: str, includers: Mapping[str, Sequence[str]]) -> str | None:
    if path.endswith(_COMPILED):
        return path
    seen = {path}
    queue = [path]
    while queue:
        cur = queue.pop(0)
        for user in sorted(includers.get(cur, ())):
            if user in seen:
                continue
            if user.endswith(_COMPILED):
                return user
            seen.add(user)
            queue.append(user)
    return None


def _mirror(root: Path, dest: Path, contents: Mapping[str, str]) -> None:
    """Links to every file of `root` under `dest`, real files for `contents`."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", ".flashbuild")]
        rel = Path(folder).relative_to(root)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            src = Path(folder) / name
            out = dest / rel / name
            key = (rel / name).as_posix()
            if key in contents:
                out.write_text(contents[key], encoding="utf-8", newline="")
                continue
            try:
                out.symlink_to(src)
            except OSError:  # no symlink privilege (Windows): a copy reads the same
                shutil.copy2(src, out)


def check_steps(root: Path, edits: Sequence[StepEdit], *, nvcc: Path, arch: Arch,
                runner: Runner, includers: Mapping[str, Sequence[str]],
                include_dirs: Sequence[str] = ()) -> list[Verdict]:
    """Compile-check every code step of `edits`: its unit as the tree is, and with the whole
    draft applied (steps often need each other: an allow-list and the traits it admits)."""
    final: dict[str, str] = {}
    for edit in edits:
        final.update(edit.changes)
    units: dict[str, str | None] = {}
    for edit in edits:
        if edit.transform in ("macro-edit", "insert-block") and edit.changes:
            units[edit.step_id] = next(
                (u for p in sorted(edit.changes) if (u := _unit_for(p, includers))), None)
    cache: dict[tuple[str, bool], Completed] = {}

    def build(unit: str, drafted: bool) -> Completed:
        key = (unit, drafted)
        if key not in cache:
            with tempfile.TemporaryDirectory(prefix="fb-check-") as tmp:
                mirror = Path(tmp) / "tree"
                _mirror(root, mirror, final if drafted else {})
                argv = [str(nvcc), "-c", f"-arch={arch.sm}", "-std=c++17", "-I", str(mirror),
                        *(x for d in include_dirs for x in ("-I", str(mirror / d))),
                        "-o", str(Path(tmp) / "unit.o"), str(mirror / unit)]
                cache[key] = runner.run(argv, check=False, timeout=TIMEOUT_S, cwd=mirror)
        return cache[key]

    verdicts: list[Verdict] = []
    for step_id, unit in units.items():
        if unit is None:
            verdicts.append(Verdict(step_id, "unchecked", "", "no compiled source of the "
                                    "tree includes the edited file"))
            continue
        pre, post = build(unit, drafted=False), build(unit, drafted=True)
        if post.ok:
            verdicts.append(Verdict(step_id, "ok" if pre.ok else "fixed", unit, ""))
        elif not pre.ok and _MISSING_INCLUDE.search(pre.output):
            verdicts.append(Verdict(step_id, "unchecked", unit,
                                    f"{unit} does not compile here as is "
                                    f"({_first_error(pre.output)})"))
        else:
            verdicts.append(Verdict(step_id, "fails", unit, _first_error(post.output)))
    return verdicts
