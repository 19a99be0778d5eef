/* Settings from ZS_* environment variables (read once), ranks on this node,
 * fault injection, clock. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

static zs_settings_t settings;
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;

static atomic_int fault_skip[ZS_FAULT_COUNT];
static atomic_int fault_count[ZS_FAULT_COUNT];

static int launcher_rank(void);

/* What settings_read finds wrong waits here until the settings are in place:
 * it runs under settings_once, and the log it would write to takes its level
 * (and the launcher's rank) from these settings, which would wait on
 * settings_once again. zs__settings logs them once, through the sink. */
enum { PENDING_MAX = 24 };
static struct {
  int line;
  char msg[480];
} pending[PENDING_MAX];
static int npending, pending_more;
static atomic_int pending_ready;

static void note(int line, const char *fmt, ...) ZS_PRINTF(2, 3);
static void note(int line, const char *fmt, ...) {
  if (npending == PENDING_MAX) {
    pending_more++;
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pending[npending].msg, sizeof pending[npending].msg, fmt, ap);
  va_end(ap);
  pending[npending++].line = line;
}

/* Called with the settings in place; the exchange makes one caller log them
 * (and the log's own zs__settings call, from within, finds nothing). */
static void pending_log(void) {
  if (!atomic_exchange(&pending_ready, 0)) return;
  for (int i = 0; i < npending; i++) zs__log(ZS_LOG_WARN, __FILE__, pending[i].line, "%s", pending[i].msg);
  if (pending_more)
    zs__log(ZS_LOG_WARN, __FILE__, __LINE__, "... and %d more warnings about ZS_* variables", pending_more);
  npending = pending_more = 0;
}

/* Each ZS_* variable of the environment that nobody reads (a typo, or a name
 * another tool uses), once per process: set, it would otherwise be ignored in
 * silence. */
static void unknown_vars(void) {
  extern char **environ;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "ZS_", 3)) continue;
    char name[128], why[400];
    size_t len = strcspn(*e, "=");
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, *e, len);
    name[len] = '\0';
    if (zs__env_unknown(name, why, sizeof why)) note(__LINE__, "%s", why);
  }
}

static void settings_read(void) {
  zs_settings_t s = {.log_level = ZS_LOG_WARN, .comm_timeout_s = 300.0, .threads = 0, .mem_check = 1};
  char why[400], shown[4 * 64 + 8];
  const char *v = getenv("ZS_LOG");
  if (v && *v) { /* empty: the default, as an empty config variable keeps its default */
    if (!strcasecmp(v, "none")) s.log_level = ZS_LOG_NONE;
    else if (!strcasecmp(v, "error")) s.log_level = ZS_LOG_ERROR;
    else if (!strcasecmp(v, "warn")) s.log_level = ZS_LOG_WARN;
    else if (!strcasecmp(v, "info")) s.log_level = ZS_LOG_INFO;
    else if (!strcasecmp(v, "debug")) s.log_level = ZS_LOG_DEBUG;
    else {
      zs__env_shown(shown, sizeof shown, v);
      note(__LINE__, "ZS_LOG='%s' is not none|error|warn|info|debug; using warn", shown);
    }
  }
  if ((v = getenv("ZS_COMM_TIMEOUT_S")) && *v) {
    char *end;
    double t = strtod(v, &end);
    if (*end == '\0' && end != v && isfinite(t) && t >= 0) {
      s.comm_timeout_s = t;
    } else {
      zs__env_shown(shown, sizeof shown, v);
      note(__LINE__, "ZS_COMM_TIMEOUT_S='%s' is not a number of seconds (such as 300 or 2.5; 0 waits forever); "
           "using %g", shown, s.comm_timeout_s);
    }
  }
  s.threads = zs__env_count_parse("ZS_THREADS", getenv("ZS_THREADS"), 1, ZS_THREADS_MAX, 0,
                                  "the automatic count (OMP_NUM_THREADS, else the rank's CPUs)", why, sizeof why);
  if (why[0]) note(__LINE__, "%s", why);
  /* OpenMP's own list form "4,2" gives the outer level first */
  if ((v = getenv("OMP_NUM_THREADS")) && *v) {
    char *end;
    long t = strtol(v, &end, 10);
    if (t > 0 && t <= 1 << 20 && (*end == '\0' || *end == ',')) s.omp_threads = (int)t;
    else {
      zs__env_shown(shown, sizeof shown, v);
      note(__LINE__, "OMP_NUM_THREADS='%s' is not a thread count; ignored (the rank's CPUs decide)", shown);
    }
  }
  if ((v = getenv("ZS_SIMD")) && *v) snprintf(s.simd, sizeof s.simd, "%s", v);
  if ((v = getenv("ZS_TRACE")) && *v) snprintf(s.trace, sizeof s.trace, "%s", v);
  s.nvtx = zs__env_flag_parse("ZS_NVTX", getenv("ZS_NVTX"), 0, why, sizeof why);
  if (why[0]) note(__LINE__, "%s", why);
  s.mem_check = zs__env_flag_parse("ZS_MEM_CHECK", getenv("ZS_MEM_CHECK"), 1, why, sizeof why);
  if (why[0]) note(__LINE__, "%s", why);
  s.launcher_rank = launcher_rank();
  unknown_vars();
  settings = s;
  for (int f = 0; f < ZS_FAULT_COUNT; f++) {
    int skip = 0, count = 0;
    if ((v = getenv(zs__fault_env[f])) && sscanf(v, "%d:%d", &skip, &count) == 2) zs__fault_arm(f, skip, count);
  }
  atomic_store(&pending_ready, npending + pending_more > 0);
}

