#!/usr/bin/env python3
"""Per-unit instructions of each function, from two callgrind runs of the same loop.

Usage: scripts/callgrind-diff.py SHORT.out LONG.out UNITS [--inclusive] [--top N] [--grep RE]

UNITS is the difference of the two runs' units (sections, pairs): each function's Ir in
the longer run minus the shorter, divided by UNITS, is its cost per unit alone (start-up
and connecting cancel out). --inclusive lists inclusive costs (a function with all it
calls), else exclusive (its own). --grep keeps the functions whose name matches RE.
Needs callgrind_annotate (valgrind) on the PATH.
"""
import argparse
import re
import subprocess
from collections import defaultdict

LINE = re.compile(r'^\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(\S.*?)\s*$')


def costs(path, inclusive):
    text = subprocess.run(
        ['callgrind_annotate', '--auto=no', '--threshold=100',
         f'--inclusive={"yes" if inclusive else "no"}', path],
        check=True, capture_output=True, text=True).stdout
    out, started = defaultdict(list), False
    for line in text.splitlines():
        if 'file:function' in line:
            started = True
            continue
        if not started or line.startswith('--') or not line.strip():
            continue
        m = LINE.match(line)
        if m:
            name = m.group(2).split(' [')[0]
            fn = name.split(':', 1)[1] if name.startswith(('???:', './', '/')) else name
            out[fn].append(int(m.group(1).replace(',', '')))
    # Inclusive parts of one function overlap (the largest stands for it); own ones add up.
    return {fn: (max(v) if inclusive else sum(v)) for fn, v in out.items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument('short')
    p.add_argument('long')
    p.add_argument('units', type=int)
    p.add_argument('--inclusive', action='store_true')
    p.add_argument('--top', type=int, default=40)
    p.add_argument('--grep')
    a = p.parse_args()
    s, l = costs(a.short, a.inclusive), costs(a.long, a.inclusive)
    rows = [(fn, (l.get(fn, 0) - s.get(fn, 0)) / a.units) for fn in set(s) | set(l)]
    if a.grep:
        rows = [r for r in rows if re.search(a.grep, r[0])]
    for fn, v in sorted(rows, key=lambda r: -r[1])[:a.top]:
        print(f'{v:>10,.0f}  {fn[:150]}')


if __name__ == '__main__':
    main()
