#!/usr/bin/env python3
"""docs_plan_outputs: every zs-plan command docs/planning.md shows, run as written
(from the repository's root, the built zs-plan standing in for the installed
one), prints every line of the output block that follows it on the page. The
block may leave lines out: "...", "(10 of the 25 rows)" and "... (N such lines
on stderr)" stand for what it skips. The figures went stale once, unnoticed,
when the gradient norm's all-reduce became 8 bytes.

Usage: check_doc_outputs.py REPO ZS_PLAN"""
import os
import re
import shlex
import subprocess
import sys


def blocks(text):
    """(command, [expected lines]) for each indented zs-plan command followed by a fenced block."""
    lines = text.split("\n")
    i, out = 0, []
    while i < len(lines):
        if not lines[i].startswith("    zs-plan "):
            i += 1
            continue
        cmd = []
        while i < len(lines) and lines[i].startswith("    "):
            part = lines[i][4:].rstrip()
            cmd.append(part[:-1].rstrip() if part.endswith("\\") else part)
            i += 1
            if not part.endswith("\\"):
                break
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i >= len(lines) or not lines[i].startswith("```"):
            out.append((" ".join(cmd), None))
            continue
        i += 1
        want = []
        while i < len(lines) and not lines[i].startswith("```"):
            want.append(lines[i].rstrip())
            i += 1
        out.append((" ".join(cmd), want))
    return out


def skipped(line):
    return (not line.strip() or line.strip() == "..." or re.fullmatch(r"\(\d+ of the \d+ rows\)", line.strip())
            or re.fullmatch(r"\.\.\. \(\d+ such lines on stderr\)", line.strip()))


def main():
    repo, zs_plan = sys.argv[1], sys.argv[2]
    page = repo + "/docs/planning.md"
    found = blocks(open(page, encoding="utf-8").read())
    bad = 0
    if len(found) < 2:
        print(f"{page}: {len(found)} zs-plan commands with an output block; expected at least 2 (the page changed?)")
        return 1
    for cmd, want in found:
        if want is None:
            print(f"{page}: no output block after: {cmd}")
            bad += 1
            continue
        argv = [zs_plan] + shlex.split(cmd)[1:]
        # as the page's reader runs it: none of the caller's ZS_* settings (zs-plan
        # reads ZS_MPI_RING_MIN_BYTES, say)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZS_")}
        r = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=25, env=env)
        got = set(l.rstrip() for l in (r.stdout + "\n" + r.stderr).split("\n"))
        missing = [w for w in want if not skipped(w) and w not in got]
        checked = sum(1 for w in want if not skipped(w))
        print(f"{cmd[:80]}...: exit {r.returncode}, {checked - len(missing)} of {checked} lines as the page shows")
        for w in missing:
            print(f"  the page shows a line zs-plan does not print:\n    {w}")
        if r.returncode != 0 or missing:
            bad += 1
            if missing:
                print("  zs-plan printed:\n" + "\n".join("    " + l for l in r.stdout.rstrip().split("\n")))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
