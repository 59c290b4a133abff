#!/bin/bash
# Durable ingest driven by wrk, a client much lighter than hookbench's own:
# the bare Fiber handler (hookbench -serve-bare), then hookgate, each under
#   wrk -t2 -c64 -d$DURATION --latency
# with the same pre-signed 1 KiB requests. Prints requests/s, p50, p99 and
# the server's CPU time and disk writes per request (from /proc, during the
# load only).
#
#   cmd/hookbench/wrk.sh [DURATION]     # default 30s; needs wrk (apt-get install wrk)
#
# HOOKGATE=/path/to/binary measures that build instead of this tree's;
# KEEP_LOG=file keeps the gateway's log; NO_BARE=1 skips the bare handler.
set -euo pipefail
duration=${1:-30s}
secs=${duration%s}
case $secs in
'' | *[!0-9]*)
	echo "usage: $0 [SECONDSs] (e.g. 30s)" >&2
	exit 2
	;;
esac
if [ "$secs" -gt 140 ]; then
	# The requests are signed in advance and used by the bare run, then
	# by the gateway's: standard-webhooks refuses timestamps more than 5
	# minutes old, so both runs and their setup must fit in that.
	echo "$0: at most 140s" >&2
	exit 2
fi
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
if [ -n "${HOOKGATE:-}" ]; then
	cp "$HOOKGATE" "$work/hookgate"
else
	go build -o "$work/hookgate" .
fi
go build -o "$work/hookbench" ./cmd/hookbench
# Enough unique events for 20k req/s; past that wrk would send retries.
"$work/hookbench" -wrk-requests $((secs * 20000)) -wrk-files "$work/req"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
written() { awk '/^write_bytes/ {print $2}' "/proc/$1/io"; }
waitfor() { until [ -e "$1" ]; do sleep 0.05; done; }

measure() { # name pid url
	local name=$1 pid=$2 url=$3 c0 c1 w0 w1
	rm -f "$work/started" "$work/done"
	WRK_REQUESTS="$work/req" WRK_MARKER="$work/" \
		wrk -t2 -c64 -d"$duration" --latency -s cmd/hookbench/wrk.lua "$url" >"$work/$name.out" &
	local w=$!
	waitfor "$work/started"
	c0=$(ticks "$pid")
	w0=$(written "$pid")
	waitfor "$work/done"
	c1=$(ticks "$pid")
	w1=$(written "$pid")
	wait $w
	local n
	n=$(awk '/requests in/ {print $1}' "$work/$name.out")
	printf '%-8s %9s req/s  p50 %8s  p99 %8s  non-2xx %s  CPU %d µs/request  disk %d bytes/request\n' "$name" \
		"$(awk '/Requests\/sec/ {printf "%d", $2}' "$work/$name.out")" \
		"$(awk '$1 == "50%" {print $2}' "$work/$name.out")" \
		"$(awk '$1 == "99%" {print $2}' "$work/$name.out")" \
		"$(awk '/Non-2xx/ {print $NF}' "$work/$name.out" | grep . || echo 0)" \
		$(((c1 - c0) * 10000 / n)) $(((w1 - w0) / n))
	if [ "$n" -gt $((secs * 20000)) ] && [ "$name" != bare ]; then
		echo "  (more requests than events: the rest were retries)"
	fi
}

if [ -z "${NO_BARE:-}" ]; then
	"$work/hookbench" -serve-bare 127.0.0.1:18181 &
	bare=$!
	until curl -sf http://127.0.0.1:18181/healthz >/dev/null; do sleep 0.1; done
	measure bare $bare http://127.0.0.1:18181/ingest/bench
	kill $bare
fi

cat >"$work/config.yaml" <<CFG
server: {listen: "127.0.0.1:18182", max_body: 1MiB}
admin: {listen: "127.0.0.1:18183", tokens: [{token: wrk-admin-token}]}
storage: {path: "$work/data"}
sources:
  - id: bench
    tenant: bench
    verify: {scheme: standard-webhooks, secrets: ["whsec_aG9va2JlbmNoLXNlY3JldC1mb3ItbG9hZC10ZXN0cw=="]}
CFG
"$work/hookgate" serve -config "$work/config.yaml" 2>"$work/gateway.log" &
gw=$!
until curl -sf http://127.0.0.1:18183/readyz >/dev/null; do sleep 0.1; done
measure hookgate $gw http://127.0.0.1:18182/ingest/bench
kill $gw
wait $gw || true
if [ -n "${KEEP_LOG:-}" ]; then cp "$work/gateway.log" "$KEEP_LOG"; fi
