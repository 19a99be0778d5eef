/* Memory of a torch::nn module trained through the libtorch adapter: the
 * engine's accountant equals the ZeRO formulas for fp32 AdamW per stage
 * (params 4psi at stages 0-2 / 4psi/N at 3, grads 4psi at 0-1 / 4psi/N at 2-3,
 * m and v 8psi at 0 / 8psi/N at 1-3: psi counted padded as the engine lays it
 * out), and at stage 3 the process holds no second full copy of the model:
 * its resident set grows by what the engine holds (accountant + its cache),
 * not by that plus the module's own parameters or gradients.
 * Prints the table README.md quotes (rank 0). */
#include <zeroshard/torch.hpp>
#include <zeroshard/zeroshard.h>

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "harness.h"

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static const int64_t WIDTH = 1024, LAYERS = 8;

static torch::nn::Sequential model() {
  torch::manual_seed(1);
  torch::nn::Sequential s;
  for (int i = 0; i < LAYERS; i++) s->push_back(torch::nn::Linear(WIDTH, WIDTH));
  return s;
}

static uint64_t rss_bytes(void) {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void train(zs_torch::ShardedSequential &f, int steps) {
  auto x = torch::randn({4, WIDTH});
  for (int s = 0; s < steps; s++) {
    f.forward(x).square().mean().backward();
    f.step();
  }
}

static double mib(uint64_t b) { return (double)b / (1 << 20); }

static void test_formulas(void) {
  if (rank == 0)
    printf("%-6s %5s %11s %11s %11s %11s %9s\n", "stage", "ranks", "params MiB", "grads MiB", "optim MiB",
           "formula", "psi");
  for (int stage = 0; stage <= 3; stage++) {
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = stage;
    auto m = model();
    zs_torch::ShardedSequential f(m, c, dev, world);
    train(f, 2);
    uint64_t P = 0, S = 0, psi = 0;
    for (int u = 0; u < f.num_units(); u++) {
      int64_t numel, padded, shard;
      assert_ok(zs_unit_layout(f.engine(), u, &numel, &padded, &shard));
      expect_int_eq(padded, shard * nranks);
      P += (uint64_t)padded;
      S += (uint64_t)shard;
      psi += (uint64_t)numel;
    }
    expect_u64_eq(psi, (uint64_t)LAYERS * (WIDTH * WIDTH + WIDTH));
    uint64_t want_params = 4 * (stage <= 2 ? P : S), want_grads = 4 * (stage <= 1 ? P : S),
             want_optim = 8 * (stage == 0 ? P : S);
    zs_memory_stats_t s = f.memory_stats();
    const uint64_t *d = s.current[ZS_DOMAIN_DEVICE];
    expect_u64_eq(d[ZS_MEM_PARAMS], want_params);
    expect_u64_eq(d[ZS_MEM_GRADS], want_grads);
    expect_u64_eq(d[ZS_MEM_OPTIMIZER], want_optim);
    expect_u64_eq(d[ZS_MEM_GATHER], 0); /* between steps nothing stays gathered */
    if (rank == 0)
      printf("%-6d %5d %11.2f %11.2f %11.2f %11.2f %9llu\n", stage, nranks, mib(d[ZS_MEM_PARAMS]),
             mib(d[ZS_MEM_GRADS]), mib(d[ZS_MEM_OPTIMIZER]), mib(want_params + want_grads + want_optim),
             (unsigned long long)psi);
  }
}

/* Stage 3: the resident set grows by the engine's bytes. The module is built
 * (its full fp32 parameters allocated by libtorch), handed to the adapter,
 * trained; the module's own parameter memory must be gone and no full-size
 * gradient must have been kept. glibc keeps freed heap memory, so large blocks
 * are mmapped here (returned on free) and the heap is trimmed before reading. */
static void test_stage3_rss(void) {
#ifdef ZS_SANITIZED
  zs_test_skip("the resident set of a sanitized process is not the program's");
#endif
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  {
    /* warm-up: what a first run touches once (MPI's shared-memory queues, the
     * allocators' arenas, libtorch's autograd state) is not the model's */
    torch::manual_seed(1);
    torch::nn::Sequential small(torch::nn::Linear(WIDTH, WIDTH));
    zs_config_t w = ZS_CONFIG_INIT;
    w.stage = 3;
    zs_torch::ShardedSequential f(small, w, dev, world);
    train(f, 2);
  }
  malloc_trim(0);
  const uint64_t full = (uint64_t)LAYERS * (WIDTH * WIDTH + WIDTH) * 4; /* one fp32 copy */
  uint64_t base = rss_bytes();
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  auto m = model();
  uint64_t with_module = rss_bytes();
  expect_true(with_module - base > full * 9 / 10); /* the measurement sees the module */
  zs_torch::ShardedSequential f(m, c, dev, world);
  auto x = torch::randn({4, WIDTH});
  f.forward(x).square().mean().backward();
  malloc_trim(0);
  zs_memory_stats_t s = f.memory_stats();
  uint64_t engine = s.current_total[ZS_DOMAIN_DEVICE] + s.current_total[ZS_DOMAIN_HOST] + s.cache_bytes;
  uint64_t after_backward = rss_bytes() - base;
  f.step();
  train(f, 2);
  malloc_trim(0);
  s = f.memory_stats();
  uint64_t engine_end = s.current_total[ZS_DOMAIN_DEVICE] + s.current_total[ZS_DOMAIN_HOST] + s.cache_bytes;
  uint64_t after_steps = rss_bytes() - base;
  /* allowance: libtorch's and the allocators' own, far below one model copy */
  const uint64_t slack = full / 4;
  expect_int_le(after_backward, engine + slack);
  expect_int_le(after_steps, engine_end + slack);
  expect_int_ge(after_steps + slack, engine_end); /* and it does see the engine's memory */
  if (rank == 0)
    printf("stage 3, %d ranks: model %.1f MiB; RSS growth %.1f MiB after backward (engine %.1f), %.1f MiB after 3 "
           "steps (engine %.1f), formula 16psi/N = %.1f MiB\n",
           nranks, mib(full), mib(after_backward), mib(engine), mib(after_steps), mib(engine_end),
           mib(full * 4 / (uint64_t)nranks));
}

/* an exception out of a test is that test's failure (its message printed) */
static void (*current_test)(void);
static void guarded(void) {
  try {
    current_test();
  } catch (const std::exception &e) {
    ZS_T_REPORT("unexpected exception: %s", e.what());
  }
}
#define run_test(fn) (current_test = (fn), zs_test_run_named(#fn, guarded))

int main(void) {
  torch::set_num_threads(1);
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&world, dev) != ZS_OK) {
    fprintf(stderr, "setup: %s\n", zs_last_error());
    return 1;
  }
  rank = zs_t_rank = zs_comm_rank(world);
  nranks = zs_comm_size(world);
  run_test(test_stage3_rss); /* first: a clean heap */
  run_test(test_formulas);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return zs_test_finish();
}