const zs_settings_t *zs__settings(void) {
  pthread_once(&settings_once, settings_read);
  if (atomic_load_explicit(&pending_ready, memory_order_relaxed)) pending_log();
  return &settings;
}

void zs__settings_reload(void) {
  pthread_once(&settings_once, settings_read);
  pending_log(); /* the first read's, before they are overwritten */
  settings_read();
  pending_log();
}

/* ---- ranks on this node ----------------------------------------------------- */

static pthread_mutex_t node_mu = PTHREAD_MUTEX_INITIALIZER;
static zs_node_ranks_t node_set;   /* from zs__set_node_ranks; local_size 0 = never */
static zs_node_ranks_t node_env;   /* from the launcher's variables */
static int node_env_read;

/* The variable as a count in [lo, 1<<24], or -1. */
static int env_int(const char *name, int lo) {
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  char *end;
  long x = strtol(v, &end, 10);
  return *end == '\0' && x >= lo && x <= 1 << 24 ? (int)x : -1;
}

/* Slurm's per-node task counts, "2(x3),1": the entry of node `node`, or -1. */
static int slurm_tasks_on(const char *list, int node) {
  if (!list || node < 0) return -1;
  const char *p = list;
  int at = 0;
  while (*p) {
    char *end;
    long c = strtol(p, &end, 10), rep = 1;
    if (end == p || c < 1) return -1;
    p = end;
    if (!strncmp(p, "(x", 2)) {
      rep = strtol(p + 2, &end, 10);
      if (end == p + 2 || rep < 1 || *end != ')') return -1;
      p = end + 1;
    }
    if (node < at + rep) return (int)c;
    at += (int)rep;
    if (*p == ',') p++;
    else if (*p) return -1;
  }
  return -1;
}

