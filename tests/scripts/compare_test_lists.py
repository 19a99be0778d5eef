#!/usr/bin/env python3
"""Compares two `ctest --show-only=json-v1` test lists (before and after a change to
the registrations): names, commands and properties, test by test; order and the
backtrace ignored, each list's build directory replaced by <BUILD>.

  compare_test_lists.py before.json BUILD_DIR_BEFORE after.json BUILD_DIR_AFTER
"""
import json, sys

def load(path, build):
    d = json.load(open(path))
    out = {}
    for t in d["tests"]:
        s = json.dumps({"command": t.get("command"),
                        "properties": {p["name"]: p["value"] for p in t.get("properties", [])}},
                       sort_keys=True)
        out[t["name"]] = json.loads(s.replace(build, "<BUILD>"))
    return out

a = load(sys.argv[1], sys.argv[2])
b = load(sys.argv[3], sys.argv[4])
diff = 0
for n in sorted(set(a) | set(b)):
    if n not in a: print("only after: ", n); diff += 1; continue
    if n not in b: print("only before:", n); diff += 1; continue
    if a[n] != b[n]:
        diff += 1
        print("differs:", n)
        if a[n]["command"] != b[n]["command"]:
            print("   command before:", a[n]["command"]); print("   command after: ", b[n]["command"])
        pa, pb = a[n]["properties"], b[n]["properties"]
        for k in sorted(set(pa) | set(pb)):
            if pa.get(k) != pb.get(k):
                print("   %s before: %r" % (k, pa.get(k))); print("   %s after:  %r" % (k, pb.get(k)))
print("%d tests before, %d after, %d differ" % (len(a), len(b), diff))
sys.exit(1 if diff else 0)
