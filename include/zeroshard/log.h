/* zeroshard/log.h: where the library's messages go.
 *
 * The library never prints to stdout. Messages at or above the level go to the
 * callback, by default a line on stderr ("zeroshard[rank] LEVEL file:line msg").
 * The rank is zs_log_rank()'s: the world rank of the first MPI comm the process
 * made; before one exists, the launcher's (OMPI_COMM_WORLD_RANK, PMI_RANK,
 * PMIX_RANK, SLURM_PROCID, or torchrun's RANK, the first set of these, read
 * with the other settings); without either the line has no "[rank]".
 * The initial level comes from ZS_LOG=none|error|warn|info|debug (default warn;
 * empty keeps it). The library's own ZS_* settings are read once, at its first
 * use; what is wrong in them (a value that does not parse, an unknown ZS_*
 * variable) is logged then as warnings through this sink (so ZS_LOG=none or a
 * callback set before that first use governs them too). The callback may be
 * called from the library's worker threads; it must be thread-safe.
 */
#ifndef ZEROSHARD_LOG_H
#define ZEROSHARD_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZS_LOG_NONE = 0, ZS_LOG_ERROR, ZS_LOG_WARN, ZS_LOG_INFO, ZS_LOG_DEBUG } zs_log_level_t;

/* The sink: one message (no trailing newline), its level, and the base name of
 * the source file and the line that logged it. */
typedef void (*zs_log_fn)(zs_log_level_t level, const char *file, int line, const char *msg,
                          void *user);
/* Deprecated: the old name of zs_log_fn (callback types end in _fn, as
 * zs_init_fn and zs_import_name_fn do); the same type, kept so that programs
 * written against it still compile. */
typedef zs_log_fn zs_log_cb;

/* Replace the sink (NULL restores stderr); any thread, any time. A message
 * reaches one sink whole (the callback with its own user pointer), and once
 * this returns no thread is still inside the old callback, so its owner may
 * go (it waits for calls in flight). Called from inside a callback it takes
 * effect at once, but other threads may still be in the old one. The callback
 * may be called from the library's threads (the MPI progress thread, stream
 * workers), several at once: it must be thread-safe, and it must not wait for
 * a thread that is calling zs_log_set_callback. */
void zs_log_set_callback(zs_log_fn cb, void *user);
/* Overrides ZS_LOG. A value outside ZS_LOG_NONE..ZS_LOG_DEBUG is clamped to
 * the nearer end, with a warning naming it. */
void zs_log_set_level(zs_log_level_t level);
zs_log_level_t zs_log_get_level(void);
/* The rank the default sink prints (see above), -1 if none is known: for a
 * callback that wants to prefix its lines the same way. Thread-safe. */
int zs_log_rank(void);
/* Sends msg through the sink at `level` (dropped below the level), with
 * `file` and `line` as given (NULL file: ""): for adapters and trainers whose
 * messages belong beside the library's (the libtorch adapter's warnings). */
void zs_log_message(zs_log_level_t level, const char *file, int line, const char *msg);

#ifdef __cplusplus
}
#endif
#endif
