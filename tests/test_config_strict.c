/* Config loaders against hostile or careless input: what JSON forbids, what no
 * config needs (NUL in keys, control bytes, invalid UTF-8, absurd numbers, deep
 * nesting, huge documents), numbers out of a field's range, duplicate keys,
 * and the time a large document takes (no step may be quadratic). Every
 * refusal must name the position or key and leave *cfg untouched. */
#include <locale.h>
#include <stdlib.h>
#include <time.h>

#include "test_config_checks.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds a load of the largest document may take. Linear work takes ~0.2 s
 * here (quadratic took 80 s); AddressSanitizer with fast_unwind_on_malloc=0
 * (.ci/run) unwinds the stack at each of cJSON's ~200000 allocations, ~2.5 s. */
#if defined(__SANITIZE_ADDRESS__) || defined(ZS_ASAN)
#define TIME_LIMIT_S 10.0
#else
#define TIME_LIMIT_S 2.0
#endif

/* The documented limits (zeroshard/config_load.h). */
#define MAX_VALUES 100000
#define MAX_DEPTH 64

/* "{<open>"k0000000": 0, ... n keys ...<close>}" in a malloc'd buffer. */
static char *many_keys(int n, const char *open, const char *close) {
  size_t cap = (size_t)n * 16 + 64;
  char *s = malloc(cap);
  if (!s) return NULL;
  size_t at = (size_t)snprintf(s, cap, "{%s", open);
  for (int i = 0; i < n; i++) at += (size_t)snprintf(s + at, cap - at, "%s\"k%07d\":%d", i ? "," : "", i, i & 1);
  snprintf(s + at, cap - at, "%s}", close);
  return s;
}

/* ---- size: linear time, capped memory ------------------------------------------- */

static void test_json_many_keys(void) {
  zs_config_t c;
  /* the most values allowed: the root object and 99999 members, all unknown */
  char *text = many_keys(MAX_VALUES - 1, "", "");
  assert_true(text != NULL);
  capture_start(ZS_LOG_WARN);
  double t0 = now_s();
  zs_status_t st = zs_config_from_json(&c, text);
  double dt = now_s() - t0;
  capture_stop();
  free(text);
  expect_ok(st);
  fprintf(stderr, "  %d keys at the root: %.3f s\n", MAX_VALUES - 1, dt);
  assert_true(dt < TIME_LIMIT_S); /* if quadratic, stop here rather than run the rest */
  expect_true(!strncmp(zs_config_unknown_keys(), "k0000000,k0000001,", 18));
  /* one line per unknown key up to a cap, then one line with the count */
  expect_int_le(logs.warn, 21);
  expect_str_contains(logs.text, "99999 unknown config keys in all");

  /* the same inside a section the loader walks (fewer: quadratic took 7 s) */
  text = many_keys(30000, "\"zero_optimization\":{", "},\"stage\":2");
  assert_true(text != NULL);
  zs_log_set_level(ZS_LOG_NONE);
  t0 = now_s();
  st = zs_config_from_json(&c, text);
  dt = now_s() - t0;
  zs_log_set_level(ZS_LOG_WARN);
  free(text);
  expect_ok(st);
  expect_int_eq(c.stage, 2);
  fprintf(stderr, "  30000 keys in zero_optimization: %.3f s\n", dt);
  expect_true(dt < TIME_LIMIT_S);

  /* a million keys (the 16 MiB limit allows ~1.2M): refused before cJSON
   * allocates anything */
  text = many_keys(1000000, "", "");
  assert_true(text != NULL);
  zs_log_set_level(ZS_LOG_NONE);
  memset(&c, CFG_PATTERN, sizeof c);
  t0 = now_s();
  st = zs_config_from_json(&c, text);
  dt = now_s() - t0;
  zs_log_set_level(ZS_LOG_WARN);
  free(text);
  expect_status(st, ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "more than 100000 JSON values at line 1 column ");
  expect_str_contains(zs_last_error(), "is this a config file?");
  expect_int_eq(c.stage, 0x5a5a5a5a);
  fprintf(stderr, "  1000000 keys refused: %.3f s\n", dt);
  expect_true(dt < TIME_LIMIT_S);

  /* one key many times: the last value wins, one warning */
  size_t cap = 50001 * 12 + 16, at = 1;
  text = malloc(cap);
  assert_true(text != NULL);
  text[0] = '{';
  for (int i = 0; i < 50000; i++) at += (size_t)snprintf(text + at, cap - at, "\"stage\":1,");
  snprintf(text + at, cap - at, "\"stage\":2}");
  capture_start(ZS_LOG_WARN);
  t0 = now_s();
  st = zs_config_from_json(&c, text);
  dt = now_s() - t0;
  capture_stop();
  free(text);
  expect_ok(st);
  expect_int_eq(c.stage, 2);
  expect_int_eq(logs.warn, 1);
  expect_str_contains(logs.text, "key stage appears 50001 times: the last value wins");
  expect_true(dt < TIME_LIMIT_S);
}

