# Imports C extension modules from 8 threads at once (dlopen and dynamic TLS under the shim).
# Prints, per thread, which modules imported and a digest of a little work; the same in every run.
import threading
MODS = ["json", "decimal", "ssl", "sqlite3", "ctypes", "hashlib", "zlib", "csv", "bz2", "lzma",
        "uuid", "xml.etree.ElementTree", "pyexpat", "array", "math", "select", "socket",
        "unicodedata", "datetime", "binascii", "_struct", "mmap", "fcntl", "resource", "termios",
        "grp", "curses", "dbm", "_queue", "_multiprocessing", "_posixshmem"]
N = 8
barrier = threading.Barrier(N)
results = [None] * N
def work(i):
    barrier.wait()
    got = {}
    for k in range(len(MODS)):
        name = MODS[(k + i * 3) % len(MODS)]
        try:
            m = __import__(name)
            got[name] = "ok"
        except ImportError:
            got[name] = "missing"
    import json, decimal, hashlib, zlib
    data = json.dumps({"i": i, "d": str(decimal.Decimal(i) / 7)})
    got["work"] = hashlib.sha256(zlib.compress(data.encode())).hexdigest()[:16]
    results[i] = got
threads = [threading.Thread(target=work, args=(i,)) for i in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i, r in enumerate(results):
    print(i, sorted(r.items()))
