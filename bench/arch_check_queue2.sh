#!/usr/bin/env bash
# The second round of bench/gpu_arch_check.sh (QUEUE=2): after the first showed verify only
# warning on FlashMLA for sm_120, cuFFT called "fails" by doctor --packages, build notes not
# printed and the check costing 21.7 ms: the same steps again, fewer of them.
set -u
work=/tmp/ac
cd "$REPO" || exit 1
now() { python3 -c "import time; print(f'{time.monotonic():.3f}')"; }
say() { echo "$*" | tee -a "$work/summary.txt"; }
timed() {
  local name=$1; shift
  local t0 t1 rc
  t0=$(now); "$@" > "$work/$name.txt" 2>&1; rc=$?; t1=$(now)
  say "$name rc=$rc seconds=$(python3 -c "print(round($t1 - $t0, 2))")"
  return $rc
}
fb() { python3 -m flashbuild "$@"; }
python3 bench/bench_arch_check.py --runs 30 > "$work/bench-arch-check.json" 2>&1
grep -E "median|cost" "$work/bench-arch-check.json" | tee -a "$work/summary.txt"
timed csrc-sm120-build fb build --arch sm_120
grep -iE "cannot run this build" "$work/csrc-sm120-build.txt" | cut -c1-300 | tee -a "$work/summary.txt"
timed flashmla-sm120-build fb build "$work/FlashMLA" --arch sm_120
grep -iE "only trap" "$work/flashmla-sm120-build.txt" | cut -c1-400 | tee -a "$work/summary.txt"
timed flashmla-sm120-verify fb verify --package flash_mla --arch sm_120
grep -E "placeholders" "$work/flashmla-sm120-verify.txt" | cut -c1-400 | tee -a "$work/summary.txt"
timed flashmla-sm120-verify-allow fb verify --package flash_mla --arch sm_120 --allow-placeholders
timed doctor-packages fb doctor --packages
timed doctor-packages-again fb doctor --packages
grep -E "error|warn|Read " "$work/doctor-packages-again.txt" | cut -c1-200 | tee -a "$work/summary.txt"
fb doctor --packages --json > "$work/doctor-packages.json" 2>/dev/null
fb doctor --packages --arch sm_120 > "$work/doctor-packages-sm120.txt" 2>&1
touch "$work/queue.done"