static void test_json_size_limits(void) {
  zs_log_set_level(ZS_LOG_NONE);
  /* values in an array count too (an ignored section is still parsed) */
  size_t cap = MAX_VALUES * 2 + 64, at = 0;
  char *text = malloc(cap);
  assert_true(text != NULL);
  at += (size_t)snprintf(text, cap, "{\"scheduler\": [");
  for (int i = 0; i < MAX_VALUES; i++) at += (size_t)snprintf(text + at, cap - at, "%s0", i ? "," : "");
  snprintf(text + at, cap - at, "]}");
  JSON_BAD(text, ZS_ERR_INVALID, "more than 100000 JSON values");
  free(text);

  /* nesting: 64 levels load (an unknown key), 65 do not */
  char deep[8 * MAX_DEPTH + 64];
  for (int levels = MAX_DEPTH; levels <= MAX_DEPTH + 1; levels++) {
    at = 0;
    for (int i = 0; i < levels - 1; i++) at += (size_t)snprintf(deep + at, sizeof deep - at, "{\"a\":");
    at += (size_t)snprintf(deep + at, sizeof deep - at, "{}");
    for (int i = 0; i < levels - 1; i++) deep[at++] = '}';
    deep[at] = '\0';
    zs_config_t c;
    if (levels == MAX_DEPTH) {
      expect_ok(zs_config_from_json(&c, deep));
    } else {
      JSON_BAD(deep, ZS_ERR_INVALID, "JSON nested deeper than 64 levels at line 1 column 321");
    }
  }
  /* far deeper than cJSON's own limit (1000), arrays */
  text = malloc(200002);
  assert_true(text != NULL);
  memset(text, '[', 100000);
  memset(text + 100000, ']', 100000);
  text[200000] = '\0';
  JSON_BAD(text, ZS_ERR_INVALID, "JSON nested deeper than 64 levels at line 1 column 65");
  free(text);

  /* the text itself: 16 MiB or more is refused without parsing it */
  size_t big = (16u << 20) + 16;
  text = malloc(big + 1);
  assert_true(text != NULL);
  memcpy(text, "{\"note\": \"", 10);
  memset(text + 10, 'x', big - 12);
  memcpy(text + big - 2, "\"}", 3);
  double t0 = now_s();
  JSON_BAD(text, ZS_ERR_INVALID, "the JSON text is 16 MiB or longer: is it a config?");
  expect_true(now_s() - t0 < TIME_LIMIT_S);
  /* a large string that fits is fine */
  memcpy(text + (8u << 20), "\"}", 3);
  zs_config_t c;
  expect_ok(zs_config_from_json(&c, text));
  free(text);
  zs_log_set_level(ZS_LOG_WARN);
}

/* ---- what JSON forbids --------------------------------------------------------- */

