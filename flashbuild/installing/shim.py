"""The loader shim: render the template with its data, and put its import between marker
comments at the top of a package's `__init__.py` (idempotent and removable).

The template is a real Python file (`resources/loader_shim.py`, linted and typed like the
rest of flashbuild); rendering replaces its data lines: `DLL_DIRS` (the folders to register on
Windows), `IMAGES` (the GPU images each binary holds, for the arch check at import) and
`REBUILD` (the command the check's paragraph names).
The rendered file is written into the package as `_flashbuild_shim.py`; the `__init__.py`
block only imports it, so the add_dll_directory handles live in that module (FACTS.md,
"Windows DLL loading": the known-good delvewheel pattern).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from flashbuild import __version__, platforms
from flashbuild.errors import InstallError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

SHIM_MODULE = "_flashbuild_shim"
BEGIN = "# >>> flashbuild loader shim >>>"
END = "# <<< flashbuild loader shim <<<"
_DATA_LINE = "DLL_DIRS: tuple[str, ...] = ()"
_PRELOAD_LINE = "PRELOAD: tuple[str, ...] = ()"
_IMPORT_TORCH_LINE = "IMPORT_TORCH: bool = False"
_IMAGES_LINE = "IMAGES: dict[str, tuple[str, ...]] = {}"
_REBUILD_LINE = 'REBUILD: str = "flashbuild build --arch {arch}"'
_SOURCE_LINE = 'SOURCE: str = ""'
_JIT_LINE = "JIT: dict[str, str] = {}"
TEMPLATE = Path(__file__).resolve().parent / "resources" / "loader_shim.py"


def dll_dirs(candidates: Iterable[PurePath | str], *, must_exist: bool = True) -> tuple[str, ...]:
    """The folders worth registering: absolute, existing (when checked here), deduplicated,
    in order. Relative folders are dropped: they would mean the current directory."""
    seen: dict[str, None] = {}
    for candidate in candidates:
        text = str(candidate)
        path = Path(text)
        if not (PurePath(text).is_absolute() or _is_windows_absolute(text)):
            continue
        if must_exist and not path.is_dir():
            continue
        seen.setdefault(text, None)
    return tuple(seen)


#: Where pip puts the DLLs a CUDA extension may import on Windows: the CUDA wheels
#: (`nvidia/cu13/bin/x86_64`, `nvidia/<lib>/bin` for cu12-era wheels) and torch (`torch/lib`).
WHEEL_DLL_ROOTS = ("nvidia", "torch/lib")


def folders_for_imports(needed: Iterable[str], site_packages: Iterable[Path]) -> list[Path]:
    """Folders under the active environment's site-packages that hold a library the binaries
    import, found by name (case-insensitive, as Windows matches DLL names). This is how the
    shim learns about torch's `lib` or a PyPI `nvidia/*` folder: only when the module really
    links against something there."""
    wanted = {name.lower() for name in needed}
    found: dict[Path, None] = {}
    if not wanted:
        return []
    for site in site_packages:
        for root in WHEEL_DLL_ROOTS:
            base = site / root
            if not base.is_dir():
                continue
            for path in base.rglob("*"):
                if path.name.lower() in wanted and path.is_file():
                    found.setdefault(path.parent, None)
    return list(found)


#: Where pip puts the CUDA libraries a Linux binary may need (`nvidia/cu13/lib`,
#: `nvidia/cublas/lib` for cu12-era wheels); torch's `lib` is loaded by `import torch`.
WHEEL_LIBRARY_ROOT = "nvidia"


def wheel_libraries(names: Iterable[str], site_packages: Iterable[Path]) -> list[Path]:
    """The files below the environment's `nvidia/` wheel folders named as one of `names` (a
    soname, matched exactly as the Linux loader does), the first found for each, in the
    order of `names`; never a link stub (`stubs/`, which only the linker may see)."""
    wanted = list(dict.fromkeys(names))
    found: dict[str, Path] = {}
    for site in site_packages:
        base = site / WHEEL_LIBRARY_ROOT
        if not wanted or not base.is_dir():
            continue
        for path in sorted(base.rglob("lib*.so*")):
            if path.name in wanted and path.name not in found and "stubs" not in \
                    path.relative_to(base).parts and path.is_file():
                found[path.name] = path
    return [found[name] for name in wanted if name in found]


def _is_windows_absolute(text: str) -> bool:
    return len(text) > 2 and text[1] == ":" and text[2] in "\\/"


def render(folders: Sequence[str], *, package: str,
           images: Mapping[str, Sequence[str]] | None = None, rebuild: str = "",
           source: str = "", preload: Sequence[str] = (), import_torch: bool = False,
           jit: Mapping[str, str] | None = None) -> str:
    """The template with its data filled in: the DLL folders, the GPU images per binary
    (relative path -> `sm_90a`, `compute_120`, ...), the rebuild command (`{arch}`, and
    `{source}` for the tree `source`, left for the shim to fill), the wheel libraries to
    load first on Linux, whether torch is imported before them (`import_torch`), and the
    load() names the package compiles at run time that were built ahead of time (`jit`:
    name -> dotted module)."""
    template = TEMPLATE.read_text(encoding="utf-8")
    for line in (_DATA_LINE, _PRELOAD_LINE, _IMPORT_TORCH_LINE, _IMAGES_LINE, _REBUILD_LINE,
                 _SOURCE_LINE, _JIT_LINE):
        if template.count(line) != 1:
            raise InstallError(
                "the loader shim template has no single data line",
                evidence=f"{TEMPLATE} must contain `{line}` exactly once",
                fix="reinstall flashbuild (its package data is damaged)",
            )
    items = "".join(f"    {folder!r},\n" for folder in folders)
    data = f"DLL_DIRS: tuple[str, ...] = (\n{items})" if folders else _DATA_LINE
    text = template.replace(_DATA_LINE, data)
    if preload:
        files = "".join(f"    {path!r},\n" for path in preload)
        text = text.replace(_PRELOAD_LINE, f"PRELOAD: tuple[str, ...] = (\n{files})")
    if import_torch:
        text = text.replace(_IMPORT_TORCH_LINE, "IMPORT_TORCH: bool = True")
    if images:
        rows = "".join(f"    {path!r}: {tuple(held)!r},\n" for path, held in images.items())
        text = text.replace(_IMAGES_LINE, f"IMAGES: dict[str, tuple[str, ...]] = {{\n{rows}}}")
    if rebuild:
        text = text.replace(_REBUILD_LINE, f"REBUILD: str = {rebuild!r}")
    if source:
        text = text.replace(_SOURCE_LINE, f"SOURCE: str = {source!r}")
    if jit:
        rows = "".join(f"    {name!r}: {module!r},\n" for name, module in jit.items())
        text = text.replace(_JIT_LINE, f"JIT: dict[str, str] = {{\n{rows}}}")
    header = (f"# Rendered by flashbuild {__version__} for the `{package}` package; "
              "`flashbuild build` rewrites it.\n")
    text = header + text
    ast.parse(text)  # a rendering bug must not reach a user's package
    return text


def import_block(newline: str = "\n") -> str:
    lines = [BEGIN,
             f"from . import {SHIM_MODULE}  # noqa: F401  (DLL folders on Windows; GPU check)",
             END]
    return newline.join(lines) + newline


_BOM = "\ufeff"
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _lines(text: str) -> list[str]:
    """Lines as Python's parser counts them (ends kept): only CR LF, CR and LF end a line.
    `str.splitlines` also splits at U+2028, form feeds and other separators that can sit
    inside a docstring, which would put the block inside the string."""
    return _LINE.findall(text)


def insert(init_text: str) -> str:
    """`__init__.py` text with the shim block at its top (after the docstring and
    `from __future__` imports, which must stay first). Running it twice changes nothing.
    A UTF-8 byte order mark stays the first character of the file."""
    bom = _BOM if init_text.startswith(_BOM) else ""
    init_text = init_text.removeprefix(_BOM)
    newline = "\r\n" if "\r\n" in init_text else "\n"
    text = remove(init_text)
    lines = _lines(text)
    at = _insertion_line(text)
    block = import_block(newline)
    head = "".join(lines[:at])
    if head and not head.endswith(("\n", "\r")):
        # A file that ends right after its docstring / __future__ import, without a final
        # newline: without one here BEGIN would share that line, and neither remove() nor a
        # re-run would find the block again. (remove() then leaves this newline in place.)
        head += newline
    return bom + head + block + "".join(lines[at:])


def _marker_lines(text: str, marker: str) -> list[int]:
    """0-based indexes of the lines that are `marker` as a comment of their own. Found with
    `tokenize`, so the same words inside a string (a docstring that quotes the block) are
    not a marker: they were taken for one, and the shim refused the file or cut the string
    (issue 22). A file that does not tokenize falls back to whole lines."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text, newline="").readline))
    except (tokenize.TokenError, SyntaxError):
        return [i for i, line in enumerate(_lines(text)) if line.rstrip("\r\n") == marker]
    return [t.start[0] - 1 for t in tokens
            if t.type == tokenize.COMMENT and t.start[1] == 0 and t.string == marker]


