#!/usr/bin/env bash
# Redis' own instructions per uncontended acquire + release, redlease against the bare loop
# (`SET NX PX` + an `EVALSHA` compare-and-delete), counted by `valgrind --tool=callgrind`
# on the server side (scripts/redis-cpu.sh measures the same loops in CPU time; `make
# callgrind` counts the client's instructions).
#
# For each side, the loop (`redlease bench-callgrind-loop`) runs twice, SHORT and LONG
# pairs, each time against a fresh private redis-server started under callgrind on a free
# 127.0.0.1 port, with no persistence, in a temporary directory of its own. The server is
# stopped with SIGTERM (by the PID this script started, nothing else), so that callgrind
# writes its output. Each run's total Ir (instructions executed, all server threads) holds
# start-up, the client's connect and SCRIPT LOAD, and shutdown; the difference of the two
# runs divided by LONG - SHORT is the cost of one pair alone. The script waits for the
# server's "Ready to accept connections" log line rather than pinging it, so that no
# extra client is counted. serverCron (10 a second) runs per second of wall clock, not per
# pair, and a server under callgrind is many times slower than without, so its
# instructions (and those of all it calls) are not counted (--toggle-collect=serverCron
# --collect-atstart=yes, in that order: the first resets the second).
#
# Then, per pair (the same difference, function by function, from callgrind_annotate):
# the inclusive instructions of the steps of a request and of a script call, the
# exclusive (own) instructions grouped by source file (Lua VM, script glue, commands,
# server core, networking and protocol, latency histograms, malloc, libc, data structures),
# and the top functions by inclusive and by exclusive instructions for each side.
#
# The profile needs a redis-server with debug info (the groups go by source file).
# Debian's is stripped: its totals hold (it keeps the dynamic symbols of Redis' -rdynamic,
# serverCron among them), but its functions have no source files and static ones show as
# addresses. So build one, e.g. Redis 7.0.15 from its source tree with
# `make BUILD_TLS=no OPTIMIZATION=-O2 CFLAGS=-g` (CFLAGS=-g gives the bundled Lua debug
# info too; the allocator is the default, the bundled jemalloc), and pass
# REDIS_SERVER=/path/to/src/redis-server.
#
# Usage: scripts/redis-callgrind.sh [SHORT] [LONG]   (defaults 2000, 6000 pairs: under a
#        minute in all on 2 vCPUs)
# Environment: SIDES (the two loops compared, default "redlease bare"; "contended
#        contended-bare" for the contended scenario, where the unit is one critical
#        section of 8 tasks on one key; the first is compared with the second),
#        LOOP_ARGS (more arguments of the loop, e.g. "--workers 8 --runtime multi-thread"),
#        REDIS_SERVER (default redis-server), REDLEASE (default
#        target/release/redlease; needs a release build), TOP (functions listed, default
#        20), OUT (directory for the callgrind files, kept; default a new temporary one)
set -euo pipefail

cd "$(dirname "$0")/.."
short="${1:-2000}"
long="${2:-6000}"
top="${TOP:-20}"
read -r -a sides <<<"${SIDES:-redlease bare}"
read -r -a loop_args <<<"${LOOP_ARGS:-}"
[ "${#sides[@]}" -eq 2 ] || { echo "SIDES must name two loops" >&2; exit 2; }
bin="${REDLEASE:-target/release/redlease}"
server="${REDIS_SERVER:-redis-server}"
if [ "$long" -le "$short" ]; then
  echo "LONG ($long) must be larger than SHORT ($short): the cost per pair is their difference" >&2
  exit 2
fi
for tool in valgrind callgrind_annotate python3; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install valgrind python3)" >&2; exit 2; }
done
[ -x "$bin" ] || { echo "$bin is missing: cargo build --release -p redlease-cli --features bench" >&2; exit 2; }
server_path="$(command -v "$server")" || { echo "no redis-server at $server" >&2; exit 2; }
if file -L "$server_path" | grep -q ', stripped'; then
  echo "warning: $server_path is stripped: the totals hold, the groups do not (see the" \
    "header of this script to build one with debug info)" >&2
