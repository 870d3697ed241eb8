"""The command reference and the exit-code table (docs/commands.md), generated from the Typer
app and from `errors.py`.

`python -m flashbuild.clidoc --write docs/commands.md` rewrites the blocks between the markers
below; a test fails when the committed file differs from what the code says, so neither can
drift from it. Usage lines are the app's own (`{NAME}` is how the help screen
writes a required argument, `[PATH]` an optional one).
"""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path
from typing import Any

import typer.main

from flashbuild.cli import app
from flashbuild.errors import exit_code_table

#: Where the reference lives, relative to the repository root.
REFERENCE = "docs/commands.md"
BEGIN = ("<!-- BEGIN command reference "
         "(generated: python -m flashbuild.clidoc --write docs/commands.md) -->")
END = "<!-- END command reference -->"
EXIT_BEGIN = ("<!-- BEGIN exit codes (generated from flashbuild/errors.py: "
              "python -m flashbuild.clidoc --write docs/commands.md) -->")
EXIT_END = "<!-- END exit codes -->"


def _unescape(text: str) -> str:
    """Help as the terminal shows it: the app renders help as Rich markup, where `\\[` is a
    literal `[` (an unescaped `[verify]` would be taken for a style tag and vanish)."""
    return text.replace("\\[", "[")


# Typer vendors its own click, so commands and parameters are read by their attributes.
def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "option"


def _rows(command: Any) -> list[str]:
    rows = []
    for param in command.params:
        if not _is_option(param) or param.hidden:
            continue
        names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
        text = _unescape(" ".join((param.help or "").split())).replace("|", "\\|")
        rows.append(f"| {names} | {text} |")
    return rows


def _takes_usage(param: Any) -> bool:
    """Typer's arguments render their usage form (`{NAME}`, `[PATH]`) with `usage=True`."""
    return "usage" in inspect.signature(param.make_metavar).parameters


def _section(path: list[str], command: Any) -> list[str]:
    lines: list[str] = []
    if hasattr(command, "commands"):
        for name in sorted(command.commands):
            lines += _section([*path, name], command.commands[name])
        return lines
    ctx = command.make_context(" ".join(path), [], resilient_parsing=True)
    args = " ".join(p.make_metavar(ctx, usage=True) if _takes_usage(p) else p.make_metavar(ctx)
                    for p in command.params
                    if getattr(p, "param_type_name", "") == "argument")
    lines.append(f"## `{' '.join(path)}{' ' + args if args else ''}`")
    lines.append("")
    for paragraph in (command.help or "").split("\n\n"):
        doc = _unescape(" ".join(paragraph.split()))
        if doc:
            lines += [doc, ""]
    rows = _rows(command)
    if rows:
        lines += ["| option | meaning |", "|---|---|", *rows, ""]
    return lines


def render() -> str:
    root = typer.main.get_command(app)
    lines = [
        "Global options (before the command): " + ", ".join(
            f"`{o}`" for p in root.params if _is_option(p) for o in p.opts
        ) + ".",
        "",
        *_section(["flashbuild"], root),
    ]
    return "\n".join(lines).rstrip() + "\n"


def splice(document: str, reference: str, begin: str = BEGIN, end: str = END) -> str:
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(document):
        raise SystemExit(f"the document has no block between {begin!r} and {end!r}")
    return pattern.sub(lambda _m: f"{begin}\n{reference}{end}", document)


def regenerate(document: str) -> str:
    """`document` (docs/commands.md) with both generated blocks as the code says."""
    return splice(splice(document, render()), exit_code_table(), EXIT_BEGIN, EXIT_END)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help=f"document to update in place ({REFERENCE})")
    args = parser.parse_args()
    if args.write:
        args.write.write_text(regenerate(args.write.read_text(encoding="utf-8")),
                              encoding="utf-8")
    else:
        print(render(), end="")


if __name__ == "__main__":
    main()
