/* The library's own environment variables (src/common/settings.c, env.c):
 * on/off variables take 1|0|true|false|on|off|yes|no and warn for anything else;
 * ZS_THREADS is a count from 1 to 4096; the warnings of the settings go through
 * the log sink (ZS_LOG=none silences them, a callback gets them) and say the
 * value used; an unknown ZS_* variable is named once, with the known name it is
 * close to; every name the source tree reads or sets for itself is known. Then
 * the log's rank before a comm exists (the launcher's variables), and
 * zs_log_set_level's range.
 *
 * Usage: test_env SOURCE_DIR (the repository: its names must all be known).
 * The _hugeoff run sets ZS_HOST_HUGEPAGES=off, read once per process. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw's FTW_SKIP_SUBTREE, strcasestr */
#endif
#include <ftw.h>
#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "harness.h"
#include "memory/memory.h"

/* ---- the messages the sink got ----------------------------------------------- */

enum { MAXMSG = 256 };
static struct {
  zs_log_level_t level;
  char file[64];
  int line;
  char msg[1024];
} got[MAXMSG];
static int ngot;

static void grab(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)user;
  if (ngot >= MAXMSG) return;
  got[ngot].level = level;
  snprintf(got[ngot].file, sizeof got[ngot].file, "%s", file);
  got[ngot].line = line;
  snprintf(got[ngot].msg, sizeof got[ngot].msg, "%s", msg);
  ngot++;
}
static void grab_start(void) {
  ngot = 0;
  zs_log_set_callback(grab, NULL);
}
static void grab_stop(void) { zs_log_set_callback(NULL, NULL); }

/* The first message holding both a and b (b may be NULL), or NULL. */
static const char *got_msg(const char *a, const char *b) {
  for (int i = 0; i < ngot; i++)
    if (strstr(got[i].msg, a) && (!b || strstr(got[i].msg, b))) return got[i].msg;
  return NULL;
}
static void show_got(void) {
  for (int i = 0; i < ngot; i++) fprintf(stderr, "  got: %s:%d %s\n", got[i].file, got[i].line, got[i].msg);
}

/* Sets name=value (NULL: unsets), re-reads the settings with the sink grabbed. */
static void reload_with(const char *name, const char *value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  grab_start();
  zs__settings_reload();
  grab_stop();
}

/* ---- on/off variables --------------------------------------------------------- */

static void test_flag_words(void) {
  static const char *const on[] = {"1", "true", "TRUE", "on", "On", "yes", "YES"};
  static const char *const off[] = {"0", "false", "False", "off", "OFF", "no", "No"};
  for (size_t i = 0; i < sizeof on / sizeof *on; i++) {
    reload_with("ZS_NVTX", on[i]);
    expect_int_eq(zs__settings()->nvtx, 1);
    reload_with("ZS_MEM_CHECK", off[i]);
    expect_int_eq(zs__settings()->mem_check, 0);
    expect_int_eq(ngot, 0);
  }
  for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
    reload_with("ZS_NVTX", off[i]);
    if (zs__settings()->nvtx != 0) ZS_T_REPORT("ZS_NVTX=%s read as on", off[i]);
    reload_with("ZS_MEM_CHECK", on[i]);
    if (zs__settings()->mem_check != 1) ZS_T_REPORT("ZS_MEM_CHECK=%s read as off", on[i]);
    expect_int_eq(ngot, 0);
  }
  /* empty: the default, silently */
  reload_with("ZS_NVTX", "");
  expect_int_eq(zs__settings()->nvtx, 0);
  expect_int_eq(ngot, 0);
  reload_with("ZS_MEM_CHECK", "");
  expect_int_eq(zs__settings()->mem_check, 1);
  expect_int_eq(ngot, 0);
  /* another word: the default, and a warning naming the variable, the value,
   * the accepted words and the value used */
  reload_with("ZS_NVTX", "maybe");
  expect_int_eq(zs__settings()->nvtx, 0);
  const char *m = got_msg("ZS_NVTX", "'maybe'");
  expect_true(m != NULL);
  expect_str_contains(m, "1|0|true|false|on|off|yes|no");
  expect_str_contains(m, "using 0 (off)");
  reload_with("ZS_MEM_CHECK", "disable");
  expect_int_eq(zs__settings()->mem_check, 1);
  m = got_msg("ZS_MEM_CHECK", "'disable'");
  expect_true(m != NULL);
  expect_str_contains(m, "using 1 (on)");
  if (!m) show_got();
  reload_with("ZS_NVTX", NULL);
  reload_with("ZS_MEM_CHECK", NULL);
}

