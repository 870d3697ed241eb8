"""`flashbuild recipe init`: draft a recipe from a scan.

Every finding a transform fixes becomes a `[[patch]]` step (grouped: one
`explicit-instantiations` step for all files, one `dynamic-loading` step, one `macro-edit` per
edited condition, one `exclude-sources` per arch, one `insert-block` per over-budget traits
struct), with `when` conditions for the platform/arch the finding is about. Each step is then
planned on the tree with the transform itself, so the drafted `expect` counts are what the
transform finds today (upstream drift later is an error, not a silent no-op). Every finding
that needs a person becomes a commented `# TODO:` block with its evidence.

Traits for a new arch cannot be decided by a transform (tile sizes are a person's choice):
when the budget that the target would use is too big, the draft derives a specialisation for
the target from the primary template, with the shared-memory member set to the target's limit
rounded down to whole KB and a `static_assert`, marked `REVIEW` in the recipe. A struct that
is not a primary template gets a TODO instead.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashbuild.scanning.rules import RULES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from flashbuild.scanning.scan import Finding, ScanResult, ScanTarget


@dataclass
class DraftStep:
    id: str
    description: str
    transform: str
    params: dict[str, Any]
    when: dict[str, Any]
    comment: str = ""
    expect: dict[str, int] = field(default_factory=dict)


@dataclass
class Draft:
    name: str
    source_path: str
    target: ScanTarget
    steps: list[DraftStep] = field(default_factory=list)
    todos: list[Finding] = field(default_factory=list)
    handled: list[tuple[Finding, str]] = field(default_factory=list)


def _arch_when(codes: Sequence[int]) -> dict[str, Any]:
    return {"arch": [f"sm_{c}" for c in sorted(set(codes))]}


def draft_recipe(result: ScanResult, *, name: str, source_path: str) -> Draft:
    """Group the findings into steps and TODOs (no expect counts yet: see `fill_expect`)."""
    d = Draft(name=name, source_path=source_path, target=result.target)
    by_rule: dict[str, list[Finding]] = defaultdict(list)
    for f in result.findings:
        by_rule[f.rule].append(f)
    inst = sorted({f.path for f in by_rule["FB140"] + by_rule["FB141"]})
    if inst:
        kept = len(by_rule["FB142"])
        d.steps.append(DraftStep(
            id="msvc-instantiations", transform="explicit-instantiations",
            description="Guard explicit template instantiations from MSVC (scan FB140/FB141)",
            params={"files": inst, "mode": "guard"}, when={"platform": ["windows"]},
            comment=f"{len(by_rule['FB140'])} kernel and {len(by_rule['FB141'])} host "
            f"instantiation sites; {kept} host instantiation(s) kept (another file needs "
            "them)" if kept else ""))
    for f in by_rule["FB142"]:
        d.handled.append((f, "kept by the explicit-instantiations step"))
    dl_files = sorted({f.path for f in by_rule["FB101"]})
    plugins = sorted({f.path for f in by_rule["FB102"]})
    if dl_files or plugins:
        params: dict[str, Any] = {"mode": "portable", "files": dl_files}
        if plugins:
            params["plugin_files"] = plugins
        d.steps.append(DraftStep(
            id="portable-dynamic-loading", transform="dynamic-loading",
            description="dlfcn.h does not exist on Windows: route dlopen/dlsym through the "
            "compat header and export the plugin's entry points (scan FB101/FB102)",
            params=params, when={"platform": ["windows"]}))
    _macro_steps(d, by_rule)
    _exclude_steps(d, by_rule)
    for f in by_rule["FB170"]:
        step = _traits_step(f, result.root)
        if step is None:
            d.todos.append(f)
        else:
            d.steps.append(step)
    for f in by_rule["FB181"]:
        d.handled.append((f, "`flashbuild install` adds the loader shim to this __init__.py"))
    fixable = {"FB140", "FB141", "FB142", "FB101", "FB102", "FB150", "FB151", "FB160",
               "FB170", "FB181"}
    d.todos += [f for f in result.findings if f.rule not in fixable]
    return d


def _macro_steps(d: Draft, by_rule: dict[str, list[Finding]]) -> None:
    seen: set[tuple[str, str]] = set()
    for f in by_rule["FB151"] + by_rule["FB150"]:
        p = f.fix.params
        if f.fix.transform != "macro-edit" or not p.get("find"):
            d.todos.append(f)
            continue
        key = (f.path, p["find"])
        if key in seen:
            continue
        seen.add(key)
        directives = f.data.get("directives") or ["if", "elif"]
        slug = re.sub(r"[^a-z0-9]+", "-", f"{Path(f.path).stem}-{f.data['arch']}-"
                      f"{'allow-list' if f.rule == 'FB150' else 'equality'}-{len(seen)}")
        d.steps.append(DraftStep(
            id=slug.strip("-"), transform="macro-edit",
            description=f"{RULES[f.rule].short} at {f.path}:{f.line} (scan {f.rule})",
            params={"files": [f.path], "find": p["find"], "replace": p["replace"],
                    "directives": directives},
            when=_arch_when([f.data["arch"]]),
            comment="REVIEW: the target now takes this path; check it is right for it"
            if f.rule == "FB151" else ""))


def _exclude_steps(d: Draft, by_rule: dict[str, list[Finding]]) -> None:
    by_arch: dict[int, set[str]] = defaultdict(set)
    for f in by_rule["FB160"]:
        by_arch[f.data["arch"]].add(f.path)
    for code, paths in sorted(by_arch.items()):
        d.steps.append(DraftStep(
            id=f"exclude-for-sm{code}", transform="exclude-sources",
            description=f"Sources using instructions sm_{code} lacks (scan FB160)",
            params={"globs": sorted(paths)}, when=_arch_when([code])))


def _traits_step(f: Finding, root: Path) -> DraftStep | None:
    data = f.data
    if data.get("specialised") or not data.get("struct_text", "").lstrip().startswith(
            "template"):
        return None
    value = (data["arch"] * 10)
    kb = data["limit"] // 1024
    struct = data["struct"]
    text: str = data["struct_text"]
    body = re.sub(r"^template\s*<[^>]*>\s*", "template <>\n", text, count=1)
    body = re.sub(rf"\b(struct|class)\s+{re.escape(struct)}\b", rf"\1 {struct}<{value}>", body,
                  count=1)
    member = re.escape(data["member"])
    body, n = re.subn(rf"(\b{member}\s*=\s*)[^;]+;[^\n]*", rf"\g<1>{kb} * 1024;", body, count=1)
    if n != 1:
        return None
    close = body.rstrip().rfind("}")
    body = (body[:close] + f"  static_assert({data['member']} <= {data['limit']}, "
            f"\"sm_{data['arch']} allows {data['limit']} B of shared memory per block\");\n"
            + body[close:])
    # Anchor: the first non-blank line after the primary template, if it is unique.
    try:
        lines = (root / f.path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    end = data["struct_line"] - 1 + text.count("\n")
    anchor = next((ln for ln in lines[end + 1:] if ln.strip()), None)
    if anchor is None or sum(ln.strip() == anchor.strip() for ln in lines) != 1:
        return None
    return DraftStep(
        id=f"sm{data['arch']}-traits", transform="insert-block",
        description=f"{struct}<{value}>: sm_{data['arch']} allows {data['limit']} B of "
        f"shared memory per block; the primary template asks {data['value']} B (scan FB170)",
        params={"file": f.path, "anchor": anchor.strip(), "where": "before",
                "block": f"\n// sm_{data['arch']}: {data['limit']} B opt-in shared memory per "
                f"block (drafted by flashbuild recipe init).\n{body.strip()}\n\n"},
        when=_arch_when([data["arch"]]),
        comment=f"REVIEW: derived from the primary template {struct}; only {data['member']} "
        f"was changed ({data['value']} -> {kb} * 1024). Tile sizes are a person's decision.")


# --- planning the drafted steps: exact expect counts ---------------------------------------

def fill_expect(d: Draft, root: Path) -> None:
    """Plan every step on the tree with the transform itself (in memory, nothing written) and
    record the sites it finds as the step's `expect`."""
    from flashbuild.patching.transforms import registry
    from flashbuild.patching.transforms.base import TransformContext
    from flashbuild.patching.tree import Tree
    from flashbuild.recipes.load import parse_recipe

    recipe = parse_recipe(render(d))
    tree = Tree(root)
    sources = sorted({p for g in recipe.source.sources for p in tree.glob(g)})
    archs = tuple(a.sm for a in d.target.archs)
    ctx = TransformContext(platform=d.target.platform, archs=archs, sources=tuple(sources))
    reg = registry()
    for step, drafted in zip(recipe.patch, d.steps, strict=True):
        assert step.transform is not None
        result = reg[step.transform].apply(tree, step.params, ctx)
        for rel, new in result.changes.items():
            tree.plan(rel, new.encode("utf-8"))
        counted = [s for s in result.sites if s.action in ("edit", "already")]
        drafted.expect = {"sites": len(counted)}


