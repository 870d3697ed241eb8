"""Library APIs that newer releases changed under a tree's feet (issue 30).

* FB119: a `cub::Device*` algorithm called with its trailing `debug_synchronous` argument.
  CCCL 2.0 deprecated that argument and CCCL 3.0, CUDA 13's, removed the overloads that take
  it (https://nvidia.github.io/cccl/cccl/3.0_migration_guide.html); the same call without it
  compiles with every CUB since the argument had a default. A tree written for CUDA 12 stops
  with nvcc's "no instance of overloaded function" (megablocks' `csrc/cumsum.h`).

* FB123: a condition written without its parentheses, `if PyTuple_Check(o) {`, which
  compiles only while the name is a macro whose expansion brings its own. Python 3.10 made
  `PyType_HasFeature` a static inline function, so with 3.11's headers `PyTuple_Check(o)`
  expands to a plain call and g++ stops with "expected '(' before" (libKMCUDA 6.2.3's
  python.cc:202). The parenthesised condition compiles with every release.

* FB124: `AT_DISPATCH_FLOATING_TYPES(x.type(), …)`: torch's dispatch macros take a
  ScalarType, and `Tensor::type()` (deprecated since torch 1.x) returns
  `DeprecatedTypeProperties`, which no longer converts to one: nvcc stops with "no suitable
  conversion function from \"const at::DeprecatedTypeProperties\" to \"c10::ScalarType\""
  (Deformable-DETR's ms_deform_attn_cuda.cu:64 with torch 2.14). `x.scalar_type()` compiles
  with every torch since 1.0.

* FB125: THC, torch's old CUDA library (`#include <THC/THC.h>`, `THCState_getCurrentStream
  (state)`, `THCudaCheck`), which torch 1.11 removed: a tree written for torch 1.x stops
  with "THC/THC.h: No such file or directory" (Pointnet2.PyTorch's src/*.cpp). Each line
  that uses what has a one-for-one ATen/c10 successor gets its edit (the header, the current
  stream, the error check, ceil_div, the caching allocator's raw_alloc / raw_delete; the
  `extern THCState *state;` declaration is commented out); a line with any other THC name is
  a finding without a step. `<TH/TH.h>`, THC's CPU half, becomes `<ATen/ATen.h>`.

* FB126: `AT_CHECK(cond, msg…)`, deprecated for `TORCH_CHECK` (same arguments) and gone
  since torch 1.5 (pytorch/pytorch#36581): "'AT_CHECK' was not declared in this scope"
  (Pointnet2.PyTorch's `CHECK_CUDA` macros, once FB125's edits were in).

Each finding proposes its edit (`EditCall`): a `replace-block` of the lines involved. A
one-line edit is anchored on the line's text, and every line of the file that reads the same
gets the same edit; a call over several lines is drafted only when its lines are a region the
transform finds once.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from flashbuild.scanning.findings import Category, Fix, Severity
from flashbuild.scanning.proposals import EditCall, ProposedStep
from flashbuild.source import cxx
from flashbuild.source.pp import host_pass

if TYPE_CHECKING:
    from tree_sitter import Node

    from flashbuild.scanning.checks_cxx import _Ctx

#: `cub::DeviceScan::ExclusiveSum`, `::cub::DeviceRadixSort::SortPairs<K, V>`, spaces removed.
_CUB_DEVICE_CALL = re.compile(r"(?:::)?cub::Device\w+::\w+(?:<.*>)?")
#: The smallest device-wide CUB call that still passed `debug_synchronous` has seven
#: arguments (`DeviceReduce::Sum(temp, bytes, in, out, n, stream, debug)`).
_MIN_ARGS = 7
_BOOL_LITERALS = ("true", "false")
#: The argument before `debug_synchronous` is the stream (`s`, `stream`, `0`,
#: `at::cuda::getCurrentCUDAStream()`). `DeviceReduce::Reduce(…, cub::Max(), false)` has 7
#: arguments and a bool `init` last, after an operator object: no finding there.
_OPERATOR_LIKE = re.compile(r"^(?!.*(?i:stream)).*[({]")


#: `if NAME(` / `while NAME(` with no parenthesis of the statement's own; `if constexpr`
#: and `if consteval` are C++ and have theirs after the keyword.
_BARE_CONDITION = re.compile(
    rb"(?<![\w#])(?P<kw>if|while)[ \t]+(?!constexpr\b|consteval\b)(?P<name>[A-Za-z_]\w*)"
    rb"[ \t]*\(")


#: A dispatch macro's first argument written `EXPR.type()` (EXPR a name, member or call),
#: on the macro's line or a later one.
_DISPATCH_TYPE = re.compile(
    r"\b(?P<macro>AT_DISPATCH_\w+)\s*\(\s*(?P<expr>[A-Za-z_][\w.]*(?:\(\))?(?:->"
    r"[A-Za-z_]\w*)?)(?P<call>\.type\(\))[ \t]*,")
#: What a TOML multi-line string or the transform's line anchor cannot carry as is.
_UNSAFE_IN_ANCHOR = ("\\", '"""', "'''")


