/* The CPU optimizer's default thread count (issue 11, item 10): ranks that share
 * cores must not each take all of them.
 *
 * Run alone it checks the decision function on given inputs, where the ranks on
 * this node come from (the MPI comm's setter, else the launcher's variables) and
 * the log line. Run under mpiexec (test_optim_threads_np4) it first checks what
 * every rank picks in the real environment: with unbound ranks (as mpiexec
 * --oversubscribe starts them) the CPUs of the mask divided by the ranks on the
 * node, so 4 ranks on this 2-core machine take 1 thread each, not 2. CTest
 * unsets ZS_THREADS and OMP_NUM_THREADS for it. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "optim/optim.h"

static int mask_cpus(pid_t pid) {
  cpu_set_t set;
  return sched_getaffinity(pid, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

static char last_log[512];
static void keep_log(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)level, (void)file, (void)line, (void)user;
  snprintf(last_log, sizeof last_log, "%s", msg);
}

/* ---- the real environment (first: before any test changes it) ------------------ */

static void test_real_environment(void) {
  const char *ompi = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (getenv("ZS_THREADS") || getenv("OMP_NUM_THREADS")) {
    fprintf(stderr, "ZS_THREADS or OMP_NUM_THREADS is set: the default is not what runs here\n");
  }
  zs_log_set_callback(keep_log, NULL);
  zs_log_set_level(ZS_LOG_INFO);
  int t = zs__optim_threads();
  zs_log_set_level(ZS_LOG_WARN);
  zs_log_set_callback(NULL, NULL);
  int cpus = mask_cpus(0), launcher = mask_cpus(getppid());
  zs_node_ranks_t node = zs__node_ranks();
  fprintf(stderr, "[local rank %d of %d (%s)] %d CPUs in the mask, launcher %d: %s\n", node.local_rank,
          node.local_size, node.source, cpus, launcher, last_log);
  expect_str_contains(last_log, "CPU optimizer: ");
  if (ompi) {
    expect_int_eq(node.local_size, atoi(ompi));
    expect_true(!strcmp(node.source, "OMPI_COMM_WORLD_LOCAL_SIZE"));
  }
  if (getenv("ZS_THREADS") || getenv("OMP_NUM_THREADS")) return;
  expect_int_ge(t, 1);
  expect_int_le(t, cpus);
  if (launcher <= cpus) { /* unbound: every rank of the node shares this mask */
    int want = cpus / node.local_size > 1 ? cpus / node.local_size : 1;
    expect_int_eq(t, want);
    /* the node's ranks together take no more threads than CPUs (or one each) */
    expect_int_le((long long)t * node.local_size, cpus > node.local_size ? cpus : node.local_size);
  }
}

/* ---- the decision on given inputs ---------------------------------------------- */

static int decide(int zs, int omp, int cpus, int launcher, int ranks, const char *src, char *why) {
  zs_threads_in_t in = {.zs_threads = zs, .omp_threads = omp, .mask_cpus = cpus,
                        .launcher_cpus = launcher, .node = {0, ranks, src}};
  return zs__optim_threads_decide(&in, why, 400);
}

