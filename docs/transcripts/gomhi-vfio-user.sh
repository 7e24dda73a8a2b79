#!/bin/sh
# gomhi's side of the transcript comparison (docs/FIDELITY.md §10): the
# served mock modem records gomhi's host ('mhictl up --vfio-user', with a
# TUN) pinging the gateway ten times, then stopped by SIGTERM.
#   unshare -n sh docs/transcripts/gomhi-vfio-user.sh MODEL OUT.jsonl [MHICTL] [PING]
# (root, in a network namespace of its own: it configures a TUN.)
# TestTranscriptAgainstLinux (cmd/mhictl) runs the same scenario, and compares.
set -e
model=$1 out=$2 mhictl=${3:-mhictl} ping=${4:-ping}
dir=$(mktemp -d)
ip link set lo up
"$mhictl" modem serve --socket "$dir/m.sock" --model "$model" --transcript "$out" 2>"$dir/serve.log" &
srv=$!
i=0; while [ ! -S "$dir/m.sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
"$mhictl" up --vfio-user "$dir/m.sock" --tun mhi0 --tun-addr 192.0.2.1/24 --run-dir "$dir/run" 2>"$dir/up.log" &
up=$!
i=0; while ! grep -q ready "$dir/up.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
$ping -c 10 -W 5 192.0.2.2
kill -TERM $up; wait $up
kill -TERM $srv; wait $srv
rm -rf "$dir"
