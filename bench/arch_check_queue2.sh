#!/usr/bin/env bash
# The second round of bench/gpu_arch_check.sh (QUEUE=2): after the first showed verify only
# warning on FlashMLA for sm_120, cuFFT called "fails" by doctor --packages, build notes not
# printed and the check costing 21.7 ms: the same steps again, fewer of them.
set -u
cd "$REPO" || exit 1
# shellcheck source=bench/arch_check_lib.sh
. bench/arch_check_lib.sh
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
