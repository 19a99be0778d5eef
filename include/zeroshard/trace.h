/* zeroshard/trace.h: timeline traces (Chrome trace JSON, for chrome://tracing
 * and Perfetto), and NVTX ranges on CUDA builds.
 *
 * ZS_TRACE=FILE (read once, with the other ZS_* settings) or zs_trace_start(FILE)
 * turns tracing on for the process. FILE is checked as zs_trace_start checks
 * it, when the trace layer first reads ZS_TRACE: at the first comm the process
 * makes (or a traced call before it), so before any training. A FILE whose
 * directory does not exist or cannot be written, or too long a name, is then
 * an error in the log ("ZS_TRACE: cannot write trace files in 'DIR' ...;
 * tracing is off") and tracing stays off, as zs_trace_start refuses such a
 * FILE: the run is not left to find out at exit, from zs_trace_flush's
 * ZS_ERR_IO, that its trace is lost. Events are kept in memory, per process (a
 * growable buffer under a mutex), and written as {"traceEvents":[...]} to
 * FILE.rank<r> by zs_trace_flush, by zs_comm_destroy and at process exit; r is
 * the rank of the first comm the process made (its world rank; recorded whether
 * tracing was on then or not), 0 without one. Every flush writes every event
 * recorded so far (the file is replaced), so flushing twice is harmless.
 *
 * What is recorded, each a complete event ("ph":"X", ts and dur in
 * microseconds of CLOCK_MONOTONIC, pid = the rank), by row (tid):
 *   tid 1 "compute": the trainer's thread
 *     cat "user"     ranges the trainer marks (below). A range named "step N"
 *                    (N an integer) delimits step N for `zs-trace bubble`.
 *     cat "compute"  the pipeline runtime's forward and backward callbacks:
 *                    name "F 3.0" / "B 3.0"; args: mb, chunk, stage.
 *     cat "engine"   the engine's calls, from the call to its return:
 *                    "gather blk.3" (until the unit's parameters are ready:
 *                    on the cpu device, whose compute stream is the caller's
 *                    thread, the call waits for the all-gather; on a cuda
 *                    stream it returns once the wait is queued, and the
 *                    all-gather's comm event shows the transfer), "release
 *                    blk.3", "reduce blk.3" (queues the reduce-scatter or
 *                    all-reduce, whose comm event has the bytes); args: unit,
 *                    bytes (the unit's padded bytes in the parameter dtype: what
 *                    a gather holds, or the gradients a reduce sums; 0 for a
 *                    frozen unit's reduce, and for a backward gather of a unit
 *                    of ZS_PARAM_BACKWARD_UNREAD parameters, which gathers
 *                    nothing).
 *   tid 2 "comm": every collective, send and receive of every comm (cat
 *                    "comm"), from the moment its backend starts running it to
 *                    its end: on the mpi backend as its progress thread runs
 *                    it; on the nccl backend as the GPU runs the call's work on
 *                    its stream (the comm's watchdog records the event once
 *                    the GPU has finished it, a poll later: up to ~16 ms, and
 *                    by the time zs_comm_destroy returns; a trace stopped
 *                    right after a synchronize may lack a live comm's last
 *                    calls); name = the kind (zs_coll_name), or the label of
 *                    the layer that issued it (a pipeline transfer: "send_act
 *                    3.0" = micro-batch 3, chunk 0); args: bytes_sent,
 *                    bytes_recv (comm.h's formulas, the same as
 *                    zs_comm_stats), comm size.
 *   tid 3 "optimizer": cat "engine", the optimizer's update, one "update step
 *                    N" event a step, N the step count it makes (args: step,
 *                    segments, elements; with offload: step, units, and
 *                    delayed 1 for the delayed update), with offload one
 *                    "update blk.3" inside it per unit (args: unit, elements);
 *                    the delayed update (ZeRO-Offload's DPU) records them on
 *                    its own thread while the trainer goes on; the NVMe tier's
 *                    is "nvme update step N".
 *                    Without offload the update is a device call on the
 *                    engine's compute stream: on the cpu device with the
 *                    default (NULL) stream the event is the update itself, on
 *                    a stream it is the queuing.
 *   tid 4 "offload copies": cat "engine", the offload copies as the copy
 *                    stream runs them: "grad d2h blk.3" (a reduced gradient
 *                    shard to the host; args: unit, bytes) and "param h2d
 *                    blk.3" (a unit's updated parameters back; args: unit,
 *                    bytes = its shard's parameter elements x the parameter
 *                    dtype's size). Not recorded: the delayed update's copies
 *                    back (zs_step's own, after it joins the update thread).
 * zs_step's other phases show as what they run: the gradient norm's
 * all-reduce(s) and stages 1-2's parameter all-gathers on the comm row, the
 * update on the optimizer row; a trainer that wants the whole call marks it
 * with zs_trace_begin("zs_step")/zs_trace_end.
 * Off (ZS_TRACE unset or empty and no zs_trace_start), each hook is one branch
 * on a cached flag.
 *
 * NVTX: a library built with CUDA (ZS_CUDA, where the toolkit has
 * nvtx3/nvToolsExt.h) also pushes and pops an NVTX range, on the thread that
 * runs it, for every range timed where it runs: zs_trace_begin/end, the
 * engine's calls and updates, the pipeline's forwards and backwards and every
 * mpi comm call on its progress thread; not for zs_trace_range (after the
 * fact), the nccl comm's calls (recorded after the fact; nsys shows NCCL's
 * kernels) or the copies (nsys shows those on the CUDA rows). NVTX is on whenever tracing
 * is on, and with ZS_NVTX=1 alone (for nsys, without the JSON files).
 *
 * tools/zs_trace.c reads these files: `zs-trace merge OUT FILE.rank*` (one
 * file, for all ranks), `zs-trace bubble FILE...` (the measured pipeline
 * bubble, per "step N" range when the trainer marks them), `zs-trace plot
 * OUT.png FILE...` (a per-rank timeline, gnuplot), `zs-trace summary FILE...`
 * (where a step's time goes: per row, event kind and rank, count, total, mean
 * and share; docs/pipeline.md).
 *
 * Thread rules: every function may be called from any thread. */
