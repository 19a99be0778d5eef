#!/usr/bin/env python3
"""libzeroshard.so loaded at run time, the way a plugin, a language binding or a
framework loads it: ctypes.CDLL (dlopen) in a plain python3, with neither
GLIBC_TUNABLES nor LD_PRELOAD (CTest unsets both). Then a few calls through it:
a status string, a cpu device, pinned host memory from the arena and a 1 MiB
buffer from the big-buffer arena, both counted by the accountant and freed.

A jemalloc built with initial-exec TLS (Debian's libjemalloc.so.2) cannot be
dlopened: its TLS block must come from the static TLS surplus glibc keeps for
late loads, which is too small for it ("cannot allocate memory in static TLS
block"). zeroshard links its own jemalloc, built with general-dynamic TLS and
prefixed symbols; this test also checks that none of jemalloc's API leaks out
of the library (it would change the allocator of the host program).

usage: test_dlopen.py LIBZEROSHARD_SO [--skip REASON]
Exits 77 (skipped) with --skip: CTest passes it in sanitizer builds.
"""
import ctypes
import os
import sys

if "--skip" in sys.argv:
    print("skipped: " + sys.argv[sys.argv.index("--skip") + 1])
    sys.exit(77)
path = sys.argv[1]
for var in ("GLIBC_TUNABLES", "LD_PRELOAD"):
    assert var not in os.environ, f"{var} is set: the test must load the library without help"

try:
    lib = ctypes.CDLL(path)
except OSError as e:
    print(f"FAILED: ctypes.CDLL({path!r}): {e}")
    if "static TLS" in str(e):
        print("the library (or one it needs) uses initial-exec TLS: a jemalloc built without "
              "--disable-initial-exec-tls (configure said which jemalloc it used: ZS_JEMALLOC)")
    sys.exit(1)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what)


# jemalloc stays private: neither the plain nor a prefixed API is reachable
# through the library's handle (dlsym searches it and what it loaded).
for sym in ("mallocx", "sdallocx", "mallctl", "je_mallocx", "zs_je_mallocx"):
    check(not hasattr(lib, sym), f"{sym} is visible through libzeroshard.so: jemalloc is not private")

lib.zs_status_string.restype = ctypes.c_char_p
lib.zs_status_string.argtypes = [ctypes.c_int]
lib.zs_status_name.restype = ctypes.c_char_p
lib.zs_status_name.argtypes = [ctypes.c_int]
lib.zs_last_error.restype = ctypes.c_char_p
check(lib.zs_status_string(0) == b"success", f"zs_status_string(ZS_OK) = {lib.zs_status_string(0)!r}")
check(lib.zs_status_name(4) == b"ZS_ERR_NOMEM", f"zs_status_name(4) = {lib.zs_status_name(4)!r}")

DOMAINS, CATS = 3, 6  # zeroshard/memory.h: device, host, nvme
DEVICE, HOST = 0, 1
PARAMS, OPTIMIZER = 0, 2
PINNED, STRICT = 1, 2  # ZS_HOST_PINNED, ZS_HOST_STRICT


class Stats(ctypes.Structure):
    _fields_ = [("current", (ctypes.c_uint64 * CATS) * DOMAINS),
                ("peak", (ctypes.c_uint64 * CATS) * DOMAINS),
                ("current_total", ctypes.c_uint64 * DOMAINS),
                ("peak_total", ctypes.c_uint64 * DOMAINS),
                ("pageable_copies", ctypes.c_uint64),
                # the rest of zs_memory_stats_t: the library writes the whole struct
                ("cache_bytes", ctypes.c_uint64), ("cache_peak", ctypes.c_uint64),
                ("backend_allocs", ctypes.c_uint64), ("backend_frees", ctypes.c_uint64),
                ("device_syncs", ctypes.c_uint64), ("host_waits", ctypes.c_uint64),
                ("host_funcs", ctypes.c_uint64)]


def stats(dev):
    s = Stats()
    lib.zs_device_memory_stats(dev, ctypes.byref(s))
    return s


def ok(st, call):
    if st != 0:
        check(False, f"{call} -> {lib.zs_status_name(st).decode()}: {lib.zs_last_error().decode()}")
    return st == 0


vp = ctypes.c_void_p
lib.zs_device_create_cpu.argtypes = [ctypes.POINTER(vp)]
lib.zs_device_destroy.argtypes = [vp]
lib.zs_device_memory_stats.argtypes = [vp, ctypes.POINTER(Stats)]
lib.zs_device_host_alloc.argtypes = [vp, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(vp)]
lib.zs_device_host_free.argtypes = [vp, vp, ctypes.c_size_t, ctypes.c_int]
lib.zs_device_alloc.argtypes = [vp, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(vp)]
lib.zs_device_free.argtypes = [vp, vp, ctypes.c_size_t, ctypes.c_int]

dev = vp()
if ok(lib.zs_device_create_cpu(ctypes.byref(dev)), "zs_device_create_cpu"):
    pinned_bytes, big_bytes = 3 << 20, 1 << 20
    p, q = vp(), vp()
    # STRICT: from the pinned arena (a jemalloc arena of our own) or fail
    if ok(lib.zs_device_host_alloc(dev, pinned_bytes, OPTIMIZER, PINNED | STRICT, ctypes.byref(p)),
          "zs_device_host_alloc(pinned, strict)"):
        ctypes.memset(p, 0x5a, pinned_bytes)
        check(ctypes.string_at(p.value + pinned_bytes - 4, 4) == b"\x5a" * 4, "pinned memory reads back")
    # >= 1 MiB: jemalloc's mallocx on the big-buffer arena
    if ok(lib.zs_device_alloc(dev, big_bytes, PARAMS, ctypes.byref(q)), "zs_device_alloc(1 MiB)"):
        ctypes.memset(q, 1, big_bytes)
    s = stats(dev)
    check(s.current[HOST][OPTIMIZER] == pinned_bytes,
          f"accountant host/optimizer {s.current[HOST][OPTIMIZER]}, wanted {pinned_bytes}")
    check(s.current[DEVICE][PARAMS] == big_bytes,
          f"accountant device/params {s.current[DEVICE][PARAMS]}, wanted {big_bytes}")
    lib.zs_device_host_free(dev, p, pinned_bytes, OPTIMIZER)
    lib.zs_device_free(dev, q, big_bytes, PARAMS)
    s = stats(dev)
    check(s.current_total[HOST] == 0 and s.current_total[DEVICE] == 0,
          f"after the frees the accountant holds host {s.current_total[HOST]}, device {s.current_total[DEVICE]}")
    check(s.peak[HOST][OPTIMIZER] == pinned_bytes, f"peak host/optimizer {s.peak[HOST][OPTIMIZER]}")
    lib.zs_device_destroy(dev)

# the host program's own allocator still works after all that
check(len(bytearray(8 << 20)) == 8 << 20, "python allocates after the library ran")
print("dlopen ok: %s" % path if not failures else "%d checks failed" % len(failures))
sys.exit(1 if failures else 0)