static void test_json_syntax(void) {
  zs_log_set_level(ZS_LOG_NONE);
  /* control bytes are not whitespace */
  JSON_BAD("{\v\"stage\": 1}", ZS_ERR_INVALID,
           "malformed JSON at line 1 column 2, near '\\x0b\"stage\": 1}': control byte 0x0B is not JSON "
           "whitespace: use spaces, tabs or newlines");
  JSON_BAD("{\"stage\":\f1}", ZS_ERR_INVALID, "line 1 column 10, near '\\x0c1}': control byte 0x0C");
  JSON_BAD("{\"stage\": 1}\x01", ZS_ERR_INVALID, "line 1 column 13, near '\\x01': control byte 0x01");
  JSON_BAD("\x1f{}", ZS_ERR_INVALID, "line 1 column 1, near '\\x1f{}': control byte 0x1F");
  JSON_BAD("{\"stage\": 1}\x7f", ZS_ERR_INVALID, "line 1 column 13, near '\\x7f': text after the end of");
  /* trailing text */
  JSON_BAD("{} {}", ZS_ERR_INVALID, "line 1 column 4, near '{}': text after the end of the config object");
  JSON_BAD("{}\n// done", ZS_ERR_INVALID, "line 2 column 1, near '// done': text after the end");
  /* not JSON */
  JSON_BAD("{\"stage\": NaN}", ZS_ERR_INVALID, "line 1 column 11, near 'NaN}': JSON has no NaN or Infinity");
  JSON_BAD("{\"lr\": Infinity}", ZS_ERR_INVALID, "JSON has no NaN or Infinity: use a finite number");
  JSON_BAD("{\"lr\": -Infinity}", ZS_ERR_INVALID, "column 8, near '-Infinity}': JSON has no NaN or Infinity");
  JSON_BAD("{\"lr\": nan}", ZS_ERR_INVALID, "JSON has no NaN or Infinity");
  JSON_BAD("{'stage': 1}", ZS_ERR_INVALID, "column 2, near ''stage': 1}': expected a key in double quotes");
  JSON_BAD("{stage: 1}", ZS_ERR_INVALID, "expected a key in double quotes");
  JSON_BAD("{\"stage\" 1}", ZS_ERR_INVALID, "column 10, near '1}': expected ':' after the key");
  JSON_BAD("{\"a\": [1, 2,]}", ZS_ERR_INVALID, "column 13, near ']}': a trailing comma: remove it");
  JSON_BAD("{\"a\": 1,}", ZS_ERR_INVALID, "column 9, near '}': a trailing comma: remove it");
  JSON_BAD("{\"a\": [1 2]}", ZS_ERR_INVALID, "column 10, near '2]}': expected ',' or ']'");
  JSON_BAD("{\"a\": 1 \"b\": 2}", ZS_ERR_INVALID, "expected ',' or '}'");
  JSON_BAD("{\"a\": tru}", ZS_ERR_INVALID, "column 7, near 'tru}': expected a value");
  JSON_BAD("{\"a\": truex}", ZS_ERR_INVALID, "column 11, near 'x}': expected ',' or '}'");
  JSON_BAD("{\"a\": /* c */ 1}", ZS_ERR_INVALID, "expected a value");
  JSON_BAD("{\"a\": \"open}", ZS_ERR_INVALID, "column 7, near '\"open}': the string does not end");
  JSON_BAD("{\"a\": \"\\x41\"}", ZS_ERR_INVALID, "column 8, near '\\\\x41\"}': unknown escape");
  JSON_BAD("{\"a\": \"\\u12\"}", ZS_ERR_INVALID, "column 8, near '\\\\u12\"}': \\u needs four hex digits");
  JSON_BAD("   ", ZS_ERR_INVALID, "malformed JSON at line 1 column 4, near '(end of input)': expected a value");
  /* a BOM at the very start is skipped (Windows editors write one), not elsewhere */
  zs_config_t c;
  expect_ok(zs_config_from_json(&c, "\xef\xbb\xbf{\"stage\": 1}"));
  expect_int_eq(c.stage, 1);
  JSON_BAD("{\"stage\": 1, \xef\xbb\xbf\"prefetch\": 2}", ZS_ERR_INVALID,
           "column 14, near '\\xef\\xbb\\xbf\"prefetch\": 2}': expected a key in double quotes");
  zs_log_set_level(ZS_LOG_WARN);
}

