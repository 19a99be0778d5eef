/* Internal: the trace layer's hooks for the layers above common
 * (zeroshard/trace.h has what is recorded). A hook costs one branch on a
 * cached flag when tracing is off: guard every call with zs__trace_on(). */
#ifndef ZS_TRACE_TRACE_IMPL_H
#define ZS_TRACE_TRACE_IMPL_H

#include <stdatomic.h>
#include <stdint.h>

#include "zeroshard/trace.h"

/* -1: ZS_TRACE not read yet, 0: off, 1: on. */
extern atomic_int zs__trace_state;
int zs__trace_init(void);
static inline int zs__trace_on(void) {
  int s = atomic_load_explicit(&zs__trace_state, memory_order_relaxed);
  return s >= 0 ? s : zs__trace_init();
}

enum { ZS_TRACE_TID_COMPUTE = 1, ZS_TRACE_TID_COMM = 2 };

/* The process's rank in the file name and pid: the first call wins (the comm
 * layer calls it for every comm it makes; the world comm comes first). */
void zs__trace_set_rank(int rank);
/* One complete event. name is copied (63 bytes kept); args: the members of the
 * "args" object, already JSON ("\"mb\":3,\"chunk\":0"), or NULL. */
void zs__trace_event(const char *cat, const char *name, int tid, int64_t t0_us, int64_t t1_us, const char *args);
/* A label for the next comm call made by this thread (the comm layer takes it
 * with zs__trace_take_label, which clears it); NULL clears it. */
void zs__trace_label(const char *label);
const char *zs__trace_take_label(void);

#endif
