#!/usr/bin/env bash
# The fourth round of bench/gpu_arch_check.sh (QUEUE=4): after the no-attach NVML init was
# found to list no GPU, the check's cost and an sm_120-only build refused on this GPU, again.
set -u
cd "$REPO" || exit 1
# shellcheck source=bench/arch_check_lib.sh
. bench/arch_check_lib.sh
python3 bench/bench_arch_check.py --runs 30 > "$work/bench-arch-check.json" 2>&1
grep -E "GPU|median|cost" "$work/bench-arch-check.json" | tee -a "$work/summary.txt"
timed csrc-sm120-build fb build --arch sm_120
grep -iE "cannot run this build" "$work/csrc-sm120-build.txt" | cut -c1-400 | tee -a "$work/summary.txt"
timed csrc-sm120-import imp
tail -n 1 "$work/csrc-sm120-import.txt" | cut -c1-700 | tee -a "$work/summary.txt"
touch "$work/queue.done"
