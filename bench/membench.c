/* zs-membench: per-rank model-state memory of the engine beside the ZeRO table,
 * the peak, the traffic per step beside theory, and step time, per stage.
 *
 *   mpiexec -n 4 zs-membench --model gpt [--layers 2 --channels 64 --heads 4 --vocab 256 --seq 64]
 *       [--batch 1] [--no-compute] [--tp N [--sequence-parallel]]
 *   mpiexec -n 4 zs-membench --units 1000,3000,517
 *   common: [--stages 0,1,2,3] [--dtype fp32|bf16] [--reduce-dtype fp32|bf16] [--offload]
 *           [--delayed] [--offload-param] [--nvme DIR [--nvme-chunk N]] [--compute-ms X]
 *           [--prefetch K] [--device cpu|cuda] [--steps 3] [--json] [--plot FILE.png]
 *           [--ranks-per-node R]
 *
 * World size is the number of ranks it was launched with. For each stage (and,
 * with --offload, each of stages 1-3 again with the optimizer state on the host)
 * it builds an engine, declares the model, runs --steps steps and measures on
 * every rank. ZeRO-Infinity's tiers add runs: --nvme DIR each of stages 1-3
 * again with the optimizer state (master, m, v, and the fp32 gradient shard)
 * in the NVMe tier, one file a
 * rank under DIR (a disk's file system: the tier uses direct I/O; tmpfs has
 * none), chunks of --nvme-chunk elements; --offload-param stage 3 again with
 * every parameter shard in host memory (and the optimizer state there too),
 * or, with --nvme, makes --nvme's stage 3 run keep the parameter shards on
 * disk as well. Measured:
 *   model_state_bytes       device-domain params + grads + optimizer after zs_step
 *   host_model_state_bytes  the same in the host domain (offload)
 *   nvme_model_state_bytes  the same in the accountant's nvme domain (the tier's
 *                           file, by category), beside nvme_file_bytes, the file's
 *                           size (zs_engine_nvme_stats, and fstat(2)'s of the open file)
 *   formula_bytes           docs/design.md's table computed here from the shapes alone
 *                           (not from the engine's layout): each parameter starts
 *                           at a multiple of 64 elements, a unit is padded to a
 *                           multiple of 64 x ranks, shard = padded / ranks; for
 *                           the host and the tier (host_formula_bytes,
 *                           nvme_formula_bytes) 3.3 and 3.3.1 likewise: the file
 *                           is each shard cut into chunks, a record a chunk of its
 *                           fields padded to 4 KiB, twice for trainable units,
 *                           and their fp32 gradient shards once
 *   peak_bytes              the device domain's peak over the run (from engine
 *                           creation on; the peaks are reset before each run)
 *   comm_bytes_per_step     bytes sent per step over every collective kind, after
 *                           the first step (mb_measured_steps)
 *                           (zs_engine_comm_stats), beside the ZeRO traffic and the
 *                           gradient norm's all-reduce; split into what rank 0's
 *                           comm groups inside one node and those spanning nodes
 *                           carry (comm_bytes_intra, comm_bytes_inter, each beside
 *                           theory and formula; membench_links.c), nodes of
 *                           --ranks-per-node R consecutive ranks or MPI's
 *   step_s                  mean step time after the first step, max over ranks
 *   step_min_s              each rank's fastest step after the first, max over
 *                           ranks (where the CPUs are shared, the step that
 *                           sharing slowed least)
 * --units N1,N2,...: one parameter of Ni elements per unit, no compute (gather /
 * release, gather / reduce only); --compute-ms X emulates X ms of accelerator
 * compute per round as a sleep split between forward and backward (the host is
 * idle meanwhile, as when a GPU computes), so --delayed (offloaded runs again
 * with the delayed parameter update) shows how much of the CPU step it hides. --model gpt: the example GPT's units, with its
 * forward and backward on a tiny batch (--batch sequences per rank) unless
 * --no-compute. --tp N splits the GPT Megatron-style over tp groups of N
 * neighbouring ranks (examples/gpt/gpt_tp.c; --sequence-parallel its sp form):
 * a mesh (dp) x tp, or (dp_replicate x dp_shard) x tp with --shard-group, the
 * engine over it (zs_engine_create_mesh: ZeRO over the world/N data-parallel
 * ranks, or over each shard group of them), each rank declaring its part's shapes
 * (ZS_PARAM_MP_REPLICATED on the replicated ones). It adds per rank: the
 * parameters declared against replicated + split/tp, the activation bytes a
 * layer keeps against 4(4 Nr C + 4 Nr + 12 N C/tp + B (NH/tp) T^2), and the tp
 * comm's bytes per step against theory (mb_gpt_tp_comm_theory); a difference
 * is a mismatch (exit 3), as for the model state.
 *
 * Output: rank 0 prints a table for people (stdout; stderr with --json) and,
 * with --json, one JSON document on stdout (see membench_report.c). Exit codes:
 * 0 every rank's model_state_bytes (and host_model_state_bytes,
 * nvme_model_state_bytes and the tier file's size) equals the formula; 3 a
 * mismatch (listed); 2 bad flags; 77 this build or machine
 * cannot run what was asked (no example GPT, no CUDA/NCCL or no GPU, --nvme
 * without liburing: CTest's skip code); 1 a run failed. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/wquant.h"
#include "membench.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/mpi.h"
#ifdef ZS_HAVE_NCCL
#include "zeroshard/nccl.h"
#endif

int mb_rank, mb_world;
zs_device_t *mb_dev;
zs_comm_t *mb_comm;

/* ============================================================================
 * failing: messages from rank 0 for collective problems, from the rank itself otherwise
 * ========================================================================== */

