/* The log's rank and level: before a comm exists the default sink's prefix
 * carries the rank the launcher gives (Open MPI, PMI, PMIx, Slurm, torchrun's
 * RANK, in that order), a comm's rank wins over it, zs_log_rank() says which
 * one a callback's message belongs to; zs_log_set_level clamps a level out of
 * range, with a warning. */
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

int main(void) {
  zs_test_run(test_launcher_rank);
  zs_test_run(test_callback_rank);
  zs_test_run(test_level_range);
  return zs_test_finish();
}
