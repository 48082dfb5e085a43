#!/usr/bin/env python3
"""Runs a command and reports its wall time and peak memory, for machines without /usr/bin/time.

    measure.py [-o FILE] command [args...]

Writes one line `<wall seconds> <max RSS kB>` to FILE (default: stderr) and exits with the
command's status. The RSS is getrusage(RUSAGE_CHILDREN).ru_maxrss: the largest resident set of
the command or any of its waited-for descendants (for `gcc`, that is `cc1`).
"""

import resource
import subprocess
import sys
import time


def main():
    args = sys.argv[1:]
    out = None
    if len(args) >= 2 and args[0] == "-o":
        out, args = args[1], args[2:]
    if not args:
        sys.stderr.write(__doc__)
        return 2
    start = time.perf_counter()
    status = subprocess.call(args)
    wall = time.perf_counter() - start
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    line = "%.6f %d\n" % (wall, rss_kb)
    if out is None:
        sys.stderr.write(line)
    else:
        with open(out, "w") as f:
            f.write(line)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