static void test_decide(void) {
  char why[400];
  /* the issue: 4 unbound ranks on 2 cores took 2 threads each */
  expect_int_eq(decide(0, 0, 2, 2, 4, "OMPI_COMM_WORLD_LOCAL_SIZE", why), 1);
  expect_str_contains(why, "1 thread: 2 CPUs in the affinity mask / 4 ranks on this node "
                           "(OMPI_COMM_WORLD_LOCAL_SIZE)");
  expect_int_eq(decide(0, 0, 4, 4, 2, "the MPI comm", why), 2);
  expect_str_contains(why, "2 threads: 4 CPUs in the affinity mask / 2 ranks on this node (the MPI comm)");
  expect_int_eq(decide(0, 0, 64, 64, 8, "LOCAL_WORLD_SIZE", why), 8);
  expect_int_eq(decide(0, 0, 6, 6, 4, "MPI_LOCALNRANKS", why), 1); /* floor, not 1.5 */
  expect_int_eq(decide(0, 0, 8, 0, 1, "default", why), 8); /* launcher unknown: unbound */
  expect_str_contains(why, "8 threads: 8 CPUs in the affinity mask / 1 rank on this node (default)");
  /* ZS_THREADS wins, then OMP_NUM_THREADS */
  expect_int_eq(decide(3, 5, 2, 2, 4, "default", why), 3);
  expect_str_contains(why, "3 threads: ZS_THREADS=3");
  expect_int_eq(decide(0, 5, 2, 2, 4, "default", why), 5);
  expect_str_contains(why, "5 threads: OMP_NUM_THREADS=5");
  /* bound ranks: mpirun's per-socket binding, 8 ranks on 2 x 32 CPUs: 4 per mask */
  expect_int_eq(decide(0, 0, 32, 64, 8, "OMPI_COMM_WORLD_LOCAL_SIZE", why), 8);
  expect_str_contains(why, "8 threads: 32 CPUs in the affinity mask / 4 ranks sharing it (8 ranks on "
                           "this node (OMPI_COMM_WORLD_LOCAL_SIZE), bound to parts of the launcher's 64 CPUs)");
  /* srun --cpus-per-task=8 --cpu-bind=cores: 4 tasks on 32 CPUs, one per mask */
  expect_int_eq(decide(0, 0, 8, 32, 4, "SLURM_STEP_TASKS_PER_NODE", why), 8);
  /* bound to one core each */
  expect_int_eq(decide(0, 0, 1, 2, 2, "OMPI_COMM_WORLD_LOCAL_SIZE", why), 1);
  /* more ranks bound than the launcher's CPUs hold: shared as if unbound */
  expect_int_eq(decide(0, 0, 2, 4, 16, "default", why), 1);
  /* nonsense inputs still give at least one thread */
  expect_int_eq(decide(0, 0, 0, 0, 0, NULL, why), 1);
  expect_int_eq(decide(0, 0, 4, 4, 2, "x", NULL), 2);
}

/* ---- where the ranks on this node come from ------------------------------------ */

static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALNRANKS", "MPI_LOCALRANKID",
    "LOCAL_WORLD_SIZE", "LOCAL_RANK", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE",
    "SLURM_NODEID", "SLURM_LOCALID"};
#define NVARS (sizeof launcher_vars / sizeof *launcher_vars)

static void expect_node(int rank, int size, const char *src, int line) {
  zs_node_ranks_t n = zs__node_ranks();
  if (n.local_rank != rank || n.local_size != size || strcmp(n.source, src))
    ZS_T_REPORT("line %d: node ranks %d of %d (%s), wanted %d of %d (%s)", line, n.local_rank,
                n.local_size, n.source, rank, size, src);
}
#define EXPECT_NODE(r, s, src) expect_node((r), (s), (src), __LINE__)

