"""The Linux leg `flashbuild ci init` writes, run on this machine for a real tree: the closest
to a GitHub runner a machine without one has (docs/ci.md, "What ran locally").

    python3 bench/ci_leg_local.py TREE --arch ARCH --out DIR [--python PY] [--recipe R]

1. `flashbuild ci init` for a copy of TREE: one arch, this Python's version, the installed
   torch's version (and its CUDA; `--cuda` without one), `--linux-image none`, so the leg's
   steps are the ones a runner runs on its own host;
2. the wheel job's `run:` steps in order, each with `bash --noprofile --norc -eo pipefail` in
   the copy, `${{ matrix.* }}`/`${{ env.* }}` expanded, `if:` judged, GITHUB_PATH/GITHUB_ENV
   honoured. Stood in: checkout (the copy), setup-python (a venv of PY over PY's packages,
   so `--install wheel` lands in the venv), sccache-action (sccache from PATH, else a launcher
   that runs the compiler), and every network install (`pip install` of anything but a local
   file): a no-op that checks what it would install is here already and says so;
3. `flashbuild repair` of the built wheel and `flashbuild verify WHEEL` under the policy this
   host's glibc allows (a wheel linked here can claim no older one);
4. DIR/summary.json and DIR/summary.md: each step's exit and seconds, the wheel, repair's and
   verify's verdicts; each step's output in DIR/logs/, the repaired wheel in DIR/wheelhouse.

flashbuild runs as `PY -m flashbuild` with this checkout on PYTHONPATH (no install needed, no
network: pip never reaches an index, PIP_NO_INDEX=1). Exit 0 when every step ran and repair and
verify passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ci_leg import bash, expand, holds, job_steps, matrix, workflow_env  # noqa: E402

#: setup-python's python: `pip install` of a local file runs; of anything else (flashbuild
#: from git, torch, the PyPI toolkit) checks that it is installed instead of downloading it.
STUB_PYTHON = """#!/bin/bash
if [ "$1" = -m ] && [ "$2" = pip ] && [ "$3" = install ] && [[ "$4" != *.whl ]]; then
  exec "$REAL_PYTHON" "$LEG_SCRIPT" --check-installed "${@:4}"
fi
exec "$REAL_PYTHON" "$@"
"""
STUB_FLASHBUILD = '#!/bin/bash\nexec "$REAL_PYTHON" -m flashbuild "$@"\n'
#: sccache-action's sccache where none is installed: a launcher that runs the compiler.
STUB_SCCACHE = """#!/bin/bash
case "$1" in -*|"") exit 0;; esac
exec "$@"
"""


def check_installed(args: list[str]) -> int:
    """The no-op that stands in for a network `pip install ARGS`: say, per requirement,
    whether an installed distribution satisfies it (`flashbuild @ URL`: this checkout)."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    log = Path(os.environ["LEG_LOG"])
    skip_next = False
    for arg in args:
        if skip_next or arg.startswith("-"):
            skip_next = arg in {"--index-url", "-i", "--extra-index-url", "-f", "--find-links"}
            continue
        try:
            req = Requirement(arg)
        except InvalidRequirement:
            line = f"unread: {arg}"
        else:
            if req.url and req.name == "flashbuild":
                here = importlib.util.find_spec("flashbuild")
                line = (f"present: {arg} (this checkout, {here.origin})" if here else
                        f"absent: {arg}")
            else:
                try:
                    have = metadata.version(req.name)
                except metadata.PackageNotFoundError:
                    line = f"absent: {arg} (the step would download it)"
                else:
                    fits = req.specifier.contains(have, prereleases=True) or not req.specifier
                    line = (f"present: {arg} ({req.name} {have})" if fits else
                            f"other version: {arg} ({req.name} {have} is installed)")
        print(f"network install stood in: {line}")
        with log.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
    return 0


