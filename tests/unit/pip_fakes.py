"""A stand-in for an interpreter's pip, as flashbuild asks it (detect/pinned.py and the
version probe): what is installed, `pip install -c … REQ…` and the version probe, the last
two through `python -c <importlib.metadata>`."""

from __future__ import annotations

import json

from packaging.requirements import Requirement

from flashbuild.runner import Completed


class PipWorld:
    """`installed` answers the listing and the version probe; `pip install` adds what it was
    asked for, unless `refuse` (then it fails with `refusal`); `on_path` are programs
    `which` finds. Every command is kept in `calls`."""

    def __init__(self, installed: dict[str, str], *, refuse: bool = False,
                 refusal: str = "ERROR: Cannot install x because these package versions "
                 "have conflicting dependencies.", on_path: tuple[str, ...] = (),
                 modules: dict[str, str] | None = None) -> None:
        self.installed, self.refuse, self.refusal = dict(installed), refuse, refusal
        self.on_path = on_path
        #: distribution -> the top-level module it provides, where not its own name.
        self.modules = dict(modules or {})
        self.calls: list[list[str]] = []

    def which(self, program: str, env: object = None) -> str | None:
        return f"/usr/bin/{program}" if program in self.on_path else None

    def installs(self) -> list[list[str]]:
        """The requirements of each `pip install` asked for."""
        return [c[c.index("--constraint") + 2:] for c in self.calls
                if c[1:4] == ["-m", "pip", "install"]]

    def run(self, argv: list[str], **_kw: object) -> Completed:
        self.calls.append(list(argv))
        if argv[1:4] == ["-m", "pip", "list"]:
            rows = [{"name": n, "version": v} for n, v in self.installed.items()]
            return Completed(tuple(argv), 0, json.dumps(rows) + "\n", "")
        if argv[1:4] == ["-m", "pip", "install"]:
            if self.refuse:
                return Completed(tuple(argv), 1, "", self.refusal)
            for req in argv[argv.index("--constraint") + 2:]:
                self.installed[Requirement(req).name] = "9.9"
            return Completed(tuple(argv), 0, "", "")
        if argv[1] == "-c" and len(argv) == 3:  # pinned.installed: what is installed
            modules: dict[str, list[str]] = {}
            for name in self.installed:
                modules.setdefault(self.modules.get(name, name.replace("-", "_")),
                                   []).append(name)
            listing = {"dists": self.installed, "modules": modules}
            return Completed(tuple(argv), 0, json.dumps(listing) + "\n", "")
        if argv[1] == "-c":  # the version probe: a JSON list of names in argv[3]
            names = json.loads(argv[3])
            found = {n: self.installed[n] for n in names if n in self.installed}
            return Completed(tuple(argv), 0, json.dumps(found) + "\n", "")
        raise AssertionError(argv)
