"""The build manifest round-trips and rejects garbage with a VerifyError."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from flashbuild.errors import VerifyError
from flashbuild.installing.manifest import (
    MANIFEST_NAME,
    Artifact,
    HostCompiler,
    KernelSmem,
    Manifest,
    PatchRecord,
    Toolkit,
)

if TYPE_CHECKING:
    from pathlib import Path


def sample(**changes: object) -> Manifest:
    base: dict[str, object] = dict(
        flashbuild="0.1.0", recipe="csrc", platform="linux", archs=("sm_120",),
        toolkit=Toolkit(root="/usr/local/cuda-13.0", version="13.0"),
        host_compiler=HostCompiler(kind="gcc", version="12.2", path="/usr/bin/g++"),
        patches=(PatchRecord(id="sm120-traits", sha256="ab" * 32),),
        flags={"CMAKE_BUILD_TYPE": "Release"},
        artifacts=(Artifact(path="_C.so", kind="module"),),
        exports=("rms_norm",), kernel_smem=(KernelSmem(kernel="stage",
                                                        dynamic_smem_bytes=4096),),
    )
    base.update(changes)
    return Manifest(**base)  # type: ignore[arg-type]


def test_round_trip(tmp_path: Path) -> None:
    m = sample(ptxas_info="ptxas info : x")
    path = m.write(tmp_path)
    assert path.name == MANIFEST_NAME
    assert Manifest.load(tmp_path) == m
    assert Manifest.load(path) == m


def test_the_target_is_stored_typed_and_an_older_manifests_cmake_text_still_reads(
        tmp_path: Path) -> None:
    m = sample(archs=("sm_90a", "sm_120+PTX"))
    path = m.write(tmp_path)
    assert json.loads(path.read_text())["archs"] == ["sm_90a", "sm_120+PTX"]
    # As flashbuild wrote it before, read as verify always read it (a bare CMake entry as
    # its SASS).
    path.write_text(json.dumps(m.to_json() | {"archs": "90a-real;120-real"}))
    assert Manifest.load(tmp_path) == sample(archs=("sm_90a", "sm_120"))
    path.write_text(json.dumps(m.to_json() | {"archs": "93-real"}))
    with pytest.raises(VerifyError, match="archs"):
        Manifest.load(tmp_path)


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda d: d.pop("archs"), "archs is missing"),
    (lambda d: d.update(archs=[90]), "archs must be a list of strings"),
    (lambda d: d.update(schema_version=2), "schema_version is 2"),
    (lambda d: d.update(platform="macos"), "platform"),
    (lambda d: d.update(artifacts=[{"path": "../../evil.so", "kind": "module"}]), "leaves"),
    # (`../lib/x.so`, a file elsewhere in the same site-packages, is allowed: test_toplevel.py)
    (lambda d: d.update(artifacts=[{"path": "../lib/../../evil.so", "kind": "module"}]),
     "leaves"),
    (lambda d: d.update(artifacts=[{"path": "/abs/evil.so", "kind": "module"}]), "leaves"),
    (lambda d: d.update(artifacts=[{"path": "C:/evil.pyd", "kind": "module"}]), "leaves"),
    (lambda d: d.update(artifacts=[{"path": "x.so", "kind": "exe"}]), "kind"),
    (lambda d: d.update(archz="90"), "did you mean archs"),
    (lambda d: d["toolkit"].pop("version"), "toolkit.version"),
])
def test_rejects_bad_documents(tmp_path: Path, mutate: object, needle: str) -> None:
    data = sample().to_json()
    mutate(data)  # type: ignore[operator]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(VerifyError, match=needle.replace(".", r"\.")):
        Manifest.load(tmp_path)


def test_garbage_and_missing(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_bytes(b"\x00\xffnot json")
    with pytest.raises(VerifyError, match="invalid"):
        Manifest.load(tmp_path)
    with pytest.raises(VerifyError, match="no build manifest"):
        Manifest.load(tmp_path / "nowhere")


def test_a_module_beside_its_package_may_be_named(tmp_path: Path) -> None:
    """A setup.py's top-level extension (`causal_conv1d_cuda.so` next to `causal_conv1d/`)
    is one file up from the manifest in the package folder: allowed, and nothing further."""
    m = sample(artifacts=(Artifact(path="../causal_conv1d_cuda.so", kind="module"),))
    m.write(tmp_path)
    assert Manifest.load(tmp_path).artifacts[0].path == "../causal_conv1d_cuda.so"
