#!/usr/bin/env bash
# The third round of bench/gpu_arch_check.sh (QUEUE=3): FlashMLA for sm_120 and for sm_90a
# with the placeholder verdict counted by compiled unit, and doctor --packages after cuFFT's
# kernel-less libcufftw module was taken for a failure.
set -u
cd "$REPO" || exit 1
# shellcheck source=bench/arch_check_lib.sh
. bench/arch_check_lib.sh
timed flashmla-sm120-build fb build "$work/FlashMLA" --arch sm_120
grep -iE "only trap" "$work/flashmla-sm120-build.txt" | cut -c1-500 | tee -a "$work/summary.txt"
timed flashmla-sm120-verify fb verify --package flash_mla --arch sm_120
grep -E "placeholders" "$work/flashmla-sm120-verify.txt" | cut -c1-500 | tee -a "$work/summary.txt"
timed flashmla-sm90a-build fb build "$work/FlashMLA" --arch sm_90a
grep -iE "only trap" "$work/flashmla-sm90a-build.txt" | cut -c1-500 | tee -a "$work/summary.txt"
timed flashmla-sm90a-verify fb verify --package flash_mla --arch sm_90a
grep -E "placeholders|verified" "$work/flashmla-sm90a-verify.txt" | cut -c1-500 | tee -a "$work/summary.txt"
timed doctor-packages fb doctor --packages
timed doctor-packages-again fb doctor --packages
grep -E "error|warn|Read " "$work/doctor-packages-again.txt" | cut -c1-200 | tee -a "$work/summary.txt"
fb doctor --packages --json > "$work/doctor-packages.json" 2>/dev/null
touch "$work/queue.done"
