/* zs_mpi_local_gpu: the GPU of a rank, from its place on its node.
 *
 * World rank modulo the GPU count is wrong as soon as a job spans nodes with a
 * placement other than "fill each node in turn": with two 2-GPU nodes and
 * round-robin placement (mpirun --map-by node), ranks 0 and 2 share node A and
 * both take GPU 0, while NCCL needs one GPU per rank. The node-local rank
 * (MPI_Comm_split_type MPI_COMM_TYPE_SHARED) is right for any placement.
 *
 * Launchers that bind GPUs themselves (Slurm --gpus-per-task, some container
 * setups) give each rank its own CUDA_VISIBLE_DEVICES: every rank then sees one
 * GPU, ordinal 0, and that is not sharing. So ranks are numbered among the ranks
 * of their node that have the same CUDA_VISIBLE_DEVICES (unset counts as one
 * value): without such binding that is the node-local rank itself.
 *
 * Uses the device layer's GPU count only (no CUDA here), so it is built with
 * every MPI build. */
#include <stdint.h>
#include <stdlib.h>

#include "comm/mpi_f2c.h"
#include "common/common.h"
#include "zeroshard/device.h"
#include "zeroshard/mpi.h"

/* FNV-1a of CUDA_VISIBLE_DEVICES as a non-negative split color; unset and ""
 * differ (CUDA reads "" as "no GPU"). */
static int visible_color(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  uint32_t h = 2166136261u;
  if (!v) return 1;
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) h = (h ^ *p) * 16777619u;
  return (int)(h & 0x7ffffffe); /* even: never the "unset" color */
}

static zs_status_t mpi_fail(const char *fn, const char *call, int rc) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: %s failed: %s", fn, call, msg);
}

static zs_status_t local_gpu(MPI_Comm comm, int *ordinal, const char *fn);

zs_status_t zs_mpi_local_gpu(MPI_Comm comm, int *ordinal) { return local_gpu(comm, ordinal, "zs_mpi_local_gpu"); }

zs_status_t zs_mpi_local_gpu_f(MPI_Fint fortran_comm, int *ordinal) {
  return local_gpu(zs__mpi_comm_f2c(fortran_comm), ordinal, "zs_mpi_local_gpu_f");
}

static zs_status_t local_gpu(MPI_Comm comm, int *ordinal, const char *fn) {
  if (!ordinal) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: ordinal is NULL", fn);
  *ordinal = -1;
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return ZS_FAIL(NULL, ZS_ERR_STATE, "%s: MPI is not initialized (call MPI_Init first)", fn);
  if (comm == MPI_COMM_NULL) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: comm is MPI_COMM_NULL", fn);
  const int ngpu = zs_device_cuda_count();

  /* the collectives first, on every rank, so that a rank without a GPU fails
   * alone instead of leaving the others in the split */
  int rank = 0, node_rank = 0, node_size = 0, lrank = 0, lsize = 0, rc;
  MPI_Comm node = MPI_COMM_NULL, group = MPI_COMM_NULL;
  MPI_Comm_rank(comm, &rank);
  if ((rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node)) != MPI_SUCCESS)
    return mpi_fail(fn, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)", rc);
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  rc = MPI_Comm_split(node, visible_color(), 0, &group);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS) return mpi_fail(fn, "MPI_Comm_split (ranks with the same CUDA_VISIBLE_DEVICES)", rc);
  MPI_Comm_rank(group, &lrank);
  MPI_Comm_size(group, &lsize);
  MPI_Comm_free(&group);

  if (ngpu <= 0) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    return ZS_FAIL(NULL, ZS_ERR_DEVICE,
                   "%s: rank %d sees no CUDA GPU (CUDA_VISIBLE_DEVICES=%s%s%s; or this build has no CUDA): run "
                   "on a node with GPUs, fix the launcher's GPU binding, or use a cpu device",
                   fn, rank, v ? "'" : "unset", v ? v : "", v ? "'" : "");
  }
  *ordinal = lrank % ngpu;
  if (lsize > ngpu && lrank == 0)
    ZS_LOG_W("%s: %d ranks on this node see the same %d GPU(s), so some share one (rank %d: GPU %d); NCCL needs "
             "one GPU per rank: run at most %d ranks per node, or use zs_comm_create_mpi (host staging)",
             fn, lsize, ngpu, rank, *ordinal, ngpu);
  ZS_LOG_D("%s: rank %d is rank %d of %d on its node (%d of %d with its CUDA_VISIBLE_DEVICES): GPU %d of %d", fn,
           rank, node_rank, node_size, lrank, lsize, *ordinal, ngpu);
  return ZS_OK;
}
