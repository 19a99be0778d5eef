/* The library's environment variables: one parser for the on/off ones and one
 * for counts, and the list of every ZS_* name the library or this repository
 * reads, against which an unknown one is reported (with the known name it is
 * closest to). settings.c reads the variables; this file only judges them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/common.h"

/* ---- values ----------------------------------------------------------------- */

void zs__env_shown(char *out, size_t n, const char *v) {
  size_t k = 0, i = 0;
  for (; v[i] && i < 64 && k + 5 < n; i++) {
    unsigned char c = (unsigned char)v[i];
    if (c < 0x20 || c == 0x7f) k += (size_t)snprintf(out + k, n - k, "\\x%02x", c);
    else out[k++] = (char)c;
  }
  if (v[i] && k + 4 < n) k += (size_t)snprintf(out + k, n - k, "...");
  out[k < n ? k : n - 1] = '\0';
}

/* v without the blanks around it (as config_env.c trims its values), in buf. */
static const char *trimmed(const char *v, char *buf, size_t n) {
  while (*v == ' ' || *v == '\t') v++;
  size_t len = strlen(v);
  while (len && (v[len - 1] == ' ' || v[len - 1] == '\t' || v[len - 1] == '\n')) len--;
  if (len >= n) return NULL;
  memcpy(buf, v, len);
  buf[len] = '\0';
  return buf;
}

int zs__env_flag_parse(const char *name, const char *v, int def, char *why, size_t n) {
  static const char *const on[] = {"1", "true", "on", "yes"}, *const off[] = {"0", "false", "off", "no"};
  if (n) why[0] = '\0';
  if (!v || !*v) return def;
  char buf[16];
  const char *w = trimmed(v, buf, sizeof buf);
  for (int i = 0; w && i < 4; i++) {
    if (!strcasecmp(w, on[i])) return 1;
    if (!strcasecmp(w, off[i])) return 0;
  }
  char shown[4 * 64 + 8];
  zs__env_shown(shown, sizeof shown, v);
  snprintf(why, n, "%s='%s' is not one of " ZS_ENV_FLAG_WORDS " (case-insensitive); using %d (%s)", name, shown,
           def, def ? "on" : "off");
  return def;
}

int zs__env_flag(const char *name, int def) {
  char why[400];
  int on = zs__env_flag_parse(name, getenv(name), def, why, sizeof why);
  /* read per comm or device: a bad value warns once a process (a mesh makes
   * several comms), names compared by content */
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static char warned[8][48];
  int first = 0;
  if (why[0]) {
    pthread_mutex_lock(&mu);
    int k = 0;
    while (k < 8 && warned[k][0] && strcmp(warned[k], name)) k++;
    if (k < 8 && !warned[k][0]) snprintf(warned[k], sizeof warned[k], "%s", name), first = 1;
    pthread_mutex_unlock(&mu);
  }
  if (first) ZS_LOG_W("%s", why);
  return on;
}

int zs__env_count_parse(const char *name, const char *v, int lo, int hi, int def, const char *def_text, char *why,
                        size_t n) {
  if (n) why[0] = '\0';
  if (!v || !*v) return def;
  /* digits only: strtol would take blanks, a sign and "0x" */
  long long x = 0;
  const char *p = v;
  for (; *p >= '0' && *p <= '9' && x <= hi; p++) x = x * 10 + (*p - '0');
  if (p != v && *p == '\0' && x >= lo && x <= hi) return (int)x;
  char shown[4 * 64 + 8];
  zs__env_shown(shown, sizeof shown, v);
  snprintf(why, n, "%s='%s' is not a whole number from %d to %d; using %s", name, shown, lo, hi, def_text);
  return def;
}

/* ---- names ------------------------------------------------------------------ */

/* Every variable the library reads but the fault injection's (zs__fault_env,
 * below). Keep in step with the readers (a getenv in src/, config_env.c's
 * env_keys): test_env scans the tree and fails on a name that draws the
 * unknown-variable warning. */
