#!/usr/bin/env bash
# Redis' own time per uncontended acquire + release, redlease against the bare loop: each
# side alone (`redlease bench-callgrind-loop`, the loops `make callgrind` counts) on a
# private redis-server, read from the server's INFO (used_cpu_user + used_cpu_sys, and
# commandstats: calls per pair and the scripts' usec). Part of `make figures`.
#
# Usage: scripts/redis-cpu.sh [PAIRS] [ROUNDS]   (defaults 20000, 3; needs a release build,
#        or REDLEASE=path/to/redlease for another build of the binary)
set -euo pipefail

cd "$(dirname "$0")/.."
pairs="${1:-20000}"
rounds="${2:-3}"
bin="${REDLEASE:-target/release/redlease}"
dir="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir"
cleanup() {
  if [ -s "$dir/redis.pid" ]; then kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 50); do
  redis-cli -p "$port" PING >/dev/null 2>&1 && break
  sleep 0.1
done

cpu() {
  redis-cli -p "$port" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'
}

echo "Redis per uncontended acquire + release ($pairs pairs per run, $(redis-server --version | cut -d' ' -f3))"
printf '%-9s %-6s %14s %16s %s\n' side round "cpu µs/pair" "script µs/pair" "commands/pair"
for round in $(seq "$rounds"); do
  for side in redlease bare; do
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
    before="$(cpu)"
    "$bin" bench-callgrind-loop --url "redis://127.0.0.1:$port" --side "$side" --ops "$pairs" >/dev/null
    after="$(cpu)"
    redis-cli -p "$port" INFO commandstats | tr -d '\r' > "$dir/stats"
    awk -F'[:,=]' -v pairs="$pairs" -v side="$side" -v round="$round" -v cpu="$(echo "($after - $before) * 1000000 / $pairs" | bc -l)" '
      /^cmdstat_/ {
        name = substr($1, 9)
        if (name == "info" || name == "config|resetstat") next
        calls[name] = $3; usec[name] = $5
      }
      END {
        list = ""
        for (n in calls) { total += calls[n]; list = list sprintf(" %s %.2f", n, calls[n] / pairs) }
        printf "%-9s %-6s %14.2f %16.2f %.2f:%s\n", side, round, cpu, usec["evalsha"] / pairs, total / pairs, list
      }' "$dir/stats"
  done
done
