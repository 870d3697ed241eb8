"""Import the installed package in a fresh interpreter and run its own GPU self-check.

The child runs from a new empty temp folder with `-P` (no script folder or cwd on sys.path),
so a source tree in the current directory cannot shadow the installed package; the package's
`__init__` (which holds the loader shim) runs as it will for users. Exports are looked up in
the child and reported back as JSON on stdout.

The self-check (`python -m PKG.selfcheck --json`, flashkern's `selfcheck.py`) prints one JSON
document, schema version 1: `{"schema_version", "device", "capability", "checks": [{"name",
"dtype", "ok", "max_abs_err", "tol", "rtol"?, "detail"?}], "skipped"?: [{"name", "reason"}],
"bench": [{"kernel", "tb_s", "fraction_of_copy", "error"?, ...}] | null, "ok", "error"?}`, and
exits 0 (all pass), 1 (a check failed) or 2 (no torch / no CUDA device; `error` says why).
`parse_selfcheck` turns it into typed data and `selfcheck_findings` into verdicts.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from flashbuild.errors import FlashbuildError, VerifyError
from flashbuild.installing.resources import loader_shim
from flashbuild.installing.resources.loader_shim import CHECK_VARIABLE, Gpu
from flashbuild.proc import Runner, tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_T = TypeVar("_T")

#: The child program: argv = [package, top-level modules as a JSON list, export...]; prints
#: one JSON line.
_PROBE = r"""
import importlib, importlib.machinery, importlib.util, json, os, sys, traceback
pkg, tops, names = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
out = {"imported": False, "missing": [], "why": {}, "error": None, "file": None,
       "torch": importlib.util.find_spec("torch") is not None, "torch_first": False}


def extension(name):
    # An extension module by its own top-level name (no package whose __init__ imports torch
    # first): a torch extension needs torch's libraries loaded before it, as its users
    # `import torch` before it.
    try:
        spec = importlib.util.find_spec(name)
    except BaseException:
        return False
    origin = getattr(spec, "origin", None) or ""
    return spec is not None and not spec.submodule_search_locations and \
        origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


try:
    if out["torch"] and "." not in pkg and extension(pkg):
        import torch
        out["torch_first"] = True
    mod = importlib.import_module(pkg)
    out["imported"] = True
    out["file"] = getattr(mod, "__file__", None)
