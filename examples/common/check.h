/* check.h: the check macros of the programs beside the library (examples/gpt,
 * bench/), one meaning per name. The library's own family is ZS_CHECK & co. in
 * src/common/common.h; a program links the library as a user would and cannot
 * see it.
 *
 *   TRY(expr)               expr is a zs_status_t: return it unless ZS_OK (the
 *                           callee already set zs_last_error)
 *   TRY_RC(expr)            expr is an int error code (0 = success, as ops_cuda.h
 *                           returns): return it unless 0
 *   CHECK_EXIT(prog, call)  call is a zs_status_t: unless ZS_OK print
 *                           "<prog>: <call>: <NAME> (<zs_last_error()>)" on stderr
 *                           and exit(1), for code far from main
 *
 * The one-file examples (examples/walkthrough, examples/pipeline,
 * examples/minimal) keep their own macro so that each reads, builds and can be
 * copied alone: CHECK in walkthrough.c and pipeline.c (print "<call>:
 * <zs_last_error()>", return 1 from main) and TRY_REPORT in train_min.c.
 *
 * Include it by its path ("../common/check.h", "../examples/common/check.h"):
 * no target adds this folder to an include path. TRY and CHECK_EXIT need
 * zeroshard/status.h where they are used; TRY_RC needs nothing, so CUDA
 * sources (ops_cuda.cu) include it too. */
#ifndef ZS_EXAMPLES_COMMON_CHECK_H
#define ZS_EXAMPLES_COMMON_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define TRY(expr)                   \
  do {                              \
    zs_status_t st_ = (expr);       \
    if (st_ != ZS_OK) return st_;   \
  } while (0)

#define TRY_RC(expr)         \
  do {                       \
    int rc_ = (expr);        \
    if (rc_) return rc_;     \
  } while (0)

#define CHECK_EXIT(prog, call)                                                                    \
  do {                                                                                            \
    zs_status_t st_ = (call);                                                                     \
    if (st_ != ZS_OK) {                                                                           \
      fprintf(stderr, "%s: %s: %s (%s)\n", (prog), #call, zs_status_name(st_), zs_last_error()); \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

#endif
