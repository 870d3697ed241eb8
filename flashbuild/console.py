"""The console: human output through Rich on stderr-safe channels, JSON on stdout.

Every stage reports through `ui`: `ui.step("patched 6 files")` is one line saying what was done;
`ui.command(...)` shows a command only with `-v`; `ui.emit_json(obj)` writes the machine-readable
result. In `--json` mode human output goes to stderr so stdout stays parseable.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

#: Bumped when a documented JSON key changes meaning or disappears.
JSON_SCHEMA_VERSION = 1


@dataclass
class UI:
    verbose: bool = False
    debug: bool = False
    json_mode: bool = False
    out: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=False))
    err: Console = field(default_factory=lambda: Console(stderr=True, highlight=False))

    def configure(self, *, verbose: bool | None = None, debug: bool | None = None,
                  json_mode: bool | None = None) -> None:
        if verbose is not None:
            self.verbose = verbose
        if debug is not None:
            self.debug = debug
        if json_mode is not None:
            self.json_mode = json_mode

    @property
    def human(self) -> Console:
        """Where human-readable lines go: stdout normally, stderr under --json."""
        return self.err if self.json_mode else self.out

    def step(self, message: str) -> None:
        self.human.print(f"[bold green]•[/] {message}")

    def info(self, message: str) -> None:
        self.human.print(message)

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/] {message}")

    def command(self, quoted: str) -> None:
        if self.verbose:
            self.err.print(f"[dim]$ {escape(quoted)}[/]")

    def emit_json(self, payload: dict[str, Any]) -> None:
        document = {"schema_version": JSON_SCHEMA_VERSION, **payload}
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")
        sys.stdout.flush()


ui = UI()
