/* blas.c: OpenBLAS's kernel choice (blas.h). */
#include "blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h> // defines: openblas_get_corename, openblas_get_config (OpenBLAS)

/* OpenBLAS's DYNAMIC_ARCH entry points (exported by libopenblas; driver/others/
 * dynamic.c): quit forgets the kernel table, init picks one again, reading
 * OPENBLAS_CORETYPE first. */
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));

static char g_was[32]; /* what OpenBLAS had chosen, when we replaced it */

/* Kernel sets older than AVX2 that OpenBLAS falls back to on a CPU it does not
 * know, and Sandybridge (AVX without FMA). */
static int core_is_fallback(const char *c) {
  static const char *const old[] = {"Prescott", "Core2", "Penryn", "Dunnington",
                                    "Nehalem",  "Atom",  "Sandybridge"};
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
    if (!strcmp(c, old[i])) return 2;
  return !strcmp(c, "Haswell") ? 1 : 0; /* AVX2: only AVX-512 is better */
}

int gpt_blas_fix_core(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || getenv("OPENBLAS_CORETYPE")) return 0;
  const char *now = openblas_get_corename();
  if (!now) return 0;
  int fb = core_is_fallback(now);
  const char *want = NULL;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    want = fb ? "SkylakeX" : NULL;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    want = fb == 2 ? "Haswell" : NULL;
  if (!want) return 0;
  snprintf(g_was, sizeof g_was, "%s", now);
  /* the table is read on each call; nothing has called OpenBLAS yet */
  setenv("OPENBLAS_CORETYPE", want, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  return 1;
#else
  return 0;
#endif
}

const char *gpt_blas_describe(char *buf, size_t n) {
  const char *cfg = openblas_get_config();
  char ver[32] = "OpenBLAS";
  if (cfg) sscanf(cfg, "%31[^ ] %*s", ver);
  const char *vnum = cfg && strlen(cfg) > 9 ? cfg + 9 : "";
  int vlen = (int)strcspn(vnum, " ");
  snprintf(buf, n, "%s %.*s (%s) %s kernels%s%s%s", ver, vlen, vnum,
           cfg && strstr(cfg, "USE_OPENMP") ? "OpenMP" : "threads of its own",
           openblas_get_corename(), g_was[0] ? " (chosen by CPU features; OpenBLAS had " : "",
           g_was, g_was[0] ? ")" : "");
  return buf;
}
