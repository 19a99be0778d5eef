/* The log's rank and level: before a comm exists the default sink's prefix
 * carries the rank the launcher gives (Open MPI, PMI, PMIx, Slurm, torchrun's
 * RANK, in that order), a comm's rank wins over it, zs_log_rank() says which
 * one a callback's message belongs to; zs_log_set_level clamps a level out of
 * range, with a warning; replacing the callback while other threads log gives
 * every message to one sink with its own user pointer, and no thread is in the
 * old callback once the replacement returns. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "harness.h"

static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"};
enum { NVARS = sizeof launcher_vars / sizeof *launcher_vars };

static void launcher_clear(void) {
  for (int i = 0; i < NVARS; i++) unsetenv(launcher_vars[i]);
}

/* What the default sink writes on stderr for one warning. */
static void stderr_line(char *out, size_t n, const char *msg) {
  out[0] = '\0';
  FILE *t = tmpfile();
  if (!t) return;
  fflush(stderr);
  int saved = dup(2);
  dup2(fileno(t), 2);
  ZS_LOG_W("%s", msg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(t);
  if (!fgets(out, (int)n, t)) out[0] = '\0';
  fclose(t);
}

static void test_launcher_rank(void) {
  char line[1200];
  launcher_clear();
  zs__settings_reload();
  stderr_line(line, sizeof line, "no rank");
  expect_true(!strncmp(line, "zeroshard WARN test_log.c:", 26));

  static const struct {
    const char *var, *value, *prefix;
  } cases[] = {{"OMPI_COMM_WORLD_RANK", "3", "zeroshard[3] WARN"}, {"PMI_RANK", "4", "zeroshard[4] WARN"},
               {"PMIX_RANK", "5", "zeroshard[5] WARN"},           {"SLURM_PROCID", "6", "zeroshard[6] WARN"},
               {"RANK", "7", "zeroshard[7] WARN"},                {"RANK", "x7", "zeroshard WARN"},
               {"RANK", "-2", "zeroshard WARN"},                  {"RANK", "", "zeroshard WARN"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    launcher_clear();
    setenv(cases[i].var, cases[i].value, 1);
    zs__settings_reload();
    stderr_line(line, sizeof line, "hello");
    if (strncmp(line, cases[i].prefix, strlen(cases[i].prefix)))
      ZS_T_REPORT("%s=%s: the line is \"%s\", wanted it to start with \"%s\"", cases[i].var, cases[i].value, line,
                  cases[i].prefix);
  }
  /* Open MPI's own variable first, where a job has several */
  launcher_clear();
  setenv("RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  zs__settings_reload();
  stderr_line(line, sizeof line, "two");
  expect_true(!strncmp(line, "zeroshard[2] WARN", 17));
  /* the comm's rank, once there is one, wins */
  zs__log_set_rank(9);
  stderr_line(line, sizeof line, "comm");
  expect_true(!strncmp(line, "zeroshard[9] WARN", 17));
  zs__log_set_rank(-1);
  launcher_clear();
  zs__settings_reload();
}

static int cb_rank = -2;
static void rank_cb(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)level, (void)file, (void)line, (void)msg, (void)user;
  cb_rank = zs_log_rank();
}

static void test_callback_rank(void) {
  launcher_clear();
  zs__settings_reload();
  expect_int_eq(zs_log_rank(), -1);
  setenv("PMIX_RANK", "12", 1);
  zs__settings_reload();
  expect_int_eq(zs_log_rank(), 12);
  zs_log_set_callback(rank_cb, NULL);
  ZS_LOG_W("to the callback");
  expect_int_eq(cb_rank, 12);
  zs__log_set_rank(3);
  ZS_LOG_W("to the callback");
  expect_int_eq(cb_rank, 3);
  zs_log_set_callback(NULL, NULL);
  zs__log_set_rank(-1);
  launcher_clear();
  zs__settings_reload();
  expect_int_eq(zs_log_rank(), -1);
}

static int warned;
static char warn_msg[1024];
static void warn_cb(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line, (void)user;
  if (level == ZS_LOG_WARN) warned++, snprintf(warn_msg, sizeof warn_msg, "%s", msg);
}

static void test_level_range(void) {
  zs_log_set_callback(warn_cb, NULL);
  zs_log_set_level(ZS_LOG_INFO);
  expect_int_eq(zs_log_get_level(), ZS_LOG_INFO);
  warned = 0;
  zs_log_set_level((zs_log_level_t)99);
  expect_int_eq(zs_log_get_level(), ZS_LOG_DEBUG);
  expect_int_eq(warned, 1);
  expect_str_contains(warn_msg, "99");
  expect_str_contains(warn_msg, "debug");
  warned = 0;
  zs_log_set_level((zs_log_level_t)-1);
  expect_int_eq(zs_log_get_level(), ZS_LOG_NONE);
  expect_int_eq(warned, 1);
  expect_str_contains(warn_msg, "-1");
  zs_log_set_level(ZS_LOG_WARN);
  expect_int_eq(zs_log_get_level(), ZS_LOG_WARN);
  zs_log_set_callback(NULL, NULL);
}

/* Two sinks, each checking the user pointer it gets is its own; the loggers
 * run until `stop`. */
typedef struct {
  atomic_long calls, wrong;
  atomic_int inside; /* threads in this callback now */
} sink_state_t;
static sink_state_t sink_a, sink_b;
static atomic_int stop_logging;

static void sink_check(sink_state_t *mine, void *user) {
  atomic_fetch_add(&mine->inside, 1);
  atomic_fetch_add(&mine->calls, 1);
  if (user != mine) atomic_fetch_add(&mine->wrong, 1);
  atomic_fetch_sub(&mine->inside, 1);
}
static void cb_a(zs_log_level_t l, const char *f, int n, const char *m, void *user) {
  (void)l, (void)f, (void)n, (void)m;
  sink_check(&sink_a, user);
}
static void cb_b(zs_log_level_t l, const char *f, int n, const char *m, void *user) {
  (void)l, (void)f, (void)n, (void)m;
  sink_check(&sink_b, user);
}
static void *logger(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_logging)) zs_log_message(ZS_LOG_WARN, "logger.c", 1, "x");
  return NULL;
}

