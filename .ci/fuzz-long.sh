#!/usr/bin/env bash
# Long fuzzing runs: every target given, one after the other, each for
# FUZZTIME (a Go duration such as 1h or 90s, or a count such as 500000x),
# with one summary line per target appended to LOG:
#
#   target  duration  execs  execs/s  new-interesting  result
#
# Usage: fuzz-long.sh LOG pkg:Name[:count] ...   (the Makefile's
# FUZZ_TARGETS; the count is ignored here). Environment: GO (go),
# FUZZTIME (1h), FUZZMINIMIZETIME (the minimisation budget of each new
# input, default 10s).
#
# Results:
#   PASS        the run ended cleanly.
#   PASS*       Go 1.26's coordinator failed a clean duration run with
#               "context deadline exceeded" at the deadline
#               (golang/go#75804): no crasher was written and the run
#               lasted its whole FUZZTIME, so it is a pass; the line says so.
#   FAIL <path> a crash (or hang, or failed check): the input Go wrote,
#               to re-run with go test -run=Name/<file> pkg.
#   FAIL <why>  anything else (build failure, seed corpus failure…).
# The script exits 1 if any target failed. Each run's full output is kept
# next to LOG as LOG.<Name>.out.
set -uo pipefail

log=${1:?usage: fuzz-long.sh LOG pkg:Name[:count] ...}
shift
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-1h}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-10s}

# seconds converts a Go duration made of h, m and s parts ("1h30m",
# "90s") to whole seconds; it prints nothing for anything else.
seconds() {
	local d=$1 total=0 n unit
	[[ $d =~ ^([0-9]+[hms])+$ ]] || return 0
	while [[ $d =~ ^([0-9]+)([hms])(.*)$ ]]; do
		n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]} d=${BASH_REMATCH[3]}
		case $unit in
		h) total=$((total + n * 3600)) ;;
		m) total=$((total + n * 60)) ;;
		s) total=$((total + n)) ;;
		esac
	done
	echo "$total"
}

want=$(seconds "$FUZZTIME")
printf '# fuzz-long %s: FUZZTIME=%s FUZZMINIMIZETIME=%s, %s, %s, %s\n' \
	"$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$FUZZTIME" "$FUZZMINIMIZETIME" "$($GO version)" \
	"$(nproc) CPUs" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >>"$log"
printf '%-45s %9s %12s %9s %8s  %s\n' target duration execs execs/s new result >>"$log"

failed=0
for t in "$@"; do
	pkg=${t%%:*}
	rest=${t#*:}
	name=${rest%%:*}
	out="$log.$name.out"
	start=$(date +%s)
	$GO test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" \
		-fuzzminimizetime "$FUZZMINIMIZETIME" "$pkg" >"$out" 2>&1
	rc=$?
	end=$(date +%s)
	dur=$((end - start))

	# The last progress line: "fuzz: elapsed: 1h0m0s, execs: N (R/sec),
	# new interesting: K (total: T)".
	progress=$(grep -E '^fuzz: elapsed: .*execs: [0-9]+' "$out" | tail -n 1)
	execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$progress")
	newi=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$progress")
	execs=${execs:-0}
	newi=${newi:-0}
	rate=0
	if [ "$dur" -gt 0 ]; then
		rate=$((execs / dur))
	fi

	crasher=$(sed -nE 's/^ *Failing input written to (.*)$/\1/p' "$out" | tail -n 1)
	if [ "$rc" -eq 0 ]; then
		result=PASS
	elif [ -n "$crasher" ]; then
		result="FAIL $pkg/$crasher"
		failed=1
	elif grep -qE '^ +context deadline exceeded$' "$out" &&
		! grep -qE -- '--- FAIL: [^ ]+/' "$out" &&
		[ -n "$want" ] && [ "$dur" -ge "$want" ]; then
		result="PASS* (golang/go#75804: \"context deadline exceeded\" at the ${FUZZTIME} deadline, no crasher written)"
	else
		# What follows the first "--- FAIL" line, else the first line
		# that looks like an error.
		why=$(grep -m1 -A1 -E -- '--- FAIL' "$out" | sed -n '2p' | sed 's/^ *//')
		[ -n "$why" ] || why=$(grep -m1 -E 'FAIL|panic|error|cannot' "$out" | tr -s ' \t' ' ')
		result="FAIL ${why:-exit status $rc} (see $out)"
		failed=1
	fi
	printf '%-45s %8ss %12s %9s %8s  %s\n' "$pkg:$name" "$dur" "$execs" "$rate" "$newi" "$result" >>"$log"
	tail -n 1 "$log"
done
exit "$failed"
