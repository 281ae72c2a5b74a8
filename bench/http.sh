#!/usr/bin/env bash
# HTTP throughput and latency of a standalone sidecar, measured with wrk on loopback.
# Bounded: each point runs for $DURATION seconds (default 5); 3 repetitions, median shown.
# Usage: bench/http.sh            (prints a Markdown table)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
REPS=${REPS:-3}
PORT=${PORT:-7171}

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release -q -p kubeflake-sidecar
state=$(mktemp -d)
./target/release/kubeflake-sidecar --listen "127.0.0.1:$PORT" --state-dir "$state" 2>"$state/log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$state"' EXIT
for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.05; done

# Prints "ok_requests/s p50_ms p99_ms refused" for one wrk run. Refusals (503, when demand
# outruns the layout's 2^sequenceBits IDs per tick beyond the drift limit) are not counted
# as served.
run() { # path connections
  local threads=$(( $2 < 2 ? 1 : 2 ))
  wrk -t"$threads" -c"$2" -d"${DURATION}s" --latency "http://127.0.0.1:$PORT$1" | awk '
    function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
    /^ +50%/ { p50 = ms($2) } /^ +99%/ { p99 = ms($2) }
    / requests in / { total = $1; secs = $4 + 0 } /Non-2xx/ { bad = $5 }
    END { printf "%.1f %.3f %.3f %d\n", (total - bad) / secs, p50, p99, bad }'
}

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

echo "| request | connections | served requests/s (median of $REPS) | IDs/s | p50 ms | p99 ms | refused (503) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for spec in "/id 1 1" "/id 16 1" "/id 64 1" "/ids?count=1000 1 1000" "/ids?count=1000 16 1000"; do
  set -- $spec
  results=$(for _ in $(seq "$REPS"); do run "$1" "$2"; done)
  rps=$(echo "$results" | awk '{print $1}' | median)
  p50=$(echo "$results" | awk '{print $2}' | median)
  p99=$(echo "$results" | awk '{print $3}' | median)
  refused=$(echo "$results" | awk '{print $4}' | median)
  printf '| GET %s | %s | %.0f | %.0f | %s | %s | %s |\n' "$1" "$2" "$rps" "$(echo "$rps * $3" | bc -l)" "$p50" "$p99" "$refused"
done
