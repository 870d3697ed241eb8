"""PTX instructions that only some targets have, and which targets: the scan's FB160 table.

Each row was checked against ptxas 13.0 (`.version 9.0`) for sm_75 … sm_121 with the `a` and
`f` variants (../shared/FACTS.md "PTX instructions on the sm_120 family"), and
`tests/integration/test_ptx_table.py` assembles every row's `ptx` body for sm_120, sm_120a,
sm_120f, sm_90a and sm_100a with the toolkit's ptxas and compares with `accepts`, so the
table is a measured fact, not memory. Notable: `setmaxnreg` is accepted for sm_120a/sm_120f
(only plain sm_120 rejects it); the warp-level block-scale MMA kinds (`kind::mxf4nvf4`,
`kind::mxf4`, `kind::mxf8f6f4`) exist on the sm_120 family's a/f targets only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flashbuild.arch import Suffix

if TYPE_CHECKING:
    from collections.abc import Callable

    from flashbuild.arch import Arch

_BLOCK_SCALE_REGS = (".reg .b32 a<4>; .reg .b32 b<2>; .reg .f32 c<4>; .reg .f32 d<4>; "
                     ".reg .b32 sa; .reg .b32 sb;\n")


@dataclass(frozen=True, kw_only=True)
class Instruction:
    name: str
    """As matched in the source (`wgmma`, `kind::f8f6f4`)."""
    needs: str
    """The targets that have it, for messages."""
    accepts: Callable[[Arch], bool]
    ptx: str
    """A kernel body that uses it (assembled by the table's integration test)."""


def _specific(a: Arch) -> bool:
    return a.suffix is not Suffix.NONE


INSTRUCTIONS: dict[str, Instruction] = {i.name: i for i in (
    Instruction(name="wgmma", needs="sm_90a",
                accepts=lambda a: a.code == 90 and a.suffix is Suffix.ARCH,
                ptx="wgmma.fence.sync.aligned;"),
    Instruction(name="tcgen05", needs="sm_100a/f, sm_103a/f, sm_110a/f",
                accepts=lambda a: a.code in (100, 101, 103, 110) and _specific(a),
                ptx="tcgen05.fence::before_thread_sync;"),
    Instruction(name="setmaxnreg", needs="sm_90a, or an a/f target of sm_100 and later",
                accepts=lambda a: (a.code == 90 and a.suffix is Suffix.ARCH)
                or (a.code >= 100 and _specific(a)),
                ptx="setmaxnreg.inc.sync.aligned.u32 240;"),
    Instruction(name="kind::f8f6f4", needs="an a/f target of sm_100 and later",
                accepts=lambda a: a.code >= 100 and _specific(a),
                ptx=_BLOCK_SCALE_REGS + "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32."
                "e4m3.e4m3.f32 {d0,d1,d2,d3}, {a0,a1,a2,a3}, {b0,b1}, {c0,c1,c2,c3};"),
    Instruction(name="kind::mxf4nvf4", needs="sm_120a/f or sm_121a/f",
                accepts=lambda a: a.code in (120, 121) and _specific(a),
                ptx=_BLOCK_SCALE_REGS + "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4."
                "block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0 {d0,d1,d2,d3}, "
                "{a0,a1,a2,a3}, {b0,b1}, {c0,c1,c2,c3}, sa, {0, 0}, sb, {0, 0};"),
    Instruction(name="kind::mxf4", needs="sm_120a/f or sm_121a/f",
                accepts=lambda a: a.code in (120, 121) and _specific(a),
                ptx=_BLOCK_SCALE_REGS + "mma.sync.aligned.m16n8k64.row.col.kind::mxf4."
                "block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0 {d0,d1,d2,d3}, "
                "{a0,a1,a2,a3}, {b0,b1}, {c0,c1,c2,c3}, sa, {0, 0}, sb, {0, 0};"),
    Instruction(name="kind::mxf8f6f4", needs="sm_120a/f or sm_121a/f",
                accepts=lambda a: a.code in (120, 121) and _specific(a),
                ptx=_BLOCK_SCALE_REGS + "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4."
                "block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0 {d0,d1,d2,d3}, "
                "{a0,a1,a2,a3}, {b0,b1}, {c0,c1,c2,c3}, sa, {0, 0}, sb, {0, 0};"),
    Instruction(name="cp.async.bulk.tensor", needs="sm_90 and later",
                accepts=lambda a: a.code >= 90,
                ptx=".reg .b64 p; .reg .b32 s; .reg .b32 m;\ncp.async.bulk.tensor.1d."
                "shared::cluster.global.mbarrier::complete_tx::bytes [s], [p, {0}], [m];"),
)}


def ptx_kernel(body: str, target: str) -> str:
    """A whole PTX module around `body` for `target` (e.g. sm_120a)."""
    return (f".version 9.0\n.target {target}\n.address_size 64\n"
            f".visible .entry k()\n{{\n{body}\nret;\n}}\n")
