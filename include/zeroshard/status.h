/* zeroshard/status.h: status codes, their messages, and the last error.
 *
 * Every fallible zeroshard call returns a zs_status_t. The code says what kind
 * of failure happened and zs_status_string() gives a fixed message saying what
 * to do about it; the detailed message of the most recent failure (naming the
 * parameter, rank or size involved) is kept per thread (zs_last_error) and per
 * handle (zs_engine_last_error, zs_comm_last_error, zs_device_last_error).
 */
#ifndef ZEROSHARD_STATUS_H
#define ZEROSHARD_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* One list generates the enum, the names and the messages. */
#define ZS_STATUS_LIST(X)                                                              \
  X(ZS_OK, "success")                                                                  \
  X(ZS_ERR_INVALID, "invalid argument: check the call against its header comment")     \
  X(ZS_ERR_STATE, "call out of order: see the phase rules in zeroshard/engine.h")      \
  X(ZS_ERR_MISMATCH,                                                                    \
    "mismatch: the ranks disagree, or a checkpoint or file does not fit this model, "  \
    "optimizer or layout; the detailed message names both sides")                      \
  X(ZS_ERR_NOMEM, "out of memory: reduce the model, raise the stage or offload")       \
  X(ZS_ERR_DEVICE, "device runtime failed: see the detailed message for the call")     \
  X(ZS_ERR_COMM, "collective backend failed: see the detailed message; the comm may "  \
                 "need to be destroyed")                                                \
  X(ZS_ERR_TIMEOUT, "collective timed out (ZS_COMM_TIMEOUT_S): a rank is stuck or "    \
                    "ranks issued different collectives")                               \
  X(ZS_ERR_UNSUPPORTED, "not supported by this build or backend")                      \
  X(ZS_ERR_IO, "file input/output failed: check the path, permissions and free space") \
  X(ZS_ERR_CORRUPT, "data is corrupt or truncated: the file or message failed its checks") \
  X(ZS_ERR_OVERFLOW, "non-finite values: gradients or loss scale overflowed")          \
  X(ZS_ERR_INTERNAL, "internal error in zeroshard: please report it with the log")      \
  X(ZS_ERR_PEER, "another rank failed and told this one (zeroshard/comm.h): the "        \
                 "detailed message names that rank and its reason; destroy the comm")

typedef enum {
#define ZS_STATUS_ENUM_(name, msg) name,
  ZS_STATUS_LIST(ZS_STATUS_ENUM_)
#undef ZS_STATUS_ENUM_
  ZS_STATUS_COUNT
} zs_status_t;

/* Fixed, actionable message for a code ("unknown status" if out of range). */
const char *zs_status_string(zs_status_t st);
/* The enumerator's name, e.g. "ZS_ERR_INVALID". */
const char *zs_status_name(zs_status_t st);
/* Detailed message of the most recent failure on the calling thread, or "". The
 * pointer stays valid until the next zeroshard call on this thread. */
const char *zs_last_error(void);
/* Sets the calling thread's message (printf-style, truncated at 511 bytes),
 * for a trainer's callback that fails: zs_pp_run and zs_engine_setup's init
 * callback end their own message with it ("... the forward callback failed on
 * F of micro-batch 3 chunk 0 (stage 1) with ZS_ERR_IO: <yours>"); both clear
 * it before each call, so an older message is never taken for the callback's. */
void zs_set_last_error(const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* The same with the message as it is (no format: '%' stays '%'), for
 * languages that cannot call a variadic function (Fortran's bind(C)). */
void zs_set_last_error_str(const char *msg);

#ifdef __cplusplus
}
#endif
#endif
