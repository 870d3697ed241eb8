#!/usr/bin/env bash
# The seed trees from their pristine tarballs, one command each, on the GPU machine:
#   bash bench/gpu_seed_trees.sh start OUTDIR   # install flashbuild, unpack, start the queue
#   bash bench/gpu_seed_trees.sh poll OUTDIR    # wait (at most ~9 min a call), collect results
# The queue runs in the background (setsid) and goes on between calls. For each tree in
# SEED_TREES (default: FlashMLA xformers-full causal-conv1d) it times
#   flashbuild build /tmp/seed/TREE --arch $SEED_ARCH          (no recipe: zero-config)
# then three unchanged re-runs, `flashbuild verify`, and the tree's own tests:
#   FlashMLA       tests/test_flash_mla_dense_decoding.py (a script: correctness + TFLOPS)
#   xformers-full  tests/test_sparsity24.py (pytest, from outside the tree)
#   causal-conv1d  tests/test_causal_conv1d.py -k "$CC_K" (default 2048: a subset, the file
#                  has 13,300 cases)
#   FlashRT        import flash_vla and one kernel against torch (bench/seed_flashrt_check.py)
# With SEED_PIP=1, after FlashMLA: its own build as a user would run it (`pip wheel
# --no-build-isolation .`, both of its archs, with the two hand fixes CUDA 13 needs: the CCCL
# folder on CPLUS_INCLUDE_PATH and a git commit so its version is stable), timed, for the
# cold-build ratio.
# Expects the tarballs in .devcarry/ and flashbuild's pure-Python dependencies as wheels in
# .whl/ (the machine has no internet). Results land in OUTDIR as small text/JSON files.
set -u
mode=${1:?start|poll}; out=${2:?OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site
export PATH=/tmp/site/bin:$PATH
seed=/tmp/seed
arch=${SEED_ARCH:-sm_90a}
trees=${SEED_TREES:-FlashMLA xformers-full causal-conv1d}
now() { python3 -c "import time; print(f'{time.monotonic():.3f}')"; }

if [ "$mode" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
    || { cat "$out/install.log"; exit 1; }
  # An editable install compiles no bytecode; a pip install of a wheel does (and Python
  # writes it on first import unless the machine says not to): compile it once, as a user's
  # install would have it, so the no-op timings below are not Python compiling flashbuild.
  python3 -c "import sys; print('dont_write_bytecode', sys.dont_write_bytecode)" | tee "$out/pyc.txt"
  python3 -m compileall -q flashbuild /tmp/site >/dev/null
  rm -rf "$seed" && mkdir -p "$seed"
  for t in $trees; do tar xzf ".devcarry/$t.tar.gz" -C "$seed" || exit 1; done
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  nproc | tee "$out/nproc.txt"
  python3 -m flashbuild --version || exit 1
  cp bench/seed_queue.sh "$seed/queue.sh"
  setsid env SEED_ARCH="$arch" SEED_TREES="$trees" SEED_PIP="${SEED_PIP:-0}" \
    CC_K="${CC_K:-}" SEED_XF_OWN="${SEED_XF_OWN:-0}" REPO="$PWD" bash "$seed/queue.sh" > "$seed/queue.log" 2>&1 < /dev/null &
  echo "queue started: $trees"
  exit 0
fi

# poll: wait for the queue (or until ~9 minutes pass), then copy what exists to OUTDIR.
for _ in $(seq 1 "${SEED_POLLS:-100}"); do [ -f "$seed/queue.done" ] && break; sleep 5; done
cp "$seed"/*.txt "$seed"/*.json "$seed"/*.prof "$out"/ 2>/dev/null
tail -n 40 "$seed/queue.log" > "$out/queue-tail.txt"
cat "$seed/summary.txt" 2>/dev/null
if [ ! -f "$seed/queue.done" ]; then
  echo "still running:"; tail -n 5 "$seed/queue.log"
  ps -eo etimes,args | grep -E 'nvcc|cicc|ptxas|pytest|pip' | grep -v grep | cut -c1-160 | head -6
  exit 3
fi
