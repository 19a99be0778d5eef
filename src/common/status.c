/* Status names and messages (from the X-macro list), the thread's last error. */
#include <stdio.h>
#include <string.h>

#include "common/common.h"

static const char *const status_names[] = {
#define ZS__NAME(name, msg) #name,
    ZS_STATUS_LIST(ZS__NAME)
#undef ZS__NAME
};
static const char *const status_msgs[] = {
#define ZS__MSG(name, msg) msg,
    ZS_STATUS_LIST(ZS__MSG)
#undef ZS__MSG
};

static _Thread_local char last_error[ZS_ERRBUF];

const char *zs_status_string(zs_status_t st) {
  if ((int)st < 0 || st >= ZS_STATUS_COUNT) return "unknown status";
  return status_msgs[st];
}

const char *zs_status_name(zs_status_t st) {
  if ((int)st < 0 || st >= ZS_STATUS_COUNT) return "ZS_UNKNOWN";
  return status_names[st];
}

const char *zs_last_error(void) { return last_error; }

/* Formats into a local buffer first: the arguments often include the message
 * being replaced (zs_last_error(), a handle's buffer), and vsnprintf into the
 * buffer it reads from is undefined (and garbles the text). */
static void set_error(char *handle_buf, const char *fmt, va_list ap) {
  char msg[ZS_ERRBUF];
  vsnprintf(msg, sizeof msg, fmt, ap);
  memcpy(last_error, msg, sizeof msg);
  if (handle_buf) memcpy(handle_buf, msg, sizeof msg);
}

zs_status_t zs__fail(char *handle_buf, zs_status_t st, const char *file, int line,
                     const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error(handle_buf, fmt, ap);
  va_end(ap);
  zs__log(ZS_LOG_ERROR, file, line, "%s: %s", zs_status_name(st), last_error);
  return st;
}

void zs_set_last_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (fmt) set_error(NULL, fmt, ap);
  else last_error[0] = 0;
  va_end(ap);
}

void zs_set_last_error_str(const char *msg) {
  if (msg) zs_set_last_error("%s", msg);
  else zs_set_last_error(NULL);
}

zs_status_t zs__fail_quiet(char *handle_buf, zs_status_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error(handle_buf, fmt, ap);
  va_end(ap);
  return st;
}

/* ---- dtypes ---------------------------------------------------------------- */

size_t zs_dtype_size(zs_dtype_t dt) {
  switch (dt) {
    case ZS_FP32: case ZS_INT32: return 4;
    case ZS_BF16: case ZS_FP16: return 2;
    case ZS_INT64: case ZS_FP64: return 8;
    case ZS_UINT8: return 1;
    default: return 0;
  }
}

const char *zs_dtype_name(zs_dtype_t dt) {
  static const char *const n[] = {"fp32", "bf16", "fp16", "int32", "int64", "uint8", "fp64"};
  return ((int)dt >= 0 && dt < ZS_DTYPE_COUNT) ? n[dt] : "invalid";
}

const char *zs_redop_name(zs_redop_t op) {
  static const char *const n[] = {"sum", "avg", "max", "min", "prod"};
  return ((int)op >= 0 && op < ZS_REDOP_COUNT) ? n[op] : "invalid";
}
