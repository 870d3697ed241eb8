#!/usr/bin/env bash
# The background half of bench/gpu_seed_trees.sh (see there): builds, verifies and tests each
# seed tree in turn, writing one line per step to /tmp/seed/summary.txt.
set -u
seed=/tmp/seed
cd "$seed" || exit 1
now() { python3 -c "import time; print(f'{time.monotonic():.3f}')"; }
say() { echo "$*" | tee -a "$seed/summary.txt"; }
timed() {  # timed NAME COMMAND...: run, keep its output in NAME.txt, one summary line
  local name=$1; shift
  local t0 t1 rc
  t0=$(now); "$@" > "$seed/$name.txt" 2>&1; rc=$?; t1=$(now)
  say "$name rc=$rc seconds=$(python3 -c "print(round($t1 - $t0, 2))")"
  return $rc
}
fb() { python3 -m flashbuild "$@"; }

for t in $SEED_TREES; do
  tree="$seed/$t"
  timed "$t-build" fb build "$tree" --arch "$SEED_ARCH" || { tail -n 30 "$seed/$t-build.txt"; continue; }
  for i in 1 2 3; do timed "$t-noop$i" fb build "$tree" --arch "$SEED_ARCH"; done
  grep -iE "compiled|nothing|reinstall|installed" "$seed/$t-noop3.txt" | head -3
  # Where an unchanged re-run spends its time on this machine: imports, then a profile.
  python3 -X importtime -m flashbuild build "$tree" --arch "$SEED_ARCH" >/dev/null \
    2> "$seed/$t-importtime.txt"
  python3 -m cProfile -o "$seed/$t-noop.prof" -m flashbuild build "$tree" --arch "$SEED_ARCH" \
    > /dev/null 2>&1
  case $t in
    FlashMLA)
      timed "$t-verify" fb verify --package flash_mla --arch "$SEED_ARCH"
      (cd "$tree" && timed "$t-tests" timeout 420 python3 tests/test_flash_mla_dense_decoding.py)
      grep -iE "tflops|pass|error|mismatch" "$seed/$t-tests.txt" | tail -n 8
      if [ "${SEED_PIP:-0}" = 1 ]; then
        rm -rf "$seed/pip" && mkdir -p "$seed/pip" && tar xzf "$REPO/.devcarry/FlashMLA.tar.gz" -C "$seed/pip"
        (cd "$seed/pip/FlashMLA" && git init -q && git add -A && \
          git -c user.email=a@b -c user.name=bench commit -qm pristine)
        cccl=$(dirname "$(dirname "$(command -v nvcc)")")/include/cccl
        (cd "$seed/pip/FlashMLA" && CPLUS_INCLUDE_PATH="$cccl" MAX_JOBS=$(nproc) \
          timed "FlashMLA-pip" python3 -m pip wheel -v --no-build-isolation --no-deps -w "$seed/pip/dist" .)
      fi
      ;;
    xformers-full)
      timed "$t-verify" fb verify --package xformers --arch "$SEED_ARCH"
      (cd /tmp && timed "$t-tests" timeout 420 python3 "$REPO/bench/seed_xformers_sp24.py" \
        "$tree" "$seed/xft")
      tail -n 3 "$seed/$t-tests.txt"
      # The one case that crashed before, alone, with Python's stack (faulthandler).
      (cd /tmp && timed "$t-crash" timeout 200 python3 -X faulthandler \
        "$REPO/bench/seed_xformers_sp24.py" "$tree" "$seed/xft" -x -k largest_mask_2d_notaligned)
      (cd /tmp && timed "$t-rest" timeout 420 python3 "$REPO/bench/seed_xformers_sp24.py" \
        "$tree" "$seed/xft" -k "not largest_mask_2d_notaligned")
      tail -n 3 "$seed/$t-rest.txt"
      if [ "${SEED_XF_OWN:-0}" = 1 ]; then
        # The same tree built by its own `pip wheel` (TORCH_CUDA_ARCH_LIST for this GPU), in
        # the background while the next tree builds, and the same crashing case against it:
        # does it crash without flashbuild too?
        (
          own="$seed/xfown"; rm -rf "$own"; mkdir -p "$own"
          tar xzf "$REPO/.devcarry/xformers-full.tar.gz" -C "$own" && cd "$own/xformers-full" || exit 1
          export TORCH_CUDA_ARCH_LIST="${SEED_TORCH_ARCH:-9.0a}" MAX_JOBS; MAX_JOBS=$(nproc)
          timed xformers-own-wheel python3 -m pip wheel -v --no-build-isolation --no-deps \
            -w "$own/dist" . || { touch "$seed/xfown.done"; exit 1; }
          python3 -m pip install -q --no-deps --target "$own/site" "$own"/dist/*.whl
          export PYTHONPATH="$own/site:$PYTHONPATH"; cd /tmp || exit 1
          python3 -c "import xformers; print(xformers.__file__)" > "$seed/xformers-own-which.txt" 2>&1
          timed xformers-own-crash timeout 200 python3 -X faulthandler \
            "$REPO/bench/seed_xformers_sp24.py" "$own/xformers-full" "$own/xft" \
            -k largest_mask_2d_notaligned
          touch "$seed/xfown.done"
        ) &
      fi
      ;;
    causal-conv1d)
      timed "$t-verify" fb verify --package causal_conv1d --arch "$SEED_ARCH"
      (cd /tmp && timed "$t-tests" timeout 420 python3 -m pytest -q -x -p no:cacheprovider \
        -k "${CC_K:-2048}" "$tree/tests/test_causal_conv1d.py")
      tail -n 3 "$seed/$t-tests.txt"
      ;;
    FlashRT)
      timed "$t-verify" fb verify --package flash_vla --arch "$SEED_ARCH"
      timed "$t-tests" timeout 300 python3 "$REPO/bench/seed_flashrt_check.py"
      tail -n 5 "$seed/$t-tests.txt"
      ;;
  esac
done
# Wait for a background comparison build, if one was started.
if [ "${SEED_XF_OWN:-0}" = 1 ]; then
  for _ in $(seq 1 120); do [ -f "$seed/xfown.done" ] && break; sleep 5; done
fi
touch "$seed/queue.done"
