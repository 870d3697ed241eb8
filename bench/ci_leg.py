"""The generated workflow read as a runner reads it, for the local runs of a Linux leg
(tests/integration/test_ci_local_leg.py and bench/ci_leg_local.py): its matrix entries, a
job's steps, `${{ matrix.* }}`/`${{ env.* }}` expansion, the `if:` conditions the wheel job
uses, the workflow's and the job's `env:`, and a step's script run with bash as the runner
runs it.

No YAML library is a dependency of flashbuild, and the template's layout is fixed (jobs at 2
spaces, steps at 6, matrix entries as flow mappings on one line each), so the text is read by
indentation. Only Python's standard library: the script runs where flashbuild's own
dependencies are the only packages.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

BASH = shutil.which("bash")
_ENTRY = re.compile(r'([\w-]+): ("(?:[^"\\]|\\.)*")')


def matrix(text: str) -> list[dict[str, str]]:
    """The matrix entries of a rendered workflow."""
    block = text.split("        include:\n", 1)[1].split("    defaults:", 1)[0]
    return [{k: json.loads(v) for k, v in _ENTRY.findall(line)}
            for line in block.splitlines() if line.strip().startswith("- {")]


@dataclass
class Step:
    """One step of a job, as the template writes it (block or plain scalars only)."""

    name: str = ""
    uses: str = ""
    condition: str = ""
    run: str = ""
    env: dict[str, str] = field(default_factory=dict)


def job_steps(text: str, job: str) -> list[Step]:
    """The steps of `job`, read from the rendered text by indentation."""
    body = text.split(f"\n  {job}:\n", 1)[1]
    end = re.search(r"^  \w[\w-]*:$", body, re.MULTILINE)
    body = body[:end.start()] if end else body
    steps_at = body.index("    steps:\n") + len("    steps:\n")
    items = re.split(r"^      - ", body[steps_at:], flags=re.MULTILINE)[1:]
    steps = []
    for item in items:
        lines = ("        " + item).splitlines()
        step = Step()
        i = 0
        while i < len(lines):
            m = re.match(r"^        (name|uses|if|run|env): ?(.*)$", lines[i])
            i += 1
            if not m:
                continue
            key, value = m[1], m[2]
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" " * 10)):
                block.append(lines[i][10:])
                i += 1
            if key == "run":
                if value == "|":
                    step.run = "\n".join(block).strip("\n") + "\n"
                elif value == ">-":
                    step.run = " ".join(b.strip() for b in block) + "\n"
                else:
                    step.run = value + "\n"
            elif key == "env":
                step.env = dict(b.split(": ", 1) for b in block if b.strip())
            elif key == "if":
                step.condition = value
            elif key == "name":
                step.name = value
            else:
                step.uses = value
        steps.append(step)
    return steps


def expand(text: str, values: dict[str, str]) -> str:
    """`${{ matrix.X }}` and `${{ env.X }}` as the runner expands them before bash sees them."""
    def one(m: re.Match[str]) -> str:
        return values[m[1]]
    return re.sub(r"\$\{\{ (?:matrix|env)\.([\w-]+) \}\}", one, text)


def holds(condition: str, entry: dict[str, str]) -> bool:
    """The `if:` conditions the wheel job uses, on a Linux runner (a passing job: `failure()`
    does not hold)."""
    if not condition:
        return True
    if condition == "failure()":
        return False
    if condition == "always()":
        return True
    facts = {"runner.os == 'Linux'": True, "runner.os == 'Windows'": False,
             "matrix.toolkit == 'pypi'": entry["toolkit"] == "pypi",
             "matrix.toolkit == 'installer'": entry["toolkit"] == "installer",
             "matrix.image == ''": not entry["image"], "matrix.image != ''": bool(entry["image"]),
             "matrix.policy != ''": bool(entry["policy"])}
    return all(facts[part.strip()] for part in condition.split("&&"))


def workflow_env(text: str, entry: dict[str, str] | None = None) -> dict[str, str]:
    """The workflow's `env:`, and with `entry` the wheel job's own over it (its archs come
    from the matrix entry: `${{ matrix.arch }}`)."""
    block = text.split("\nenv:\n", 1)[1].split("\njobs:\n", 1)[0]
    env = {m[1]: m[2] for m in re.finditer(r'^  (\w+): "(.*)"$', block, re.MULTILINE)}
    if entry is not None:
        job = text.split("\n  wheel:\n", 1)[1].split("\n    env:\n", 1)[1]
        job = re.split(r"^    \S", job, maxsplit=1, flags=re.MULTILINE)[0]
        env.update((m[1], expand(m[2], entry))
                   for m in re.finditer(r"^      (\w+): (.*)$", job, re.MULTILINE))
    return env


def bash(script: str, cwd: Path, env: dict[str, str], *, timeout: float = 600
         ) -> subprocess.CompletedProcess[str]:
    """`script` as the runner's `shell: bash` runs it: `bash --noprofile --norc -eo pipefail`.
    The timeout only bounds a hang."""
    if BASH is None:
        raise RuntimeError("bash is not on PATH")
    return subprocess.run([BASH, "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
