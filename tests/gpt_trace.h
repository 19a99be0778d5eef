/* --trace checks shared by the GPT trainer tests (pp, MoE, parameter server).
 *
 * gpt_trace_check runs the layout o with --trace DIR/run.json (DIR a fresh
 * directory every rank knows) and checks what a user finds:
 *   - DIR/run.json.rank<r> holds each of this rank's needles;
 *   - tracing is off once the run returns (zs_trace_enabled() == 0), so a later
 *     untraced run in the process writes nothing, not even at exit;
 *   - a second traced run of one step, to DIR/again.json, holds events, none
 *     older than its own start (each traced run holds only itself);
 * then removes DIR. Needs o->steps >= 2. */
#ifndef ZS_TESTS_GPT_TRACE_H
#define ZS_TESTS_GPT_TRACE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/trace.h"

/* 1 if the file at path holds every needle; else 0, *missing the first absent
 * (NULL: the file could not be read). */
static inline int gpt_file_has(const char *path, const char *const *needles, int n, const char **missing) {
  *missing = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  rewind(f);
  char *b = len >= 0 ? malloc((size_t)len + 1) : NULL;
  size_t got = b ? fread(b, 1, (size_t)len, f) : 0;
  fclose(f);
  int ok = b && got == (size_t)len;
  if (ok) b[len] = 0;
  for (int i = 0; ok && i < n; i++)
    if (!strstr(b, needles[i])) ok = 0, *missing = needles[i];
  free(b);
  return ok;
}

/* The events in the file at path (lines with "ts"), and how many start before t0_us. */
static inline int gpt_trace_events(const char *path, int64_t t0_us, int *older) {
  *older = 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "\"ts\":");
    if (!p) continue;
    n++;
    *older += strtoll(p + 5, NULL, 10) < t0_us;
  }
  fclose(f);
  return n;
}

static inline void gpt_trace_check(zs_device_t *dev, zs_comm_t *world, gpt_opts_t *o, const char *const *need, int n) {
  char dir[128] = {0}, file[192], mine[208];
  const int rank = zs_comm_rank(world);
  if (rank == 0) {
    snprintf(dir, sizeof dir, "/tmp/zs-gpt-trace-XXXXXX");
    if (!mkdtemp(dir)) dir[0] = 0;
  }
  assert_ok(zs_comm_broadcast(world, dir, dir, sizeof dir, ZS_UINT8, 0, NULL));
  assert_true(dir[0] != 0);
  snprintf(file, sizeof file, "%s/run.json", dir);
  const char *keep = o->trace;
  gpt_result_t r;
  o->trace = file;
  zs_status_t st = gpt_train_run(o, dev, world, &r);
  if (st != ZS_OK) ZS_T_REPORT("traced run: %s", r.err);
  expect_ok(st);
  gpt_result_free(&r);
  expect_int_eq(zs_trace_enabled(), 0);
  snprintf(mine, sizeof mine, "%s.rank%d", file, rank);
  const char *missing = NULL;
  int has = gpt_file_has(mine, need, n, &missing);
  if (!has) ZS_T_REPORT("%s lacks %s", mine, missing ? missing : "(cannot be read)");
  expect_true(has);
  /* again, one step, another file: only this run's events */
  const int steps = o->steps;
  snprintf(file, sizeof file, "%s/again.json", dir);
  o->steps = 1;
  const int64_t t0 = zs_trace_now_us();
  st = gpt_train_run(o, dev, world, &r);
  if (st != ZS_OK) ZS_T_REPORT("second traced run: %s", r.err);
  expect_ok(st);
  gpt_result_free(&r);
  snprintf(mine, sizeof mine, "%s.rank%d", file, rank);
  int older = 0;
  expect_int_ge(gpt_trace_events(mine, t0, &older), 1);
  expect_int_eq(older, 0);
  o->steps = steps, o->trace = keep;
  zs_comm_barrier(world, NULL);
  if (rank == 0) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }
}

#endif
