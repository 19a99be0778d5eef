/* The strict check a JSON config passes before cJSON parses it.
 *
 * cJSON is lenient where a config loader must not be: it skips any byte up to
 * 0x20 as whitespace, takes numbers strtod takes (01, 1., -.5), keeps raw
 * control bytes and invalid UTF-8 in strings, and decodes \u0000 into a NUL
 * that ends the C string early ("stage\u0000xyz" is the key "stage"). It also
 * recurses once per nesting level and allocates ~80 bytes per value. So every
 * document is first read here once, left to right, against RFC 8259 plus the
 * limits in config_impl.h; what passes parses in cJSON the same way, and the
 * walk after it never meets a string it would misread.
 *
 * Each refusal names the line and column (bytes, from 1), shows the text there
 * with unprintable bytes escaped, and says what to do. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config/config_impl.h"

typedef struct {
  const char *text, *p, *end;
  size_t values;
  /* the first problem: where, what ("malformed JSON", ...) and what to do */
  const char *at;
  char what[64], fix[200];
} scan_t;

static int fail(scan_t *s, const char *at, const char *what, const char *fix_fmt, ...) ZS_PRINTF(4, 5);
static int fail(scan_t *s, const char *at, const char *what, const char *fix_fmt, ...) {
  va_list ap;
  s->at = at;
  snprintf(s->what, sizeof s->what, "%s", what);
  va_start(ap, fix_fmt);
  vsnprintf(s->fix, sizeof s->fix, fix_fmt, ap);
  va_end(ap);
  return 0;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static void skip_ws(scan_t *s) {
  while (s->p < s->end && is_ws(*s->p)) s->p++;
}

/* An unexpected byte where `expected` was due: control bytes get their own
 * message, since an editor does not show them. */
static int unexpected(scan_t *s, const char *expected) {
  unsigned char c = s->p < s->end ? (unsigned char)*s->p : 0;
  if (s->p < s->end && c < 0x20)
    return fail(s, s->p, "malformed JSON",
                "control byte 0x%02X is not JSON whitespace: use spaces, tabs or newlines", c);
  return fail(s, s->p, "malformed JSON", "%s", expected);
}

/* ---- strings -------------------------------------------------------------------- */

static int hex4(const char *p, const char *end, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    if (p + i >= end) return 0;
    char c = p[i];
    unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
    if (d == 16) return 0;
    v = v * 16 + d;
  }
  *out = v;
  return 1;
}

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlongs, no
 * surrogates, nothing past U+10FFFF), or 0. */
int zs__utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned char c = p[0];
  int n;
  unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;      /* overlong below U+0800 */
    else if (c == 0xED) hi = 0x9F; /* U+D800-U+DFFF */
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;      /* overlong below U+10000 */
    else if (c == 0xF4) hi = 0x8F; /* beyond U+10FFFF */
  } else {
    return 0;
  }
  if (end - p < n || p[1] < lo || p[1] > hi) return 0;
  for (int i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return n;
}

/* s->p at the opening quote. Keys may not hold control characters at all:
 * they are printed in warnings and matched by name. */