static void test_json_strings(void) {
  zs_log_set_level(ZS_LOG_NONE);
  /* NUL cuts a C string short: "stage\u0000xyz" would set the stage */
  JSON_BAD("{\"stage\\u0000xyz\": 3}", ZS_ERR_INVALID,
           "\\u0000 (NUL) in a string at line 1 column 8, near '\\\\u0000xyz\": 3}': no config key or value "
           "contains NUL");
  JSON_BAD("{\"param_dtype\": \"bf16\\u0000junk\"}", ZS_ERR_INVALID, "\\u0000 (NUL) in a string at line 1 column 22");
  /* raw control bytes inside strings */
  JSON_BAD("{\"note\": \"a\x01z\"}", ZS_ERR_INVALID,
           "column 12, near '\\x01z\"}': raw control byte 0x01 in a string: write it as an escape");
  JSON_BAD("{\"note\": \"two\nlines\"}", ZS_ERR_INVALID, "line 1 column 14, near '\\x0alines\"}': raw control byte 0x0A");
  /* escaped control characters are fine in values, not in keys */
  zs_config_t c;
  expect_ok(zs_config_from_json(&c, "{\"note\": \"two\\nlines\\u001b\"}"));
  JSON_BAD("{\"stage\\u001b[31m\": 3}", ZS_ERR_INVALID, "control character \\u001B in a key at line 1 column 8");
  /* UTF-16 surrogates must pair */
  JSON_BAD("{\"note\": \"\\ud800\"}", ZS_ERR_INVALID, "lone UTF-16 surrogate \\uD800 at line 1 column 11");
  JSON_BAD("{\"note\": \"\\ud800\\u0041\"}", ZS_ERR_INVALID, "lone UTF-16 surrogate \\uD800");
  JSON_BAD("{\"note\": \"\\udc00x\"}", ZS_ERR_INVALID, "lone UTF-16 surrogate \\uDC00");
  JSON_BAD("{\"note\": \"\\uDBFF\\uDBFF\"}", ZS_ERR_INVALID, "lone UTF-16 surrogate \\uDBFF");
  expect_ok(zs_config_from_json(&c, "{\"note\": \"\\ud83d\\ude00 \\u00e9 \\uFFFF\"}"));
  /* UTF-8: valid text loads, invalid bytes are named */
  expect_ok(zs_config_from_json(&c, "{\"note\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf\"}"));
  static const struct {
    const char *bytes, *want;
  } bad_utf8[] = {
      {"\xff", "byte 0xFF"},             /* never in UTF-8 */
      {"\x80", "byte 0x80"},             /* a continuation byte alone */
      {"\xc0\xaf", "byte 0xC0"},         /* overlong '/' */
      {"\xe0\x80\xaf", "byte 0xE0"},     /* overlong, 3 bytes */
      {"\xed\xa0\x80", "byte 0xED"},     /* a surrogate encoded in UTF-8 */
      {"\xf4\x90\x80\x80", "byte 0xF4"}, /* beyond U+10FFFF */
      {"\xf5\x80\x80\x80", "byte 0xF5"},
      {"\xe2\x82", "byte 0xE2"},         /* cut short by the quote */
      {"\xc3", "byte 0xC3"},
  };
  for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
    char text[64], want[160];
    snprintf(text, sizeof text, "{\"note\": \"ok%s\"}", bad_utf8[i].bytes);
    snprintf(want, sizeof want, "invalid UTF-8 at line 1 column 13, near '\\x%02x", (unsigned char)bad_utf8[i].bytes[0]);
    JSON_BAD(text, ZS_ERR_INVALID, want);
    JSON_BAD(text, ZS_ERR_INVALID, bad_utf8[i].want);
    expect_str_contains(zs_last_error(), "save the file as UTF-8");
  }
  /* values in messages are cut short, whatever their size */
  char *text = malloc(300000);
  assert_true(text != NULL);
  snprintf(text, 300000, "{\"param_dtype\": \"%0200d\"}", 0);
  JSON_BAD(text, ZS_ERR_INVALID, "param_dtype is \"0000000000");
  JSON_BAD(text, ZS_ERR_INVALID, "0000...\": expected fp32, bf16 or fp16");
  expect_int_le(strlen(zs_last_error()), 160);
  size_t at = (size_t)snprintf(text, 300000, "{\"zero_optimization\": [");
  for (int i = 0; i < 50000; i++) at += (size_t)snprintf(text + at, 300000 - at, "%s1", i ? "," : "");
  snprintf(text + at, 300000 - at, "]}");
  JSON_BAD(text, ZS_ERR_INVALID, "zero_optimization is [...]: expected an object {...}");
  free(text);
  /* outside strings a non-ASCII byte is a syntax error */
  JSON_BAD("{\"stage\": \xc3\xa9}", ZS_ERR_INVALID, "column 11, near '\\xc3\\xa9}': expected a value");
  zs_log_set_level(ZS_LOG_WARN);
}

