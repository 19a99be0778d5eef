/* train_device.c: zs-train-gpt's device and comm (train_device.h). The one
 * file of the program that knows whether the build has CUDA and NCCL. */
#include "train_device.h"

#include <stdio.h>

#if defined(ZS_GPT_CUDA) && defined(ZS_HAVE_NCCL)
#include "zeroshard/mpi.h"  // defines: zs_mpi_local_gpu, zs_comm_create_mpi
#include "zeroshard/nccl.h" // defines: zs_comm_create_nccl_mpi (and brings in mpi.h)

/* The GPU of this rank (zs_mpi_local_gpu: node-local rank modulo the GPUs
 * visible) and a NCCL comm over every rank, or with mpi (--comm mpi) the MPI
 * comm on that device (host staging: ranks may share a GPU, as NCCL refuses).
 * Initialises MPI if nobody has (*we_init then says to finalize it). */
static zs_status_t open_cuda(zs_device_t **dev, zs_comm_t **comm, int *we_init, int mpi) {
  int init = 0, provided = 0, gpu = -1;
  MPI_Initialized(&init);
  if (!init) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      fprintf(stderr, "zs-train-gpt: MPI_Init_thread failed\n");
      return ZS_ERR_COMM;
    }
    *we_init = 1;
  }
  zs_status_t st = zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu);
  if (st == ZS_ERR_DEVICE) {
    fprintf(stderr, "zs-train-gpt: --device cuda: %s; use --device cpu\n", zs_last_error());
    return ZS_ERR_UNSUPPORTED;
  }
  if (st == ZS_OK) st = zs_device_create_cuda(dev, gpu);
  if (st == ZS_OK)
    st = mpi ? zs_comm_create_mpi(comm, *dev, MPI_COMM_WORLD) : zs_comm_create_nccl_mpi(comm, *dev, MPI_COMM_WORLD);
  if (st != ZS_OK)
    fprintf(stderr, "zs-train-gpt: cannot create the cuda device %d and %s comm: %s (%s)\n", gpu, mpi ? "MPI" : "NCCL",
            zs_last_error(), zs_status_string(st));
  return st;
}

static void finalize_mpi(void) { MPI_Finalize(); }
#else
static zs_status_t open_cuda(zs_device_t **dev, zs_comm_t **comm, int *we_init, int mpi) {
  (void)dev, (void)comm, (void)we_init, (void)mpi;
  fprintf(stderr, "zs-train-gpt: --device cuda: this build has no CUDA model path or no NCCL (configure with "
                  "the CUDA toolkit and NCCL); use --device cpu\n");
  return ZS_ERR_UNSUPPORTED;
}

static void finalize_mpi(void) {}
#endif

zs_status_t train_device_open(const gpt_opts_t *o, zs_device_t **dev, zs_comm_t **comm, int *we_init) {
  *dev = NULL, *comm = NULL, *we_init = 0;
  zs_status_t st;
  if (o->device_cuda) {
    if ((st = open_cuda(dev, comm, we_init, o->comm_mpi)) != ZS_OK) train_device_close(*dev, *comm, *we_init);
    return st;
  }
  if (o->comm_nccl) {
    fprintf(stderr, "zs-train-gpt: --comm nccl needs --device cuda (NCCL moves device memory); the cpu device "
                    "uses MPI\n");
    return ZS_ERR_INVALID;
  }
  st = zs_device_create_cpu(dev);
  if (st == ZS_OK) st = zs_comm_create_mpi_world(comm, *dev);
  if (st != ZS_OK) {
    fprintf(stderr, "zs-train-gpt: cannot create the cpu device and MPI comm: %s (%s)\n", zs_last_error(),
            zs_status_string(st));
    zs_device_destroy(*dev);
  }
  return st;
}

void train_device_close(zs_device_t *dev, zs_comm_t *comm, int we_init) {
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
  if (we_init) finalize_mpi();
}
