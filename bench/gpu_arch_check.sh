#!/usr/bin/env bash
# Arch-aware loading, placeholders and `doctor --packages` on the GPU machine:
#   bash bench/gpu_arch_check.sh start OUTDIR   # install flashbuild, unpack FlashMLA, start the queue
#   bash bench/gpu_arch_check.sh poll OUTDIR    # wait (at most ~9 min a call), collect results
# The queue (bench/arch_check_queue.sh, in the background: it goes on between calls):
#   1. csrc (flashkern) built for sm_120 only: `import flashkern` on this GPU must refuse with
#      the loader shim's paragraph; with FLASHBUILD_ARCH_CHECK=0 it imports; verify --no-gpu;
#      `doctor --packages` names flashkern as failing here.
#   2. csrc built for sm_90a: imports, verify with the GPU self-check.
#   3. bench/bench_arch_check.py: the check's cost with the driver's real NVML.
#   4. FlashMLA (corpus tarball) for sm_120: the build's closing notes and verify name its
#      placeholder kernels (verify must fail the target); then for sm_90a: verify passes.
#   5. `doctor --packages` (GPUs present, and --arch sm_120 --json) over what is installed.
# QUEUE=2, 3 or 4 runs bench/arch_check_queueN.sh instead (later rounds, see each).
# Expects .devcarry/FlashMLA.tar.gz and flashbuild's pure-Python dependencies as wheels in .whl/.
set -u
mode=${1:?start|poll}; out=${2:?OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
work=/tmp/ac
if [ "$mode" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
    || { cat "$out/install.log"; exit 1; }
  python3 -m compileall -q flashbuild /tmp/site >/dev/null
  rm -rf "$work" && mkdir -p "$work" && tar xzf .devcarry/FlashMLA.tar.gz -C "$work" || exit 1
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  python3 -m flashbuild --version || exit 1
  cp "bench/arch_check_queue${QUEUE:-}.sh" "$work/queue.sh"
  setsid env REPO="$PWD" bash "$work/queue.sh" > "$work/queue.log" 2>&1 < /dev/null &
  echo "queue started"
  exit 0
fi
for _ in $(seq 1 "${POLLS:-100}"); do [ -f "$work/queue.done" ] && break; sleep 5; done
cp "$work"/*.txt "$work"/*.json "$out"/ 2>/dev/null
tail -n 30 "$work/queue.log" > "$out/queue-tail.txt"
cat "$work/summary.txt" 2>/dev/null
if [ ! -f "$work/queue.done" ]; then
  echo "still running:"; tail -n 5 "$work/queue.log"; exit 3
fi
