"""ABI checks of one ELF binary against a manylinux policy.

The policy numbers are data, not code: the highest symbol version each libc/libstdc++
interface may need, taken from the auditwheel policy file
(auditwheel/policy/manylinux-policy.json, pypa/auditwheel) and PEP 600 (a
`manylinux_2_X` tag means "glibc 2.X or newer"; manylinux2014 is its alias
manylinux_2_17, PEP 599). A binary that needs a newer version than its policy allows
fails to import on the oldest systems the tag promises to support.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from flashbuild.errors import UsageError, VerifyError

if TYPE_CHECKING:
    from pathlib import Path

# The symbol-version families a manylinux policy bounds (auditwheel's "symbol_versions").
_FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI")
_VERSION = re.compile(r"^(GLIBC|GLIBCXX|CXXABI)_(\d+(?:\.\d+)*)$")


@dataclass(frozen=True)
class Policy:
    """One manylinux policy: its name and the highest version per family."""

    name: str
    limits: dict[str, tuple[int, ...]]


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# From auditwheel's manylinux-policy.json (x86_64 entries): the newest GLIBC_, GLIBCXX_
# and CXXABI_ version of the reference distribution of each policy (CentOS 7 for
# _2_17, AlmaLinux 8 for _2_28, AlmaLinux 9 for _2_34).
POLICIES: dict[str, Policy] = {
    policy.name: policy for policy in (
        Policy("manylinux_2_17", {"GLIBC": _v("2.17"), "GLIBCXX": _v("3.4.19"),
                                  "CXXABI": _v("1.3.7")}),
        Policy("manylinux_2_28", {"GLIBC": _v("2.28"), "GLIBCXX": _v("3.4.24"),
                                  "CXXABI": _v("1.3.11")}),
        Policy("manylinux_2_34", {"GLIBC": _v("2.34"), "GLIBCXX": _v("3.4.29"),
                                  "CXXABI": _v("1.3.13")}),
    )
}
ALIASES = {"manylinux2014": "manylinux_2_17"}


def policy_named(name: str) -> Policy:
    """The policy for a `--policy` value or a wheel platform tag
    (`manylinux_2_28_x86_64` names manylinux_2_28)."""
    key = re.sub(r"_(x86_64|aarch64|ppc64le|s390x|i686)$", "", name.strip())
    key = ALIASES.get(key, key)
    if key not in POLICIES:
        raise UsageError(f"unknown manylinux policy {name!r}",
                       evidence=f"known: {', '.join(sorted([*POLICIES, *ALIASES]))}",
                       fix="pass one of the known policies to --policy")
    return POLICIES[key]


@dataclass(frozen=True)
class Needed:
    """One symbol version a binary needs (`GLIBC_2.38` from libc.so.6)."""

    library: str
    family: str
    version: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.family}_{'.'.join(map(str, self.version))}"


def needed_versions(path: Path) -> list[Needed]:
    """The GLIBC_/GLIBCXX_/CXXABI_ versions in the binary's version-needs section."""
    try:
        with path.open("rb") as stream:
            elf = ELFFile(stream)
            found: list[Needed] = []
            for section in elf.iter_sections():
                if not isinstance(section, GNUVerNeedSection):
                    continue
                for verneed, auxes in section.iter_versions():
                    for aux in auxes:
                        match = _VERSION.match(aux.name)
                        if match:
                            found.append(Needed(str(verneed.name), match[1], _v(match[2])))
            return found
    except (ELFError, OSError, ValueError) as exc:
        raise VerifyError(f"cannot read the symbol versions of {path.name}",
                       evidence=str(exc),
                       fix="check that the file is a complete ELF shared object") from exc


def violations(path: Path, policy: Policy) -> list[str]:
    """One line per needed version newer than the policy allows, naming the symbol version
    and the policy's limit."""
    lines = []
    for need in needed_versions(path):
        limit = policy.limits.get(need.family)
        if limit is not None and need.version > limit:
            lines.append(f"{path.name} needs {need.label} ({need.library}); "
                         f"{policy.name} allows at most "
                         f"{need.family}_{'.'.join(map(str, limit))}")
    return lines


def platform_tag_warning(tag: str) -> str | None:
    """A warning for a wheel tag PyPI refuses (`linux_x86_64`), else None."""
    if tag.startswith("linux_"):
        return (f"platform tag {tag}: PyPI refuses linux_* wheels; build in a manylinux "
                "image and tag the wheel with its policy")
    return None
