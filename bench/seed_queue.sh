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
      ;;
    causal-conv1d)
      timed "$t-verify" fb verify --package causal_conv1d --arch "$SEED_ARCH"
      (cd /tmp && timed "$t-tests" timeout 420 python3 -m pytest -q -x -p no:cacheprovider \
        -k "${CC_K:-fp16 and 2048}" "$tree/tests/test_causal_conv1d.py")
      tail -n 3 "$seed/$t-tests.txt"
      ;;
    FlashRT)
      timed "$t-verify" fb verify --package flash_vla --arch "$SEED_ARCH"
      timed "$t-tests" timeout 300 python3 "$REPO/bench/seed_flashrt_check.py"
      tail -n 5 "$seed/$t-tests.txt"
      ;;
  esac
done
touch "$seed/queue.done"