static int scan_string(scan_t *s, int is_key) {
  const char *open = s->p++;
  while (s->p < s->end) {
    unsigned char c = (unsigned char)*s->p;
    if (c == '"') {
      s->p++;
      return 1;
    }
    if (c < 0x20)
      return fail(s, s->p, "malformed JSON",
                  "raw control byte 0x%02X in a string: write it as an escape (\\n, \\t, \\u00%02X) or remove it",
                  c, c);
    if (is_key && c == 0x7F)
      return fail(s, s->p, "control character in a key", "config keys are plain names: remove it");
    if (c >= 0x80) {
      int n = zs__utf8_len((const unsigned char *)s->p, (const unsigned char *)s->end);
      if (!n)
        return fail(s, s->p, "invalid UTF-8",
                    "byte 0x%02X does not start a well-formed UTF-8 character (cut short, overlong, a "
                    "surrogate or past U+10FFFF): save the file as UTF-8", c);
      s->p += n;
      continue;
    }
    if (c != '\\') {
      s->p++;
      continue;
    }
    const char *esc = s->p;
    if (esc + 1 >= s->end) break;
    char e = esc[1];
    if (e && strchr("\"\\/bfnrt", e)) {
      if (is_key && e != '"' && e != '\\' && e != '/')
        return fail(s, esc, "control character in a key", "config keys are plain names: remove it");
      s->p += 2;
      continue;
    }
    if (e != 'u')
      return fail(s, esc, "malformed JSON",
                  "unknown escape: JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX");
    unsigned cp, lo;
    if (!hex4(esc + 2, s->end, &cp)) return fail(s, esc, "malformed JSON", "\\u needs four hex digits");
    s->p += 6;
    if (cp == 0)
      return fail(s, esc, "\\u0000 (NUL) in a string",
                  "no config key or value contains NUL (a C string ends there): remove it");
    if (is_key && (cp < 0x20 || cp == 0x7F)) {
      char what[64];
      snprintf(what, sizeof what, "control character \\u%04X in a key", cp);
      return fail(s, esc, what, "config keys are plain names: remove it");
    }
    int lone = cp >= 0xDC00 && cp <= 0xDFFF; /* a low surrogate first */
    if (cp >= 0xD800 && cp <= 0xDBFF) {       /* a high one: the low one must follow */
      lone = s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' || !hex4(s->p + 2, s->end, &lo) ||
             lo < 0xDC00 || lo > 0xDFFF;
      if (!lone) s->p += 6;
    }
    if (lone) {
      char what[64];
      snprintf(what, sizeof what, "lone UTF-16 surrogate \\u%04X", cp);
      return fail(s, esc, what,
                  "\\uD800-\\uDBFF must be followed by \\uDC00-\\uDFFF: fix the pair or write the "
                  "character as UTF-8");
    }
  }
  return fail(s, open, "malformed JSON", "the string does not end: add the closing quote");
}

/* ---- numbers and words -------------------------------------------------------- */

