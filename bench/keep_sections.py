"""Carry the sections of the old BENCHMARKS.md that bench.sh does not generate into the new one.

    python3 bench/keep_sections.py OLD NEW

bench.sh regenerates its own tables (`report.py`, then the sections it appends), but
BENCHMARKS.md also holds sections measured by other scripts (`bench/family.sh`,
`bench/chained.sh`, `bench/stack_table.sh`, callgrind per sample, ...). A `## ` section of OLD
whose heading NEW lacks is put back into NEW after the section that preceded it in OLD (or
first, when none of those is in NEW), so that a bench run replaces its own numbers and keeps
everyone else's. NEW is rewritten in place.
"""
import sys

# Sections bench.sh writes only some of the time (report.py's notes, when the run left any): an
# old one describes an old run and is never carried over.
SOMETIMES_GENERATED = ("## Notes",)


def split(text):
    """(preamble, [(heading line, section text), ...]) of a Markdown file, split at `## `."""
    pre, secs = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            secs.append([line.rstrip("\n"), [line]])
        elif secs:
            secs[-1][1].append(line)
        else:
            pre.append(line)
    return "".join(pre), [(h, "".join(body)) for h, body in secs]


def merge(old, new):
    _, old_secs = split(old)
    pre, out = split(new)
    for i, (head, body) in enumerate(old_secs):
        if head in SOMETIMES_GENERATED or any(h == head for h, _ in out):
            continue
        at = 0
        for prev, _ in reversed(old_secs[:i]):
            idx = next((k for k, (h, _) in enumerate(out) if h == prev), None)
            if idx is not None:
                at = idx + 1
                break
        if not body.endswith("\n\n"):
            body = body.rstrip("\n") + "\n\n"
        out.insert(at, (head, body))
    if out and not out[-1][1].endswith("\n"):
        out[-1] = (out[-1][0], out[-1][1] + "\n")
    return pre + "".join(body for _, body in out)


def main():
    old_path, new_path = sys.argv[1:3]
    with open(old_path) as f:
        old = f.read()
    with open(new_path) as f:
        new = f.read()
    merged = merge(old, new)
    with open(new_path, "w") as f:
        f.write(merged)
    kept = len(split(merged)[1]) - len(split(new)[1])
    print("bench: kept %d section(s) bench.sh does not generate" % kept, file=sys.stderr)


if __name__ == "__main__":
    main()