def wants(text: str) -> bool:
    """Whether the file can hold a finding (cheap, before a parse)."""
    return "cub::Device" in text or "AT_DISPATCH_" in text or \
        _THC_NAME.search(text) is not None or \
        "AT_CHECK" in text or \
        _BARE_CONDITION.search(text.encode("utf-8")) is not None


def dispatch_type(ctx: _Ctx) -> None:
    """FB124 at each `AT_DISPATCH_*(EXPR.type(), …)` in code, with the line's edit."""
    text = ctx.file.text
    if "AT_DISPATCH_" not in text or ".type()" not in text:
        return
    skip = cxx.comment_ranges(ctx.src)
    host = host_pass(ctx.target.platform)
    lines = text.split("\n")  # numbered as `count("\n")` numbers them, whatever else a line holds
    arguments = [lines[text.count("\n", 0, m.start("call"))].strip()
                 for m in _DISPATCH_TYPE.finditer(text)]
    for m in _DISPATCH_TYPE.finditer(text):
        start = ctx.byte(m.start())
        if any(a <= start < b for a, b in skip) or \
                ctx.active(ctx.node_at(start, start + 1), host) == 0:
            continue
        # The edit is on the line that holds `.type()`: the macro's, or a later one.
        line = text.count("\n", 0, m.start("call")) + 1
        old = lines[line - 1].removesuffix("\r")
        col = m.start("call") - (text.rfind("\n", 0, m.start("call")) + 1)
        new = old[:col] + ".scalar_type()" + old[col + len(".type()"):]
        # `_line_step` edits every line that reads the same: on an argument's own line (no
        # macro name on it) that must be a dispatch's argument line each time.
        ambiguous = m["macro"] not in old and \
            sum(ln.strip() == old.strip() for ln in lines) != arguments.count(old.strip())
        step = None if ambiguous else _line_step(
            ctx, line, old, new, kind="torch-scalar-type",
            what=f"passes `{m['expr']}.type()` to {m['macro']}, which takes a ScalarType "
            "(scan FB124)")
        ctx.add(start, "FB124", Category.LIBRARY_API, Severity.ERROR,
                f"`{m['macro']}({m['expr']}.type(), …)`: torch's dispatch macros take a "
                "ScalarType, and the DeprecatedTypeProperties `type()` returns no longer "
                "converts to one",
                f"the first argument is `{m['expr']}.type()`",
                Fix(manual=f"pass `{m['expr']}.scalar_type()`" + (
                    "" if step else " (not drafted: a line outside a dispatch reads the same "
                    "as the argument's, and an edit anchored there would change it too)"
                    if ambiguous else " (not drafted: the line holds what a recipe anchor "
                    "cannot carry)"),
                    step=EditCall(step=step)))


#: What THC.h's successors need: the headers of every call edit below. THC.h brought all of
#: THC, and a file that includes it through another header gets its calls edited too.
_THC_SUCCESSORS = ("ATen/cuda/CUDAContext.h", "c10/cuda/CUDAException.h",
                   "c10/cuda/CUDACachingAllocator.h", "ATen/ceil_div.h")
#: THC headers with a successor in ATen, and what replaces each (torch 1.11 removed THC).
_THC_HEADERS = {
    "THC/THC.h": _THC_SUCCESSORS,
    "THC/THCGeneral.h": _THC_SUCCESSORS,
    "THC/THCAtomics.cuh": ("ATen/cuda/Atomic.cuh",),
    "THC/THCDeviceUtils.cuh": ("ATen/cuda/DeviceUtils.cuh",),
    # TH, THC's CPU half: what trees took from it was THArgCheck (TORCH_CHECK, in ATen).
    "TH/TH.h": ("ATen/ATen.h",),
}
#: THC headers torch's CUDA builds still ship, each forwarding to its ATen successor and marked
#: for removal (torch 2.14.1+cu130's include/THC/ holds exactly these two; its CPU build has
#: no THC/ folder): an include of one compiles today, so it is no error.
_THC_SHIPPED = frozenset({"THC/THCAtomics.cuh", "THC/THCDeviceUtils.cuh"})
_THC_INCLUDE = re.compile(
    r'^(?P<indent>[ \t]*)#[ \t]*include[ \t]*[<"](?P<header>THC?/\w+\.\w+)[>"]')
