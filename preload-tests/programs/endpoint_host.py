# A long-running Python host for the endpoint test (preload-tests/tests/endpoint.rs): keeps
# bytearrays from keep_blocks, then churns until the file sys.argv[1] exists or sys.argv[2]
# seconds passed (time.sleep: clock_nanosleep, a safe point). Prints the same line whatever
# the run's length.
import os
import sys
import time


def keep_blocks():
    return [bytearray(40_000) for _ in range(500)]


def churn():
    return sum(len(bytearray(20_011)) for _ in range(20))


def main():
    stop, max_secs = sys.argv[1], float(sys.argv[2])
    kept = keep_blocks()
    start = time.monotonic()
    while True:
        churn()
        time.sleep(0.005)
        if os.path.exists(stop) or time.monotonic() - start > max_secs:
            break
    print("kept", len(kept), "blocks of", len(kept[0]))


main()
