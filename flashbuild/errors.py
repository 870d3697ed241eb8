"""The one error hierarchy. Every error a user can cause or meet carries an exit code.

A message is one paragraph in three parts: what failed, the evidence, and the fix. The CLI
catches `FlashbuildError` at its edge, prints it and exits with its code; tracebacks only
appear with `--debug`.

Exit codes are stable. Each class below carries its code and what it means; the table in
docs/commands.md ("Exit codes") is `exit_code_table()`, written there by
`python -m flashbuild.clidoc --write docs/commands.md` (a test fails when it is stale).
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
    meaning: ClassVar[str] = "internal error (a bug — please report it, with `--debug` output)"
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
    meaning = ("bad command-line input (unknown arch, conflicting options, a `--cuda` "
               "that is not a toolkit, a `recipe init -o` that cannot be written)")
    kind = "usage"


class ToolchainError(FlashbuildError):
    exit_code = 3
    meaning = ("a required tool is missing, unusable or failed (`process`, `timeout`); "
               "`doctor` found a blocking problem")
    kind = "toolchain"


class RecipeError(FlashbuildError):
    exit_code = 4
    meaning = "a recipe is malformed or invalid"
    kind = "recipe"


class PatchError(FlashbuildError):
    exit_code = 5
    meaning = "a patch or transform does not apply (the tree is left unchanged)"
    kind = "patch"


class BuildError(FlashbuildError):
    exit_code = 6
    meaning = "configure or compile failed (log kept, previous install intact)"
    kind = "build"


class InstallError(FlashbuildError):
    exit_code = 7
    meaning = "the built module could not be installed"
    kind = "install"


class VerifyError(FlashbuildError):
    exit_code = 8
    meaning = "verification found a problem (or verify's input holds no readable binary)"
    kind = "verify"


class BusyError(FlashbuildError):
    exit_code = 9
    meaning = "another flashbuild run holds the lock on this tree"
    kind = "busy"


class TreeError(FlashbuildError):
    exit_code = 10
    meaning = ("a path escapes the tree, a file was edited since flashbuild patched it, "
               "or the tree's `.flashbuild/` state cannot be trusted")
    kind = "tree"


class BlockingFindings(FlashbuildError):
    """`flashbuild scan` found errors for the target (the report has already been printed)."""

    exit_code = 11
    meaning = "`scan` found problems that block a build for the target"
    kind = "blocking-findings"


class Interrupted(FlashbuildError):
    exit_code = 130
    meaning = "interrupted (Ctrl-C); run the same command again to repair or resume"
    kind = "interrupted"


class ProcessError(FlashbuildError):
    """A command failed. Carries the command, its exit code and the tail of its output."""

    exit_code = 3
    meaning = ToolchainError.meaning
    kind = "process"


class ProcessTimeout(ProcessError):
    kind = "timeout"


#: The errors that own an exit code, in the order of their codes (ProcessError and
#: ProcessTimeout share 3 with ToolchainError, whose row names them).
EXIT_CLASSES: tuple[type[FlashbuildError], ...] = (
    FlashbuildError, UsageError, ToolchainError, RecipeError, PatchError, BuildError,
    InstallError, VerifyError, BusyError, TreeError, BlockingFindings, Interrupted)

EXIT_CODES: dict[str, int] = {cls.kind: cls.exit_code for cls in EXIT_CLASSES}

#: What exit code 0 means (no error class carries it).
SUCCESS_MEANING = "success (for `doctor`: nothing blocks a build)"


def exit_code_table() -> str:
    """The exit-code table of docs/commands.md, as Markdown, from the classes above."""
    rows = [f"| 0 | | {SUCCESS_MEANING} |"]
    rows += [f"| {cls.exit_code} | `{cls.kind}` | {cls.meaning} |" for cls in EXIT_CLASSES]
    return "\n".join(["| code | error (`--json`) | meaning |", "|---|---|---|", *rows]) + "\n"