static void test_json_numbers(void) {
  zs_log_set_level(ZS_LOG_NONE);
  /* forms strtod takes and JSON does not */
  static const char *const not_json[] = {"01", "-01", "00", "1.", "-.5", "1.e3", "+1", ".5", "1e", "1e+", "-", "0x10", "1E5.0"};
  for (size_t i = 0; i < sizeof not_json / sizeof not_json[0]; i++) {
    char text[64];
    snprintf(text, sizeof text, "{\"stage\": %s}", not_json[i]);
    JSON_BAD(text, ZS_ERR_INVALID, "malformed JSON at line 1 column 11");
    expect_str_contains(zs_last_error(), "not a JSON number: write numbers like 3, -0.5 or 1e-4");
  }
  /* absurd lengths */
  JSON_BAD("{\"lr\": 0.00000000000000000000000000000000000000001}", ZS_ERR_INVALID,
           "a number of 43 characters at line 1 column 8, near '0.0000");
  expect_str_contains(zs_last_error(), "config numbers need at most 40");
  char text[256];
  snprintf(text, sizeof text, "{\"stage\": 1%0100d}", 0);
  JSON_BAD(text, ZS_ERR_INVALID, "a number of 101 characters");
  /* floats out of range, in either direction */
  JSON_BAD("{\"optim\": {\"lr\": 1e400}}", ZS_ERR_INVALID,
           "optim.lr is beyond 1.8e+308: out of range for a float (largest magnitude 3.4e+38)");
  JSON_BAD("{\"optim\": {\"lr\": -1e400}}", ZS_ERR_INVALID, "optim.lr is beyond -1.8e+308: out of range");
  JSON_BAD("{\"gradient_clipping\": 1e39}", ZS_ERR_INVALID, "gradient_clipping is 1e+39: out of range for a float");
  JSON_BAD("{\"optim\": {\"weight_decay\": 1e-50}}", ZS_ERR_INVALID,
           "optim.weight_decay is 1e-50: out of range for a float (nonzero magnitudes below 1.4e-45 round to 0)");
  JSON_BAD("{\"optimizer\": {\"params\": {\"betas\": [0.9, 1e400]}}}", ZS_ERR_INVALID,
           "optimizer.params.betas[1] is beyond 1.8e+308: out of range");
  JSON_BAD("{\"optimizer\": {\"params\": {\"betas\": [\"0.9\", 0.95]}}}", ZS_ERR_INVALID,
           "optimizer.params.betas[0] is \"0.9\": expected a finite number");
  JSON_BAD("{\"optim\": {\"weight_decay\": 1e-400}}", ZS_ERR_INVALID,
           "a number that rounds to 0 at line 1 column 28, near '1e-400}}': it is below the smallest double");
  JSON_BAD("{\"scheduler\": {\"min_lr\": -2.5e-999}}", ZS_ERR_INVALID, "a number that rounds to 0");
  zs_config_t c;
  expect_ok(zs_config_from_json(&c, "{\"optim\": {\"weight_decay\": 0e-400, \"momentum\": 0.0E+5}}"));
  /* integer and size fields */
  JSON_BAD("{\"stage\": 1e10}", ZS_ERR_INVALID, "stage is 10000000000: out of range for an integer (-2147483648..2147483647)");
  JSON_BAD("{\"grad_accum\": -2147483649}", ZS_ERR_INVALID, "grad_accum is -2147483649: out of range for an integer");
  JSON_BAD("{\"scale_window\": 1e400}", ZS_ERR_INVALID, "scale_window is beyond 1.8e+308: out of range for an integer");
  JSON_BAD("{\"stage\": 2.5}", ZS_ERR_INVALID, "stage is 2.5: expected an integer");
  JSON_BAD("{\"stage\": true}", ZS_ERR_INVALID, "stage is true: expected an integer");
  JSON_BAD("{\"persist_threshold\": 1e20}", ZS_ERR_INVALID,
           "persist_threshold is 1e+20: out of range: at most 9007199254740992 (2^53)");
  JSON_BAD("{\"persist_threshold\": -5}", ZS_ERR_INVALID, "persist_threshold is -5: expected a whole number >= 0");
  JSON_BAD("{\"zero_optimization\": {\"stage3_max_live_parameters\": 1e300}}", ZS_ERR_INVALID,
           "zero_optimization.stage3_max_live_parameters is 1e+300: out of range");
  JSON_BAD("{\"fp16\": {\"initial_scale_power\": 1e10}}", ZS_ERR_INVALID, "expected an integer power 0..63");
  /* whole numbers in any notation are integers (DeepSpeed configs write 5e8) */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"reduce_bucket_size\": 5e8, \"stage\": 3.0},"
                                    " \"persist_threshold\": 9007199254740992, \"grad_accum\": 2147483647,"
                                    " \"optim\": {\"eps\": 1e-40, \"weight_decay\": -0}}"));
  expect_u64_eq(c.reduce_bucket_size, 500000000);
  expect_int_eq(c.stage, 3);
  expect_u64_eq(c.persist_threshold, 9007199254740992ull);
  expect_int_eq(c.grad_accum, 2147483647);
  expect_true(c.optim.eps == 1e-40f); /* subnormal floats are kept */
  expect_true(c.optim.weight_decay == 0.0f);
  zs_log_set_level(ZS_LOG_WARN);
}

