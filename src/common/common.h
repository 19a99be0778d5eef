/* Internal: errors, CHECK macros, logging, settings and fault injection shared by
 * every layer. Not installed. */
#ifndef ZS_COMMON_COMMON_H
#define ZS_COMMON_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "zeroshard/log.h"
#include "zeroshard/status.h"
#include "zeroshard/types.h"

#define ZS_ERRBUF 512

#if defined(__GNUC__)
#define ZS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ZS_PRINTF(a, b)
#endif

/* ---- errors ---------------------------------------------------------------- */

/* Formats the message into the calling thread's last error and into `handle_buf`
 * (ZS_ERRBUF bytes, may be NULL), logs it at error level, returns `st`. */
zs_status_t zs__fail(char *handle_buf, zs_status_t st, const char *file, int line,
                     const char *fmt, ...) ZS_PRINTF(5, 6);
/* Same without logging: for conditions the caller may expect and handle. */
zs_status_t zs__fail_quiet(char *handle_buf, zs_status_t st, const char *fmt, ...)
    ZS_PRINTF(3, 4);
#define ZS_FAIL(buf, st, ...) zs__fail((buf), (st), __FILE__, __LINE__, __VA_ARGS__)

/* The check family: every library file checks and propagates with these (and,
 * for a backend's own status type, the one check its header defines:
 * ZS_CUDA_CHECK in device/cuda_checks.h, ZS_NCCL_CHECK in comm/nccl_impl.h; the
 * engine's ZS_ENG_CHECK in zero/engine_impl.h adds its rank to the message).
 *
 *   ZS_FAIL(buf, st, fmt, ...)             set the message, return st (above)
 *   ZS_FAIL_GOTO(st, label, buf, code, fmt, ...)  set the message, st = code, goto label
 *   ZS_CHECK(expr)                         return a failing status as it is
 *   ZS_CHECK_GOTO(expr, st, label)         keep a failing status in st, goto label
 *   ZS_CHECK_HANDLE(h, fn)                 a NULL handle: ZS_ERR_INVALID
 *   ZS_CHECK_PTR(buf, fn, p, n)            a NULL data pointer for n > 0 elements: ZS_ERR_INVALID */

/* Goto form of ZS_FAIL: the message into `buf`, `code` into `st`, then the cleanup block. */
#define ZS_FAIL_GOTO(st, label, buf, code, ...) \
  do {                                           \
    (st) = ZS_FAIL((buf), (code), __VA_ARGS__);  \
    goto label;                                  \
  } while (0)

/* Return form: propagate a failing status (the callee already set the message). */
#define ZS_CHECK(expr)                      \
  do {                                      \
    zs_status_t zs__st_ = (expr);           \
    if (zs__st_ != ZS_OK) return zs__st_;   \
  } while (0)
/* Goto form: keep the status in `st` and jump to the function's cleanup block. */
#define ZS_CHECK_GOTO(expr, st, label) \
  do {                                 \
    (st) = (expr);                     \
    if ((st) != ZS_OK) goto label;     \
  } while (0)

