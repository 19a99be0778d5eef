/* zs-trace's parts (tools/zs_trace.c, tools/zs_trace_summary.c): the events
 * of the files read, one parser for every subcommand. Not installed, not API. */
#ifndef ZS_TOOLS_ZS_TRACE_H
#define ZS_TOOLS_ZS_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char name[64], cat[16], ph[4];
  int64_t ts, dur;
  int pid, tid;
  int mb, stage; /* a compute's args; -1 if absent */
  char *line;    /* as read, for merge */
} ev_t;

/* Every event of every file read so far, in file order (zs_trace.c). */
extern ev_t *evs;
extern size_t nev;

/* Appends path's events to evs: 1, or 0 with why on stderr (it cannot be read,
 * or holds no whole event: not a zeroshard trace, or every event cut short). */
int read_file(const char *path);
/* "step N" (cat "user", N an integer): a step range the trainer marked; *n = N. */
int step_of(const ev_t *e, long *n);

/* `zs-trace summary [--skip K] [--json] FILE...`: argv[0..argc) are what
 * follows "summary"; returns the exit status (zs_trace_summary.c). */
int summary_main(int argc, char **argv);

#endif
