"""The console: human output through Rich on stderr-safe channels, JSON on stdout.

Every stage reports through `ui`: `ui.step("patched 6 files")` is one line saying what was done;
`ui.command(...)` shows a command only with `-v`; `ui.emit_json(obj)` writes the machine-readable
result. In `--json` mode human output goes to stderr so stdout stays parseable.

Two rules hold for every line printed here:

- **Output never fails on the terminal's encoding.** On a Windows runner a step's stdout is a
  pipe that Python encodes in the ANSI code page (cp1252; FACTS.md "Windows CI runners"), where
  "→" or "✓" raise UnicodeEncodeError. `prepare_streams()` (called by the CLI entry point)
  installs an error handler that writes such symbols as ASCII ("->", "ok") and anything else
  the code page lacks as a `\\uXXXX` escape, so a build that compiled and installed never ends
  in an internal error while printing its summary.
- **Text flashbuild did not write is printed literally.** Paths, source lines and tool output
  are never read as Rich markup (`[brackets]`), emoji shortcodes (`file:100:1` is not the
  `:100:` emoji) or highlighted: the consoles have emoji and highlighting off, messages escape
  foreign text with `lit()`, and `ui.literal()` prints it as a `rich.text.Text`.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TextIO

from rich.console import Console
from rich.markup import escape
from rich.text import Text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

#: Bumped when a documented JSON key changes meaning or disappears.
JSON_SCHEMA_VERSION = 1

#: The error handler `prepare_streams()` installs on stdout and stderr.
DEGRADE_ERRORS = "flashbuild.degrade"

#: ASCII for the symbols flashbuild itself prints, used where the output encoding lacks them.
SYMBOL_FALLBACKS: dict[str, str] = {
    "→": "->", "←": "<-", "⇒": "=>", "✓": "ok", "✔": "ok", "✗": "x", "✘": "x",
    "•": "*", "…": "...", "│": "|", "─": "-", "—": "-", "\u2013": "-", "≤": "<=", "≥": ">=",
    "≠": "!=", "\u00d7": "x", "⚠": "!", "\u2019": "'", "\u2018": "'", "“": '"', "”": '"',
    "\u00a0": " ",
}


def _degrade(error: UnicodeError) -> tuple[str, int]:
    """codecs error handler: known symbols become ASCII, other characters `\\uXXXX`."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    bad = error.object[error.start:error.end]
    out = []
    for char in bad:
        fallback = SYMBOL_FALLBACKS.get(char)
        if fallback is None:
            code = ord(char)
            fallback = f"\\x{code:02x}" if code < 0x100 else (
                f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        out.append(fallback)
    return "".join(out), error.end


codecs.register_error(DEGRADE_ERRORS, _degrade)


def degrade(text: str, encoding: str) -> str:
    """`text` as it will appear on a stream of `encoding` (what `prepare_streams` makes of it)."""
    return text.encode(encoding, DEGRADE_ERRORS).decode(encoding)


def prepare_streams(*streams: TextIO) -> None:
    """Make writing to `streams` (default: stdout and stderr) never fail on their encoding.

    Only the error handler changes: the encoding stays what Python chose (the console code
    page on Windows, which is what the reader of a redirected file expects)."""
    for stream in streams or (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:
            continue
        try:
            reconfigure(errors=DEGRADE_ERRORS)
        except (ValueError, OSError):  # a detached or closed stream: nothing to protect
            continue


#: The one verdict vocabulary of doctor, verify and scan, and its colours: ASCII words, so a
#: cp1252 or ASCII pipe shows them as they are (a "✓" became "ok" there and a "⚠" a "!").
VERDICTS: dict[str, str] = {"ok": "green", "warn": "yellow", "error": "bold red",
                            "skip": "dim", "note": "cyan"}


def verdict(word: str) -> str:
    """`word` (a key of VERDICTS) as Rich markup, padded so the text after it lines up."""
    return f"[{VERDICTS[word]}]{word:<5}[/]"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`1 file`, `2 files` (`many` for an irregular plural)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def lit(text: object) -> str:
    """Foreign text (a path, a source line, tool output) made safe to embed in a markup
    message: brackets escaped. Emoji codes need nothing: the consoles never expand them."""
    return escape(str(text))


def clip(text: str, limit: int, *, keep: str = "start") -> str:
    """At most about `limit` characters of `text`, cut between tokens (never inside a path or
    an identifier), with "…" where text was left out. `keep="end"` keeps the tail (the end of
    a tool's output is where its error is). A single token longer than `limit` is kept whole
    rather than split."""
    if len(text) <= limit:
        return text
    if keep == "end":
        part = text[-limit:]
        if not text[-limit - 1].isspace():
            space = next((i for i, c in enumerate(part) if c.isspace()), -1)
            part = part[space + 1:] if space >= 0 else text.rsplit(maxsplit=1)[-1]
        return "…" + part.lstrip()
    part = text[:limit]
    if not text[limit].isspace():
        space = max((i for i, c in enumerate(part) if c.isspace()), default=-1)
        part = part[:space] if space > 0 else text.split(maxsplit=1)[0]
    return part.rstrip() + "…"


def wrap(text: str, width: int, *, indent: str = "") -> list[str]:
    """`text` as lines of at most `width` columns, broken between words only (a path, a flag or
    an identifier longer than a line stays whole on a line of its own), the lines after the
    first starting with `indent`. A pipe gets the same lines as an 80-column terminal."""
    return textwrap.wrap(text, width=max(width, 40), subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [""]


def _console(*, stderr: bool = False) -> Console:
    # emoji=False: `file.cu:100:1` stays as written (Rich would turn `:100:` into 💯);
    # highlight=False: no colouring that guesses at numbers and paths; soft_wrap=True: a long
    # line is left for the terminal to wrap, so a path is never split by an inserted newline
    # (copy/paste and grep of redirected output keep it whole).
    return Console(stderr=stderr, emoji=False, highlight=False, soft_wrap=True)


#: The progress counter that may end a stage of `UI.activity` (`preprocessing 7 units [3/7]`).
_COUNTER = re.compile(r" \[\d+/\d+\]$")


@dataclass(frozen=True)
class Column:
    """A column of `ui.table`. `key` columns hold ids and paths: they are never cut or wrapped
    (a table that cannot show them whole is printed as a list instead); the others wrap."""

    header: str
    key: bool = False
    justify: Literal["left", "right"] = "left"
    """`right` for numbers, so their digits line up."""


def _fits(console: Console, table: Any, keys: list[str]) -> bool:
    """Whether `table`, rendered at `console`'s width, shows every one of `keys` whole on one
    line (Rich cuts a column that does not fit with an ellipsis, and folds a word that is
    wider than its column)."""
    from io import StringIO

    probe = Console(file=StringIO(), width=console.width, emoji=False, highlight=False,
                    color_system=None, legacy_windows=False)
    probe.print(table)
    rendered = probe.file.getvalue()  # type: ignore[attr-defined]
    return all(key in rendered for key in keys) and "…" not in rendered


def render_table(console: Console, title: str, columns: list[Column],
                 rows: list[list[str]]) -> None:
    """Print `rows` as a table when every id and path fits whole at the console's width, and
    as a plain list (the first column, then `header: value` lines) when it does not.

    Cells are plain text (never markup). Each is written the way the output encoding will
    show it (`degrade`), so a "→" that becomes "->" on an ASCII pipe is measured as the two
    characters it will be and the table's borders stay aligned."""
    from rich import box
    from rich.table import Table

    encoding = console.encoding or "utf-8"
    cells = [[degrade(cell, encoding) for cell in row] for row in rows]
    table = Table(title=degrade(title, encoding), box=box.ASCII if _ascii(encoding)
                  else box.HEAVY_HEAD, title_justify="left")
    for column in columns:
        table.add_column(column.header, no_wrap=column.key, justify=column.justify,
                         overflow="ellipsis" if column.key else "fold")
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))
    # Ids and paths must show whole; prose may wrap between words but not inside one.
    keys = [column.header for column in columns]
    for row in cells:
        for column, cell in zip(columns, row, strict=True):
            keys += [cell] if column.key else cell.split()
    if not rows:
        console.print(Text(f"{degrade(title, encoding)}: none"))
        return
    if _fits(console, table, keys):
        console.print(table)
        return
    # One line per field, never broken by Rich: a terminal wraps a long one, a pipe keeps it.
    console.print(Text(degrade(title, encoding), style="bold"), soft_wrap=True)
    for row in cells:
        console.print(Text(f"- {row[0]}"), soft_wrap=True)
        for column, cell in zip(columns[1:], row[1:], strict=True):
            if cell:
                console.print(Text(f"    {column.header}: {cell}"), soft_wrap=True)


def _ascii(encoding: str) -> bool:
    try:
        "━┃".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return True
    return False


@dataclass
class UI:
    verbose: bool = False
    debug: bool = False
    json_mode: bool = False
    out: Console = field(default_factory=_console)
    err: Console = field(default_factory=lambda: _console(stderr=True))

    def configure(self, *, verbose: bool | None = None, debug: bool | None = None,
                  json_mode: bool | None = None) -> None:
        if verbose is not None:
            self.verbose = verbose
        if debug is not None:
            self.debug = debug
        if json_mode is not None:
            self.json_mode = json_mode

    product_on_stdout: bool = False
    """Stdout carries the command's product (`recipe init` without -o prints the recipe), so
    human lines go to stderr, as under --json: `recipe init > x.toml` writes only TOML."""

    @property
    def human(self) -> Console:
        """Where human-readable lines go: stdout normally, stderr under --json or while stdout
        carries a product (`product_on_stdout`)."""
        return self.err if self.json_mode or self.product_on_stdout else self.out

    @contextmanager
    def stdout_for_product(self, on: bool = True) -> Iterator[None]:
        """Human lines on stderr for the duration (see `product_on_stdout`)."""
        before = self.product_on_stdout
        self.product_on_stdout = on
        try:
            yield
        finally:
            self.product_on_stdout = before

    def step(self, message: str) -> None:
        """A line of flashbuild's own (Rich markup allowed; wrap foreign text in `lit()`)."""
        self.human.print(f"[bold green]•[/] {message}")

    def say(self, message: str) -> None:
        """A step line whose whole text is literal (it names paths or tool output): the same
        bullet as `step`, nothing in `message` read as markup."""
        line = Text("• ", style="bold green")
        line.append(message)
        self.human.print(line)

    def say_wrapped(self, message: str) -> None:
        """`say`, wrapped between words at the console's width (80 on a pipe) with the lines
        after the first indented under the text: for a long sentence (a note, an explanation),
        never a line that names a path to grep for."""
        lines = wrap(message, self.human.width - 2)
        self.say(lines[0])
        for more in lines[1:]:
            self.human.print(Text(f"  {more}"), soft_wrap=True)

    def paragraph(self, text: str, *, first: str = "  ", rest: str = "    ",
                  style: str = "") -> None:
        """Literal `text` wrapped between words at the console's width: the first line starts
        with `first`, the others with `rest` (a note under a step, a kept site's reason)."""
        lines = wrap(first + text, self.human.width, indent=rest)
        for line in lines:
            self.human.print(Text(line, style=style), soft_wrap=True)

    def info(self, message: str) -> None:
        self.human.print(message)

    def literal(self, text: str, *, style: str = "") -> None:
        """Foreign text, exactly as it is: no markup, no emoji codes, no highlighting."""
        self.human.print(Text(text, style=style))

    def table(self, title: str, columns: list[Column], rows: list[list[str]]) -> None:
        """A table of plain-text cells on the human channel (see `render_table`)."""
        render_table(self.human, title, columns, rows)

    @contextmanager
    def activity(self) -> Iterator[Callable[[str], None]]:
        """A status line for a long piece of work: call what this yields with what starts
        now ("preprocessing 7 units", with a counter: "... [3/7]"). On a terminal (stderr) it
        is a spinner line, rewritten in place and gone when the work ends; elsewhere (a pipe,
        a CI log) each stage is one line on stderr, said once and without its counter, so
        stdout keeps only the report. Under --json on a pipe it says nothing: a program reads
        that output (often stdout and stderr together)."""
        console = self.err
        if console.is_terminal:
            from rich.live import Live
            from rich.spinner import Spinner

            spinner = Spinner("dots", text="")
            # Lines printed to stdout meanwhile go above the spinner only when stdout is this
            # terminal too; redirected (`scan > report.txt`) they stay in the file.
            with Live(spinner, console=console, transient=True, refresh_per_second=12.5,
                      redirect_stdout=self.out.is_terminal):
                yield lambda what: spinner.update(text=Text(what))
            return
        if self.json_mode:
            yield lambda _what: None
            return
        said: list[str] = []

        def stage(what: str) -> None:
            # A counter within a stage (`[3/7]`) moves the terminal's line; a log gets the
            # stage once.
            what = _COUNTER.sub("", what)
            if what not in said:
                said.append(what)
                console.print(Text(f"… {what}", style="dim"), soft_wrap=True)

        yield stage

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/] {message}")

    def command(self, quoted: str) -> None:
        if self.verbose:
            self.err.print(Text(f"$ {quoted}", style="dim"))

    def emit_json(self, payload: dict[str, Any]) -> None:
        document = {"schema_version": JSON_SCHEMA_VERSION, **payload}
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")
        sys.stdout.flush()


ui = UI()
