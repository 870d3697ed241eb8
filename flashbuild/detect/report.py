"""doctor's output: a Rich report for people and a JSON document for machines.

JSON document (`flashbuild doctor --json`), stable keys; `schema_version` is bumped when a key
changes meaning or disappears (new keys may appear at any time):

- `schema_version` (int): see flashbuild.console.JSON_SCHEMA_VERSION.
- `ok` (bool): true when no verdict is an error (exit code 0); false → exit code 3.
- `platform` (str): `linux` or `windows`.
- `targets` (list[str]): the targets checked (`sm_90a`, …); `target_origin`: `--arch`,
  `gpus` or `none`.
- `verdicts` (list): one object per finding, with `rule` (stable id, e.g. `toolkit.too-old`),
  `severity` (`ok` / `warn` / `error`), `section`, `title`, `evidence`, `fix`.
- `toolkits`: `candidates` (list of toolkits: `root`, `nvcc`, `version`, `version_source`,
  `codes`, `layout` (`standard`/`pypi`), `dll_dirs`, `has_headers`, `host_config`,
  `origins`, `problems`), `chosen` (root or null), `reason`, `disagreement`, `problems`.
- `host_window`: what the chosen nvcc accepts: `msc_min`, `msc_end`, `gcc_max`,
  `clang_max`, `source` (`host_config.h` / `table` / `unknown`).
- `compilers`: `family` (`msvc`/`gnu`), `gnu` (name, path, version), `visual_studios`
  (instance_id, display_name, path, version, product_line, prerelease, toolsets
  [version, path, msc_ver], default_toolset), `active_msvc` (activated, vc_tools_version,
  cl_path, cl_version, msc_ver), `cuda_host_compiler`, `problems`.
- `gpus`: `gpus` (index, name, compute_capability, sm, memory_mib), `driver_version`,
  `driver_cuda`, `source` (`nvml` / `nvidia-smi` / `none`), `problems`.
- `python`: `python` (executable, version, implementation, abi_tag, ext_suffix, venv,
  site_packages), `torch` (null or path, version, cuda, git_version, arch_list, problems),
  `tools` (name, version, path for pybind11, ninja, cmake), `problems`.
- `host`: cores, free_ram, total_ram, build_dir, free_disk (bytes), jobs_heavy, jobs_light,
  long_paths_enabled, path_hazards (path, what, role).
- `probe_failures` (list of {probe, error}).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.text import Text

from flashbuild.console import plural
from flashbuild.console import verdict as verdict_word
from flashbuild.detect.rules import Section, Severity, blocking

if TYPE_CHECKING:
    from rich.console import Console

    from flashbuild.detect.rules import Findings, Verdict

_WORD = {Severity.OK: "ok", Severity.WARN: "warn", Severity.ERROR: "error"}


def to_document(findings: Findings, verdicts: list[Verdict]) -> dict[str, Any]:
    """The JSON document described in this module's docstring (without schema_version, which
    `ui.emit_json` adds)."""
    f = findings
    return {
        "ok": not blocking(verdicts),
        "platform": f.platform,
        "targets": [a.sm for a in f.targets],
        "target_origin": f.target_origin,
        "verdicts": [v.to_json() for v in verdicts],
        "toolkits": f.toolkits.to_json() if f.toolkits else None,
        "host_window": f.window.to_json() if f.toolkit else None,
        "compilers": f.compilers.to_json() if f.compilers else None,
        "gpus": f.gpus.to_json() if f.gpus else None,
        "python": f.pyenv.to_json() if f.pyenv else None,
        "host": f.host.to_json() if f.host else None,
        "probe_failures": [{"probe": n, "error": e} for n, e in f.probe_failures],
    }


def render(console: Console, findings: Findings, verdicts: list[Verdict]) -> None:
    """Grouped by section, each verdict as ok / warn / error, the fix under each problem, a
    summary line last."""
    for section in Section:
        rows = [v for v in verdicts if v.section is section]
        if not rows:
            continue
        console.print(Text(section.value, style="bold underline"))
        for verdict in rows:
            console.print(f"  {verdict_word(_WORD[verdict.severity])} {escape(verdict.title)}")
            if verdict.evidence:
                console.print(f"        [dim]{escape(verdict.evidence)}[/]")
            if verdict.fix and verdict.severity is not Severity.OK:
                console.print(f"        [bold]fix:[/] {escape(verdict.fix)}")
        if section is Section.TOOLKIT and findings.toolkits is not None:
            others = [t for t in findings.toolkits.candidates
                      if findings.toolkit is None or t.root != findings.toolkit.root]
            for tk in others:
                console.print(f"        [dim]also found: CUDA {tk.version or '?'} at "
                              f"{escape(str(tk.root))} ({tk.layout} layout, via "
                              f"{', '.join(tk.origins)})[/]")
        console.print()
    errors = sum(v.severity is Severity.ERROR for v in verdicts)
    warns = sum(v.severity is Severity.WARN for v in verdicts)
    if errors:
        console.print(f"{verdict_word('error')} [bold red]{plural(errors, 'problem')} "
                      f"{'blocks' if errors == 1 else 'block'} a build[/]"
                      + (f", {plural(warns, 'warning')}" if warns else ""))
    else:
        console.print(f"{verdict_word('ok')} [bold green]nothing blocks a build[/]"
                      + (f" ({plural(warns, 'warning')})" if warns else ""))