static const char *const lib_names[] = {
    /* src/common/settings.c */
    "ZS_LOG", "ZS_COMM_TIMEOUT_S", "ZS_THREADS", "ZS_SIMD", "ZS_TRACE", "ZS_NVTX", "ZS_MEM_CHECK",
    /* src/memory (ZS_JE_MALLOC_CONF: the MALLOC_CONF of zeroshard's own jemalloc, cmake/zs_jemalloc.cmake) */
    "ZS_HOST_HUGEPAGES", "ZS_JE_MALLOC_CONF",
    /* src/device/cpu.c */
    "ZS_CPU_SHARED_HOST_THREAD", "ZS_CPU_HOST_FN_LIMIT_S", "ZS_CPU_ASYNC_NULL_STREAM",
    /* src/comm/mpi.c */
    "ZS_MPI_RING_MIN_BYTES", "ZS_MPI_POLL", "ZS_MPI_STAGING",
    /* src/zero/engine.c (a debugging switch) */
    "ZS_POISON_RELEASED",
    /* src/ckpt/ckpt_async.c */
    "ZS_CKPT_DIRECT", "ZS_CKPT_KEEP_COPY",
    /* src/config/config_env.c (zs_config_from_env, zs_config_apply_env) */
    "ZS_STAGE", "ZS_PARAM_DTYPE", "ZS_REDUCE_DTYPE", "ZS_OPTIM", "ZS_LR", "ZS_BETA1", "ZS_BETA2", "ZS_EPS",
    "ZS_WEIGHT_DECAY", "ZS_MOMENTUM", "ZS_NESTEROV", "ZS_OPTIM_STATE", "ZS_OPTIM_STATE_BLOCK", "ZS_GRAD_ACCUM", "ZS_GRAD_CLIP",
    "ZS_PREFETCH", "ZS_RESHARD_AFTER_FORWARD", "ZS_PERSIST_THRESHOLD", "ZS_OFFLOAD", "ZS_DELAYED_PARAM_UPDATE",
    "ZS_OFFLOAD_PARAM", "ZS_NVME_PATH", "ZS_NVME_CHUNK", "ZS_NVME_BUFFERS", "ZS_NVME_PARAM_BUFFERS",
    "ZS_AIO_BLOCK_SIZE", "ZS_AIO_QUEUE_DEPTH", "ZS_LOSS_SCALE", "ZS_SHARD_GROUP", "ZS_QUANTIZED_WEIGHTS",
    "ZS_QUANTIZED_WEIGHTS_BLOCK", "ZS_HPZ_PARTITION_SIZE", "ZS_QUANTIZED_GRADIENTS", "ZS_QUANTIZED_GRADIENTS_GROUP",
    "ZS_REPLICA_OVERLAP", "ZS_LR_SCHEDULE", "ZS_WARMUP_STEPS", "ZS_TOTAL_STEPS", "ZS_MIN_LR", "ZS_WARMUP_TYPE",
    "ZS_WARMUP_MIN_RATIO", "ZS_COS_MIN_RATIO",
    /* what this repository's scripts, tests, examples and benches read for themselves */
    "ZS_CKPT_TOOL", "ZS_IMPORT_PY", "ZS_STALL_TAG", "ZS_TRAIN_GPT", "ZS_HF", "ZS_TORCH", "ZS_TORCH_VERSION",
    "ZS_INSTALL_LOG"};
/* ... and the families of them: ZS_TEST_* (tests), ZS_BUILD_DIR and ZS_CMAKE_ARGS
 * (scripts/test), ZS_GPT_* (the GPT example's kernels), ZS_GPU_CHECK_*
 * (scripts/gpu-check), ZS_DEMO_* (scripts/demo*). */
static const char *const exempt_prefixes[] = {"ZS_TEST_", "ZS_BUILD_", "ZS_CMAKE_", "ZS_GPT_", "ZS_GPU_CHECK_",
                                              "ZS_DEMO_"};

const char *const zs__fault_env[ZS_FAULT_COUNT] = {"ZS_FAULT_HOST_ALLOC", "ZS_FAULT_DEVICE_ALLOC",
                                                   "ZS_FAULT_PINNED",     "ZS_FAULT_THREAD",
                                                   "ZS_FAULT_AIO_READ",   "ZS_FAULT_AIO_WRITE", "ZS_FAULT_DPU"};

enum { NLIB = sizeof lib_names / sizeof *lib_names };
/* The i-th known name (lib_names, then zs__fault_env), NULL past the last. */
static const char *known(size_t i) {
  return i < NLIB ? lib_names[i] : i < NLIB + ZS_FAULT_COUNT ? zs__fault_env[i - NLIB] : NULL;
}

/* Levenshtein distance of a and b (both under 128 bytes), or 99. */
static int distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la >= 128 || lb >= 128) return 99;
  int row[128], prev;
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    prev = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int sub = prev + (a[i - 1] != b[j - 1]), del = row[j] + 1, ins = row[j - 1] + 1, cur = row[j];
      row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
      prev = cur;
    }
  }
  return row[lb];
}

static int starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }
static int ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && !strcmp(s + a - b, tail);
}

/* The known name closest to `name`: within an edit distance of 2 first (the
 * nearest, the longer on a tie), else one that is a prefix of it, it a prefix
 * of, or whose part after "ZS" ends it (ZS_TRACE_FILE -> ZS_TRACE,
 * ZS_COMM_TIMEOUT -> ZS_COMM_TIMEOUT_S, ZS_ZERO_STAGE -> ZS_STAGE), the
 * nearest in length; NULL if none. */
static const char *closest(const char *name) {
  const char *best = NULL;
  long best_score = 1L << 30;
  size_t ln = strlen(name);
  const char *k;
  for (size_t i = 0; (k = known(i)); i++) {
    size_t lk = strlen(k);
    int d = distance(name, k);
    long score;
    if (d <= 2) score = d * 1000L;
    else if (starts_with(name, k) || starts_with(k, name) || ends_with(name, k + 2))
      score = 3000L + (long)(ln > lk ? ln - lk : lk - ln);
    else continue;
    if (score < best_score || (score == best_score && lk > strlen(best))) best = k, best_score = score;
  }
  return best;
}

int zs__env_unknown(const char *name, char *why, size_t n) {
  if (n) why[0] = '\0';
  if (!starts_with(name, "ZS_")) return 0;
  const char *k;
  for (size_t i = 0; (k = known(i)); i++)
    if (!strcmp(name, k)) return 0;
  for (size_t i = 0; i < sizeof exempt_prefixes / sizeof *exempt_prefixes; i++)
    if (starts_with(name, exempt_prefixes[i])) return 0;
  const char *near = closest(name);
  char hint[96] = "";
  if (near) snprintf(hint, sizeof hint, "; did you mean %s?", near);
  snprintf(why, n, "%s is not a variable zeroshard reads: it is ignored%s (docs/configuration.md lists them)", name,
           hint);
  return 1;
}