#: THC calls with a one-for-one successor: (pattern, replacement, header the successor needs).
_THC_CALLS = (
    (re.compile(r"\bTHCState_getCurrentStream[ \t]*\([ \t]*\w+[ \t]*\)"),
     "at::cuda::getCurrentCUDAStream()", "ATen/cuda/CUDAContext.h"),
    (re.compile(r"\bTHCudaCheck[ \t]*\("), "C10_CUDA_CHECK(", "c10/cuda/CUDAException.h"),
    (re.compile(r"\bTHCCeilDiv[ \t]*\("), "at::ceil_div(", "ATen/ceil_div.h"),
    (re.compile(r"\bTHCudaMalloc[ \t]*\([ \t]*\w+[ \t]*,[ \t]*"),
     "c10::cuda::CUDACachingAllocator::raw_alloc(", "c10/cuda/CUDACachingAllocator.h"),
    (re.compile(r"\bTHCudaFree[ \t]*\([ \t]*\w+[ \t]*,[ \t]*"),
     "c10::cuda::CUDACachingAllocator::raw_delete(", "c10/cuda/CUDACachingAllocator.h"),
)
#: The device a THC BLAS call ran on: the current CUDA device (its stream is ATen's too).
_THC_DEVICE = "at::Device(at::kCUDA, c10::cuda::current_device()), "
#: TH and THC BLAS calls, whose successors are helpers of flashbuild's own (`_THC_HELPERS`),
#: written once into the file after its THC include: (pattern, replacement, helpers, headers
#: the call itself needs; the CPU calls none of CUDA's, so a CPU-only build still compiles).
#: ATen's own BLAS wrappers are no successor: `at::cuda::blas::gemm<float>` compiles against
#: torch's headers, but libtorch_cuda does not export it (torch 2.11 and 2.14, `nm -D`), so
#: the module fails to load; nor is the CPU `at::native::cpublas::gemm` exported.
_THC_HELPER_CALLS = (
    *((re.compile(rf"\bTHCudaBlas_{letter}{op}[ \t]*\([ \t]*\w+[ \t]*,[ \t]*"),
       f"flashbuild_blas_{op}<{ctype}>({_THC_DEVICE}", ("blas",), ("c10/cuda/CUDAFunctions.h",))
      for letter, ctype in (("S", "float"), ("D", "double")) for op in ("gemm", "gemv")),
    *((re.compile(rf"\bTHCudaBlas_{letter}gemmBatched[ \t]*\([ \t]*\w+[ \t]*,[ \t]*"),
       f"flashbuild_blas_gemm_batched<{ctype}>(", ("blas", "gemm_batched"), ())
      for letter, ctype in (("S", "float"), ("D", "double"))),
    *((re.compile(rf"\bTH{name}Blas_{op}[ \t]*\("), f"flashbuild_blas_{op}<{ctype}>(at::kCPU, ",
       ("blas",), ())
      for name, ctype in (("Float", "float"), ("Double", "double")) for op in ("gemm", "gemv")),
)
#: The helpers: the headers each needs and its code, in the order they are written. A BLAS
#: call becomes ATen's addmm_/addmv_ on views of the caller's column-major memory, on the
#: device the call names; THC's pointer-array batched GEMM has no ATen form: its arrays are
#: read back to the host (one synchronisation) and each matrix is one such GEMM.
_THC_HELPERS: dict[str, tuple[tuple[str, ...], str]] = {
    "blas": (("ATen/ATen.h",), """\
// flashbuild: TH's and THC's BLAS, removed in torch 1.11, as ATen ops on views of the
// caller's memory. A column-major r x c matrix with leading dimension ld is the row-major
// c x r view with strides (ld, 1): its transpose.
template <typename T>
static inline at::Tensor flashbuild_blas_transposed(at::Device on, const T *p, int64_t r,
                                                    int64_t c, int64_t ld) {
  return at::from_blob(const_cast<T *>(p), {c, r}, {ld, 1}, at::dtype<T>().device(on));
}
// C = alpha op(A) op(B) + beta C, as C^T = alpha op(B)^T op(A)^T + beta C^T.
template <typename T>
static inline void flashbuild_blas_gemm(at::Device on, char transa, char transb, int64_t m,
                                        int64_t n, int64_t k, T alpha, const T *a,
                                        int64_t lda, const T *b, int64_t ldb, T beta, T *c,
                                        int64_t ldc) {
  const bool ta = transa != 'n' && transa != 'N', tb = transb != 'n' && transb != 'N';
  at::Tensor a_t = ta ? flashbuild_blas_transposed(on, a, k, m, lda).t()
                      : flashbuild_blas_transposed(on, a, m, k, lda);
  at::Tensor b_t = tb ? flashbuild_blas_transposed(on, b, n, k, ldb).t()
                      : flashbuild_blas_transposed(on, b, k, n, ldb);
  flashbuild_blas_transposed<T>(on, c, m, n, ldc).addmm_(b_t, a_t, beta, alpha);
}
// y = alpha op(A) x + beta y, A m x n.
template <typename T>
static inline void flashbuild_blas_gemv(at::Device on, char trans, int64_t m, int64_t n,
                                        T alpha, const T *a, int64_t lda, const T *x,
                                        int64_t incx, T beta, T *y, int64_t incy) {
  TORCH_CHECK(incx > 0 && incy > 0, "gemv: negative increments are not supported here");
  const bool t = trans != 'n' && trans != 'N';
  const auto options = at::dtype<T>().device(on);
  at::Tensor a_t = flashbuild_blas_transposed(on, a, m, n, lda);
  at::Tensor xv = at::from_blob(const_cast<T *>(x), {t ? m : n}, {incx}, options);
  at::Tensor yv = at::from_blob(y, {t ? n : m}, {incy}, options);
  yv.addmv_(t ? a_t : a_t.t(), xv, beta, alpha);
}"""),
    "gemm_batched": (("ATen/cuda/CUDAContext.h", "c10/cuda/CUDAException.h",
                      "c10/cuda/CUDAFunctions.h", "vector"), """\
// flashbuild: THC's pointer-array batched GEMM has no ATen form: the pointer arrays are read
// back to the host (one synchronisation of the current stream), then each matrix is one
// GEMM on that stream.
template <typename T>
static inline void flashbuild_blas_gemm_batched(char transa, char transb, int64_t m,
                                                int64_t n, int64_t k, T alpha,
                                                const T *const a[], int64_t lda,
                                                const T *const b[], int64_t ldb, T beta,
                                                T *const c[], int64_t ldc, int64_t batch) {
  std::vector<const T *> ha(batch), hb(batch);
  std::vector<T *> hc(batch);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const size_t bytes = batch * sizeof(T *);
  C10_CUDA_CHECK(cudaMemcpyAsync(ha.data(), a, bytes, cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaMemcpyAsync(hb.data(), b, bytes, cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaMemcpyAsync(hc.data(), c, bytes, cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  const at::Device on(at::kCUDA, c10::cuda::current_device());
  for (int64_t i = 0; i < batch; ++i)
    flashbuild_blas_gemm<T>(on, transa, transb, m, n, k, alpha, ha[i], lda, hb[i], ldb, beta,
                            hc[i], ldc);
}"""),
}
#: `THArgCheck(cond, argument_number, message…)`: TORCH_CHECK without the number.
_TH_ARG_CHECK = re.compile(r"\bTHArgCheck[ \t]*\(")
#: The THCState a translation unit declared or fetched, which nothing needs once the calls
#: above no longer take it: `extern THCState *state;`,
#: `THCState *state = at::globalContext().lazyInitCUDA();`.
_THC_STATE_LINE = re.compile(
    r"^[ \t]*(?:extern[ \t]+THCState[ \t]*\*[ \t]*\w+|THCState[ \t]*\*[ \t]*\w+[ \t]*=[ \t]*"
    r"at::globalContext\(\)\.(?:lazyInitCUDA|getTHCState)\(\))[ \t]*;[ \t]*$")
