#!/usr/bin/env bash
# alternate.sh BEFORE PKG BENCH [ROUNDS [BENCHTIME]]
#
# Builds the test binary of package PKG at git revision BEFORE (in a
# temporary worktree) and from the working tree, then runs benchmark
# pattern BENCH with each, alternately, ROUNDS times (default 7), one
# -count per run, so that both see the same load. Every run is headed by
# "=== round N before|after load L" (the 1-minute load average), which is
# what docs/PERFORMANCE.md's before/after tables are the medians of.
#
#   docs/bench/alternate.sh b6a4960^1 ./mhinet/tun '^Benchmark(RawTUN|Bridge)$'
#   docs/bench/alternate.sh dbd178b ./pcigeneric/vfiouser '^BenchmarkLoopback$'
#
# A benchmark file that the BEFORE revision lacks or has in an older form
# can be given in BENCH_FILES (paths relative to the repository): they are
# copied from the working tree into the BEFORE worktree first.
set -euo pipefail
before=${1:?before revision} pkg=${2:?package} bench=${3:?benchmark pattern}
rounds=${4:-7} benchtime=${5:-2s}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/before" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q --detach "$tmp/before" "$before"
for f in ${BENCH_FILES:-}; do cp "$root/$f" "$tmp/before/$f"; done
(cd "$tmp/before" && go test -c -o "$tmp/before.test" "$pkg")
(cd "$root" && go test -c -o "$tmp/after.test" "$pkg")
dir=$root/${pkg#./}
for i in $(seq 1 "$rounds"); do
	for v in before after; do
		echo "=== round $i $v load $(cut -d' ' -f1 /proc/loadavg)"
		(cd "$dir" && "$tmp/$v.test" -test.run '^$' -test.bench "$bench" \
			-test.benchtime "$benchtime" -test.count 1 -test.benchmem) | grep '^Benchmark' || true
	done
done
