#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time from its seeds (README.md).
# usage: run.sh FUZZ_EXE SEED_DIR WORK_DIR SECONDS
# DSP_FUZZ_SECONDS overrides SECONDS (the documented long run). New inputs go to
# WORK_DIR/corpus (never into the seeds), crashes to WORK_DIR/artifacts/. Exits non-zero on a
# crash, a leak, a timeout (10 s per input) or more than 2 GB of memory. -error_exitcode=1:
# libFuzzer's default, 77, is what meson reads as a skipped test (a crash once passed as SKIP).
set -euo pipefail
exe=$1 seeds=$2 work=$3
secs=${DSP_FUZZ_SECONDS:-$4}
mkdir -p "$work/corpus" "$work/artifacts"
exec "$exe" -max_total_time="$secs" -timeout=10 -error_exitcode=1 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds"