_THC_NAME = re.compile(r"\bTH(?:C\w*|Arg\w*|Error\w*|(?:Float|Double)Blas\w*)\b|[<\"]THC?/")


def thc(ctx: _Ctx) -> None:
    """FB125 at each line of code that uses THC, with the line's edit where every THC name
    on it has a successor."""
    text = ctx.file.text
    if _THC_NAME.search(text) is None:
        return
    skip = _not_code(ctx)
    host = host_pass(ctx.target.platform)
    lines = text.split("\n")
    # Names the tree defines itself (a function shim for newer torch: `inline T
    # THCCeilDiv(T a, T b)`): their uses compile, and their definitions are no call to edit.
    own = {m["name"] for m in _DECLARED.finditer(text) if _THC_NAME.fullmatch(m["name"])}
    # A file that includes no THC header gets its THC names from a header of the tree (THC's,
    # or the tree's own shims): said, not edited, since the successors' headers would not be
    # there.
    direct = any(_THC_INCLUDE.match(ln) for ln in lines)
    offset = 0
    wanted: set[str] = set()
    helpers: set[str] = set()
    # byte, line, old, new ("" when not drafted), whether the line is certainly compiled
    sites: list[tuple[int, int, str, str, bool]] = []
    for number, raw in enumerate(lines, start=1):
        start_char, offset = offset, offset + len(raw) + 1
        old = raw.removesuffix("\r")
        names = [m for m in _THC_NAME.finditer(old)
                 if not any(a <= ctx.byte(start_char + m.start()) < b for a, b in skip)]
        if not names or _shim_line(old) or all(
                m.group(0) in own or _provided(ctx, m.group(0)) for m in names):
            continue
        start = ctx.byte(start_char + names[0].start())
        active = ctx.active(ctx.node_at(start, start + 1), host)
        if active == 0:
            continue
        edited, needs, helps = _thc_line(old) if direct else ("", set(), set())
        wanted.update(needs)
        helpers.update(helps)
        sites.append((start, number, old, edited, active == 1))
    # The helpers' headers come with every include; their code once, after the first.
    wanted.update(h for name in helpers for h in _THC_HELPERS[name][0])
    pending = [name for name in _THC_HELPERS if name in helpers]
    for start, number, old, edited, certain in sites:
        include = _THC_INCLUDE.match(old)
        # An include becomes its successors and what the file's own call edits need.
        block = "\n".join(
            f"{include['indent']}#include <{h}>" for h in dict.fromkeys(
                (*_THC_HEADERS[include["header"]], *sorted(wanted)))) \
            if include and include["header"] in _THC_HEADERS else edited
        if block and include and pending:
            block += "".join(f"\n{_THC_HELPERS[name][1]}" for name in pending)
            pending = []
        step = _line_step(ctx, number, old, block, kind="thc",
                          what="uses THC, which torch 1.11 removed (scan FB125)") \
            if block else None
        shipped = include is not None and include["header"] in _THC_SHIPPED
        # Under a condition the scan cannot decide (`#if TORCH_VERSION_MAJOR < 1`), the line
        # may be a branch for old torch that no build compiles: a warning, edit still drafted.
        ctx.add(start, "FB125", Category.LIBRARY_API,
                Severity.ERROR if direct and certain and not shipped else Severity.WARNING,
                f"<{include['header']}> is one of the two THC headers torch's CUDA builds "
                "still ship (2.14.1 does), forwarding to ATen and marked for removal"
                if shipped and include is not None else
                "THC, torch's CUDA library before ATen, was removed in torch 1.11: this line "
                "does not compile against any torch since",
                f"`{old.strip()}`",
                Fix(manual="use the ATen/c10 successor: <ATen/cuda/CUDAContext.h>, "
                    "at::cuda::getCurrentCUDAStream(), C10_CUDA_CHECK, TORCH_CHECK (for "
                    "THArgCheck, without its argument number), at::ceil_div, "
                    "c10::cuda::CUDACachingAllocator::raw_alloc/raw_delete; TH's and THC's "
                    "BLAS calls become helpers over ATen's addmm_/addmv_ that the include's "
                    "edit defines" + (
                        "" if step else " (not drafted: " + (
                            "a THC name here has no one-for-one successor, or the line "
                            "cannot be an anchor" if direct else "this file includes no THC "
                            "header; its THC names come from a header of the tree") + ")"),
                    step=EditCall(step=step)))