fi
out="${OUT:-$(mktemp -d -t redis-callgrind.XXXXXX)}"
mkdir -p "$out"

pid=""
run_dir=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [ -n "$run_dir" ]; then rm -rf "$run_dir"; fi
}
trap cleanup EXIT

# run SIDE N: one fresh server under callgrind, N pairs of SIDE's loop, the server stopped;
# leaves $out/callgrind.SIDE.N.out.
run() {
  local side="$1" n="$2" port file start
  file="$out/callgrind.$side.$n.out"
  run_dir="$(mktemp -d -t redis-callgrind-server.XXXXXX)"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  valgrind --tool=callgrind --quiet --callgrind-out-file="$file" \
    --toggle-collect=serverCron --collect-atstart=yes \
    "$server_path" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$run_dir" --logfile "$run_dir/redis.log" </dev/null &
  pid=$!
  start=$SECONDS
  until grep -q 'Ready to accept connections' "$run_dir/redis.log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null || [ $((SECONDS - start)) -gt 300 ]; then
      echo "redis-server under callgrind did not start; its log:" >&2
      cat "$run_dir/redis.log" >&2 2>/dev/null || true
      exit 1
    fi
    sleep 0.2
  done
  "$bin" bench-callgrind-loop --url "redis://127.0.0.1:$port" --side "$side" --ops "$n" \
    ${loop_args[@]+"${loop_args[@]}"} >/dev/null
  kill -TERM "$pid"
  wait "$pid" || { echo "redis-server under callgrind exited with status $?" >&2; exit 1; }
  pid=""
  rm -rf "$run_dir"
  run_dir=""
  printf '  %-9s %6s pairs: %4ds\n' "$side" "$n" $((SECONDS - start)) >&2
}

echo "running each side twice ($short and $long pairs) under callgrind; files in $out" >&2
for side in "${sides[@]}"; do
  for n in "$short" "$long"; do
    run "$side" "$n"
  done
done

# Per-function exclusive and inclusive Ir of each file, as callgrind_annotate lists them
# (every function: --threshold=100).
for f in "$out"/callgrind.*.out; do
  callgrind_annotate --auto=no --inclusive=no --threshold=100 "$f" > "${f%.out}.excl.txt"
  callgrind_annotate --auto=no --inclusive=yes --threshold=100 "$f" > "${f%.out}.incl.txt"
done

python3 - "$out" "$short" "$long" "$top" "$("$server_path" --version)" "${sides[@]}" <<'PY'
import re, sys
from collections import defaultdict

out, short, long_, top, version = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
OURS, FLOOR = sys.argv[6], sys.argv[7]
UNIT = 'section' if OURS.startswith('contended') else 'pair'
span = long_ - short
LINE = re.compile(r'^\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(\S.*?)\s*$')

def total(path):
    with open(path) as f:
        for line in f:
            if line.startswith(('summary:', 'totals:')):
                return int(line.split()[1])
    raise SystemExit(f'no summary: line in {path}')

def functions(path):
    """{function: {source file: Ir}} from callgrind_annotate's listing. Callgrind lists a
    function once per source file its instructions come from (code inlined from headers),
    so one function may have several lines."""
    costs, started = defaultdict(lambda: defaultdict(int)), False
    with open(path) as f:
        for line in f:
            if 'file:function' in line:
                started = True
                continue
            if not started or line.startswith('--'):
                continue
            if not line.strip():
                break
            m = LINE.match(line)
            if m:
                name = m.group(2).split(' [')[0]
                src, _, fn = name.rpartition(':')
                costs[fn][src] += int(m.group(1).replace(',', ''))
    return costs

