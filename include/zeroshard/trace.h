/* zeroshard/trace.h: timeline traces (Chrome trace JSON, for chrome://tracing
 * and Perfetto).
 *
 * ZS_TRACE=FILE (read once, with the other ZS_* settings) turns tracing on for
 * the process. Events are kept in memory, per process (a growable buffer under
 * a mutex), and written as {"traceEvents":[...]} to FILE.rank<r> by
 * zs_trace_flush, and at process exit; r is the rank of the first comm the
 * process made (its world rank), 0 without one. Every flush writes every event
 * recorded so far (the file is replaced), so flushing twice is harmless.
 *
 * What is recorded, each a complete event ("ph":"X", ts and dur in
 * microseconds of CLOCK_MONOTONIC, pid = the rank):
 *   cat "comm"    every collective, send and receive of every comm, from the
 *                 moment its backend starts running it to its end (the mpi
 *                 backend's progress thread); name = the kind (zs_coll_name),
 *                 or the label of the layer that issued it (a pipeline
 *                 transfer: "send_act 3.0" = micro-batch 3, chunk 0);
 *                 args: bytes_sent, bytes_recv (comm.h's formulas, the same as
 *                 zs_comm_stats), comm size. tid 2.
 *   cat "compute" the pipeline runtime's forward and backward callbacks: name
 *                 "F 3.0" / "B 3.0"; args: mb, chunk, stage. tid 1.
 *   cat "user"    ranges the trainer marks (below). tid 1.
 * Off (ZS_TRACE unset or empty), each hook is one branch on a cached flag.
 *
 * tools/zs_trace.c reads these files: `zs-trace merge OUT FILE.rank*` (one
 * file, for all ranks), `zs-trace bubble FILE...` (the measured pipeline
 * bubble), `zs-trace plot OUT.png FILE...` (a per-rank timeline, gnuplot).
 *
 * Thread rules: every function may be called from any thread. */
#ifndef ZEROSHARD_TRACE_H
#define ZEROSHARD_TRACE_H

#include <stdint.h>

#include "zeroshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if ZS_TRACE names a file (tracing is on), else 0. */
int zs_trace_enabled(void);
/* The trace clock: CLOCK_MONOTONIC in microseconds (comparable across the
 * processes of one machine). */
int64_t zs_trace_now_us(void);
/* A range [t0_us, t1_us] named `name` (copied; up to 63 bytes kept) on the
 * calling rank's compute row. Nothing when tracing is off. */
void zs_trace_range(const char *name, int64_t t0_us, int64_t t1_us);
/* The same, timed: begin opens a range on the calling thread (they nest, up to
 * 16 deep), end closes the innermost one. An end without a begin is ignored. */
void zs_trace_begin(const char *name);
void zs_trace_end(void);
/* Writes FILE.rank<r> now (see above). ZS_OK when tracing is off;
 * ZS_ERR_IO if the file cannot be written. */
zs_status_t zs_trace_flush(void);

#ifdef __cplusplus
}
#endif
#endif
