"""The README's Python example: an index of a million strings, built by two functions."""

def make_value(i):
    return "value-%d-" % i + "x" * 100

def build_index(n):
    index = {}
    for i in range(n):
        index[i] = make_value(i)
    return index

index = build_index(1_000_000)
print(f"{len(index)} entries")