/* A NULL handle (no handle to hold the message): ZS_ERR_INVALID "<fn>: <name> is NULL". */
#define ZS_CHECK_HANDLE(h, fn)                                                    \
  do {                                                                            \
    if (!(h)) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: %s is NULL", (fn), #h);   \
  } while (0)

/* A NULL data pointer, accepted only for n == 0 elements: ZS_ERR_INVALID
 * "<fn>: <p> is NULL for <n> elements" into `buf`. */
#define ZS_CHECK_PTR(buf, fn, p, n)                                                                   \
  do {                                                                                                \
    if (!(p) && (n))                                                                                  \
      return ZS_FAIL((buf), ZS_ERR_INVALID, "%s: %s is NULL for %zu elements", (fn), #p, (size_t)(n)); \
  } while (0)

/* ---- logging --------------------------------------------------------------- */

void zs__log(zs_log_level_t level, const char *file, int line, const char *fmt, ...)
    ZS_PRINTF(4, 5);
/* Rank shown in the default sink's prefix (-1: none; then the launcher's, the
 * settings' launcher_rank, if any). Set by comm creation. */
void zs__log_set_rank(int rank);
#define ZS_LOG_E(...) zs__log(ZS_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define ZS_LOG_W(...) zs__log(ZS_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define ZS_LOG_I(...) zs__log(ZS_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define ZS_LOG_D(...) zs__log(ZS_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

/* ---- settings (ZS_* environment variables, read once) ---------------------- */

/* The most ZS_THREADS takes: past any machine's cores per rank, and a value
 * beyond it is a typo ("99999") rather than a wish. */
#define ZS_THREADS_MAX 4096

typedef struct {
  zs_log_level_t log_level; /* ZS_LOG: error|warn|info|debug (default warn) */
  double comm_timeout_s;    /* ZS_COMM_TIMEOUT_S: 0 = wait forever (default 300) */
  int threads;              /* ZS_THREADS: CPU optimizer threads 1..ZS_THREADS_MAX, 0 = decide (src/optim) */
  int omp_threads;          /* OMP_NUM_THREADS (its first value), 0 = unset: the same role */
  char simd[16];            /* ZS_SIMD: force a CPU path: scalar|avx2|avx512 ("" = best) */
  char trace[512];          /* ZS_TRACE: trace file prefix ("" = off; zeroshard/trace.h) */
  int nvtx;                 /* ZS_NVTX=1: NVTX ranges on CUDA builds without ZS_TRACE (zeroshard/trace.h) */
  int mem_check;            /* ZS_MEM_CHECK=0: setup skips its host-memory room check (default 1) */
  int launcher_rank;        /* the job's rank from the launcher's variables, -1 if none (zs_log_rank) */
} zs_settings_t;

/* The settings, read at the first call. What is wrong in them (a value that
 * does not parse, an unknown ZS_* variable) is logged as a warning once they
 * are in place, by the first call that finds them so (the log's level comes
 * from them: they are not read under the log). */
const zs_settings_t *zs__settings(void);
/* Re-reads the environment and logs its warnings again (tests only). */
void zs__settings_reload(void);

/* ---- environment variables (src/common/env.c) ------------------------------- */

/* The words of every on/off variable, as config_load.h takes them for flags. */
#define ZS_ENV_FLAG_WORDS "1|0|true|false|on|off|yes|no"
/* The on/off variable `name` with value v (may be NULL): the words above,
 * case-insensitive, blanks around them ignored. Unset or empty: def, silently.
 * Any other value: def, and why (n bytes) says so, naming the variable, the
 * value, the words and the value used; else why is "". */
int zs__env_flag_parse(const char *name, const char *v, int def, char *why, size_t n);
/* zs__env_flag_parse on getenv(name), its complaint logged as a warning. Not
 * for settings.c's reader (see zs__settings). */
int zs__env_flag(const char *name, int def);
/* A whole number lo..hi (digits only) from v; unset or empty: def silently;
 * else def, and why names the variable, the value, the range and def_text
 * (what def means: "the automatic count"). */
int zs__env_count_parse(const char *name, const char *v, int lo, int hi, int def, const char *def_text, char *why,
                        size_t n);
/* 1 if `name` starts with ZS_ and is neither read by the library nor one of
 * the repository's own (ZS_TEST_* and the others env.c lists); why then says
 * so, with "did you mean ZS_X?" where a known name is close. */
int zs__env_unknown(const char *name, char *why, size_t n);
/* v as a message shows it: 64 bytes at most ("..." after), control bytes as \xNN. */
void zs__env_shown(char *out, size_t n, const char *v);

/* ---- ranks on this node ------------------------------------------------------ */

/* How many ranks of the job run on this node and which one this is, so thread
 * pools can share the node's cores instead of each taking all of them. */
typedef struct {
  int local_rank, local_size; /* 0 <= local_rank < local_size */
  const char *source;         /* what said so: "the MPI comm", a variable's name, or "default" */
} zs_node_ranks_t;

/* Called by the MPI comm when it is created (the shared-memory split of its
 * communicator). Thread-safe; the largest local_size set so far is kept (a
 * sub-communicator sees only part of the node). Ignored unless
 * 0 <= local_rank < local_size. */
void zs__set_node_ranks(int local_rank, int local_size);
/* What zs__set_node_ranks set; before any call, the launcher's variables (read
 * once): Open MPI OMPI_COMM_WORLD_LOCAL_SIZE/_RANK, MPICH/Hydra MPI_LOCALNRANKS/
 * MPI_LOCALRANKID, torchrun LOCAL_WORLD_SIZE/LOCAL_RANK, Slurm
 * SLURM_STEP_TASKS_PER_NODE (this node's entry, SLURM_NODEID) or
 * SLURM_NTASKS_PER_NODE with SLURM_LOCALID; else 1 rank ("default"). */
zs_node_ranks_t zs__node_ranks(void);
/* Forgets what zs__set_node_ranks set and re-reads the environment (tests only). */
void zs__node_ranks_reset(void);
/* The CPUs of one rank: mask_cpus (its affinity mask) divided among the ranks of
 * this node that share that mask, at least 1. Ranks whose masks equal the
 * launcher's (launcher_cpus <= mask_cpus: unbound) all share it; ranks bound to
 * parts of the launcher's CPUs are taken to be spread evenly, ceil(ranks x mask /
 * launcher) to a mask. *sharing (may be NULL): that count of ranks. */
int zs__cpus_per_rank(int mask_cpus, int launcher_cpus, int ranks, int *sharing);
/* The CPUs in the affinity mask of process pid (0: this one); 0 if unknown. */
int zs__cpus_of(int pid);
/* zs__cpus_per_rank for this process: its mask, its parent's (the launcher's
 * daemon), and zs__node_ranks. */
int zs__my_cpus(void);
/* The same; *own (may be NULL): whether this rank has a CPU to itself, the
 * ranks sharing its mask no more than the CPUs in it (not oversubscribed). */
int zs__my_cpus_shared(int *own);

/* ---- fault injection (tests) ---------------------------------------------- */

typedef enum {
  ZS_FAULT_HOST_ALLOC = 0, /* zs__host_malloc */
  ZS_FAULT_DEVICE_ALLOC,   /* zs_device_alloc */
  ZS_FAULT_PINNED,         /* pinning an extent of the pinned arena */
  ZS_FAULT_THREAD,         /* starting a worker thread (zs__worker_start) */
  ZS_FAULT_AIO_READ,       /* a read request of src/aio: fails with EIO, as from the device */
  ZS_FAULT_AIO_WRITE,      /* a write request of src/aio: the same */
  ZS_FAULT_DPU,            /* a delayed update's job (src/offload/delayed.c): fails with ZS_ERR_IO */
  ZS_FAULT_COUNT
} zs_fault_t;

/* After `skip` more calls succeed, the next `count` calls of kind `f` fail.
 * Also armed from the environment: ZS_FAULT_HOST_ALLOC=skip:count, etc.,
 * the names of zs__fault_env (indexed by zs_fault_t). */
extern const char *const zs__fault_env[ZS_FAULT_COUNT];
void zs__fault_arm(zs_fault_t f, int skip, int count);
/* 1 if this call must fail. Thread-safe. */
int zs__fault_hit(zs_fault_t f);

/* ---- misc ------------------------------------------------------------------ */

/* Monotonic seconds. */
double zs__now(void);

#endif
