/* zs-bench-offload: the offload pipeline's two costs and how much of one hides
 * behind the other.
 *
 *   zs-bench-offload [--device cpu|cuda] [--units U] [--unit-mb M] [--dtype fp32|bf16]
 *                    [--iters I] [--json]
 *
 * 1. Copies: host<->device copies of a unit's bytes through the engine's path
 *    (pinned memory from the pinned arena, zs_memcpy_async on a copy stream),
 *    against a plain copy of the same size (cuda: cudaMemcpyAsync between a
 *    cudaMallocHost buffer and device memory; cpu: memcpy on the calling thread).
 *    Reported as a fraction (target on a GPU: >= 0.9).
 * 2. The CPU step: U units of M MiB of fp32 parameters each, with fp32 master,
 *    m, v and gradient in pinned host memory, as the engine lays them out with
 *    offload. Times (a) the CPU AdamW over all units alone, (b) the host-to-device
 *    copies of the updated parameters alone, (c) zs__offload_step, which steps
 *    unit i while unit i-1's parameters travel. hidden = (a + b - c) / min(a, b):
 *    1 when the shorter of the two is fully hidden, 0 when nothing overlaps.
 *
 * --json prints one document: {"device","unit_bytes","units","dtype",
 *  "h2d_gbps","d2h_gbps","plain_h2d_gbps","plain_d2h_gbps","h2d_fraction",
 *  "d2h_fraction","cpu_step_s","copy_s","pipelined_s","hidden_fraction"}
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/common/check.h" // defines: CHECK_EXIT
#include "common/common.h"
#include "device/device_impl.h"
#include "offload/offload.h"
#include "optim/optim.h"
#ifdef ZS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct {
  int cuda, units, iters, json;
  size_t unit_elems;
  zs_dtype_t pdt;
} opts_t;

static int parse(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.units = 8, .iters = 5, .unit_elems = (size_t)8 << 20 >> 2, .pdt = ZS_FP32};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) o->json = 1;
    else if (!strcmp(a, "--device") && v) o->cuda = !strcmp(argv[++i], "cuda");
    else if (!strcmp(a, "--units") && v) o->units = atoi(argv[++i]);
    else if (!strcmp(a, "--unit-mb") && v) o->unit_elems = (size_t)(atof(argv[++i]) * 1048576.0) / 4;
    else if (!strcmp(a, "--iters") && v) o->iters = atoi(argv[++i]);
    else if (!strcmp(a, "--dtype") && v) o->pdt = !strcmp(argv[++i], "bf16") ? ZS_BF16 : ZS_FP32;
    else {
      fprintf(stderr, "usage: zs-bench-offload [--device cpu|cuda] [--units U] [--unit-mb M] [--dtype fp32|bf16]\n"
                      "                        [--iters I] [--json]\n");
      return -1;
    }
  }
  return o->units > 0 && o->iters > 0 && o->unit_elems > 0 ? 0 : -1;
}

static const char prog[] = "zs-bench-offload"; /* CHECK_EXIT's prefix */

/* Best time of `iters` runs of one copy direction through the engine's path. */
static double time_copies(zs_device_t *dev, zs_stream_t *s, void *dst, const void *src, size_t bytes,
                          zs_copy_kind_t kind, int iters) {
  double best = 1e30;
  for (int i = 0; i < iters; i++) {
    double t0 = zs__now();
    CHECK_EXIT(prog, zs_memcpy_async(dev, dst, src, bytes, kind, s));
    CHECK_EXIT(prog, zs_stream_synchronize(dev, s));
    double t = zs__now() - t0;
    if (t < best) best = t;
  }
  return best;
}

/* The plain copy of the same bytes: cudaMemcpyAsync from cudaMallocHost memory,
 * or memcpy on the calling thread for the cpu device. */
static void plain_copies(const opts_t *o, size_t bytes, double *h2d, double *d2h) {
  *h2d = *d2h = 1e30;
#ifdef ZS_HAVE_CUDA
  if (o->cuda) {
    void *h, *d;
    cudaStream_t s;
    if (cudaMallocHost(&h, bytes) || cudaMalloc(&d, bytes) || cudaStreamCreate(&s)) {
      fprintf(stderr, "zs-bench-offload: plain CUDA allocation failed\n");
      exit(1);
    }
    memset(h, 1, bytes);
    for (int i = 0; i < o->iters; i++) {
      double t0 = zs__now();
      cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s);
      cudaStreamSynchronize(s);
      double t1 = zs__now();
      cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s);
      cudaStreamSynchronize(s);
      double t2 = zs__now();
      if (t1 - t0 < *h2d) *h2d = t1 - t0;
      if (t2 - t1 < *d2h) *d2h = t2 - t1;
    }
    cudaFreeHost(h);
    cudaFree(d);
    cudaStreamDestroy(s);
    return;
  }