#ifndef ZEROSHARD_TRACE_H
#define ZEROSHARD_TRACE_H

#include <stdint.h>

#include "zeroshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if tracing is on (ZS_TRACE names a file, or zs_trace_start was called),
 * else 0. */
int zs_trace_enabled(void);
/* Turns tracing on as ZS_TRACE=FILE does (for a trainer's --trace FILE):
 * events from now on are recorded and written to FILE.rank<r> (the rank rule
 * above). It may be called before or after the first comm is made; events
 * before the call are not recorded. Called again, or with ZS_TRACE set, FILE
 * replaces the earlier name: the events recorded so far are written under the
 * new one. Errors, with a message in zs_last_error(): ZS_ERR_INVALID for a NULL,
 * empty or too long (over 495 bytes) FILE, ZS_ERR_IO if FILE's directory does
 * not exist or cannot be written; tracing stays as it was. */
zs_status_t zs_trace_start(const char *file);
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
/* Writes FILE.rank<r> (as zs_trace_flush), then turns tracing off, ZS_TRACE's
 * too: the events are dropped, nothing more is recorded or written (not by
 * zs_comm_destroy, not at exit) until the next zs_trace_start, whose file then
 * holds only what follows it. For a program that traces one run of several
 * (a trainer's --trace): call it once the run's threads record nothing more.
 * Returns the write's status (ZS_OK when tracing is off); tracing is off
 * either way. NVTX ranges stay on where ZS_NVTX=1 asks for them. */
zs_status_t zs_trace_stop(void);

#ifdef __cplusplus
}
#endif
#endif