def remove(init_text: str) -> str:
    """`__init__.py` text without the shim block (byte for byte what it was before)."""
    bom = _BOM if init_text.startswith(_BOM) else ""
    body = init_text.removeprefix(_BOM)
    lines = _lines(body)
    starts = _marker_lines(body, BEGIN)
    if not starts:
        return init_text
    start = starts[0]
    ends = [i for i in _marker_lines(body, END) if i > start]
    if not ends:
        raise InstallError(
            "the loader shim block in __init__.py has no end marker",
            evidence=f"found `{BEGIN}` but not `{END}` after it",
            fix=f"restore the line `{END}` or delete the block by hand",
        )
    return bom + "".join(lines[:start] + lines[ends[0] + 1:])


def has_block(init_text: str) -> bool:
    return bool(_marker_lines(init_text.removeprefix(_BOM), BEGIN))


def _insertion_line(text: str) -> int:
    """0-based line after the module docstring and the `from __future__` imports."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise InstallError(
            "the package's __init__.py does not parse, so the loader shim cannot be added",
            evidence=str(exc), fix="fix the syntax error in __init__.py",
        ) from exc
    at = 0
    for node in tree.body:
        is_doc = (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str) and node is tree.body[0])
        is_future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (is_doc or is_future):
            break
        at = node.end_lineno or at
    return at


def install_shim(package_dir: Path, folders: Sequence[str], *, package: str) -> Path:
    """Write `_flashbuild_shim.py` and the `__init__.py` block; return the shim's path.
    Files are rewritten only when their text changes (an unchanged re-run touches nothing)."""
    shim = package_dir / f"{SHIM_MODULE}.py"
    write_if_changed(shim, render(folders, package=package))
    init = package_dir / "__init__.py"
    before = init.read_bytes().decode("utf-8") if init.is_file() else ""
    write_if_changed(init, insert(before))
    return shim


def uninstall_shim(package_dir: Path) -> None:
    """Remove the block from `__init__.py` and delete `_flashbuild_shim.py`."""
    init = package_dir / "__init__.py"
    if init.is_file():
        write_if_changed(init, remove(init.read_bytes().decode("utf-8")))
    (package_dir / f"{SHIM_MODULE}.py").unlink(missing_ok=True)


def write_if_changed(path: Path, text: str) -> bool:
    """Write bytes exactly (no newline translation) through a temp file; skip when equal."""
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return False
    tmp = path.with_name(path.name + ".flashbuild-tmp")
    tmp.write_bytes(data)
    platforms.current().replace(tmp, path)
    return True