#endif
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) exit(1);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  for (int i = 0; i < o->iters; i++) {
    double t0 = zs__now();
    memcpy(b, a, bytes);
    double t1 = zs__now();
    memcpy(a, b, bytes);
    double t2 = zs__now();
    if (t1 - t0 < *h2d) *h2d = t1 - t0;
    if (t2 - t1 < *d2h) *d2h = t2 - t1;
  }
  free(a);
  free(b);
}

int main(int argc, char **argv) {
  opts_t o;
  if (parse(argc, argv, &o)) return 2;
  zs_device_t *dev;
  if (o.cuda) {
    if (zs_device_cuda_count() == 0) {
      fprintf(stderr, "zs-bench-offload: --device cuda but no GPU is visible\n");
      return 77;
    }
    CHECK_EXIT(prog, zs_device_create_cuda(&dev, 0));
  } else {
    CHECK_EXIT(prog, zs_device_create_cpu(&dev));
  }
  zs_stream_t *copy;
  CHECK_EXIT(prog, zs_stream_create(dev, &copy));
  const size_t n = o.unit_elems, U = (size_t)o.units, pb = zs_dtype_size(o.pdt);

  /* ---- 1. copies of one unit's parameters, both directions ---- */
  size_t cbytes = n * 4;
  void *hbuf, *dbuf;
  CHECK_EXIT(prog, zs_device_host_alloc(dev, cbytes, ZS_MEM_COMM, ZS_HOST_PINNED, &hbuf));
  CHECK_EXIT(prog, zs_device_alloc(dev, cbytes, ZS_MEM_COMM, &dbuf));
  memset(hbuf, 1, cbytes);
  CHECK_EXIT(prog, zs_memset_async(dev, dbuf, 0, cbytes, NULL));
  double h2d = time_copies(dev, copy, dbuf, hbuf, cbytes, ZS_COPY_H2D, o.iters);
  double d2h = time_copies(dev, copy, hbuf, dbuf, cbytes, ZS_COPY_D2H, o.iters);
  double ph2d, pd2h;
  plain_copies(&o, cbytes, &ph2d, &pd2h);

  /* ---- 2. the pipelined CPU step ---- */
  float *host[4]; /* master, m, v, grad: U*n each */
  for (int k = 0; k < 4; k++)
    CHECK_EXIT(prog, zs_device_host_alloc(dev, U * n * 4, ZS_MEM_OPTIMIZER, ZS_HOST_PINNED, (void **)&host[k]));
  void *stage[2] = {NULL, NULL}, *dparams;
  if (pb != 4)
    for (int k = 0; k < 2; k++)
      CHECK_EXIT(prog, zs_device_host_alloc(dev, n * pb, ZS_MEM_COMM, ZS_HOST_PINNED, &stage[k]));
  CHECK_EXIT(prog, zs_device_alloc(dev, U * n * pb, ZS_MEM_PARAMS, &dparams));
  for (size_t i = 0; i < U * n; i++) {
    host[0][i] = 0.01f * (float)(i % 97);
    host[1][i] = host[2][i] = 0.0f;
    host[3][i] = 0.001f * (float)(i % 89) - 0.04f;
  }
  zs_optim_seg_t *segs = calloc(U, sizeof *segs);
  void **dst = calloc(U, sizeof *dst);
  zs_offload_unit_t *units = calloc(U, sizeof *units);
  for (size_t u = 0; u < U; u++) {
    segs[u] = (zs_optim_seg_t){.master = host[0] + u * n, .m = host[1] + u * n, .v = host[2] + u * n,
                               .grad = host[3] + u * n, .param = pb != 4 ? stage[u % 2] : NULL, .n = n,
                               .lr_scale = 1.0f, .wd_scale = 1.0f};
    dst[u] = (char *)dparams + u * n * pb;
    units[u] = (zs_offload_unit_t){.segs = &segs[u], .nseg = 1, .dev_dst = &dst[u], .elem_bytes = pb,
                                   .staging_slot = pb != 4 ? (int)(u % 2) : -1};
  }
  zs_optim_hyper_t h = {.cfg = {.kind = ZS_ADAMW, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                .weight_decay = 0.01f},
                        .step = 1, .grad_mult = 1.0f, .grad_dtype = ZS_FP32, .param_dtype = o.pdt};
  zs_event_t *slot[2], *done;
  CHECK_EXIT(prog, zs_event_create(dev, &slot[0]));
  CHECK_EXIT(prog, zs_event_create(dev, &slot[1]));
  CHECK_EXIT(prog, zs_event_create(dev, &done));
  double step_s = 1e30, copy_s = 1e30, pipe_s = 1e30;
  for (int it = 0; it < o.iters; it++) {
    double t0 = zs__now();
    for (size_t u = 0; u < U; u++) CHECK_EXIT(prog, zs__optim_step_cpu(&h, &segs[u], 1));
    double t1 = zs__now();
    for (size_t u = 0; u < U; u++) {
      const void *src = pb != 4 ? stage[u % 2] : (const void *)segs[u].master;
      CHECK_EXIT(prog, zs_memcpy_async(dev, dst[u], src, n * pb, ZS_COPY_H2D, copy));
    }
    CHECK_EXIT(prog, zs_stream_synchronize(dev, copy));
    double t2 = zs__now();
    CHECK_EXIT(prog, zs__offload_step(dev, copy, &h, units, (int)U, slot, done));
    CHECK_EXIT(prog, zs_event_synchronize(dev, done));
    double t3 = zs__now();
    if (t1 - t0 < step_s) step_s = t1 - t0;
    if (t2 - t1 < copy_s) copy_s = t2 - t1;
    if (t3 - t2 < pipe_s) pipe_s = t3 - t2;
  }
  double shorter = step_s < copy_s ? step_s : copy_s;
  double hidden = (step_s + copy_s - pipe_s) / shorter;
  if (hidden < 0) hidden = 0;
  zs_memory_stats_t ms;
  zs_device_memory_stats(dev, &ms);

  const char *devname = o.cuda ? "cuda" : "cpu";
  double gb = (double)cbytes / 1e9;
  if (o.json) {
    printf("{\"device\": \"%s\", \"unit_bytes\": %zu, \"units\": %d, \"dtype\": \"%s\", \"h2d_gbps\": %.3f, "
           "\"d2h_gbps\": %.3f, \"plain_h2d_gbps\": %.3f, \"plain_d2h_gbps\": %.3f, \"h2d_fraction\": %.3f, "
           "\"d2h_fraction\": %.3f, \"cpu_step_s\": %.6f, \"copy_s\": %.6f, \"pipelined_s\": %.6f, "
           "\"hidden_fraction\": %.3f, \"pageable_copies\": %llu}\n",
           devname, cbytes, o.units, zs_dtype_name(o.pdt), gb / h2d, gb / d2h, gb / ph2d, gb / pd2h, ph2d / h2d,
           pd2h / d2h, step_s, copy_s, pipe_s, hidden, (unsigned long long)ms.pageable_copies);
  } else {
    printf("# zs-bench-offload on %s: %d units of %zu fp32 parameters (%s copies to the device)\n", devname, o.units,
           n, zs_dtype_name(o.pdt));
    printf("copies of %.1f MiB   engine path (pinned arena, copy stream)   plain          fraction\n",
           (double)cbytes / 1048576.0);
    printf("  host->device       %8.2f GB/s                         %8.2f GB/s   %.3f\n", gb / h2d, gb / ph2d,
           ph2d / h2d);
    printf("  device->host       %8.2f GB/s                         %8.2f GB/s   %.3f\n", gb / d2h, gb / pd2h,
           pd2h / d2h);
    printf("step: CPU AdamW alone %.2f ms, copies alone %.2f ms, pipelined %.2f ms: %.0f%% of the shorter hidden\n",
           step_s * 1e3, copy_s * 1e3, pipe_s * 1e3, 100.0 * hidden);
    printf("pageable copies: %llu\n", (unsigned long long)ms.pageable_copies);
  }

  for (int k = 0; k < 4; k++) zs_device_host_free(dev, host[k], U * n * 4, ZS_MEM_OPTIMIZER);
  for (int k = 0; k < 2; k++)
    if (stage[k]) zs_device_host_free(dev, stage[k], n * pb, ZS_MEM_COMM);
  zs_device_free(dev, dparams, U * n * pb, ZS_MEM_PARAMS);
  zs_device_host_free(dev, hbuf, cbytes, ZS_MEM_COMM);
  zs_device_free(dev, dbuf, cbytes, ZS_MEM_COMM);
  zs_event_destroy(dev, slot[0]);
  zs_event_destroy(dev, slot[1]);
  zs_event_destroy(dev, done);
  zs_stream_destroy(dev, copy);
  zs_device_destroy(dev);
  free(segs);
  free(dst);
  free(units);
  return 0;
}