def _probe(python: str, env: dict[str, str]) -> dict[str, str]:
    """What the leg's matrix and the policy come from, as `python` sees them (flashbuild from
    this checkout: PYTHONPATH in `env`)."""
    code = ("import json, platform, sys, sysconfig\n"
            "from flashbuild.verifying.abi import policy_for_glibc\n"
            "try:\n import torch; t, c = torch.__version__, torch.version.cuda or ''\n"
            "except Exception: t, c = '', ''\n"
            "g = platform.libc_ver()[1]; p = policy_for_glibc(g) if g else None\n"
            "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'torch': t,"
            " 'cuda': c, 'purelib': sysconfig.get_paths()['purelib'],"
            " 'platlib': sysconfig.get_paths()['platlib'], 'glibc': g,"
            " 'policy': p.name if p else ''}))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                          timeout=300, env=env)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _recipe(tree: Path, given: str | None) -> str:
    if given:
        return str(tree / given) if (tree / given).is_file() else given
    found = sorted(tree.glob("*.toml"))
    if len(found) != 1:
        raise SystemExit(f"pass --recipe (a bundled recipe's name or a file in the tree): "
                         f"{tree} holds {len(found)} .toml files at its top")
    return str(found[0])


def _flashbuild(python: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "flashbuild", *args], capture_output=True, text=True,
                          env=env, check=False, timeout=3600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that builds (its torch, its packages)")
    parser.add_argument("--recipe", help="bundled recipe name or a file in TREE "
                        "(default: the one .toml at TREE's top)")
    parser.add_argument("--cuda", default="13.0",
                        help="the matrix's CUDA where torch names none (a CPU torch or none)")
    parser.add_argument("--step-timeout", type=float, default=6 * 3600)
    options = parser.parse_args(argv)
    out: Path = options.out.resolve()
    if out.exists():
        # Only a folder this script wrote (or an empty one) is replaced.
        if any(out.iterdir()) and not (out / "summary.json").is_file():
            raise SystemExit(f"{out} exists and is not an earlier --out of this script: "
                             "pass a new or empty folder")
        shutil.rmtree(out)
    (out / "logs").mkdir(parents=True)
    python = str(Path(options.python))
    # checkout: a copy of the tree.
    work = out / "checkout"
    # Everything, .git included: checkout fetches full history (trees version from git).
    shutil.copytree(options.tree, work, symlinks=True)
    base_env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    facts = _probe(python, base_env)
    torch = facts["torch"].split("+", 1)[0]
    cuda = ".".join(facts["cuda"].split(".")[:2]) if facts["cuda"] else options.cuda
    workflow = out / "flashbuild.yml"
    init = _flashbuild(python, base_env, "ci", "init", "--recipe",
                       _recipe(work, options.recipe), "--source", str(work),
                       "--arch", options.arch, "--platform", "linux", "--cuda", cuda,
                       "--python", facts["python"], *(["--torch", torch] if torch else []),
                       "--linux-image", "none", "--flashbuild-spec",
                       f"flashbuild @ file://{ROOT}", "-o", str(workflow))
    (out / "logs" / "00-ci-init.log").write_text(init.stdout + init.stderr, encoding="utf-8")
    summary: dict[str, Any] = {
        "tree": str(options.tree), "arch": options.arch, "python": facts["python"],
        "torch": facts["torch"], "cuda": cuda, "glibc": facts["glibc"],
        "ci_init": {"exit": init.returncode}, "steps": [], "wheel": None,
        "repair": None, "verify": None}
    if init.returncode == 0:
        _run_leg(workflow.read_text(encoding="utf-8"), work, out, python, facts, base_env,
                 summary, options.step_timeout)
    ok = (init.returncode == 0 and all(s["exit"] == 0 for s in summary["steps"])
          and bool(summary["repair"]) and summary["repair"]["ok"]
          and bool(summary["verify"]) and summary["verify"]["ok"])
    summary["ok"] = ok
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(_markdown(summary), encoding="utf-8")
    print(_markdown(summary))
    return 0 if ok else 1


def _venv(python: str, facts: dict[str, str], folder: Path) -> Path:
    """setup-python's interpreter: a venv of `python` that sees its packages (a .pth, so it
    works when `python` is itself a venv's) and takes what the leg installs."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=300)
    probe = subprocess.run([str(folder / "bin" / "python"), "-c",
                            "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True, timeout=300)
    purelib = Path(probe.stdout.strip())
    paths = dict.fromkeys([facts["purelib"], facts["platlib"]])
    (purelib / "leg-host-packages.pth").write_text("\n".join(paths) + "\n", encoding="utf-8")
    return folder / "bin" / "python"


def _run_leg(text: str, work: Path, out: Path, python: str, facts: dict[str, str],
             base_env: dict[str, str], summary: dict[str, Any], timeout: float) -> None:
    (entry,) = matrix(text)
    venv_python = _venv(python, facts, out / "venv")
    stubs = out / "bin"
    stubs.mkdir()
    scripts = {"python": STUB_PYTHON, "flashbuild": STUB_FLASHBUILD}
    if shutil.which("sccache") is None:
        scripts["sccache"] = STUB_SCCACHE
    for name, script in scripts.items():
        (stubs / name).write_text(script, encoding="utf-8")
        (stubs / name).chmod(0o755)
    summary["sccache"] = shutil.which("sccache") or "none (a stand-in that runs the compiler)"
    files = out / "github"
    files.mkdir()
    env = {**base_env, **workflow_env(text, entry), "REAL_PYTHON": str(venv_python),
           "LEG_SCRIPT": str(Path(__file__).resolve()), "LEG_LOG": str(out / "installs.log"),
           "PATH": os.pathsep.join([str(stubs), str(venv_python.parent),
                                    base_env.get("PATH", "")]),
           "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "RUNNER_OS": "Linux",
           "GITHUB_OUTPUT": str(files / "output"), "GITHUB_ENV": str(files / "env"),
           "GITHUB_PATH": str(files / "path"), "GITHUB_WORKSPACE": str(work)}
    values = {**workflow_env(text, entry), **entry}
    steps: list[dict[str, object]] = []
    summary["steps"] = steps
    for number, step in enumerate(job_steps(text, "wheel"), start=1):
        if step.uses or not step.run or not holds(step.condition, entry):
            continue
        name = expand(step.name, values) or f"step {number}"
        started = time.monotonic()
        try:
            done = bash(expand(step.run, values), work, env, timeout=timeout)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            code, output = 124, f"timed out after {timeout} s: {exc}"
        seconds = round(time.monotonic() - started, 1)
        slug = re.sub(r"[^\w.-]+", "-", name).strip("-")
        log = out / "logs" / f"{number:02d}-{slug}.log"
        log.write_text(output, encoding="utf-8")
        steps.append({"name": name, "exit": code, "seconds": seconds, "log": str(log)})
        print(f"{name}: exit {code}, {seconds} s", flush=True)
        if code != 0:
            return  # the runner stops the job at the first failing step
        _github_files(files, env)
    installs = out / "installs.log"
    summary["network_installs"] = (installs.read_text(encoding="utf-8").splitlines()
                                   if installs.exists() else [])
    built = sorted((work / "build" / "flashbuild-ci" / "dist").glob("*.whl"))
    if len(built) != 1:
        summary["wheel"] = f"{len(built)} wheels in build/flashbuild-ci/dist"
        return
    wheel = built[0]
    summary["wheel"] = wheel.name
    _repair_and_verify(wheel, out, python, facts, base_env, summary, entry["arch"])


def _github_files(files: Path, env: dict[str, str]) -> None:
    """What a step wrote to GITHUB_PATH and GITHUB_ENV, as the runner applies it."""
    path = files / "path"
    if path.exists():
        added = path.read_text(encoding="utf-8").split()
        env["PATH"] = os.pathsep.join([*reversed(added), env["PATH"]])
        path.unlink()
    envfile = files / "env"
    if envfile.exists():
        for line in envfile.read_text(encoding="utf-8").splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                env[key] = value
        envfile.unlink()


def _repair_and_verify(wheel: Path, out: Path, python: str, facts: dict[str, str],
                       env: dict[str, str], summary: dict[str, Any], arch: str) -> None:
    policy = facts["policy"]
    if not policy:
        summary["repair"] = {"ok": False, "said": f"glibc {facts['glibc']}: no policy"}
        return
    repair = _flashbuild(python, env, "repair", str(wheel), "--policy", policy,
                         "--wheel-dir", str(out / "wheelhouse"), "--json")
    (out / "logs" / "repair.log").write_text(repair.stdout + repair.stderr, encoding="utf-8")
    said = _json(repair.stdout)
    summary["repair"] = {"ok": repair.returncode == 0, "exit": repair.returncode,
                         "policy": policy, "wheels": said.get("wheels"),
                         "said": None if repair.returncode == 0 else
                         (repair.stdout + repair.stderr)[-2000:]}
    repaired = sorted((out / "wheelhouse").glob("*.whl"))
    if repair.returncode != 0 or not repaired:
        return
    verify = _flashbuild(python, env, "verify", str(repaired[0]), "--policy", policy,
                         "--arch", arch, "--no-gpu", "--json")
    (out / "logs" / "verify.log").write_text(verify.stdout + verify.stderr, encoding="utf-8")
    report = _json(verify.stdout)
    listed = report.get("checks")
    checks: list[Any] = listed if isinstance(listed, list) else []
    failed = [f"{c.get('area')}: {c.get('subject')}: {c.get('summary')}" for c in checks
              if isinstance(c, dict) and c.get("status") not in {"ok", "warn", "note", "skip"}]
    summary["verify"] = {"ok": verify.returncode == 0, "exit": verify.returncode,
                         "wheel": repaired[0].name, "checks": len(checks), "failed": failed}


def _json(text: str) -> dict[str, object]:
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _markdown(summary: dict[str, Any]) -> str:
    lines = [f"# The Linux leg, locally: {summary['tree']}", "",
             f"arch {summary['arch']}, Python {summary['python']}, torch "
             f"{summary['torch'] or '-'}, CUDA {summary['cuda']}, glibc {summary['glibc']}; "
             f"ci init exit {summary['ci_init']['exit']}", "",
             "| step | exit | seconds |", "|---|---:|---:|"]
    lines += [f"| {s['name']} | {s['exit']} | {s['seconds']} |"
              for s in summary["steps"]]
    lines += ["", f"wheel: {summary['wheel']}"]
    for key in ("repair", "verify"):
        lines.append(f"{key}: {json.dumps(summary[key])}")
    for line in summary.get("network_installs") or []:
        lines.append(f"network install stood in: {line}")
    lines += ["", f"ok: {summary.get('ok')}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--check-installed":
        sys.exit(check_installed(sys.argv[2:]))
    sys.exit(main())
