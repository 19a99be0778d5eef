/* A trace file (zeroshard/trace.h's JSON) read back whole with cJSON, for the
 * tests that check its events (test_trace_engine, test_engine_overlap). */
#ifndef ZS_TESTS_TRACE_JSON_H
#define ZS_TESTS_TRACE_JSON_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

/* The parsed document, or NULL when the file cannot be read or parsed. */
static cJSON *read_json(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n > 0 ? malloc((size_t)n + 1) : NULL;
  size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  cJSON *j = NULL;
  if (buf && got == (size_t)n) {
    buf[n] = '\0';
    j = cJSON_Parse(buf);
  }
  free(buf);
  return j;
}

#endif