except BaseException as exc:
    out["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    # The package's own line that raised (the last frame inside its folder): what a failed
    # import is about when the error comes from a library it called (torch's GPU check).
    folder = "/" + pkg.split(".")[0] + "/"
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        name = frame.filename.replace("\\", "/")
        if folder in name:
            out["at"] = name[name.rindex(folder) + 1:] + ":" + str(frame.lineno)
            break
def beside(first):
    # A top-level module installed next to the package (setup.py's
    # CUDAExtension("foo_cuda", ...) beside packages=["foo"]): its file sits in the folder
    # that holds the package, so `foo_cuda.fwd` means that module, not foo.foo_cuda.
    if not out["file"] or "." in first:
        return False
    spec = importlib.util.find_spec(first)
    here = os.path.dirname(os.path.dirname(os.path.abspath(out["file"])))
    origin = getattr(spec, "origin", None) if spec else None
    return bool(origin) and os.path.dirname(os.path.abspath(origin)) == here


def missed(name, exc):
    # The first line of why a name was not found: an ImportError of the module that holds
    # it (`libc10.so: cannot open shared object file`) is not the same as a missing binding.
    out["missing"].append(name)
    # resolve() ends in import_module(path): a plain missing name raises ModuleNotFoundError
    # for a dotted path ending in that name, which is no import failure of a real module.
    absent = isinstance(exc, ModuleNotFoundError) and (exc.name or "").endswith(
        name.replace(":", ".").split(".")[-1])
    if not isinstance(exc, LookupError) and not absent:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        out["why"][name] = text.splitlines()[-1][:300] if text else type(exc).__name__


def resolve(base, path, parts):
    obj = base
    for part in parts:
        path += "." + part if path else part
        # In a package, a submodule of that name wins over an attribute: an __init__ that
        # runs `from .hash_cpu import cluster as hash_cpu` leaves `pkg.hash_cpu` the
        # function, and `pkg.hash_cpu.cluster` names the module's export.
        if hasattr(obj, "__path__"):
            try:
                spec = importlib.util.find_spec(path)
            except (ImportError, ValueError):
                spec = None
            if spec is not None:
                obj = importlib.import_module(path)
                continue
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        obj = importlib.import_module(path)
    return obj


if out["imported"]:
    for name in names:
        parts = name.replace(":", ".").split(".")
        if len(parts) > 1 and (parts[0] in tops or (parts[0] == pkg and not
                                                    hasattr(mod, "__path__"))):
            # A top-level module (the build installed it by that name; or the module
            # imported is itself one): `rotary_emb.apply_rotary` is that module's attribute.
            try:
                top = mod if parts[0] == pkg else importlib.import_module(parts[0])
                resolve(top, parts[0], parts[1:])
            except BaseException as exc:
                missed(name, exc)
            continue
        try:
            resolve(mod, pkg, parts)
            continue
        except AttributeError:
            first = None
        except BaseException as exc:
            first = exc
        try:
            if not (len(parts) > 1 and "." not in pkg and beside(parts[0])):
                raise first or LookupError(name)
            resolve(importlib.import_module(parts[0]), parts[0], parts[1:])
        except BaseException as exc:
            missed(name, exc)
print("FLASHBUILD-PROBE " + json.dumps(out))
"""

#: The package's own GPU self-check, `{python}` and `{package}` substituted; `--json` asks for
#: the one-document report that `parse_selfcheck` reads.
DEFAULT_SELFCHECK = ("{python}", "-m", "{package}.selfcheck", "--json")
#: The self-check report version this module reads.
SELFCHECK_SCHEMA_VERSION = 1
#: The self-check's exit status for "cannot run here" (no torch, or torch sees no GPU).
SELFCHECK_UNAVAILABLE = 2
#: Failed kernel checks listed one by one; the rest are counted in one more verdict (a sticky
#: CUDA error fails every case after it, and a hundred identical rows hide the first one).
MAX_LISTED_FAILURES = 20


@dataclass(frozen=True)
class ImportResult:
    imported: bool
    missing_exports: tuple[str, ...]
    error: str | None
    file: str | None
    #: Whether torch is importable in that interpreter (the GPU self-check needs it).
    torch: bool = False
    #: torch was imported first: the module imported is a top-level extension module, which
    #: (a torch extension) needs torch's libraries loaded before it, as its users do.
    torch_first: bool = False
    #: Why a missing export was not found, where it was more than an absent name (the
    #: module holding it failed to import: `ImportError: libc10.so: cannot open …`).
    why: Mapping[str, str] = field(default_factory=dict)
    #: Where a failed import raised in the package's own code (`torchsparse/backends.py:7`),
    #: "" when no frame of it was on the stack.
    at: str = ""


@dataclass(frozen=True)
class KernelCheck:
    """One case of the self-check: a kernel and dtype against its torch reference."""

    name: str
    dtype: str
    ok: bool
    #: Largest |got - want|; None when the case is not numeric or the error was not finite.
    max_abs_err: float | None
    #: Absolute tolerance (None when not numeric); a value passes at tol + rtol * |want|.
    tol: float | None
    rtol: float | None = None
    #: Why it failed (first mismatch, the exception), or what a non-numeric case compared.
    detail: str = ""


@dataclass(frozen=True)
class BenchRow:
    """One row of the self-check's `--bench` table."""

    kernel: str
    #: Achieved bandwidth, TB/s; None when the kernel failed to run (see `error`).
    tb_s: float | None
    #: Achieved bandwidth over torch's device-to-device copy in the same run.
    fraction_of_copy: float | None
    error: str = ""


@dataclass(frozen=True)
class SelfCheckReport:
    """The self-check's JSON document, validated."""

    device: str | None
    capability: str | None
    checks: tuple[KernelCheck, ...]
    bench: tuple[BenchRow, ...] | None
    ok: bool
    #: (name, reason) of the cases it did not run, e.g. no attention plugin installed.
    skipped: tuple[tuple[str, str], ...] = ()
    #: Why it could not run at all (exit status 2).
    error: str | None = None

    @property
    def failures(self) -> tuple[KernelCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)


@dataclass(frozen=True)
class SelfCheckResult:
    ok: bool
    output: str
    #: The parsed report; None when the child printed none (a crash, or a custom command).
    report: SelfCheckReport | None = None
    returncode: int | None = None
    #: Why stdout held no valid report (empty when it did, or when none was expected).
    parse_error: str = ""


@dataclass(frozen=True)
class Finding:
    """A verdict for `verify` to show: the stage turns each into one of its checks."""

    area: str
    status: Literal["ok", "warn", "fail", "skip"]
    subject: str
    summary: str
    evidence: str = ""
    fix: str = ""


def _child_env(env: Mapping[str, str], extra_path: Path | None) -> dict[str, str]:
    child = dict(env)
    if extra_path is not None:
        child["PYTHONPATH"] = os.pathsep.join(
            [str(extra_path), *([child["PYTHONPATH"]] if child.get("PYTHONPATH") else [])])
    return child


def import_check(package: str, exports: Sequence[str], *, runner: Runner,
                 python: str = sys.executable, env: Mapping[str, str] | None = None,
                 search_path: Path | None = None, timeout: float = 120.0,
                 top_level: Sequence[str] = ()) -> ImportResult:
    """Import `package` in a fresh interpreter from a neutral folder and look up `exports`.
    `search_path` is put on PYTHONPATH (for an in-place install inside a source tree).
    An export whose first part is one of `top_level` (modules installed by their own name,
    beside the package or without one) is looked up on that module, not on the package.

    The loader shim's GPU check is off for this import: verify judges the images against the
    requested archs itself, and a build for another GPU than this machine's (sm_120 built on an
    H100) must still import here to have its exports checked."""
    child_env = {**_child_env(os.environ if env is None else env, search_path),
                 CHECK_VARIABLE: "0"}
    with tempfile.TemporaryDirectory(prefix="flashbuild-verify-") as neutral:
        try:
            done = runner.run([python, "-P", "-c", _PROBE, package,
                               json.dumps(list(top_level)), *exports],
                              env=child_env, cwd=Path(neutral), timeout=timeout, check=False)
        except FlashbuildError as exc:
            return ImportResult(False, (), exc.paragraph(), None)
    for line in done.stdout.splitlines():
        if line.startswith("FLASHBUILD-PROBE "):
            data = json.loads(line[len("FLASHBUILD-PROBE "):])
            return ImportResult(bool(data["imported"]), tuple(data["missing"]),
                                data["error"], data["file"], bool(data.get("torch")),
                                bool(data.get("torch_first")),
                                why={str(k): str(v) for k, v in data.get("why", {}).items()},
                                at=str(data.get("at") or ""))
    # The interpreter died before printing (a crash inside the extension's init).
    return ImportResult(False, (), f"the interpreter exited with code {done.returncode}: "
                        f"{tail(done.output, 12)}", None)


def run_selfcheck(package: str, *, runner: Runner, bench: bool = False,
                  command: Sequence[str] = DEFAULT_SELFCHECK, python: str = sys.executable,
                  env: Mapping[str, str] | None = None, search_path: Path | None = None,
                  timeout: float = 600.0) -> SelfCheckResult:
    """Run the package's kernel self-check (and `--bench`) in a fresh interpreter and read
    its JSON report when the command asks for one (`--json`, as the default does)."""
    argv = [part.format(python=python, package=package) for part in command]
    if bench:
        argv.append("--bench")
    child_env = _child_env(os.environ if env is None else env, search_path)
    with tempfile.TemporaryDirectory(prefix="flashbuild-verify-") as neutral:
        try:
            done = runner.run(argv, env=child_env, cwd=Path(neutral), timeout=timeout,
                              check=False)
        except FlashbuildError as exc:
            return SelfCheckResult(False, exc.paragraph())
    if "--json" not in argv:
        return SelfCheckResult(done.ok, done.output, returncode=done.returncode)
    try:
        report = parse_selfcheck(done.stdout)
    except VerifyError as exc:
        return SelfCheckResult(False, done.output, returncode=done.returncode,
                               parse_error=exc.paragraph())
    # Both must agree: a report that says ok from a child that then crashed is not a pass.
    return SelfCheckResult(done.ok and report.ok, done.output, report, done.returncode)


def parse_selfcheck(stdout: str) -> SelfCheckReport:
    """The self-check's JSON document from its stdout (the whole of it, or else its last line
    that is a JSON object, so a stray print before it does no harm). Raises VerifyError."""
    doc: object = None
    candidates = [stdout.strip(), *reversed([ln.strip() for ln in stdout.splitlines()])]
    for text in candidates:
        if not text.startswith("{"):
            continue
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict) and "schema_version" in doc:
            break
        doc = None
    if not isinstance(doc, dict):
        raise VerifyError("the self-check printed no JSON report",
                          evidence=f"stdout: {tail(stdout, 12) or '(empty)'}")
    version = doc.get("schema_version")
    if version != SELFCHECK_SCHEMA_VERSION:
        raise VerifyError(f"the self-check report has schema_version {version!r}; this "
                          f"flashbuild reads {SELFCHECK_SCHEMA_VERSION}",
                          fix="use a flashbuild and a kernel package of matching versions")
    try:
        checks = tuple(_kernel_check(c) for c in _list(doc, "checks"))
        bench_rows = doc.get("bench")
        bench = (None if bench_rows is None else
                 tuple(_bench_row(r) for r in _list(doc, "bench")))
        skipped = tuple((_req(s, "name", str), _req(s, "reason", str))
                        for s in _list(doc, "skipped", required=False))
        return SelfCheckReport(
            device=_opt(doc, "device", str), capability=_opt(doc, "capability", str),
            checks=checks, bench=bench, ok=_req(doc, "ok", bool), skipped=skipped,
            error=_opt(doc, "error", str))
    except (TypeError, KeyError) as exc:
        raise VerifyError("the self-check report does not match its schema",
                          evidence=str(exc).strip("'\""),
                          fix="use a flashbuild and a kernel package of matching "
                          "versions") from None