# --- rendering ----------------------------------------------------------------------------

def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "\n" in value and "'''" not in value:
            return "'''" + ("\n" if value.startswith("\n") else "") + value + "'''"
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value))


def render(d: Draft) -> str:
    t = d.target
    out = [
        f"# Drafted by `flashbuild recipe init` for {t.label}.",
        "# Review every step (REVIEW marks a decision flashbuild made for you) and every TODO,",
        "# then: flashbuild recipe check <this file>; flashbuild patch --recipe <this file> "
        "--dry-run",
        "",
        "[recipe]",
        f"name = {_toml(d.name)}",
        f"description = {_toml(f'drafted from a scan for {t.label}')}",
        "",
        "[source]",
        f"path = {_toml(d.source_path)}",
        "",
    ]
    for s in d.steps:
        if s.comment:
            out += [f"# {line}" for line in s.comment.splitlines()]
        out += ["[[patch]]", f"id = {_toml(s.id)}", f"description = {_toml(s.description)}",
                f"transform = {_toml(s.transform)}", f"when = {_toml(s.when)}"]
        if s.expect:
            out.append(f"expect = {_toml(s.expect)}")
        out.append("[patch.params]")
        out += [f"{k} = {_toml(v)}" for k, v in s.params.items()]
        out.append("")
    if d.handled:
        out.append("# Handled without a step:")
        out += [f"#   {f.rule} {f.path}:{f.line}: {why}" for f, why in d.handled]
        out.append("")
    for f in d.todos:
        out += [
            f"# TODO: {f.rule} ({RULES[f.rule].name}, {f.severity.value}) "
            f"{f.path}:{f.line}:{f.col}",
            f"#   {f.message}",
            f"#   evidence: {f.evidence}",
            f"#   source:   {f.snippet}",
            f"#   fix:      {f.fix.describe()}",
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


def run_init(source: Path, *, platform: str | None, arch: str, output: Path | None,
             as_json: bool) -> int:
    """The `recipe init` stage: scan, draft, plan for expect counts, validate, write."""
    from flashbuild.console import ui
    from flashbuild.recipes.load import parse_recipe
    from flashbuild.scanning.report import resolve_platform
    from flashbuild.scanning.scan import make_target, scan_tree

    target = make_target(resolve_platform(platform), arch)
    root = source.resolve()
    result = scan_tree(root, target)
    base = (output.resolve().parent if output is not None else Path.cwd())
    rel = os.path.relpath(root, base).replace(os.sep, "/")
    d = draft_recipe(result, name=re.sub(r"[^a-z0-9-]+", "-", root.name.lower()) or "tree",
                     source_path=rel)
    fill_expect(d, root)
    text = render(d)
    parse_recipe(text, output)  # the draft must load: a RecipeError here is a flashbuild bug
    if output is not None:
        output.write_text(text, encoding="utf-8")
    if as_json:
        ui.emit_json({"ok": True, "output": str(output) if output else None,
                      "steps": [{"id": s.id, "transform": s.transform, "expect": s.expect}
                                for s in d.steps],
                      "todos": len(d.todos), "recipe": text})
    elif output is None:
        ui.out.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        ui.step(f"drafted {len(d.steps)} patch step(s) and {len(d.todos)} TODO(s) into "
                f"{output}")
    return 0