#: A function declared or defined by name (a return type, qualifiers or a template header
#: before it, nothing that makes it a call: no `=`, `(`, `,` or `return` ahead of it).
_DECLARED = re.compile(
    r"^[ \t]*(?:template[ \t]*<[^>\n]*>[ \t]*)?(?!(?:return|else|case|throw|do|co_return|new|"
    r"delete|sizeof)\b)(?:[A-Za-z_][\w:]*(?:<[^;()\n]*>)?[ \t*&]+)+(?P<name>[A-Za-z_]\w*)"
    r"[ \t]*\(", re.M)


def _not_code(ctx: _Ctx) -> list[tuple[int, int]]:
    """Byte ranges of comments and string/char literals: a THC name there is no use."""
    return cxx.comment_ranges(ctx.src) + [
        (n.start_byte, n.end_byte) for n in cxx.nodes_of_type(
            ctx.src.root, ("string_literal", "raw_string_literal", "char_literal"))]


#: A preprocessor line other than an #include: a tree's own compatibility shim
#: (`#define THCudaCheck(x) C10_CUDA_CHECK(x)`, `#ifndef AT_CHECK`), never edited.
_DIRECTIVE = re.compile(r"^\s*#\s*(?!include\b)(?P<kind>\w+)(?:\s+(?P<name>\w+))?")