/* The sink's callback and user pointer were two plain stores: a message
 * between them reached one callback with the other's pointer (a trial counted
 * hundreds of thousands in a second). */
static void test_callback_swap(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_WARN);
  pthread_t t[2];
  atomic_store(&stop_logging, 0);
  zs_log_set_callback(cb_a, &sink_a);
  for (int i = 0; i < 2; i++) assert_true(pthread_create(&t[i], NULL, logger, NULL) == 0);
  long stale = 0;
  /* at least 4000 swaps, and until both sinks took messages (bounded) */
  for (long k = 0; k < 4000 || ((atomic_load(&sink_a.calls) < 100 || atomic_load(&sink_b.calls) < 100) && k < 4000000);
       k++) {
    int to_b = k % 2 == 0;
    zs_log_set_callback(to_b ? cb_b : cb_a, to_b ? (void *)&sink_b : (void *)&sink_a);
    /* returned: nobody is in the replaced callback */
    stale += atomic_load(to_b ? &sink_a.inside : &sink_b.inside);
  }
  atomic_store(&stop_logging, 1);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  zs_log_set_callback(NULL, NULL);
  zs_log_set_level(saved);
  expect_true(atomic_load(&sink_a.calls) > 0 && atomic_load(&sink_b.calls) > 0);
  expect_int_eq((int)atomic_load(&sink_a.wrong), 0);
  expect_int_eq((int)atomic_load(&sink_b.wrong), 0);
  expect_int_eq((int)stale, 0);
}

/* From inside a callback: a nested message reaches the sink again, and a
 * replacement takes effect at once without waiting for the callback it is
 * called from (it would wait for itself). */
static int reenter_calls;
static void cb_reenter(zs_log_level_t l, const char *f, int n, const char *m, void *user) {
  (void)l, (void)f, (void)n, (void)user;
  reenter_calls++;
  if (!strcmp(m, "outer")) {
    zs_log_message(ZS_LOG_WARN, "t.c", 1, "nested");
    zs_log_set_callback(cb_a, &sink_a);
  }
}
static void test_callback_reentry(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_WARN);
  long a0 = atomic_load(&sink_a.calls);
  zs_log_set_callback(cb_reenter, NULL);
  zs_log_message(ZS_LOG_WARN, "t.c", 1, "outer");
  expect_int_eq(reenter_calls, 2); /* "outer" and "nested" */
  zs_log_message(ZS_LOG_WARN, "t.c", 1, "after");
  expect_int_eq(reenter_calls, 2);
  expect_int_eq((int)(atomic_load(&sink_a.calls) - a0), 1);
  zs_log_set_callback(NULL, NULL); /* frees the sink retired inside the callback (ASan: no leak) */
  zs_log_set_level(saved);
}

int main(void) {
  zs_test_run(test_launcher_rank);
  zs_test_run(test_callback_rank);
  zs_test_run(test_level_range);
  zs_test_run(test_callback_swap);
  zs_test_run(test_callback_reentry);
  return zs_test_finish();
}