def _list(doc: dict[str, object], key: str, *, required: bool = True) -> list[object]:
    value = doc.get(key, None if required else [])
    if not isinstance(value, list):
        raise TypeError(f"`{key}` must be a list, got {type(value).__name__}")
    return value


def _opt(obj: object, key: str, kind: type[_T]) -> _T | None:
    """`obj[key]` if present and not null, checked to be a `kind`."""
    if not isinstance(obj, dict):
        raise TypeError(f"expected an object, got {type(obj).__name__} while reading `{key}`")
    value = obj.get(key)
    if value is None:
        return None
    # JSON numbers: an int is a valid float; a bool is not a number.
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise TypeError(f"`{key}` must be {kind.__name__}, got {value!r}")
    return value


def _req(obj: object, key: str, kind: type[_T]) -> _T:
    value = _opt(obj, key, kind)
    if value is None:
        raise KeyError(f"missing `{key}` in {json.dumps(obj)[:200]}")
    return value


def _kernel_check(obj: object) -> KernelCheck:
    return KernelCheck(
        name=_req(obj, "name", str), dtype=_req(obj, "dtype", str), ok=_req(obj, "ok", bool),
        max_abs_err=_opt(obj, "max_abs_err", float), tol=_opt(obj, "tol", float),
        rtol=_opt(obj, "rtol", float), detail=_opt(obj, "detail", str) or "")


