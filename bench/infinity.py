#!/usr/bin/env python3
"""bench/infinity.py: a model whose state does not fit in memory, trained
through the NVMe tier (ZeRO-Infinity), inside a memory cgroup of its own.

One run does, in this order:
  1. reference: zs-train-gpt with the whole state in memory (stage 3), outside
     any limit;
  2. the same run inside a memory cgroup whose limit is well below that state,
     with --nvme DIR --offload-param (optimizer state and parameter shards on
     disk): it must train, and give the reference's losses bit for bit;
  3. the same run in the same cgroup without --nvme: setup must refuse with
     ZS_ERR_NOMEM and the numbers (the room check), never an OOM kill;
  4. optionally (--disk) the disk's bandwidth, by zs-bench-nvme --disk-only.
The cgroup is made here and removed on exit, failure included: cgroup v1
(/sys/fs/cgroup/memory/<name>, memory.limit_in_bytes) or v2 (memory.max).
Exit 77 (skipped) where no memory cgroup can be made or the build has no
NVMe tier; 1 if a check fails.

usage: bench/infinity.py [--bin build/bin] [--dir DIR] [--limit-mib N] [--ranks N]
                         [--model "--layers 4 --channels 640 ..."] [--steps S] [--disk] [--json]
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_odls_base_sigkill_timeout": "0"}


class Cgroup:
    """A memory cgroup of our own (v1 or v2), removed by close()."""

    def __init__(self, limit):
        name = "zs_infinity_%d" % os.getpid()
        v1 = "/sys/fs/cgroup/memory"
        if os.access(v1, os.W_OK) and os.path.exists(v1 + "/memory.limit_in_bytes"):
            self.path, self.v2 = os.path.join(v1, name), False
        elif os.access("/sys/fs/cgroup", os.W_OK) and "memory" in open("/sys/fs/cgroup/cgroup.controllers").read():
            self.path, self.v2 = os.path.join("/sys/fs/cgroup", name), True
        else:
            raise PermissionError("no writable memory cgroup here")
        os.mkdir(self.path)
        try:
            self._write("memory.max" if self.v2 else "memory.limit_in_bytes", str(limit))
            if not self.v2 and os.path.exists(self.path + "/memory.memsw.limit_in_bytes"):
                self._write("memory.memsw.limit_in_bytes", str(limit))  # no swap to escape into
            if self.v2 and os.path.exists(self.path + "/memory.swap.max"):
                self._write("memory.swap.max", "0")
        except OSError:
            self.close()
            raise

    def _write(self, f, v):
        with open(os.path.join(self.path, f), "w") as fh:
            fh.write(v)

    def _read(self, f):
        try:
            with open(os.path.join(self.path, f)) as fh:
                return fh.read()
        except OSError:
            return ""

    def peak(self):
        s = self._read("memory.peak" if self.v2 else "memory.max_usage_in_bytes").strip()
        return int(s) if s.isdigit() else None

    def reset_peak(self):
        try:
            self._write("memory.peak" if self.v2 else "memory.max_usage_in_bytes", "0")
        except OSError:
            pass

    def oom_kills(self):
        text = self._read("memory.events" if self.v2 else "memory.oom_control")
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def run(self, cmd, env, timeout):
        """cmd inside the cgroup: the shell moves itself in, then execs."""
        inner = "echo $$ > %s && exec %s" % (shlex.quote(self.path + "/cgroup.procs"), shlex.join(cmd))
        return subprocess.run(["sh", "-c", inner], env=env, capture_output=True, text=True, timeout=timeout)

    def close(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        print("could not remove %s" % self.path, file=sys.stderr)


def trainer(a, extra):
    return (["mpiexec", "-n", str(a.ranks), os.path.join(a.bin, "zs-train-gpt")] + shlex.split(a.model) +
            ["--stage", "3", "--dtype", "bf16", "--steps", str(a.steps), "--val-every", "0", "--val-seqs", "4",
             "--json", "--quiet"] + extra)


def parse(proc, what):
    try:
        return json.loads(proc.stdout)
    except ValueError:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit("%s: no JSON from zs-train-gpt (exit %d)" % (what, proc.returncode))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="build/bin")
    p.add_argument("--dir", default=None, help="the tier's directory (a disk's file system; default: a temporary "
                   "directory under the build directory)")
    p.add_argument("--limit-mib", type=int, default=512)
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--model", default="--layers 4 --channels 640 --heads 10 --seq 64 --batch 4")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--nvme-chunk", type=int, default=262144)
    p.add_argument("--disk", action="store_true", help="also measure the disk (zs-bench-nvme --disk-only)")
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    env = dict(os.environ, **MPI_ENV)
    limit = a.limit_mib << 20
    base = a.dir or os.path.join(os.path.dirname(os.path.abspath(a.bin)), "infinity_tier")
    os.makedirs(base, exist_ok=True)
    tier = tempfile.mkdtemp(prefix="zs_inf_", dir=base)
    out = {"limit_bytes": limit, "ranks": a.ranks, "model": a.model, "steps": a.steps, "dir": tier}
    failed = []
    try:
        cg = Cgroup(limit)
    except (OSError, PermissionError) as e:
        print("skipped: %s" % e)
        return 77
    try:
        t0 = time.time()
        ref = subprocess.run(trainer(a, []), env=env, capture_output=True, text=True, timeout=a.timeout)
        ref_s = time.time() - t0
        rj = parse(ref, "the reference run")
        if ref.returncode:
            raise SystemExit("the reference run failed (%d): %s" % (ref.returncode, ref.stderr[-2000:]))
        r0 = rj["ranks"][0]
        out["params"] = rj["params"]
        out["reference"] = {"losses": rj["losses"], "peak_device_bytes": r0["peak_device_bytes"],
                            "peak_host_bytes": r0["peak_host_bytes"], "seconds": ref_s,
                            "tokens_per_s": rj["tokens_per_s"]}
        # 2: in the cgroup, through the tier
        cg.reset_peak()
        kills0 = cg.oom_kills()
        t0 = time.time()
        nv = cg.run(trainer(a, ["--nvme", tier, "--offload-param", "--nvme-chunk", str(a.nvme_chunk)]), env,
                    a.timeout)
        nv_s = time.time() - t0
        if nv.returncode and "without liburing" in nv.stderr:
            print("skipped: this zeroshard was built without liburing (no NVMe tier)")
            return 77
        if nv.returncode:
            failed.append("with --nvme in %d MiB the run failed (exit %d): %s" %
                          (a.limit_mib, nv.returncode, nv.stderr.strip().splitlines()[-1:] or ""))
        nj = parse(nv, "the NVMe run") if not nv.returncode else None
        out["nvme"] = {"exit": nv.returncode, "seconds": nv_s, "cgroup_peak_bytes": cg.peak(),
                       "oom_kills": cg.oom_kills() - kills0}
        if nj:
            n0 = nj["ranks"][0]
            out["nvme"].update({"losses": nj["losses"], "tokens_per_s": nj["tokens_per_s"],
                                "file_bytes": [r["nvme_file_bytes"] for r in nj["ranks"]],
                                "estimate_bytes": [r["nvme_estimate_bytes"] for r in nj["ranks"]],
                                "phase_s": [r["nvme_phase_s"] for r in nj["ranks"]],
                                "bytes_moved": [r["nvme_bytes_moved"] for r in nj["ranks"]],
                                "peak_device_bytes": n0["peak_device_bytes"], "peak_host_bytes": n0["peak_host_bytes"]})
            if nj["losses"] != rj["losses"]:
                failed.append("losses differ: nvme %s vs memory %s" % (nj["losses"], rj["losses"]))
            if out["nvme"]["file_bytes"] != out["nvme"]["estimate_bytes"]:
                failed.append("tier files %s bytes, the estimate says %s" % (out["nvme"]["file_bytes"],
                                                                             out["nvme"]["estimate_bytes"]))
        state = r0["peak_device_bytes"] + r0["peak_host_bytes"]
        out["state_bytes_per_rank"] = state
        if state * a.ranks <= limit:
            failed.append("the in-memory run's peak (%d MiB a rank) fits in the limit: raise the model" % (state >> 20))
        # 3: in the cgroup, without the tier: refused at setup
        kills0 = cg.oom_kills()
        mem = cg.run(trainer(a, []), env, a.timeout)
        refused = mem.returncode not in (0, 137, -9) and "ZS_ERR_NOMEM" in mem.stderr
        msg = [l for l in mem.stderr.splitlines() if "may use" in l]
        out["memory_in_cgroup"] = {"exit": mem.returncode, "refused": refused, "oom_kills": cg.oom_kills() - kills0,
                                   "message": msg[0].strip() if msg else ""}
        if not refused:
            failed.append("without --nvme in %d MiB: exit %d, not ZS_ERR_NOMEM: %s" %
                          (a.limit_mib, mem.returncode, mem.stderr[-1500:]))
        if out["nvme"]["oom_kills"] or out["memory_in_cgroup"]["oom_kills"]:
            failed.append("the OOM killer ran in the cgroup")
        if a.disk:  # the disk's bandwidth at the engine's depth, by zs-bench-nvme (its engine part kept small)
            d = subprocess.run(["mpiexec", "-n", str(a.ranks), os.path.join(a.bin, "zs-bench-nvme"), "--dir", tier,
                                "--params", "4M", "--units", "4", "--steps", "1", "--warmup", "0", "--rounds", "3",
                                "--json"], env=env, capture_output=True, text=True, timeout=a.timeout)
            try:
                disk = json.loads(d.stdout)["disk"]
                out["disk"] = {"write_mbps": disk["write_mbps"]["median"], "read_mbps": disk["read_mbps"]["median"]}
            except (ValueError, KeyError):
                out["disk"] = None
            if out["disk"] and nj:  # the optimizer phase against what the disk allows for its bytes
                steps = max(a.steps, 1)
                ph = sum(out["nvme"]["phase_s"]) / len(out["nvme"]["phase_s"])
                mv = sum(out["nvme"]["bytes_moved"]) / len(out["nvme"]["bytes_moved"])
                bw = 2 / (1 / out["disk"]["write_mbps"] + 1 / out["disk"]["read_mbps"])  # half read, half written
                out["disk"]["phase_mbps"] = mv / ph / 1e6 if ph else None
                out["disk"]["fraction"] = (mv / 1e6 / bw) / ph if ph else None
                out["disk"]["phase_s_per_step"] = ph / steps
    finally:
        cg.close()
        subprocess.run(["rm", "-rf", tier])
    out["failed"] = failed
    if a.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        n = out.get("nvme", {})
        print("model: %s params, state %.0f MiB a rank in memory (peak), %d rank(s), cgroup limit %d MiB" %
              (out.get("params"), out.get("state_bytes_per_rank", 0) / 2**20, a.ranks, a.limit_mib))
        print("%-24s %10s %14s %12s %10s" % ("run", "exit", "cgroup peak", "disk/rank", "s/step"))
        steps = max(a.steps, 1)
        print("%-24s %10s %14s %12s %10.2f" % ("memory, no limit", 0, "-", "-", out["reference"]["seconds"] / steps))
        print("%-24s %10s %14s %12s %10.2f" % ("nvme, in the cgroup", n.get("exit"),
              "%.0f MiB" % (n["cgroup_peak_bytes"] / 2**20) if n.get("cgroup_peak_bytes") else "?",
              "%.0f MiB" % (n["file_bytes"][0] / 2**20) if n.get("file_bytes") else "-", n.get("seconds", 0) / steps))
        m = out.get("memory_in_cgroup", {})
        print("%-24s %10s  %s" % ("memory, in the cgroup", m.get("exit"), m.get("message", "")[:160]))
        print("losses equal: %s; OOM kills: %d" % (n.get("losses") == out["reference"]["losses"],
                                                  n.get("oom_kills", 0) + m.get("oom_kills", 0)))
        dk = out.get("disk")
        if dk:
            print("disk: write %.0f MB/s, read %.0f MB/s; the optimizer phase moved %.0f MB/s: %.2f of the disk's time "
                  "for its bytes" % (dk["write_mbps"], dk["read_mbps"], dk.get("phase_mbps") or 0,
                                     dk.get("fraction") or 0))
        for f in failed:
            print("FAILED: " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
