#!/usr/bin/env bash
# flashkern alone on a GPU machine, without installing flashbuild: build csrc/ for this GPU
# (csrc/python/flashkern/_devbuild.py: CMake + Ninja), run the GPU tests on that build, then
# the kernel benchmark. Needs python3 with torch (CUDA), pytest, pybind11, cmake, ninja, nvcc.
#   bash bench/gpu_kernels.sh OUTDIR [SECTIONS]   (SECTIONS: see bench_kernels.py --sections;
#                                                 none: build and GPU tests only)
# Writes OUTDIR/gpu.txt, build.log, attn_resources.txt, gputests.log, bench.json, bench.md.
set -u
out=${1:?usage: gpu_kernels.sh OUTDIR [SECTIONS]}
sections=${2:-bandwidth,attention,norms,small}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
work=${FLASHKERN_WORK:-/tmp/flashkern-gpu}
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$out/gpu.txt"
arch=$(python3 -c 'import torch; M, m = torch.cuda.get_device_capability(); print(f"{M}{m}a-real" if (M, m) == (9, 0) else f"{M}{m}-real")')
echo "== build ($arch)"
python3 csrc/python/flashkern/_devbuild.py "$work" "$arch" >"$out/build.log" 2>&1 \
  || { tail -n 40 "$out/build.log"; exit 1; }
export PYTHONPATH="$work/python${PYTHONPATH:+:$PYTHONPATH}"
cuobjdump --dump-resource-usage "$work/python/flashkern/libflashkern_attn.so" 2>&1 \
  | grep -A1 "fa_forward" >"$out/attn_resources.txt"
failed=0
echo "== GPU tests"
# -p no:benchmark: a pytest-benchmark installed there stops the run at start-up under xdist
FLASHKERN_PREBUILT=1 python3 -m pytest tests/gpu -m gpu -q -p no:cacheprovider -p no:benchmark \
  --maxfail=20 \
  >"$out/gputests.log" 2>&1 || failed=1
tail -n 25 "$out/gputests.log"
[ "$sections" = none ] && exit $failed
echo "== benchmark ($sections)"
python3 bench/bench_kernels.py --sections "$sections" --out "$out/bench.json" >"$out/bench.md" \
  || failed=1
cat "$out/bench.md"
exit $failed