def _bench_row(obj: object) -> BenchRow:
    return BenchRow(kernel=_req(obj, "kernel", str), tb_s=_opt(obj, "tb_s", float),
                    fraction_of_copy=_opt(obj, "fraction_of_copy", float),
                    error=_opt(obj, "error", str) or "")


def _fmt(value: float | None) -> str:
    return "n/a (not finite)" if value is None else f"{value:.3g}"


def _evidence(check: KernelCheck, report: SelfCheckReport) -> str:
    parts = []
    if check.tol is not None:
        allowed = f"{_fmt(check.tol)}" + (f" + {_fmt(check.rtol)}·|want|" if check.rtol
                                           else "")
        parts.append(f"max |got - want| {_fmt(check.max_abs_err)}, allowed {allowed}")
    if check.detail:
        parts.append(check.detail)
    parts.append(f"on {report.device or 'an unnamed GPU'} (capability "
                 f"{report.capability or '?'})")
    return "; ".join(parts)


def _fix(check: KernelCheck, package: str, capability: str | None) -> str:
    arch = f"sm{capability.replace('.', '')}" if capability else "<this GPU's arch>"
    if check.name.startswith("kernel_smem_bytes"):
        return (f"a tiled kernel asks for more shared memory per block than this GPU allows; "
                f"rebuild with the recipe's per-arch traits for it: `flashbuild build --arch "
                f"{arch}` (sm_120 allows 99 KB, sm_90 227 KB)")
    if check.name in ("sm_version", "built_archs"):
        return f"the module was not built for this GPU: `flashbuild build --arch {arch}`"
    return (f"reproduce with `python -m {package}.selfcheck`; if it fails only on this arch, "
            f"check the patches applied for it (`flashbuild patch --explain --arch {arch}`)")


