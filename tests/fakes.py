"""A runner that replays recorded tool output, for hermetic unit tests."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from flashbuild.errors import ProcessTimeout
from flashbuild.proc import Completed, failed

Responder = Callable[[tuple[str, ...]], Completed]


@dataclass
class ReplayRunner:
    """Maps a command (program basename without `.exe`, then its arguments) to a result.

    `responses[("nvcc", "--version")] = "..."` answers exactly that call; a key of just the
    program name answers any arguments. Programs in `hangs` raise ProcessTimeout. Unknown
    programs are "not found"; `calls` records what was asked.
    """

    responses: dict[tuple[str, ...], str | Completed | Responder] = field(default_factory=dict)
    hangs: set[str] = field(default_factory=set)
    found: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    #: The environment each call was given (None = inherited), in the order of `calls`.
    envs: list[Mapping[str, str] | None] = field(default_factory=list)

    def add(self, *argv: str, out: str = "", err: str = "", code: int = 0) -> None:
        self.responses[tuple(argv)] = Completed(tuple(argv), code, out, err)

    @staticmethod
    def _key(program: str) -> str:
        name = PurePath(program.replace("\\", "/")).name
        return name[:-4] if name.lower().endswith(".exe") else name

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None:
        key = self._key(program)
        if program in self.found:
            return self.found[program]
        if key in self.found:
            return self.found[key]
        if any(k and k[0] == key for k in self.responses) or key in self.hangs:
            return program
        return None

    def run(self, argv: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 60.0, check: bool = True,
            input: str | None = None) -> Completed:
        args = tuple(os.fspath(a) for a in argv)
        key = (self._key(args[0]), *args[1:])
        self.calls.append(args)
        self.envs.append(env)
        if key[0] in self.hangs:
            raise ProcessTimeout(f"`{key[0]}` did not finish within {timeout:g} s")
        answer = self.responses.get(key, self.responses.get(key[:1]))
        if answer is None:
            from flashbuild.errors import ToolchainError
            raise ToolchainError(f"`{args[0]}` was not found")
        if callable(answer):
            done = answer(args)
        elif isinstance(answer, Completed):
            done = Completed(args, answer.returncode, answer.stdout, answer.stderr)
        else:
            done = Completed(args, 0, answer, "")
        if check and not done.ok:
            raise failed(done)
        return done


def cmd_parse(line: str, env: Mapping[str, str]) -> list[str]:
    """How cmd.exe reads a command line, as far as quoting goes: `%NAME%` expanded first
    (names case-insensitive, values not expanded again), then words split on unquoted
    blanks, `^` escaping the next character outside quotes, and `&&`, `&`, `||`, `|`, `<`,
    `>` outside quotes returned as operator words. Quotes are removed from the words."""
    upper = {k.upper(): v for k, v in env.items()}
    expanded, i = "", 0
    while i < len(line):
        end = line.find("%", i + 1) if line[i] == "%" else -1
        if end > i and line[i + 1:end].upper() in upper:
            expanded += upper[line[i + 1:end].upper()]
            i = end + 1
        else:
            expanded += line[i]
            i += 1
    words: list[str] = []
    word, quoted, started, j = "", False, False, 0
    while j < len(expanded):
        c = expanded[j]
        if c == '"':
            quoted, started = not quoted, True
        elif quoted:
            word += c
        elif c == "^" and j + 1 < len(expanded):
            j += 1
            word += expanded[j]
            started = True
        elif c in " \t":
            if started:
                words.append(word)
            word, started = "", False
        elif c in "&|<>":
            if started:
                words.append(word)
            op = expanded[j:j + 2] if expanded[j:j + 2] in ("&&", "||") else c
            words.append(op)
            j += len(op) - 1
            word, started = "", False
        else:
            word += c
            started = True
        j += 1
    if started:
        words.append(word)
    return words


def set_target(env: Mapping[str, str] | None) -> Path:
    """Where a replayed `cmd … && set > %FLASHBUILD_SET_FILE%` writes (the variable's value
    is the quoted path)."""
    from flashbuild.platforms.windows import SET_FILE_VAR

    assert env is not None
    value = next(v for k, v in env.items() if k.upper() == SET_FILE_VAR)
    return Path(value.strip('"'))