/* ---- duplicates, atomicity --------------------------------------------------- */

static void test_json_duplicates(void) {
  /* the last value of a section wins whole: nothing of the first survives */
  capture_start(ZS_LOG_WARN);
  zs_config_t c;
  zs_status_t st = zs_config_from_json(
      &c, "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}},\n"
          " \"zero_optimization\": {\"stage\": 1}}");
  capture_stop();
  expect_ok(st);
  expect_int_eq(c.stage, 1);
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_NONE);
  expect_str_contains(logs.text, "key zero_optimization appears 2 times: the last value wins");
  /* an earlier value is not read at all */
  zs_log_set_level(ZS_LOG_NONE);
  st = zs_config_from_json(&c, "{\"optim\": {\"lr\": \"fast\", \"lr\": 0.5}}");
  expect_ok(st);
  expect_true(c.optim.lr == 0.5f);
  st = zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"Lamb\"}, \"optimizer\": {\"type\": \"sgd\"}}");
  expect_ok(st);
  expect_int_eq(c.optim.kind, ZS_SGD);
  zs_log_set_level(ZS_LOG_WARN);
}

static void test_json_atomic(void) {
  zs_log_set_level(ZS_LOG_NONE);
  /* failures after fields were already applied to the working copy */
  JSON_BAD("{\"stage\": 3, \"optim\": {\"lr\": 0.1, \"kind\": \"lamb\"}}", ZS_ERR_INVALID, "optim.kind is \"lamb\"");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}},"
           " \"bf16\": {\"enabled\": true}, \"prefetch\": 99}", ZS_ERR_INVALID, "config.prefetch is 99 (from prefetch)");
  JSON_BAD("{\"bogus\": 1, \"stage\": 3, \"grad_clip\": \"x\"}", ZS_ERR_INVALID, "grad_clip is \"x\"");
  expect_true(!strcmp(zs_config_unknown_keys(), "bogus")); /* met before the failure */
  /* files too, and a file that is too large */
  char tmp[] = "/tmp/zs_test_config_strict_XXXXXX";
  int fd = mkstemp(tmp);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("{\"stage\": 3, \"prefetch\": 2, \"grad_clip\": 1e400}", f);
  fclose(f);
  zs_config_t c, before;
  memset(&c, CFG_PATTERN, sizeof c);
  before = c;
  expect_status(zs_config_from_json_file(&c, tmp), ZS_ERR_INVALID);
  expect_true(!memcmp(&c, &before, sizeof c));
  f = fopen(tmp, "w");
  assert_true(f != NULL);
  fputs("{\"note\": \"", f);
  for (int i = 0; i < 17 * 1024; i++) fprintf(f, "%01024d", 0);
  fputs("\"}", f);
  fclose(f);
  expect_status(zs_config_from_json_file(&c, tmp), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "is 16 MiB or larger");
  expect_true(!memcmp(&c, &before, sizeof c));
  remove(tmp);
  zs_log_set_level(ZS_LOG_WARN);
}

/* ---- environment ------------------------------------------------------------ */

#define ENV_BAD(var, value, needle)                                       \
  do {                                                                    \
    zs_config_t c_, before_;                                              \
    memset(&c_, CFG_PATTERN, sizeof c_);                                  \
    before_ = c_;                                                         \
    setenv(var, value, 1);                                                \
    expect_status(zs_config_from_env(&c_), ZS_ERR_INVALID);               \
    expect_str_contains(zs_last_error(), needle);                         \
    expect_true(!memcmp(&c_, &before_, sizeof c_));                       \
    unsetenv(var);                                                        \
  } while (0)

