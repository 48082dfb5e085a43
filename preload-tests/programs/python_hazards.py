# Every state a CPython thread's frame chain can be in while it allocates, run under the shim
# with a small sample interval (see preload-tests/tests/python_frames.rs): threads whose C
# extensions allocate with the GIL released, generators and coroutines suspended and resumed,
# deep recursion, exceptions unwinding through frames, sys.settrace and sys.setprofile on,
# finalizers and weak-reference callbacks running while frames are torn down, and code objects
# freed and their memory reused. Prints a checksum that must be the same with and without the
# shim.
import asyncio
import bz2
import gc
import hashlib
import os
import sys
import threading
import weakref
import zlib

total = 0


def gil_free_worker(seed):
    # zlib, bz2 and hashlib release the GIL around their C loops, which allocate.
    data = bytes((seed * 7 + i) % 251 for i in range(200_000))
    acc = 0
    for _ in range(20):
        acc += len(zlib.compress(data, 6)) + len(bz2.compress(data[:50_000]))
        acc += hashlib.sha256(data).digest()[0]
    return acc


def gen_worker(n):
    for i in range(n):
        yield [i] * 300


def use_generators():
    gens = [gen_worker(400) for _ in range(8)]
    acc = 0
    while gens:
        for g in list(gens):
            try:
                acc += len(next(g))
            except StopIteration:
                gens.remove(g)
    return acc


async def coro_worker(i):
    acc = 0
    for j in range(200):
        acc += len(bytearray(2_000 + j))
        await asyncio.sleep(0)
    return acc + i


async def coro_main():
    return sum(await asyncio.gather(*(coro_worker(i) for i in range(20))))


def recurse(depth, leaf=None):
    if depth == 0:
        return leaf() if leaf else len(bytearray(50_000))
    return recurse(depth - 1, leaf) + len([depth] * 10)


def deep_leaf():
    # Allocates under hundreds of Python frames of one evaluation loop's activation.
    return len(bytearray(60_000))


def raiser(depth):
    if depth == 0:
        raise ValueError("x" * 5_000)
    return raiser(depth - 1)


def unwind_many():
    acc = 0
    for _ in range(300):
        try:
            raiser(40)
        except ValueError as e:
            acc += len(e.args[0])
    return acc


class Finalized:
    def __init__(self, n):
        self.payload = bytearray(n)

    def __del__(self):
        # Runs while the frame that held the last reference is being cleared.
        global total
        total += len(bytearray(3_000)) and 1


def finalizers():
    for i in range(2_000):
        obj = Finalized(1_000 + i)
        del obj
    cycles = []
    for i in range(500):
        a = Finalized(2_000)
        a.self = a
        cycles.append(weakref.ref(a, lambda r: bytearray(4_000)))
        del a
    gc.collect()
    return len(cycles)


def reused_code_objects():
    # Functions compiled and dropped: their code objects' memory is reused by the next ones.
    # made_<i> allocates 100_000 + 8192 * i bytes, so a stack named made_<i> whose figure is
    # another's size would be a name lent by a freed code object to its successor.
    acc = 0
    addresses = set()
    for i in range(120):
        ns = {}
        exec(f"def made_{i}(n):\n    return bytearray(n)\n", ns)
        f = ns[f"made_{i}"]
        addresses.add(id(f.__code__))
        acc += len(f(100_000 + 8192 * i))
        del ns, f
        gc.collect()  # The function and its namespace form a cycle: free them now.
    note = os.environ.get("PY_HAZARDS_NOTE")
    if note:
        with open(note, "w") as out:
            out.write(f"{120 - len(addresses)}\n")
    return acc


def traced(frame, event, arg):
    # The tracer itself allocates on every event (past pymalloc's 512 bytes: a malloc).
    _ = bytearray(700 + len(event))
    return traced


def with_tracing():
    sys.settrace(traced)
    sys.setprofile(lambda f, e, a: [e] * 2)
    try:
        return recurse(50) + use_generators()
    finally:
        sys.settrace(None)
        sys.setprofile(None)


def main():
    global total
    results = [0] * 4
    threads = []
    for k in range(4):
        def run(k=k):
            results[k] = gil_free_worker(k)
        t = threading.Thread(target=run, name=f"gil-free-{k}")
        t.start()
        threads.append(t)
    total += use_generators()
    total += asyncio.run(coro_main())
    total += recurse(min(800, sys.getrecursionlimit() - 100), deep_leaf)
    total += unwind_many()
    total += finalizers()
    total += reused_code_objects()
    total += with_tracing()
    for t in threads:
        t.join()
    total += sum(results) % 1_000_003
    print("checksum", total)


main()