def _shim_line(line: str) -> bool:
    """A directive that tests or defines a name (a tree's shim: `#ifndef AT_CHECK`,
    `#define THCudaCheck(x) C10_CUDA_CHECK(x)`); a `#define` of another name whose body
    uses THC (`#define CUDA_CHECK(x) THCudaCheck(x)`) is code like any other line."""
    m = _DIRECTIVE.match(line)
    if m is None:
        return False
    return m["kind"] != "define" or bool(m["name"] and _THC_NAME.fullmatch(m["name"]))


def _provided(ctx: _Ctx, name: str) -> bool:
    """Whether the tree defines `name` as a macro itself, in this file or a header it
    includes (a shim for newer torch): its uses compile, nothing to report."""
    return name in ctx.defines or name in ctx.inherited


def _thc_line(old: str) -> tuple[str, set[str], set[str]]:
    """The line with every THC call that has a successor replaced, the headers those
    successors need and the helpers (`_THC_HELPERS`) they call; a THCState declaration line
    becomes a comment. "" when a THC name is left that has no successor here (an include is
    judged by its caller)."""
    if _THC_STATE_LINE.match(old):
        indent = old[:len(old) - len(old.lstrip())]
        return f"{indent}// {old.strip()}  (THC was removed in torch 1.11)", set(), set()
    needs: set[str] = set()
    helpers: set[str] = set()
    new = old
    for pattern, successor, header in _THC_CALLS:
        new, count = pattern.subn(successor, new)
        if count:
            needs.add(header)
    for pattern, successor, used, headers in _THC_HELPER_CALLS:
        new, count = pattern.subn(successor, new)
        if count:
            helpers.update(used)
            needs.update(headers)
    while (check := _TH_ARG_CHECK.search(new)) is not None:
        commas = _top_level_commas(new, check.end())
        # THArgCheck formats its message printf-style; TORCH_CHECK concatenates: a `%`
        # would print as is.
        if len(commas) < 2 or not new[commas[0] + 1:commas[1]].strip().isdigit() or \
                "%" in new[commas[1]:]:
            break
        new = f"{new[:check.start()]}TORCH_CHECK({new[check.end():commas[0] + 1]}" \
              f"{new[commas[1] + 1:]}"
    if _THC_NAME.search(new) and not _THC_INCLUDE.match(old):
        return "", set(), set()
    return new, needs, helpers


def _top_level_commas(line: str, start: int) -> list[int]:
    """The offsets of the commas of one call's argument list that opens before `start`,
    up to its closing parenthesis or the line's end (quotes and nested brackets skipped)."""
    depth, quote, out = 0, "", []
    i = start
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(i)
        i += 1
    return out


_AT_CHECK = re.compile(r"\bAT_CHECK(?=[ \t]*\()")


def at_check(ctx: _Ctx) -> None:
    """FB126 at each line of code that calls `AT_CHECK`, with the line's edit."""
    text = ctx.file.text
    if "AT_CHECK" not in text or _provided(ctx, "AT_CHECK"):
        return
    skip = _not_code(ctx)
    host = host_pass(ctx.target.platform)
    lines = text.split("\n")
    done: set[int] = set()
    for m in _AT_CHECK.finditer(text):
        start = ctx.byte(m.start())
        line = text.count("\n", 0, m.start()) + 1
        active = ctx.active(ctx.node_at(start, start + 1), host)
        if line in done or any(a <= start < b for a, b in skip) or active == 0:
            continue
        done.add(line)
        old = lines[line - 1].removesuffix("\r")
        step = _line_step(ctx, line, old, _AT_CHECK.sub("TORCH_CHECK", old), kind="torch-check",
                          what="calls AT_CHECK, which torch 1.5 removed (scan FB126)")
        ctx.add(start, "FB126", Category.LIBRARY_API,
                Severity.ERROR if active == 1 else Severity.WARNING,
                "`AT_CHECK` was removed in torch 1.5: `TORCH_CHECK` takes the same arguments",
                f"`{old.strip()}`",
                Fix(manual="call TORCH_CHECK" + ("" if step else
                    " (not drafted: the line holds what a recipe anchor cannot carry)"),
                    step=EditCall(step=step)))