static void test_env_strict(void) {
  zs_log_set_level(ZS_LOG_NONE);
  setenv("ZS_STAGE", "3", 1); /* applied to the working copy before the failure */
  ENV_BAD("ZS_LR", "abc", "ZS_LR is 'abc': expected a finite number");
  ENV_BAD("ZS_LR", "1e60", "ZS_LR is '1e60': out of range for a float (largest magnitude 3.4e+38)");
  ENV_BAD("ZS_LR", "1e400", "ZS_LR is '1e400': out of range for a float");
  ENV_BAD("ZS_LR", "inf", "ZS_LR is 'inf': expected a finite number");
  ENV_BAD("ZS_LR", "nan", "ZS_LR is 'nan': expected a finite number");
  ENV_BAD("ZS_WEIGHT_DECAY", "1e-60", "ZS_WEIGHT_DECAY is '1e-60': out of range for a float (nonzero magnitudes");
  ENV_BAD("ZS_WEIGHT_DECAY", "1e-400", "ZS_WEIGHT_DECAY is '1e-400': out of range for a float (nonzero");
  ENV_BAD("ZS_GRAD_ACCUM", "99999999999", "ZS_GRAD_ACCUM is '99999999999': out of range for an integer");
  ENV_BAD("ZS_GRAD_ACCUM", "99999999999999999999999", "out of range for an integer");
  ENV_BAD("ZS_GRAD_ACCUM", "2.0", "ZS_GRAD_ACCUM is '2.0': expected an integer");
  ENV_BAD("ZS_PERSIST_THRESHOLD", "1e3", "ZS_PERSIST_THRESHOLD is '1e3': expected a whole number >= 0");
  ENV_BAD("ZS_PERSIST_THRESHOLD", "9007199254740993", "out of range: at most 9007199254740992 (2^53)");
  ENV_BAD("ZS_PERSIST_THRESHOLD", "99999999999999999999999", "out of range: at most 9007199254740992");
  /* control bytes in a value are shown escaped, not written to the log raw */
  ENV_BAD("ZS_OPTIM", "adamw\x1b[2J", "ZS_OPTIM is 'adamw\\x1b[2J': expected adamw, adam, sgd or lion");
  ENV_BAD("ZS_OPTIM", "adam\nw", "ZS_OPTIM is 'adam\\x0aw'");
  ENV_BAD("ZS_OPTIM", "0123456789012345678901234567890123456789012345678901234567890123456789",
          "ZS_OPTIM is '0123456789012345678901234567890123456789012345678901234567890123...': expected");
  unsetenv("ZS_STAGE");

  /* numbers do not depend on the process locale (a trainer may call setlocale) */
  static const char *const comma_locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "ru_RU.UTF-8"};
  const char *loc = NULL;
  for (size_t i = 0; i < 4 && !loc; i++) loc = setlocale(LC_NUMERIC, comma_locales[i]) ? comma_locales[i] : NULL;
  if (loc) {
    zs_config_t c;
    setenv("ZS_LR", "0.05", 1);
    expect_ok(zs_config_from_env(&c));
    expect_true(c.optim.lr == 0.05f);
    ENV_BAD("ZS_LR", "0,05", "ZS_LR is '0,05'");
    assert_ok(zs_config_from_json(&c, "{\"optim\": {\"lr\": 0.25}}"));
    expect_true(c.optim.lr == 0.25f);
    setlocale(LC_NUMERIC, "C");
  } else {
    fprintf(stderr, "  note: no comma-decimal locale installed: the locale check did not run\n");
  }
  unsetenv("ZS_LR");
  zs_log_set_level(ZS_LOG_WARN);
}

int main(void) {
  zs_test_run(test_json_syntax);
  zs_test_run(test_json_strings);
  zs_test_run(test_json_numbers);
  zs_test_run(test_json_duplicates);
  zs_test_run(test_json_atomic);
  zs_test_run(test_env_strict);
  zs_test_run(test_json_size_limits);
  zs_test_run(test_json_many_keys);
  return zs_test_finish();
}
