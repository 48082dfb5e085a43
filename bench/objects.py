"""python workload: build 1.5 million small objects (dicts, tuples, strings), then drop them.

Each of N records is a dict holding a string and a tuple (three objects per record, N = 500,000
by default); the records live in one list that is dropped at the end of each round. Run with
the interpreter under test: `python3 bench/objects.py [records] [rounds]`.
"""

import sys


def build(n):
    records = []
    for i in range(n):
        name = "item-%07d" % i
        records.append({"id": i, "name": name, "pos": (i % 1000, i // 1000)})
    return records


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    checksum = 0
    for _ in range(rounds):
        records = build(n)
        checksum += sum(len(r["name"]) + r["pos"][0] for r in records)
        del records
    print("python: %d records x %d rounds, checksum %d" % (n, rounds, checksum))


if __name__ == "__main__":
    main()