_Noreturn void mb_finish(int code) {
  zs_comm_destroy(mb_comm);
  zs_device_destroy(mb_dev);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
  exit(code);
}

/* Same on every rank (flags, configuration): rank 0 says it, everyone exits. */
_Noreturn void mb_die_all(int code, const char *fmt, const char *arg) {
  if (mb_rank == 0) {
    fprintf(stderr, "zs-membench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
  }
  mb_finish(code);
}

/* One rank failed in a collective run: the others may be waiting on it. */
_Noreturn void mb_die_rank(zs_status_t st, const char *what, const char *detail) {
  fprintf(stderr, "zs-membench [rank %d]: %s: %s (%s)\n", mb_rank, what, detail && *detail ? detail : zs_status_string(st),
          zs_status_name(st));
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* Every rank's figures on rank 0, through the comm (device staging buffers, so
 * the same code serves the nccl comm of a cuda device). */
static void gather_ranks(const mb_rank_t *me, mb_rank_t *all) {
  size_t b = sizeof *me;
  void *ds = NULL, *dr = NULL;
  zs_status_t st;
  if ((st = zs_device_alloc(mb_dev, b, ZS_MEM_OTHER, &ds)) != ZS_OK ||
      (st = zs_device_alloc(mb_dev, b * (size_t)mb_world, ZS_MEM_OTHER, &dr)) != ZS_OK ||
      (st = zs_memcpy_async(mb_dev, ds, me, b, ZS_COPY_H2D, NULL)) != ZS_OK ||
      (st = zs_comm_gather(mb_comm, ds, dr, b, ZS_UINT8, 0, NULL)) != ZS_OK ||
      (mb_rank == 0 && (st = zs_memcpy_async(mb_dev, all, dr, b * (size_t)mb_world, ZS_COPY_D2H, NULL)) != ZS_OK) ||
      (st = zs_stream_synchronize(mb_dev, NULL)) != ZS_OK)
    mb_die_rank(st, "gathering the figures", zs_last_error());
  zs_device_free(mb_dev, ds, b, ZS_MEM_OTHER);
  zs_device_free(mb_dev, dr, b * (size_t)mb_world, ZS_MEM_OTHER);
}

/* Ranks on this machine, from the launcher's environment (Open MPI, MPICH). */
static int local_ranks(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  return mb_world;
}

/* ============================================================================
 * main
 * ========================================================================== */

static void open_device(const mb_opts_t *o) {
  zs_status_t st;
  if (o->cuda) {
#ifdef ZS_HAVE_NCCL
    if (zs_device_cuda_count() == 0) mb_die_all(77, "%s", "--device cuda: no usable CUDA device on this machine");
    int gpu = -1; /* the node-local rank's GPU */
    if ((st = zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu)) != ZS_OK || (st = zs_device_create_cuda(&mb_dev, gpu)) != ZS_OK)
      mb_die_rank(st, "--device cuda", zs_last_error());
    if ((st = zs_comm_create_nccl_mpi(&mb_comm, mb_dev, MPI_COMM_WORLD)) != ZS_OK) mb_die_rank(st, "NCCL comm", zs_last_error());
#else
    mb_die_all(77, "%s", "--device cuda: this build has no CUDA and NCCL (configure with -DZS_CUDA=ON on a machine with both)");
#endif
  } else {
    if ((st = zs_device_create_cpu(&mb_dev)) != ZS_OK) mb_die_rank(st, "cpu device", zs_last_error());
    if ((st = zs_comm_create_mpi(&mb_comm, mb_dev, MPI_COMM_WORLD)) != ZS_OK) mb_die_rank(st, "MPI comm", zs_last_error());
  }
}

