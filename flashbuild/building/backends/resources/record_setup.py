"""Run a tree's setup.py in flashbuild's record mode (see sitecustomize.py in this folder).

`python record_setup.py [setup.py arguments]`, in the folder holding setup.py, with this folder
first on PYTHONPATH and FLASHBUILD_RECORD naming the JSON file to write. The build hook
(imported at start-up as `sitecustomize`) stops setup.py once torch has written its build
files; whatever else ends it (an exception the setup.py raises, `sys.exit("error: ...")`, a run
that builds nothing) is recorded here, with the innermost `file:line` of the tree's own files.
The exit status is 0 whenever the record was written: the record says what happened.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback


def _where(tb: object) -> str:
    tree = os.path.abspath(os.getcwd()) + os.sep
    found = "?"
    for frame in traceback.extract_tb(tb):  # type: ignore[arg-type]
        if frame.filename.startswith("<"):
            # `<frozen importlib._bootstrap_external>`, `<string>`: no file, though abspath
            # would put it inside the tree.
            continue
        name = os.path.abspath(frame.filename)
        if name.startswith(tree):
            found = f"{os.path.relpath(name, tree[:-1])}:{frame.lineno}"
    return found


def _missing(exc: BaseException) -> str | None:
    """The tree-relative path of a file of the tree that setup.py failed to open (a source
    distribution that left it out), or None."""
    name = getattr(exc, "filename", None)
    if not isinstance(exc, FileNotFoundError) or not isinstance(name, str):
        return None
    tree = os.path.abspath(os.getcwd())
    path = os.path.abspath(name)
    if not path.startswith(tree + os.sep):
        return None
    return os.path.relpath(path, tree).replace(os.sep, "/")


class _Argv(list):  # type: ignore[type-arg]
    """sys.argv that records which options the tree's own code looks for (`"--cuda_ext" in
    sys.argv`, `sys.argv.remove("--cpp_ext")`): a setup.py switched by its command line."""

    looked: dict[str, str] = {}  # noqa: RUF012 - one per process

    def _note(self, value: object) -> None:
        if isinstance(value, str) and value.startswith("-") and value not in self.looked:
            import sitecustomize as hook  # type: ignore[import-not-found]

            where = hook._caller_in_tree()
            if where is not None:
                self.looked[value] = where

    def __contains__(self, value: object) -> bool:
        self._note(value)
        return list.__contains__(self, value)

    def index(self, value: object, *args: object) -> int:
        self._note(value)
        return list.index(self, value, *args)  # type: ignore[arg-type]

    def remove(self, value: object) -> None:
        self._note(value)
        list.remove(self, value)


def main() -> int:
    import sitecustomize as hook  # the build hook

    if not hasattr(hook, "write_record"):
        print("flashbuild: the build hook is not first on PYTHONPATH", file=sys.stderr)
        return 3
    sys.argv = _Argv(["setup.py", *sys.argv[1:]])
    sys.path.insert(0, os.getcwd())
    outcome: dict[str, object] = {"stopped": False, "exception": None}
    try:
        if os.path.isfile("setup.py"):
            runpy.run_path("setup.py", run_name="__main__")
        else:
            # A setup.cfg or pyproject.toml tree: what setuptools itself runs for it.
            exec(compile("from setuptools import setup\nsetup()\n", "setup.py", "exec"),  # noqa: S102
                 {"__name__": "__main__", "__file__": os.path.abspath("setup.py")})
    except hook.RecordDone:
        outcome["stopped"] = True
    except SystemExit as exc:
        if exc.code not in (None, 0):
            outcome["exception"] = {"type": "SystemExit", "message": str(exc.code),
                                    "where": _where(exc.__traceback__)}
    except BaseException as exc:
        outcome["exception"] = {"type": type(exc).__name__, "message": str(exc)[:2000],
                                "where": _where(exc.__traceback__), "missing": _missing(exc)}
    outcome["argv_options"] = [{"name": k, "where": v} for k, v in _Argv.looked.items()]
    hook.write_record(outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
