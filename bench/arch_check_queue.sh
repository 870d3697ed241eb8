#!/usr/bin/env bash
# The background half of bench/gpu_arch_check.sh (see there).
set -u
cd "$REPO" || exit 1
# shellcheck source=bench/arch_check_lib.sh
. bench/arch_check_lib.sh

timed csrc-sm120-build fb build --arch sm_120
timed csrc-sm120-import imp
tail -n 1 "$work/csrc-sm120-import.txt" | cut -c1-600 | tee -a "$work/summary.txt"
FLASHBUILD_ARCH_CHECK=0 timed csrc-sm120-import-off imp
timed csrc-sm120-verify fb verify --arch sm_120 --no-gpu
timed doctor-packages-after-sm120 fb doctor --packages
timed csrc-sm90a-build fb build --arch sm_90a
timed csrc-sm90a-import imp
timed csrc-sm90a-verify fb verify
timed bench-arch-check python3 bench/bench_arch_check.py --runs 30
python3 bench/bench_arch_check.py --runs 30 > "$work/bench-arch-check.json" 2>&1
timed flashmla-sm120-build fb build "$work/FlashMLA" --arch sm_120
grep -iE "trap|placeholder" "$work/flashmla-sm120-build.txt" | cut -c1-400 | tee -a "$work/summary.txt"
timed flashmla-sm120-verify fb verify --package flash_mla --arch sm_120
fb verify --package flash_mla --arch sm_120 --json > "$work/flashmla-sm120-verify.json" 2>/dev/null
timed flashmla-sm120-import bash -c 'cd /tmp && python3 -c "import flash_mla"'
tail -n 1 "$work/flashmla-sm120-import.txt" | cut -c1-600 | tee -a "$work/summary.txt"
timed flashmla-sm90a-build fb build "$work/FlashMLA" --arch sm_90a
timed flashmla-sm90a-verify fb verify --package flash_mla --arch sm_90a
timed doctor-packages fb doctor --packages
fb doctor --packages --json > "$work/doctor-packages.json" 2>/dev/null
fb doctor --packages --arch sm_120 --json > "$work/doctor-packages-sm120.json" 2>/dev/null
(cd "$work/FlashMLA" && timed flashmla-tests timeout 300 python3 tests/test_flash_mla_dense_decoding.py)
grep -iE "tflops|pass|error|mismatch" "$work/flashmla-tests.txt" | tail -n 4 | tee -a "$work/summary.txt"
touch "$work/queue.done"