def _line_step(ctx: _Ctx, line: int, old: str, new: str, *, kind: str,
               what: str) -> ProposedStep | None:
    """A `replace-block` of every line of the file that reads `old` (the same text gets the
    same edit), anchored on that text; None for a blank line or one that holds what a TOML
    string or the transform's anchor cannot carry."""
    anchor = old.strip()
    if not anchor or old == new or any(bad in anchor for bad in _UNSAFE_IN_ANCHOR):
        return None
    digest = hashlib.sha256(anchor.encode("utf-8")).hexdigest()[:8]
    # replace-block expects one region unless told: each identical line is one. The anchor
    # matches them whatever their indentation, so every finding on such a line drafts the same
    # step, written as at the first of them (its line, its indentation): one step edits all.
    lines = ctx.file.text.split("\n")
    same = [i for i, ln in enumerate(lines) if ln.strip() == anchor]
    first = lines[same[0]] if same else old
    own, indent = _indent(old), _indent(first)
    block = new.rstrip("\r")
    if block.startswith(own):
        block = indent + block[len(own):]
    return _step(ctx, same[0] + 1 if same else line, kind=kind, tag=digest, what=what,
                 params={"file": ctx.file.path, "anchor": anchor, "block": block,
                         **({"expect": len(same)} if len(same) > 1 else {})})


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _step(ctx: _Ctx, line: int, *, kind: str, tag: str, what: str,
          params: dict[str, object]) -> ProposedStep:
    """A `replace-block` step for every platform (each edit here holds for every release of
    the library), its id `kind-file-tag`."""
    stem = re.sub(r"[^a-z0-9]+", "-", ctx.file.path.rsplit("/", 1)[-1].lower()).strip("-")
    return ProposedStep(id=f"{kind}-{stem}-{tag}", transform="replace-block",
                        description=f"{ctx.file.path}:{line} {what}", params=params,
                        when={"platform": ["linux", "windows"]})


def bare_conditions(ctx: _Ctx) -> None:
    """FB123 at each `if NAME(…)` / `while NAME(…)` in code the host pass may compile whose
    condition is that one call, followed by `{` or the end of its line."""
    data = ctx.src.data
    skip = cxx.comment_ranges(ctx.src) + [
        (n.start_byte, n.end_byte) for n in cxx.nodes_of_type(
            ctx.src.root, ("string_literal", "raw_string_literal", "char_literal"))]
    host = host_pass(ctx.target.platform)
    for m in _BARE_CONDITION.finditer(data):
        start = m.start("name")
        line_start = data.rfind(b"\n", 0, m.start()) + 1
        if data[line_start:m.start()].lstrip().startswith(b"#") or \
                any(a <= m.start() < b for a, b in skip):
            continue
        close = cxx.matching_paren(data, m.end() - 1)
        if close is None:
            continue
        after = data[close + 1:].lstrip(b" \t")
        if not after.startswith((b"{", b"\n", b"\r\n")):
            continue  # `if F(a) && G(b)`: more than the one call, not read here
        if ctx.active(ctx.node_at(start, close + 1), host) == 0:
            continue
        call = data[start:close + 1].decode("utf-8", errors="replace")
        keyword = m["kw"].decode()
        step = _parenthesise(ctx, start, close + 1, keyword)
        ctx.add(m.start(), "FB123", Category.LIBRARY_API, Severity.WARNING,
                f"`{keyword} {call}` has no parentheses of its own: it compiles only while "
                f"`{m['name'].decode()}` is a macro whose expansion brings them (Python "
                "3.11's PyTuple_Check and friends no longer do)",
                f"`{keyword}` is followed by `{m['name'].decode()}(`, not `(`",
                Fix(manual=f"write `{keyword} ({call})`" + ("" if step else " (not drafted: "
                    "the condition spans lines, or its line holds what a recipe anchor cannot "
                    "carry)"),
                    step=EditCall(step=step)))