/* Read once per process: the _hugeoff run sets it to "off", the others leave it
 * unset (or "0": test_memory_nohuge's). */
static void test_hugepages(void) {
  const char *v = getenv("ZS_HOST_HUGEPAGES");
  int want = !(v && (!strcmp(v, "off") || !strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "false")));
  expect_int_eq(zs__host_huge_for((size_t)4 << 20), want);
}

/* ---- ZS_THREADS ------------------------------------------------------------------ */

static void test_threads(void) {
  static const struct {
    const char *v;
    int threads, warns;
  } cases[] = {{"8", 8, 0},      {"1", 1, 0},     {"4096", 4096, 0}, {"", 0, 0},     {"4x", 0, 1},
               {"1e99", 0, 1},   {"abc", 0, 1},   {"-1", 0, 1},      {"0", 0, 1},    {"99999", 0, 1},
               {"4097", 0, 1},   {" 4", 0, 1},    {"0x10", 0, 1},    {"99999999999999999999", 0, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    reload_with("ZS_THREADS", cases[i].v);
    if (zs__settings()->threads != cases[i].threads)
      ZS_T_REPORT("ZS_THREADS='%s' gave %d threads, wanted %d", cases[i].v, zs__settings()->threads,
                  cases[i].threads);
    const char *m = got_msg("ZS_THREADS", NULL);
    if (!!m != cases[i].warns) ZS_T_REPORT("ZS_THREADS='%s': %s", cases[i].v, m ? m : "no warning");
    if (m) {
      expect_str_contains(m, cases[i].v);
      expect_str_contains(m, "1 to 4096");
      expect_str_contains(m, "using");
    }
  }
  reload_with("ZS_THREADS", NULL);
}

/* ---- the settings' warnings go through the log ------------------------------------ */

static void test_warnings_logged(void) {
  reload_with("ZS_COMM_TIMEOUT_S", "10s");
  expect_near(zs__settings()->comm_timeout_s, 300.0, 0, 0);
  const char *m = got_msg("ZS_COMM_TIMEOUT_S", "'10s'");
  expect_true(m != NULL);
  expect_str_contains(m, "using 300");
  if (m) {
    expect_int_eq(got[0].level, ZS_LOG_WARN);
    expect_true(!strcmp(got[0].file, "settings.c") && got[0].line > 0);
  }
  reload_with("ZS_COMM_TIMEOUT_S", "2.5");
  expect_near(zs__settings()->comm_timeout_s, 2.5, 0, 0);
  expect_int_eq(ngot, 0);

  reload_with("ZS_LOG", "loud");
  expect_int_eq(zs__settings()->log_level, ZS_LOG_WARN);
  m = got_msg("ZS_LOG", "'loud'");
  expect_true(m != NULL);
  expect_str_contains(m, "using warn");
  /* empty keeps warn silently, as an empty config variable keeps its default */
  reload_with("ZS_LOG", "");
  expect_int_eq(zs__settings()->log_level, ZS_LOG_WARN);
  expect_int_eq(ngot, 0);

  /* ZS_LOG=none silences the settings' own warnings too */
  setenv("ZS_COMM_TIMEOUT_S", "10s", 1);
  reload_with("ZS_LOG", "none");
  expect_int_eq(zs__settings()->log_level, ZS_LOG_NONE);
  expect_int_eq(ngot, 0);
  unsetenv("ZS_COMM_TIMEOUT_S");
  reload_with("ZS_LOG", NULL);
}

/* ---- unknown ZS_* variables ----------------------------------------------------- */

/* The warning about an unknown name (it starts with the name), or NULL. */
static const char *unknown_msg(const char *name) {
  size_t n = strlen(name);
  for (int i = 0; i < ngot; i++)
    if (!strncmp(got[i].msg, name, n) && got[i].msg[n] == ' ' && strstr(got[i].msg, "not a variable zeroshard reads"))
      return got[i].msg;
  return NULL;
}

static void test_unknown_vars(void) {
  static const struct {
    const char *name, *hint; /* hint NULL: no suggestion */
  } cases[] = {{"ZS_STAGEE", "did you mean ZS_STAGE?"},
               {"ZS_LOGG", "did you mean ZS_LOG?"},
               {"ZS_OFFLOAD_OPTIMIZER", "did you mean ZS_OFFLOAD?"},
               {"ZS_TRACE_FILE", "did you mean ZS_TRACE?"},
               {"ZS_COMM_TIMEOUT", "did you mean ZS_COMM_TIMEOUT_S?"},
               {"ZS_ZERO_STAGE", "did you mean ZS_STAGE?"},
               {"ZS_QUUX_NOTHING_LIKE_IT", NULL}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) setenv(cases[i].name, "3", 1);
  setenv("ZS_TEST_SOMETHING_ELSE", "1", 1); /* the repository's test variables: no warning */
  setenv("ZS_STAGE", "1", 1);               /* known */
  reload_with("ZS_FAULT_PINNED", "0:0");    /* known */
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *m = unknown_msg(cases[i].name);
    if (!m) {
      ZS_T_REPORT("no warning for %s", cases[i].name);
      continue;
    }
    if (cases[i].hint) expect_str_contains(m, cases[i].hint);
    else if (strstr(m, "did you mean")) ZS_T_REPORT("%s: unexpected suggestion: %s", cases[i].name, m);
  }
  expect_true(!unknown_msg("ZS_TEST_SOMETHING_ELSE"));
  expect_true(!unknown_msg("ZS_STAGE"));
  expect_true(!unknown_msg("ZS_FAULT_PINNED"));
  if (zs_t_cur_failed) show_got();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) unsetenv(cases[i].name);
  unsetenv("ZS_TEST_SOMETHING_ELSE");
  unsetenv("ZS_STAGE");
  reload_with("ZS_FAULT_PINNED", NULL);
}

