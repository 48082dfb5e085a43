"""Six functions that each build a known amount of memory of one kind and keep it until the
process exits, for `tests/python_memray.rs` (Ying's per-function figures against memray's and
against the program's own count).

Each function runs alone (the thread is joined, the asyncio task awaited, before the next
one starts), so the pymalloc arenas mapped while it runs are its own. Every object it makes
goes into `KEEP`, which is given one reference nobody will drop: `KEEP` outlives the
interpreter's finalization, so the exit report (written at `exit`, after `Py_FinalizeEx`)
still holds everything, as memray's record of what was never freed does.

For each function the program writes one line `truth <function> <requested> <chunks>`: the
bytes it keeps as the allocators see them, as requested (what memray counts) and as glibc's
chunks (what Ying counts: usable size and 8-byte header). Objects of more than 512 bytes come
from `malloc`: their variable part (`__sizeof__` less the type's basic size; all of a string),
in a chunk rounded to 16 bytes, or, from 128 KiB up (the threshold fixed with `mallopt`, which
glibc would otherwise move), in its own mapping rounded to the page. Smaller objects come from
pymalloc's 1 MiB arenas, counted as the arenas mapped while the function's own body ran
(`sys._debugmallocstats`, `# arenas allocated current`, read by the function itself, so that
what its caller does around it, a thread's start or an event loop's, is not counted).
"""

import asyncio
import ctypes
import os
import sys
import tempfile
import threading

MIB = 1 << 20
KEEP = []
# `KEEP` is never freed, not even by the interpreter's finalization.
ctypes.pythonapi.Py_IncRef.argtypes = [ctypes.py_object]
ctypes.pythonapi.Py_IncRef(KEEP)

# glibc's mmap threshold, fixed (M_MMAP_THRESHOLD) so that which blocks are mapped is known.
MMAP_THRESHOLD = 128 << 10
PAGE = os.sysconf("SC_PAGESIZE")
if ctypes.CDLL(None).mallopt(-3, MMAP_THRESHOLD) != 1:
    raise RuntimeError("mallopt(M_MMAP_THRESHOLD) failed")

# The dicts' keys, made before any function runs (shared by all the dicts), kept like the rest.
KEYS = ["k%d" % i for i in range(1 << 16)]
KEEP.append(KEYS)


def requested(obj):
    """The bytes of `obj` that come from malloc (see the module docs)."""
    if isinstance(obj, str):
        return obj.__sizeof__()
    return obj.__sizeof__() - type(obj).__basicsize__


def chunk(size):
    """The bytes glibc's chunk of a `size`-byte request counts (usable size + 8)."""
    normal = max(32, (size + 8 + 15) // 16 * 16)
    if size < MMAP_THRESHOLD:
        return normal
    return (normal + 8 + PAGE - 1) // PAGE * PAGE - 8


# The file `sys._debugmallocstats` writes to, opened once (so that counting makes no arena).
STATS = tempfile.TemporaryFile()


def arenas():
    """pymalloc's arenas now mapped (`sys._debugmallocstats` writes to the C stderr)."""
    STATS.seek(0)
    STATS.truncate()
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(STATS.fileno(), 2)
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    STATS.seek(0)
    for line in STATS.read().decode().splitlines():
        if line.startswith("# arenas allocated current"):
            return int(line.split("=")[1])
    raise RuntimeError("no arena count in sys._debugmallocstats()")


def arenas_at_start():
    """The arena count a function starts from: read twice, so that the temporaries of the
    reading itself are made once before the count that is kept."""
    arenas()
    return arenas()


def measured(name, fn, *args):
    """Runs `fn`, which returns its big objects and the arenas it added, and writes the bytes
    it kept."""
    big, new_arenas = fn(*args)
    sizes = [requested(o) for o in big]
    print(
        "truth",
        name,
        sum(sizes) + new_arenas * MIB,
        sum(chunk(s) for s in sizes) + new_arenas * MIB,
        flush=True,
    )


# 96 MiB: 96 bytearrays of 1 MiB, malloc'd (depth 4: main, run, fill, Store.bytearrays).
class Store:
    def bytearrays(self, n):
        start = arenas_at_start()
        kept = []
        for _ in range(n):
            kept.append(bytearray(MIB))
        KEEP.extend(kept)
        return kept, arenas() - start


def fill():
    return Store().bytearrays(96)


# 64 MiB: 64 strings of 1 MiB characters, malloc'd, built in a thread.
def make_strings(out):
    start = arenas_at_start()
    kept = []
    for i in range(64):
        kept.append(chr(97 + i % 26) * (MIB - 64))
    KEEP.extend(kept)
    out.append((kept, arenas() - start))


def in_thread():
    out = []
    t = threading.Thread(target=make_strings, args=(out,))
    t.start()
    t.join()
    return out[0]


# 40 MiB: 40 lists of 131072 references (their arrays malloc'd), at depth 5 by recursion.
def nested_lists(depth):
    if depth > 0:
        return nested_lists(depth - 1)
    start = arenas_at_start()
    kept = []
    for _ in range(40):
        kept.append([None] * (MIB // 8))
    KEEP.extend(kept)
    return kept, arenas() - start


# About 24 MiB: dicts of 65536 string keys (each table malloc'd), in an asyncio task.
async def build_dicts():
    start = arenas_at_start()
    kept = []
    for _ in range(13):
        kept.append(dict.fromkeys(KEYS))
        await asyncio.sleep(0)
    KEEP.extend(kept)
    return kept, arenas() - start


async def dicts_task():
    return await asyncio.create_task(build_dicts())


# About 14 MiB: floats, 32-byte objects in pymalloc's arenas, plus the list holding them.
def make_floats():
    start = arenas_at_start()
    kept = []
    for i in range(400_000):
        kept.append(float(i) + 0.5)
    KEEP.append(kept)
    return [kept], arenas() - start


# About 8 MiB: bytes objects of 100 bytes, 144-byte objects in pymalloc's arenas.
def small_bytes():
    start = arenas_at_start()
    kept = []
    for i in range(52_000):
        kept.append(i.to_bytes(4, "little") * 25)
    KEEP.append(kept)
    return [kept], arenas() - start


def run():
    measured("Store.bytearrays", fill)
    measured("make_strings", in_thread)
    measured("nested_lists", nested_lists, 3)
    measured("build_dicts", asyncio.run, dicts_task())
    measured("make_floats", make_floats)
    measured("small_bytes", small_bytes)


if __name__ == "__main__":
    run()
    print("kept", len(KEEP), flush=True)