static int qg_k; /* qgZ's group: --quantized-grads-group, or the ranks of a node */

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &mb_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mb_world);
  if (provided < MPI_THREAD_MULTIPLE) mb_die_all(2, "%s", "this MPI does not provide MPI_THREAD_MULTIPLE");
  mb_opts_t o = mb_parse(argc, argv);

  mb_model_t m;
  char err[256];
  if (o.gpt) {
    if (!mb_gpt_available()) mb_die_all(77, "%s", "--model gpt: this build has no example GPT (it needs a CBLAS: apt-get install libopenblas-dev)");
    if (mb_gpt_model(&o, &m, err, sizeof err)) mb_die_all(2, "%s", err);
    if (o.cuda && o.compute) {
      if (mb_rank == 0) fprintf(stderr, "zs-membench: the example GPT computes on the CPU only: --device cuda runs --no-compute\n");
      o.compute = 0;
    }
  } else {
    mb_units_model(&o, &m);
  }
  open_device(&o);
  if (o.qg && !o.qg_group && o.ranks_per_node) o.qg_group = o.ranks_per_node; /* the emulated node */
  const int node_size = mb_links_node_size(&o);
  if (o.qg) { /* the group the engine will use: given, or this node's ranks */
    qg_k = o.qg_group;
    if (!qg_k && zs_comm_node(mb_comm, NULL, &qg_k, NULL) != ZS_OK) mb_die_rank(ZS_ERR_COMM, "the node layout", zs_last_error());
  }
  if (o.gpt && o.compute) mb_gpt_threads(local_ranks());
  void **pslot = calloc((size_t)m.nparams, sizeof *pslot);
  void **gslot = calloc((size_t)m.nparams, sizeof *gslot);
  if (!pslot || !gslot) mb_die_all(1, "%s", "out of host memory");

  /* the runs: each stage; with --offload stages 1-3 again, offloaded; with
   * --delayed again with the delayed update; with --offload-param (no --nvme)
   * stage 3 with its parameter shards in host memory; with --nvme stages 1-3
   * with the optimizer state on disk (stage 3's parameters too with --offload-param) */
  int nres = 0;
  mb_result_t res[16];
  memset(res, 0, sizeof res);
  for (int i = 0; i < o.nstages; i++) res[nres++] = (mb_result_t){.stage = o.stages[i]};
  for (int i = 0; o.offload && i < o.nstages; i++)
    if (o.stages[i] > 0) res[nres++] = (mb_result_t){.stage = o.stages[i], .offload = 1};
  for (int i = 0; o.delayed && i < o.nstages; i++)
    if (o.stages[i] > 0) res[nres++] = (mb_result_t){.stage = o.stages[i], .offload = 1, .delayed = 1};
  for (int i = 0; o.offload_param && !o.nvme && i < o.nstages; i++)
    if (o.stages[i] == 3) res[nres++] = (mb_result_t){.stage = 3, .offload = 1, .param = ZS_OFFLOAD_CPU};
  for (int i = 0; o.nvme && i < o.nstages; i++)
    if (o.stages[i] > 0)
      res[nres++] = (mb_result_t){.stage = o.stages[i], .offload = 1, .nvme = 1,
                                  .param = o.stages[i] == 3 && o.offload_param ? ZS_OFFLOAD_NVME : ZS_OFFLOAD_NONE};

  size_t pb = zs_dtype_size(o.dtype), rb = zs_dtype_size(o.reduce_dtype);
  for (int r = 0; r < nres; r++) {
    mb_result_t *x = &res[r];
    mb_rank_t me;
    mb_run_one(&o, &m, x, pslot, gslot, &me);
    if (mb_rank == 0) {
      x->ranks = calloc((size_t)mb_world, sizeof *x->ranks);
      if (!x->ranks) mb_die_rank(ZS_ERR_NOMEM, "results", "out of host memory");
    }
    gather_ranks(&me, x->ranks);
    if (mb_rank != 0) continue;
    double steps = mb_measured_steps(&o);
    for (int k = 0; k < mb_world; k++) {
      const mb_rank_t *b = &x->ranks[k];
      x->step_s = b->step_s > x->step_s ? b->step_s : x->step_s;
      x->step_min_s = b->step_min_s > x->step_min_s ? b->step_min_s : x->step_min_s;
      x->allocs_per_step = fmax(x->allocs_per_step, (double)b->backend_allocs / steps);
      x->frees_per_step = fmax(x->frees_per_step, (double)b->backend_frees / steps);
      x->syncs_per_step = fmax(x->syncs_per_step, (double)b->device_syncs / steps);
      x->waits_per_step = fmax(x->waits_per_step, (double)b->host_waits / steps);
    }
    x->comm_bytes_per_step = (double)x->ranks[0].comm_bytes / mb_measured_steps(&o);
    x->comm_inter_bytes_per_step = (double)x->ranks[0].comm_inter / mb_measured_steps(&o);
    const int dpw = mb_world / o.tp; /* the data-parallel ranks ZeRO spans */
    x->shard_group = x->stage > 0 && o.shard_group > 0 ? o.shard_group : dpw;
    size_t qwb = o.quantized_weights ? (o.qw_block ? (size_t)o.qw_block : ZS_WQ_BLOCK_DEFAULT) : 0;
    size_t qgb = o.qw_block ? (size_t)o.qw_block : ZS_WQ_BLOCK_DEFAULT; /* the block qgZ packs with */
    x->comm_theory = mb_comm_theory(&o, &m, x->stage, pb, rb, x->shard_group, qwb, o.hpz, o.qg ? qg_k : 0,
                                 qgb, mb_norm_slots(dpw, o.tp), &x->comm_norm);
    /* with the tier every rank agrees twice a step (zs__eng_agree: one int64 all-reduced over the
     * engine's world each): that this step's data arrived, before the norm, and that every rank
     * wrote every chunk, before the commit */
    x->comm_agree = (x->nvme || x->param == ZS_OFFLOAD_NVME) && dpw > 1 ? 2 * (2 * (int64_t)(dpw - 1) * 8 / dpw) : 0;
    x->comm_inter_theory = x->shard_group < dpw ? mb_comm_inter_theory(&o, &m, rb, x->shard_group, dpw / x->shard_group,
                                                                        mb_norm_slots(dpw, o.tp)) : 0;
    x->comm_theory += x->comm_inter_theory;
    /* the same by comm group: the norm on the shard group, the tier's agreements on the world comm */
    mb_comm_theory_groups(&o, &m, x->stage, pb, rb, x->shard_group, qwb, o.hpz, o.qg ? qg_k : 0, qgb, x->group_theory);
    x->group_theory[MB_G_SHARD] += x->comm_norm;
    /* with --tp the norm's buffer is all-reduced across the tp ranks too (the engine's model-parallel comm) */
    x->group_theory[MB_G_MODEL] = o.tp > 1 ? 2 * (int64_t)(o.tp - 1) * 8 * mb_norm_slots(dpw, o.tp) / o.tp : 0;
    x->comm_norm += x->group_theory[MB_G_MODEL];
    x->group_theory[MB_G_WORLD] += x->comm_agree;
    x->group_theory[MB_G_REPLICA] = x->comm_inter_theory;
    if (x->shard_group == dpw) x->group_theory[MB_G_WORLD] += x->group_theory[MB_G_SHARD], x->group_theory[MB_G_SHARD] = 0;
    if (node_size) mb_links_split(&o, x, dpw, qg_k, node_size);
    for (int u = 0; u < m.nunits; u++) x->padded += mb_unit_padded(&o, &m, u, x->shard_group);
  }

  int code = 0;
  if (mb_rank == 0) {
    mb_report_t rep = {.o = &o, .m = &m, .world = mb_world, .device = o.cuda ? "cuda" : "cpu", .res = res, .nres = nres,
                       .node_size = node_size};
    for (int u = 0; u < m.nunits; u++) rep.padded_world += mb_unit_padded(&o, &m, u, mb_world / o.tp);
    mb_report_table(&rep, o.json ? stderr : stdout);
    if (o.json) mb_report_json(&rep, stdout);
    fflush(stdout);
    if (o.plot) mb_report_plot(&rep, o.plot);
    for (int r = 0; r < nres; r++)
      if (!mb_result_ok(&res[r], mb_world)) code = 3;
    if (code) fprintf(stderr, "zs-membench: measured model-state bytes differ from the formula (see the table)\n");
  }
  /* every rank exits with rank 0's verdict */
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int r = 0; r < nres; r++) free(res[r].ranks);
  free(pslot), free(gslot), free(o.units);
  mb_model_free(&m);
  mb_finish(code);
  return code;
}