def selfcheck_findings(result: SelfCheckResult, package: str, *,
                       required: bool = False) -> list[Finding]:
    """Verdicts from a self-check run: one per failed case (with the error against its
    tolerance), one for the cases that passed, skips, and the bench table.
    `required` (the user asked for the GPU check) makes "cannot run here" a failure."""
    report = result.report
    hand = f"run `python -m {package}.selfcheck` by hand to see the full output"
    if report is None:
        if result.returncode == SELFCHECK_UNAVAILABLE and not result.parse_error:
            return [Finding("gpu", "fail" if required else "warn", package,
                            "the kernel self-check cannot run here", tail(result.output, 12),
                            "install a CUDA build of torch that sees the GPU, or pass --no-gpu")]
        if result.ok:
            return [Finding("gpu", "ok", package, "kernel self-check passed",
                            tail(result.output, 40))]
        evidence = "\n".join(p for p in (result.parse_error, tail(result.output, 40)) if p)
        if result.returncode is not None:
            evidence = f"exit status {result.returncode}\n{evidence}"
        return [Finding("gpu", "fail", package, "kernel self-check failed", evidence, hand)]
    if report.error is not None:
        return [Finding("gpu", "fail" if required else "warn", package,
                        "the kernel self-check cannot run here", report.error,
                        "install a CUDA build of torch that sees the GPU, or pass --no-gpu")]
    findings: list[Finding] = []
    failures = report.failures
    for check in failures[:MAX_LISTED_FAILURES]:
        what = (f"{check.name} ({check.dtype}) differs from torch" if check.tol is not None
                else f"{check.name} ({check.dtype}) failed" if check.dtype != "-"
                else f"{check.name} failed")
        findings.append(Finding("gpu", "fail", f"{package} {check.name} [{check.dtype}]", what,
                                _evidence(check, report), _fix(check, package,
                                                               report.capability)))
    if len(failures) > MAX_LISTED_FAILURES:
        rest = failures[MAX_LISTED_FAILURES:]
        findings.append(Finding(
            "gpu", "fail", package, f"{len(rest)} more kernel check(s) failed",
            "; ".join(f"{c.name} [{c.dtype}]" for c in rest)[:2000], hand))
    passed = len(report.checks) - len(failures)
    where = f"on {report.device} (capability {report.capability})"
    if not report.checks:
        findings.append(Finding("gpu", "fail", package, "the kernel self-check ran no checks",
                                tail(result.output, 12), hand))
    elif not failures and not result.ok:
        # Every case passed but the child said otherwise (exit status, `ok`): not a pass.
        findings.append(Finding("gpu", "fail", package,
                                f"kernel self-check did not finish cleanly {where}",
                                f"exit status {result.returncode}\n{tail(result.output, 12)}",
                                hand))
    else:
        findings.append(Finding("gpu", "ok" if passed else "fail", package,
                                f"{passed} of {len(report.checks)} kernel checks passed {where}"))
    findings += [Finding("gpu", "skip", f"{package} {name}", f"not checked: {reason}")
                 for name, reason in report.skipped]
    if report.bench is not None:
        findings += _bench_findings(report.bench, package)
    return findings


def _bench_findings(rows: Sequence[BenchRow], package: str) -> list[Finding]:
    lines = ["bandwidth against a device-to-device copy (--bench):"]
    broken = []
    for row in rows:
        if row.tb_s is None or row.fraction_of_copy is None:
            broken.append(f"{row.kernel}: {row.error or 'no timing'}")
            continue
        lines.append(f"{row.kernel:<26} {row.tb_s:6.2f} TB/s {row.fraction_of_copy:6.0%}")
    out = [Finding("bench", "ok", package, "\n".join(lines))]
    if broken:
        out.append(Finding("bench", "warn", package,
                           f"{len(broken)} kernel(s) could not be timed", "; ".join(broken)))
    return out


def visible_gpus(env: Mapping[str, str]) -> list[Gpu] | None:
    """The GPUs a process started with `env` sees (CUDA_VISIBLE_DEVICES applied), as the
    loader shim lists them at import; None without a driver."""
    listed = loader_shim.nvml_gpus()
    if not listed:
        return None
    return loader_shim.visible_gpus(listed, env)[0]


def gpu_present() -> bool:
    """Whether NVML reports at least one NVIDIA GPU (False when there is no driver)."""
    try:
        import pynvml  # noqa: PLC0415  # optional

        pynvml.nvmlInit()
    except Exception:
        return False
    try:
        return int(pynvml.nvmlDeviceGetCount()) > 0
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
