/* How much host memory this process may still take (zs__host_room): the least
 * of what the kernel will give before it refuses (RLIMIT_AS) or kills (the
 * memory cgroup's limit, MemAvailable). Read from /proc and /sys each call;
 * nothing is cached, since other processes change it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "memory/memory.h"

/* A number from the first line of a file ("max" -> UINT64_MAX); 0 if unread. */
static int read_u64(const char *path, uint64_t *out) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[64] = "";
  int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  if (!ok) return 0;
  if (!strncmp(line, "max", 3)) {
    *out = UINT64_MAX;
    return 1;
  }
  char *end;
  unsigned long long v = strtoull(line, &end, 10);
  if (end == line) return 0;
  *out = v;
  return 1;
}

/* "Key:   123 kB" of a /proc file, in bytes; 0 if absent. */
static int proc_kb(const char *path, const char *key, uint64_t *out) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[256];
  size_t k = strlen(key);
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    unsigned long long kb;
    if (!strncmp(line, key, k) && line[k] == ':' && sscanf(line + k + 1, "%llu", &kb) == 1)
      *out = (uint64_t)kb * 1024, found = 1;
  }
  fclose(f);
  return found;
}

static void consider(zs_host_room_t *r, uint64_t room, int shared, const char *what) {
  if (room < r->bytes) {
    r->bytes = room;
    r->shared = shared;
    snprintf(r->what, sizeof r->what, "%s", what);
  }
}

/* A cgroup's limit minus its usage, for the cgroup at dir and each ancestor up
 * to the mount (v1 limits are hierarchical; so are v2's). */
static void cgroup_dir(zs_host_room_t *r, const char *mount, const char *path, const char *limit_file,
                       const char *usage_file, const char *label) {
  char dir[512], f[600], what[sizeof r->what];
  snprintf(dir, sizeof dir, "%s%s", mount, path);
  for (;;) {
    uint64_t lim, use = 0;
    snprintf(f, sizeof f, "%s/%s", dir, limit_file);
    if (read_u64(f, &lim) && lim < ((uint64_t)1 << 62)) {
      snprintf(f, sizeof f, "%s/%s", dir, usage_file);
      read_u64(f, &use);
      snprintf(what, sizeof what, "the memory cgroup's %s (%.200s/%s: %.1f MiB, %.1f MiB in use)", label, dir, limit_file,
               (double)lim / 1048576.0, (double)use / 1048576.0);
      consider(r, lim > use ? lim - use : 0, 1, what);
    }
    char *slash = strrchr(dir + strlen(mount), '/');
    if (!slash) break;
    *slash = 0;
  }
}

/* The process's memory cgroups (v1 "N:memory:/path", v2 "0::/path"). */
static void cgroups(zs_host_room_t *r) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (!a || !b) continue;
    *b = 0;
    const char *ctl = a + 1, *path = b + 1;
    if (!strcmp(path, "/")) path = "";
    if (!strcmp(ctl, "memory")) {
      cgroup_dir(r, "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes",
                 "memory.limit_in_bytes");
    } else if (!*ctl) {
      cgroup_dir(r, "/sys/fs/cgroup", path, "memory.max", "memory.current", "memory.max");
      cgroup_dir(r, "/sys/fs/cgroup/unified", path, "memory.max", "memory.current", "memory.max");
    }
  }
  fclose(f);
}

void zs__host_room(zs_host_room_t *r) {
  memset(r, 0, sizeof *r);
  r->bytes = UINT64_MAX;
  uint64_t avail;
  if (proc_kb("/proc/meminfo", "MemAvailable", &avail)) consider(r, avail, 1, "the node's MemAvailable (/proc/meminfo)");
  cgroups(r);
  struct rlimit rl;
  uint64_t vm = 0;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && proc_kb("/proc/self/status", "VmSize", &vm)) {
    char what[sizeof r->what];
    snprintf(what, sizeof what, "this process's RLIMIT_AS (%.1f MiB, %.1f MiB of address space in use)",
             (double)rl.rlim_cur / 1048576.0, (double)vm / 1048576.0);
    consider(r, (uint64_t)rl.rlim_cur > vm ? (uint64_t)rl.rlim_cur - vm : 0, 0, what);
  }
}
