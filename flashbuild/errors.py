"""The one error hierarchy. Every error a user can cause or meet carries an exit code.

A message is one paragraph in three parts: what failed, the evidence, and the fix. The CLI
catches `FlashbuildError` at its edge, prints it and exits with its code; tracebacks only
appear with `--debug`.

Exit codes (documented in the README, stable):

| code | class               | meaning                                                     |
|------|---------------------|-------------------------------------------------------------|
| 0    |                     | success; for `doctor`, nothing blocks a build               |
| 1    | FlashbuildError     | an unexpected internal error (a bug: please report it)      |
| 2    | UsageError          | bad command-line input (unknown arch, conflicting options)  |
| 3    | ToolchainError      | a required tool is missing or unusable; doctor found blockers |
| 4    | RecipeError         | a recipe is malformed or invalid                            |
| 5    | PatchError          | a patch or transform does not apply; tree left unchanged    |
| 6    | BuildError          | configure or compile failed; log kept, old install intact   |
| 7    | InstallError        | the built module could not be installed                     |
| 8    | VerifyError         | verification found a problem with the built binaries        |
| 9    | BusyError           | another flashbuild run holds the lock on this tree          |
| 10   | TreeError           | a path escapes the tree, or the tree is in an unexpected state |
| 11   | BlockingFindings    | `flashbuild scan` found findings that block the build       |
| 130  | Interrupted         | stopped by Ctrl-C / SIGTERM; the next run repairs or resumes |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass
class FlashbuildError(Exception):
    """Base class. `what` is one sentence; `evidence` and `fix` may be empty."""

    what: str
    evidence: str = ""
    fix: str = ""
    details: dict[str, object] = field(default_factory=dict)

    exit_code: ClassVar[int] = 1
    kind: ClassVar[str] = "internal"

    def __post_init__(self) -> None:
        super().__init__(self.what)

    def __str__(self) -> str:
        return self.paragraph()

    def paragraph(self) -> str:
        """The message as one paragraph: what, evidence, fix."""
        parts = [self.what.rstrip(".") + "."]
        if self.evidence:
            parts.append(self.evidence.rstrip() if self.evidence.endswith(".") else
                         self.evidence.rstrip() + ".")
        if self.fix:
            parts.append("Fix: " + self.fix.rstrip(".") + ".")
        return " ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "error": self.kind,
            "exit_code": self.exit_code,
            "what": self.what,
            "evidence": self.evidence,
            "fix": self.fix,
            **({"details": self.details} if self.details else {}),
        }


class UsageError(FlashbuildError):
    exit_code = 2
    kind = "usage"


class ToolchainError(FlashbuildError):
    exit_code = 3
    kind = "toolchain"


class RecipeError(FlashbuildError):
    exit_code = 4
    kind = "recipe"


class PatchError(FlashbuildError):
    exit_code = 5
    kind = "patch"


class BuildError(FlashbuildError):
    exit_code = 6
    kind = "build"


class InstallError(FlashbuildError):
    exit_code = 7
    kind = "install"


class VerifyError(FlashbuildError):
    exit_code = 8
    kind = "verify"


class BusyError(FlashbuildError):
    exit_code = 9
    kind = "busy"


class TreeError(FlashbuildError):
    exit_code = 10
    kind = "tree"


class BlockingFindings(FlashbuildError):
    """`flashbuild scan` found errors for the target (the report has already been printed)."""

    exit_code = 11
    kind = "blocking-findings"


class Interrupted(FlashbuildError):
    exit_code = 130
    kind = "interrupted"


class ProcessError(FlashbuildError):
    """A command failed. Carries the command, its exit code and the tail of its output."""

    exit_code = 3
    kind = "process"


class ProcessTimeout(ProcessError):
    kind = "timeout"


EXIT_CODES: dict[str, int] = {
    cls.kind: cls.exit_code
    for cls in (FlashbuildError, UsageError, ToolchainError, RecipeError, PatchError,
                BuildError, InstallError, VerifyError, BusyError, TreeError, BlockingFindings,
                Interrupted)
}