def cub_debug_synchronous(ctx: _Ctx) -> None:
    """FB119 at each `cub::Device*::*(…, stream, debug_synchronous)` call the host pass may
    compile: the last argument an identifier naming `debug` or a bool literal."""
    if not wants(ctx.file.text):
        return
    host = host_pass(ctx.target.platform)
    for call in cxx.nodes_of_type(ctx.src.root, ("call_expression",)):
        function = call.child_by_field_name("function")
        arguments = call.child_by_field_name("arguments")
        if function is None or arguments is None:
            continue
        name = "".join(ctx.src.node_text(function).split())
        if not _CUB_DEVICE_CALL.fullmatch(name):
            continue
        args = [a for a in arguments.named_children if a.type != "comment"]
        if len(args) < _MIN_ARGS or not _is_debug_flag(ctx, args[-1]) or \
                _OPERATOR_LIKE.search(ctx.src.node_text(args[-2])) or \
                ctx.active(call, host) == 0:
            continue
        last = ctx.src.node_text(args[-1])
        step = _drop_last_argument(ctx, call, args)
        ctx.add(call.start_byte, "FB119", Category.LIBRARY_API, Severity.ERROR,
                f"`{name}` is called with CUB's `debug_synchronous` argument (`{last}`), which "
                "CCCL 3 (CUDA 13) removed: nvcc stops with \"no instance of overloaded "
                "function\"",
                f"{len(args)} arguments, the last `{last}` after the stream",
                Fix(manual=f"leave out the last argument (`{last}`): the call without it "
                    "compiles with every CUDA" + ("" if step else " (not drafted: the call's "
                    "lines are no region of their own in the file, so an edit anchored there "
                    "could change another)"),
                    step=EditCall(step=step)))


def _parenthesise(ctx: _Ctx, start: int, end: int, keyword: str) -> ProposedStep | None:
    """The `replace-block` of the line holding the condition `data[start:end]`, with the
    condition in parentheses; None when the condition spans lines."""
    src = ctx.src
    line = src.line_of(start)
    if src.line_of(end - 1) != line:
        return None
    first = src.line_start(start)
    nl = src.data.find(b"\n", first)
    text = src.slice(first, len(src.data) if nl < 0 else nl).removesuffix("\r")
    col_a, col_b = len(src.slice(first, start)), len(src.slice(first, end))
    block = text[:col_a] + "(" + text[col_a:col_b] + ")" + text[col_b:]
    return _line_step(ctx, line, text, block, kind=f"parenthesise-{keyword}",
                      what=f"writes its `{keyword}` condition without parentheses (scan FB123)")


def _is_debug_flag(ctx: _Ctx, node: Node) -> bool:
    text = ctx.src.node_text(node).strip()
    if node.type in ("true", "false") or text in _BOOL_LITERALS:
        return True
    return node.type == "identifier" and "debug" in text.lower()


def _drop_last_argument(ctx: _Ctx, call: Node, args: list[Node]) -> ProposedStep | None:
    """The `replace-block` of the lines from the call's first to its last, with the last
    argument and the comma before it left out: a call on one line is `_line_step`'s edit of
    every line that reads the same. None when the transform would not find a call's lines as
    one region of their own (its first line's text repeats in the file, or the end anchor
    matches before the call's last line)."""
    src = ctx.src
    first_line, last_line = src.line_of(call.start_byte), src.line_of(call.end_byte - 1)
    start = src.line_start(call.start_byte)
    end = src.data.find(b"\n", call.end_byte)
    end = len(src.data) if end < 0 else end
    cut_from, cut_to = args[-2].end_byte, args[-1].end_byte
    block = (src.slice(start, cut_from) + src.slice(cut_to, end)).replace("\r\n", "\n")
    block = block.removesuffix("\r")
    what = "passes CUB's debug_synchronous argument, which CCCL 3 (CUDA 13) removed (scan FB119)"
    if first_line == last_line:
        # One line: every line of the file that reads the same gets the same edit (a call
        # repeated word for word in two branches is one step that expects each).
        old = src.slice(start, end).removesuffix("\r")
        return _line_step(ctx, first_line, old, block, kind="cub-no-debug-synchronous",
                          what=what)
    lines = [ln.rstrip("\r") for ln in src.data.decode("utf-8", errors="replace").split("\n")]
    anchor = lines[first_line - 1].strip()
    end_anchor = lines[last_line - 1].strip() if last_line > first_line else ""
    if not anchor or sum(ln.strip() == anchor for ln in lines) != 1:
        return None
    if end_anchor and next(n for n in range(first_line, last_line + 1)
                           if lines[n - 1].strip() == end_anchor) != last_line:
        return None
    return _step(ctx, first_line, kind="cub-no-debug-synchronous", tag=str(first_line),
                 what=what, params={"file": ctx.file.path, "anchor": anchor,
                         **({"end_anchor": end_anchor} if end_anchor else {}), "block": block})