static zs_node_ranks_t node_env_vars(void) {
  static const struct { const char *size, *rank; } launchers[] = {
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}, /* Open MPI */
      {"MPI_LOCALNRANKS", "MPI_LOCALRANKID"},                       /* MPICH, Hydra */
      {"LOCAL_WORLD_SIZE", "LOCAL_RANK"},                           /* torchrun */
  };
  for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++) {
    int n = env_int(launchers[i].size, 1), k = env_int(launchers[i].rank, 0);
    if (n >= 1) return (zs_node_ranks_t){k >= 0 && k < n ? k : 0, n, launchers[i].size};
  }
  /* Slurm, in a task that srun started (SLURM_LOCALID; a batch script's own
   * process has the job's counts but is one process): the step's layout, else
   * --ntasks-per-node */
  int k = env_int("SLURM_LOCALID", 0);
  if (k < 0) return (zs_node_ranks_t){0, 1, "default"};
  const char *src = "SLURM_STEP_TASKS_PER_NODE";
  int n = slurm_tasks_on(getenv(src), env_int("SLURM_NODEID", 0));
  if (n < 1) {
    src = "SLURM_NTASKS_PER_NODE";
    n = env_int(src, 1);
  }
  if (n < 1) return (zs_node_ranks_t){0, 1, "default"};
  return (zs_node_ranks_t){k < n ? k : 0, n, src};
}

/* The job's rank as the launcher gives it, for the log before a comm exists:
 * Open MPI, MPICH/Hydra (PMI), PMIx launchers, Slurm's srun, torchrun. */
static int launcher_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    int r = env_int(vars[i], 0);
    if (r >= 0) return r;
  }
  return -1;
}

static void node_env_scan(void) {
  node_env = node_env_vars();
  node_env_read = 1;
}

void zs__set_node_ranks(int local_rank, int local_size) {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size) return;
  pthread_mutex_lock(&node_mu);
  if (local_size > node_set.local_size) node_set = (zs_node_ranks_t){local_rank, local_size, "the MPI comm"};
  pthread_mutex_unlock(&node_mu);
}

zs_node_ranks_t zs__node_ranks(void) {
  pthread_mutex_lock(&node_mu);
  if (!node_env_read) node_env_scan();
  zs_node_ranks_t r = node_set.local_size > 0 ? node_set : node_env;
  pthread_mutex_unlock(&node_mu);
  return r;
}

int zs__cpus_per_rank(int mask_cpus, int launcher_cpus, int ranks, int *sharing) {
  int cpus = mask_cpus > 0 ? mask_cpus : 1, share = ranks > 0 ? ranks : 1;
  if (launcher_cpus > cpus) {
    long long s = ((long long)share * cpus + launcher_cpus - 1) / launcher_cpus;
    share = s < 1 ? 1 : s > share ? share : (int)s;
  }
  if (sharing) *sharing = share;
  return cpus / share > 1 ? cpus / share : 1;
}

int zs__cpus_of(int pid) {
#ifdef CPU_COUNT
  cpu_set_t set;
  if (sched_getaffinity((pid_t)pid, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
  (void)pid;
  return 0;
}

int zs__my_cpus_shared(int *own) {
  int mask = zs__cpus_of(0), sharing = 1;
  if (mask <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    mask = c > 0 ? (int)c : 1;
  }
  int n = zs__cpus_per_rank(mask, zs__cpus_of((int)getppid()), zs__node_ranks().local_size, &sharing);
  if (own) *own = sharing <= mask;
  return n;
}

int zs__my_cpus(void) { return zs__my_cpus_shared(NULL); }

void zs__node_ranks_reset(void) {
  pthread_mutex_lock(&node_mu);
  node_set = (zs_node_ranks_t){0, 0, NULL};
  node_env_scan();
  pthread_mutex_unlock(&node_mu);
}

/* ---- fault injection ----------------------------------------------------------- */

void zs__fault_arm(zs_fault_t f, int skip, int count) {
  atomic_store(&fault_skip[f], skip);
  atomic_store(&fault_count[f], count);
}

int zs__fault_hit(zs_fault_t f) {
  zs__settings(); /* arms faults named in the environment */
  if (atomic_load(&fault_count[f]) <= 0) return 0;
  if (atomic_fetch_sub(&fault_skip[f], 1) > 0) return 0;
  atomic_store(&fault_skip[f], 0);
  return atomic_fetch_sub(&fault_count[f], 1) > 0;
}

double zs__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
