/* Internal: the trace layer's hooks for the layers above common
 * (zeroshard/trace.h has what is recorded, on which row). A hook costs one
 * branch on a cached flag when tracing is off: guard every call with
 * zs__trace_on(). */
#ifndef ZS_TRACE_TRACE_IMPL_H
#define ZS_TRACE_TRACE_IMPL_H

#include <stdatomic.h>
#include <stdint.h>

#include "zeroshard/trace.h"

/* -1: not read yet; else a mask of ZS__TRACE_JSON (events are recorded:
 * ZS_TRACE or zs_trace_start) and ZS__TRACE_NVTX (NVTX ranges are pushed: a
 * CUDA build with tracing on or ZS_NVTX=1); 0: off. */
enum { ZS__TRACE_JSON = 1, ZS__TRACE_NVTX = 2 };
extern atomic_int zs__trace_state;
int zs__trace_init(void);
static inline int zs__trace_on(void) {
  int s = atomic_load_explicit(&zs__trace_state, memory_order_relaxed);
  return s >= 0 ? s : zs__trace_init();
}

/* The rows (tids) of a rank's timeline; trace.h says what goes on each. */
enum { ZS_TRACE_TID_COMPUTE = 1, ZS_TRACE_TID_COMM = 2, ZS_TRACE_TID_OPTIM = 3, ZS_TRACE_TID_COPY = 4 };

/* The process's rank in the file name and pid: the first call wins (the comm
 * layer calls it for every comm it makes; the world comm comes first). */
void zs__trace_set_rank(int rank);
/* One complete event. name is copied (63 bytes kept); args: the members of the
 * "args" object, already JSON ("\"mb\":3,\"chunk\":0"), or NULL. Recorded
 * only when ZS__TRACE_JSON is on; pushes no NVTX range (it is after the fact). */
void zs__trace_event(const char *cat, const char *name, int tid, int64_t t0_us, int64_t t1_us, const char *args);
/* A span timed where it runs, on one thread: zs__trace_open pushes an NVTX
 * range `name` (when NVTX is on) and returns the start time; zs__trace_close
 * pops it and records the event [t0_us, now] (none when cat is NULL: a span
 * that failed). Call both only when
 * zs__trace_on(), open first, on the same thread, properly nested. */
int64_t zs__trace_open(const char *name);
void zs__trace_close(const char *cat, const char *name, int tid, int64_t t0_us, const char *args);
/* A label for the next comm call made by this thread (the comm layer takes it
 * with zs__trace_take_label, which clears it); NULL clears it. */
void zs__trace_label(const char *label);
const char *zs__trace_take_label(void);

#endif