static int word_at(const scan_t *s, const char *p, const char *w) {
  size_t n = strlen(w);
  return (size_t)(s->end - p) >= n && !strncasecmp(p, w, n);
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, then a byte that cannot
 * continue a number. */
static int scan_number(scan_t *s) {
  const char *start = s->p, *p = s->p, *end = s->end;
  if (word_at(s, p, "nan") || word_at(s, p, "inf") || word_at(s, p, "-inf"))
    return fail(s, start, "malformed JSON", "JSON has no NaN or Infinity: use a finite number");
  int ok = 1;
  if (p < end && *p == '-') p++;
  if (p < end && *p == '0') p++;
  else if (p < end && is_digit(*p)) while (p < end && is_digit(*p)) p++;
  else ok = 0;
  if (ok && p < end && *p == '.') {
    if (++p >= end || !is_digit(*p)) ok = 0;
    while (p < end && is_digit(*p)) p++;
  }
  if (ok && p < end && (*p == 'e' || *p == 'E')) {
    if (++p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || !is_digit(*p)) ok = 0;
    while (p < end && is_digit(*p)) p++;
  }
  if (ok && p < end && (is_digit(*p) || strchr(".+-", *p) || ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')))
    ok = 0; /* 01, 1.5.5, 1e5e5, 0x10 */
  if (!ok)
    return fail(s, start, "malformed JSON",
                "not a JSON number: write numbers like 3, -0.5 or 1e-4 (no leading zeros, + sign, "
                "hex or bare decimal point)");
  if (p - start > JSON_MAX_NUMBER) {
    char what[64];
    snprintf(what, sizeof what, "a number of %zu characters", (size_t)(p - start));
    return fail(s, start, what, "config numbers need at most %d (a double holds 17 significant digits)",
                JSON_MAX_NUMBER);
  }
  /* A nonzero number below the smallest double parses to 0 in cJSON, which no
   * later check can tell from a written 0. (One beyond the largest parses to
   * infinity: the key's own check names it, with the key.) */
  char num[JSON_MAX_NUMBER + 1];
  memcpy(num, start, (size_t)(p - start));
  num[p - start] = '\0';
  const char *e = strpbrk(num, "eE"), *nonzero = strpbrk(num, "123456789");
  if (e && nonzero && nonzero < e && zs__config_strtod(num, NULL) == 0)
    return fail(s, start, "a number that rounds to 0",
                "it is below the smallest double (4.9e-324): write 0 or a larger value");
  s->p = p;
  return 1;
}

/* ---- values ------------------------------------------------------------------- */

static int scan_value(scan_t *s, int depth);

/* s->p at '{' or '['. */
static int scan_container(scan_t *s, int depth) {
  const char *open = s->p;
  int object = *s->p == '{';
  char close = object ? '}' : ']';
  if (depth > JSON_MAX_DEPTH) {
    char what[64];
    snprintf(what, sizeof what, "JSON nested deeper than %d levels", JSON_MAX_DEPTH);
    return fail(s, open, what, "a config nests 4 levels at most: is this a config file?");
  }
  s->p++;
  skip_ws(s);
  if (s->p < s->end && *s->p == close) {
    s->p++;
    return 1;
  }
  for (;;) {
    if (object) {
      if (s->p >= s->end || *s->p != '"') return unexpected(s, "expected a key in double quotes");
      if (!scan_string(s, 1)) return 0;
      skip_ws(s);
      if (s->p >= s->end || *s->p != ':') return unexpected(s, "expected ':' after the key");
      s->p++;
      skip_ws(s);
    }
    if (!scan_value(s, depth)) return 0;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
      s->p++;
      return 1;
    }
    if (s->p >= s->end || *s->p != ',')
      return unexpected(s, object ? "expected ',' or '}'" : "expected ',' or ']'");
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) return fail(s, s->p, "malformed JSON", "a trailing comma: remove it");
  }
}

static int scan_value(scan_t *s, int depth) {
  if (s->p < s->end && ++s->values > JSON_MAX_VALUES) {
    char what[64];
    snprintf(what, sizeof what, "more than %d JSON values", JSON_MAX_VALUES);
    return fail(s, s->p, what, "a DeepSpeed config has about a hundred: is this a config file?");
  }
  char c = s->p < s->end ? *s->p : '\0';
  if (c == '{' || c == '[') return scan_container(s, depth + 1);
  if (c == '"') return scan_string(s, 0);
  if (c == '-' || is_digit(c) || c == '+' || c == '.' || word_at(s, s->p, "nan") || word_at(s, s->p, "inf"))
    return scan_number(s);
  static const char *const words[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(words[i]);
    if ((size_t)(s->end - s->p) >= n && !memcmp(s->p, words[i], n)) {
      s->p += n;
      return 1;
    }
  }
  return unexpected(s, "expected a value (an object, array, string, number, true, false or null)");
}

/* ---- the document ------------------------------------------------------------- */

zs_status_t zs__config_check_syntax(const char *text, size_t len, const char *src) {
  scan_t s = {.text = text, .p = text, .end = text + len};
  if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) s.p += 3; /* a BOM; cJSON skips it too */
  skip_ws(&s);
  int ok = scan_value(&s, 0);
  if (ok) {
    skip_ws(&s);
    if (s.p < s.end) ok = unexpected(&s, "text after the end of the config object: remove it");
  }
  if (ok) return ZS_OK;

  /* line and column of the problem, and the text there */
  int line = 1;
  const char *bol = text;
  for (const char *p = text; p < s.at; p++)
    if (*p == '\n') line++, bol = p + 1;
  char near[24 * 4 + 1];
  zs__config_printable(near, sizeof near, s.at, (size_t)(s.end - s.at) < 24 ? (size_t)(s.end - s.at) : 24);
  return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s%s at line %d column %d, near '%s': %s", src, s.what, line,
                 (int)(s.at - bol) + 1, near[0] ? near : "(end of input)", s.fix);
}

size_t zs__config_printable(char *buf, size_t n, const char *s, size_t len) {
  size_t k = 0, i = 0;
  for (; i < len && n > 0; i++) {
    unsigned char c = (unsigned char)s[i];
    char one[5] = {(char)c, '\0'};
    if (c == '\\') snprintf(one, sizeof one, "\\\\");
    else if (c < 0x20 || c >= 0x7F) snprintf(one, sizeof one, "\\x%02x", c);
    size_t m = strlen(one);
    if (k + m >= n) break;
    memcpy(buf + k, one, m);
    k += m;
  }
  if (n > 0) buf[k] = '\0';
  return i;
}

size_t zs__utf8_bad(const char *s) {
  const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
  for (const unsigned char *q = p; q < end;) {
    int n = *q < 0x80 ? 1 : zs__utf8_len(q, end);
    if (!n) return (size_t)(q - p);
    q += n;
  }
  return (size_t)-1;
}