homes = {}
def per_pair(side, kind):
    a = functions(f'{out}/callgrind.{side}.{short}.{kind}.txt')
    b = functions(f'{out}/callgrind.{side}.{long_}.{kind}.txt')
    pair = {}
    for fn in set(a) | set(b):
        # Exclusive costs of a function's parts add up; inclusive ones overlap (each part's
        # holds the calls made from the others), so the largest stands for the function.
        whole = (lambda v: max(v, default=0)) if kind == 'incl' else sum
        pair[fn] = (whole(b[fn].values()) - whole(a[fn].values())) / span
        # The function's own source file: the .c (or .S) one with the most instructions.
        files = sorted(b[fn].items() or a[fn].items(), key=lambda kv: (not kv[0].endswith(('.c', '.S')), -kv[1]))
        if files and fn not in homes:
            homes[fn] = files[0][0]
    return pair

def shown(fn):
    src = homes.get(fn, '')
    base = src.rsplit('/', 1)[-1]
    return f'{base}:{fn}' if base and base != '???' else fn

LIBC_MALLOC = {'malloc', 'free', 'realloc', 'calloc', 'cfree', 'malloc_consolidate', 'unlink_chunk'}

def group(fn):
    src = homes.get(fn, '')
    base = src.rsplit('/', 1)[-1]
    if '/deps/lua/' in src:
        return 'Lua VM (deps/lua: interpreter, GC, tables, strings, libs)'
    if base in ('eval.c', 'script.c', 'script_lua.c', 'function_lua.c', 'functions.c'):
        return 'script glue (eval.c, script.c, script_lua.c)'
    if base.startswith('t_') or base in ('db.c', 'expire.c', 'acl.c', 'multi.c', 'notify.c',
                                          'pubsub.c', 'tracking.c', 'latency.c', 'slowlog.c',
                                          'blocked.c', 'lazyfree.c', 'replication.c'):
        return 'commands (t_*.c, db.c, expire.c, acl.c ...)'
    if base == 'server.c':
        return 'server core (server.c: call, processCommand, beforeSleep)'
    if base in ('networking.c', 'anet.c', 'connection.c', 'ae.c', 'ae_epoll.c'):
        return 'networking and protocol (networking.c, ae, connection)'
    if '/hdr_histogram/' in src:
        return 'latency histograms (hdr_histogram, per command)'
    if '/jemalloc/' in src or fn.startswith('je_') or base == 'zmalloc.c':
        return 'malloc: jemalloc + zmalloc (Redis)'
    if '/malloc/' in src or fn in LIBC_MALLOC or fn.startswith(('_int_', 'tcache_')):
        return "malloc: glibc (Lua's allocator)"
    if src.startswith('./') and any(s in src for s in ('strtod', 'stdio-common', 'libio', '_itoa',
                                                        'divrem', 'mul_1', 'mul.c', 'lshift', 'rshift',
                                                        'printf', 'strtol', 'mpn')):
        return 'libc number conversion (strtod, printf)'
    if src.startswith('./'):
        return 'libc other (memcpy, strcmp, strlen ...)'
    if base in ('sds.c', 'dict.c', 'object.c', 'util.c', 'siphash.c', 'listpack.c', 'quicklist.c',
                'adlist.c', 'ziplist.c', 'intset.c', 'rax.c', 'monotonic.c', 'mt19937-64.c',
                'sha1.c', 'sha256.c', 'crc64.c', 'crc16.c', 'fpconv_dtoa.c', 'endianconv.c'):
        return 'data structures and utilities (sds, dict, object, util)'
    return 'other'

def boring(fn):
    """The event loop and process start-up, which hold everything (inclusive)."""
    return fn in ('main', '(below main)', 'aeMain') or fn.startswith(
        ('aeProcessEvents', '__libc_start_main', '0x'))

sides = {}
for side in (OURS, FLOOR):
    a, b = total(f'{out}/callgrind.{side}.{short}.out'), total(f'{out}/callgrind.{side}.{long_}.out')
    sides[side] = dict(a=a, b=b, pair=(b - a) / span, incl=per_pair(side, 'incl'),
                       excl=per_pair(side, 'excl'))

print(f'Redis instructions per {"contended critical section" if UNIT == "section" else "uncontended acquire + release"} (server side, callgrind Ir, all')
print('threads, serverCron not counted)')
print(f'  server: {version}')
print(f'  {"side":<14} {"Ir(" + str(short) + " " + UNIT + "s)":>20} {"Ir(" + str(long_) + " " + UNIT + "s)":>20} {"Ir per " + UNIT:>15}')
for side, s in sides.items():
    print(f'  {side:<14} {s["a"]:>20,} {s["b"]:>20,} {s["pair"]:>15,.0f}')
