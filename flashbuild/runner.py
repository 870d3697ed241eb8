"""What running a program gives back (`Completed`) and what a runner offers (`Runner`).

Types only, below both the runner (proc.py, which asks platforms/ how to start and end a child
tree) and platforms/ (whose Windows helpers take a runner to capture vcvarsall's environment),
so neither imports the other for them. Import them from `flashbuild.proc` as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence
    from pathlib import Path


@dataclass(frozen=True)
class Completed:
    """A finished process."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0
    #: What flashbuild noticed about the run beyond its output: a process outside the child's
    #: tree that kept the output open after the child exited ("" when nothing).
    note: str = ""
    #: Bytes of stdout dropped from its start: a run keeps only the last OUTPUT_LIMIT bytes
    #: (flashbuild/proc.py), and a reader that needs all of it (the preprocessor's line
    #: markers) must not take the tail for the whole.
    stdout_dropped: int = 0

    @property
    def output(self) -> str:
        """stdout and stderr together (tools disagree on where they print versions)."""
        return self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Runner(Protocol):
    """What detection and the stages need from a process runner."""

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60.0,
        check: bool = True,
        input: str | None = None,
    ) -> Completed: ...

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None: ...