/* Every ZS_* name the tree reads from the environment, or sets there for its
 * own programs, must be known: set to "" (which every setting ignores), none
 * may draw the unknown-variable warning (or every CI test would print it). */
static const char *src_root;
static char found[512][64];
static int nfound;
static regex_t re_getenv, re_table, re_shell, re_py_get, re_py_idx, re_py_env, re_assign;
static const char *const top_dirs[] = {"src", "kernels", "tests", "examples", "bench", "tools", "adapters",
                                       "scripts", ".ci"};

static void add_name(const char *s, regmatch_t m) {
  int n = (int)(m.rm_eo - m.rm_so);
  if (n <= 0 || n >= 64) return;
  for (int i = 0; i < nfound; i++)
    if ((int)strlen(found[i]) == n && !strncmp(found[i], s + m.rm_so, (size_t)n)) return;
  if (nfound < 512) snprintf(found[nfound++], 64, "%.*s", n, s + m.rm_so);
}
static void scan_line(const char *line, const regex_t *re) {
  regmatch_t m[2];
  const char *p = line;
  while (!regexec(re, p, 2, m, 0)) {
    add_name(p, m[1]);
    p += m[0].rm_eo;
  }
}
static int ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && !strcmp(s + a - b, tail);
}
static int scan_file(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  const char *base = path + ftw->base;
  if (type == FTW_D) { /* the top folders above; below them, every folder but hidden ones */
    if (ftw->level == 0) return FTW_CONTINUE;
    if (ftw->level > 1) return base[0] == '.' ? FTW_SKIP_SUBTREE : FTW_CONTINUE;
    for (size_t i = 0; i < sizeof top_dirs / sizeof *top_dirs; i++)
      if (!strcmp(base, top_dirs[i])) return FTW_CONTINUE;
    return FTW_SKIP_SUBTREE;
  }
  if (type != FTW_F || ftw->level < 2) return FTW_CONTINUE;
  int c = ends_with(base, ".c") || ends_with(base, ".h") || ends_with(base, ".cpp") || ends_with(base, ".cu") ||
          ends_with(base, ".cuh");
  int cm = ends_with(base, ".cmake") || !strcmp(base, "CMakeLists.txt") || ends_with(base, ".cmake.in");
  if (!cm && (ends_with(base, ".json") || ends_with(base, ".png") || ends_with(base, ".txt") ||
              ends_with(base, ".bin") || ends_with(base, ".md")))
    return FTW_CONTINUE;
  FILE *f = fopen(path, "r");
  if (!f) return FTW_CONTINUE;
  char line[4096];
  int config_table = ends_with(path, "src/config/config_env.c");
  while (fgets(line, sizeof line, f)) {
    if (c) {
      scan_line(line, &re_getenv);
      if (config_table) scan_line(line, &re_table);
    } else if (cm) {
      if (strcasestr(line, "env")) scan_line(line, &re_assign);
    } else {
      scan_line(line, &re_shell);
      scan_line(line, &re_py_get);
      scan_line(line, &re_py_idx);
      if (strstr(line, "environ")) scan_line(line, &re_assign);
      scan_line(line, &re_py_env);
    }
  }
  fclose(f);
  return FTW_CONTINUE;
}