r, b = sides[OURS]['pair'], sides[FLOOR]['pair']
print(f'  {OURS} - {FLOOR}: {r - b:+,.0f} per {UNIT} ({r / b:.2f}x the instructions)')

# The steps of a request, inclusive (a step holds those indented under it).
STEPS = [
    ('processMultibulkBuffer', 'parse the request (RESP to argv objects)'),
    ('commandProcessed', 'free the argv after the command'),
    ('processCommand', 'command lookup, checks, and the command'),
    ('getCommandFlags', '  EVALSHA: find the script by SHA1 for its flags'),
    ('setCommand', '  SET (bare: top level; redlease: the 3 in scripts)'),
    ('evalGenericCommand', '  EVALSHA'),
    ('luaCreateArray', '    KEYS and ARGV to Lua tables'),
    ('lua_pcall', '    the script body'),
    ('luaRedisGenericCommand', '      redis.call: all of it'),
    ("call'2", '        the commands themselves (call() inside a script)'),
    ('luaArgsToRedisArgv', '        Lua arguments to argv objects'),
    ('parseReply', '        reply to Lua values'),
    ('luaGetFromRegistry', '        run context lookup'),
    ('luaB_tonumber', '      tonumber()'),
    ('str_format', '      string.format()'),
    ('luaF_newLclosure', '      closures made (local functions defined)'),
    ('lua_gc', '    Lua GC step (every 50th script call)'),
    ('luaReplyToRedisReply', "    the script's return value to RESP"),
    ('publishCommand', '  PUBLISH (top level or in scripts)'),
    ('pubsubCommand', '  PUBSUB (NUMSUB)'),
    ('getCommand', '  GET'),
    ('readQueryFromClient', 'read from a socket, parse, run (holds the above)'),
    ('beforeSleep', 'before sleep: replies written, fast expire cycle'),
    ('epoll_wait', 'epoll_wait (the event loop waiting)'),
]
print(f'\nsteps, inclusive Ir per {UNIT} (calls inside scripts: call\'2)')
print(f'  {"step":<58} {OURS[:10]:>10} {FLOOR[:10]:>10} {"diff":>10}')
for fn, label in STEPS:
    x, y = sides[OURS]['incl'].get(fn, 0.0), sides[FLOOR]['incl'].get(fn, 0.0)
    print(f'  {label:<58} {x:>10,.0f} {y:>10,.0f} {x - y:>+10,.0f}')

print(f'\nexclusive (own) Ir per {UNIT} by group')
print(f'  {"group":<58} {OURS[:10]:>10} {FLOOR[:10]:>10} {"diff":>10}')
groups = defaultdict(lambda: [0.0, 0.0])
for i, side in enumerate((OURS, FLOOR)):
    for fn, v in sides[side]['excl'].items():
        groups[group(fn)][i] += v
for g, (x, y) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
    print(f'  {g:<58} {x:>10,.0f} {y:>10,.0f} {x - y:>+10,.0f}')
print(f'  {"sum":<58} {sum(v[0] for v in groups.values()):>10,.0f} '
      f'{sum(v[1] for v in groups.values()):>10,.0f}')

for side in (OURS, FLOOR):
    other = FLOOR if side == OURS else OURS
    for kind, label in (('incl', 'inclusive'), ('excl', 'exclusive (own)')):
        rows = sorted(((fn, v) for fn, v in sides[side][kind].items() if not boring(fn)),
                      key=lambda kv: -kv[1])[:top]
        print(f'\n{side}: top {top} functions by {label} Ir per {UNIT} ({other} alongside)')
        for fn, v in rows:
            print(f'  {v:>10,.0f} {sides[other][kind].get(fn, 0.0):>10,.0f}  {shown(fn)}')
PY
echo "callgrind files (callgrind_annotate, kcachegrind): $out"