static void test_node_ranks(void) {
  char *saved[NVARS];
  for (size_t i = 0; i < NVARS; i++) {
    const char *v = getenv(launcher_vars[i]);
    saved[i] = v ? strdup(v) : NULL;
    unsetenv(launcher_vars[i]);
  }
  zs__node_ranks_reset();
  EXPECT_NODE(0, 1, "default");
  setenv("SLURM_NTASKS_PER_NODE", "6", 1); /* a batch script's process: not a task */
  zs__node_ranks_reset();
  EXPECT_NODE(0, 1, "default");
  setenv("SLURM_LOCALID", "2", 1);
  zs__node_ranks_reset();
  EXPECT_NODE(2, 6, "SLURM_NTASKS_PER_NODE");
  setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2),3,5(x2)", 1); /* nodes 0-1: 4, 2: 3, 3-4: 5 */
  setenv("SLURM_NODEID", "2", 1);
  zs__node_ranks_reset();
  EXPECT_NODE(2, 3, "SLURM_STEP_TASKS_PER_NODE");
  setenv("SLURM_NODEID", "4", 1);
  zs__node_ranks_reset();
  EXPECT_NODE(2, 5, "SLURM_STEP_TASKS_PER_NODE");
  setenv("SLURM_NODEID", "5", 1); /* past the list: --ntasks-per-node */
  zs__node_ranks_reset();
  EXPECT_NODE(2, 6, "SLURM_NTASKS_PER_NODE");
  setenv("LOCAL_WORLD_SIZE", "8", 1); /* torchrun inside a Slurm job: torchrun's count */
  setenv("LOCAL_RANK", "7", 1);
  zs__node_ranks_reset();
  EXPECT_NODE(7, 8, "LOCAL_WORLD_SIZE");
  setenv("MPI_LOCALNRANKS", "3", 1);
  setenv("MPI_LOCALRANKID", "1", 1);
  zs__node_ranks_reset();
  EXPECT_NODE(1, 3, "MPI_LOCALNRANKS");
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "9", 1); /* out of range: rank 0 */
  zs__node_ranks_reset();
  EXPECT_NODE(0, 4, "OMPI_COMM_WORLD_LOCAL_SIZE");
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "four", 1); /* not a count: the next launcher's */
  zs__node_ranks_reset();
  EXPECT_NODE(1, 3, "MPI_LOCALNRANKS");

  /* the MPI comm's word wins over the environment; the largest count stays */
  zs__set_node_ranks(1, 2);
  EXPECT_NODE(1, 2, "the MPI comm");
  zs__set_node_ranks(0, 1); /* a sub-communicator sees less of the node */
  EXPECT_NODE(1, 2, "the MPI comm");
  zs__set_node_ranks(5, 4); /* invalid: ignored */
  zs__set_node_ranks(-1, 4);
  EXPECT_NODE(1, 2, "the MPI comm");
  zs__set_node_ranks(3, 5);
  EXPECT_NODE(3, 5, "the MPI comm");

  /* the default thread count follows, logged once per change */
  unsetenv("ZS_THREADS");
  unsetenv("OMP_NUM_THREADS");
  zs__settings_reload();
  zs_log_set_callback(keep_log, NULL);
  zs_log_set_level(ZS_LOG_INFO);
  last_log[0] = '\0';
  int t = zs__optim_threads();
  expect_str_contains(last_log, "5 ranks");
  expect_str_contains(last_log, "(the MPI comm)");
  last_log[0] = '\0';
  expect_int_eq(zs__optim_threads(), t);
  expect_true(last_log[0] == '\0'); /* unchanged inputs: no second line */
  setenv("OMP_NUM_THREADS", "3,2", 1);
  zs__settings_reload();
  expect_int_eq(zs__optim_threads(), 3);
  expect_str_contains(last_log, "CPU optimizer: 3 threads: OMP_NUM_THREADS=3");
  setenv("ZS_THREADS", "2", 1);
  zs__settings_reload();
  expect_int_eq(zs__optim_threads(), 2);
  expect_str_contains(last_log, "CPU optimizer: 2 threads: ZS_THREADS=2");
  zs__optim_set_threads(7); /* the call wins over everything */
  expect_int_eq(zs__optim_threads(), 7);
  zs__optim_set_threads(0);
  zs_log_set_level(ZS_LOG_WARN);
  zs_log_set_callback(NULL, NULL);
  unsetenv("ZS_THREADS");
  unsetenv("OMP_NUM_THREADS");
  zs__settings_reload();

  for (size_t i = 0; i < NVARS; i++) {
    if (saved[i]) setenv(launcher_vars[i], saved[i], 1);
    else unsetenv(launcher_vars[i]);
    free(saved[i]);
  }
  zs__node_ranks_reset();
}

int main(void) {
  zs_test_run(test_real_environment); /* must run first */
  zs_test_run(test_decide);
  zs_test_run(test_node_ranks);
  return zs_test_finish();
}