static void test_tree_names_known(void) {
  if (!src_root) zs_test_skip("no SOURCE_DIR argument");
  assert_int_eq(regcomp(&re_getenv, "getenv\\(\"(ZS_[A-Z0-9_]+)\"", REG_EXTENDED), 0);
  assert_int_eq(regcomp(&re_table, "\\{\"(ZS_[A-Z0-9_]+)\"", REG_EXTENDED), 0);
  assert_int_eq(regcomp(&re_shell, "\\$\\{?(ZS_[A-Z0-9_]+)([^A-Z0-9_[]|$)", REG_EXTENDED), 0);
  assert_int_eq(regcomp(&re_py_get, "environ\\.get\\([\"'](ZS_[A-Z0-9_]+)", REG_EXTENDED), 0);
  assert_int_eq(regcomp(&re_py_idx, "environ\\[[\"'](ZS_[A-Z0-9_]+)", REG_EXTENDED), 0);
  assert_int_eq(regcomp(&re_py_env, "env\\[[\"'](ZS_[A-Z0-9_]+)[\"']\\]", REG_EXTENDED), 0);
  assert_int_eq(regcomp(&re_assign, "(ZS_[A-Z0-9_]+)=", REG_EXTENDED), 0);
  assert_int_eq(nftw(src_root, scan_file, 16, FTW_ACTIONRETVAL | FTW_PHYS), 0);
  regfree(&re_getenv), regfree(&re_table), regfree(&re_shell), regfree(&re_py_get), regfree(&re_py_idx);
  regfree(&re_py_env);
  regfree(&re_assign);
  /* the tree's own readers, at least: a scan that found none of them scanned nothing */
  expect_int_ge(nfound, 40);
  int verbose = getenv("ZS_TEST_VERBOSE") != NULL; /* one of the names: unset below */
  for (int i = 0; i < nfound; i++) setenv(found[i], "", 1);
  grab_start();
  zs__settings_reload();
  grab_stop();
  for (int i = 0; i < nfound; i++) {
    const char *m = unknown_msg(found[i]);
    if (m) ZS_T_REPORT("the tree uses %s, which the library warns about: %s", found[i], m);
    unsetenv(found[i]);
  }
  if (verbose)
    for (int i = 0; i < nfound; i++) printf("known: %s\n", found[i]);
  zs__settings_reload();
}

int main(int argc, char **argv) {
  src_root = argc > 1 ? argv[1] : NULL;
  zs_test_run(test_flag_words);
  zs_test_run(test_hugepages);
  zs_test_run(test_threads);
  zs_test_run(test_warnings_logged);
  zs_test_run(test_unknown_vars);
  zs_test_run(test_tree_names_known);
  return zs_test_finish();
}
