/* Internal to the config loaders (src/config/config_*.c): where a field's value
 * came from, the value kinds shared by the environment and JSON, and the JSON
 * walker's context and key tables. Public API: zeroshard/config_load.h. */
#ifndef ZS_CONFIG_CONFIG_IMPL_H
#define ZS_CONFIG_CONFIG_IMPL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "zeroshard/config_load.h"

/* ---- where a field's value came from ---------------------------------------- */

/* Validation names struct fields ("config.stage"); a user who wrote
 * "zero_optimization.stage" or ZS_STAGE needs to see that name too, so loaders
 * record which key or variable set each field. */
#define ORIGIN_MAX 48
typedef struct {
  int n;
  struct {
    const char *field; /* a string literal: "stage", "optim.lr", ... */
    char from[128];
  } e[ORIGIN_MAX];
} origins_t;

static inline void origin_set(origins_t *o, const char *field, const char *from) {
  int i = 0;
  while (i < o->n && strcmp(o->e[i].field, field)) i++;
  if (i == ORIGIN_MAX) return;
  if (i == o->n) o->n++;
  o->e[i].field = field;
  size_t k = 0; /* cut to fit */
  for (; k + 1 < sizeof o->e[i].from && from[k]; k++) o->e[i].from[k] = from[k];
  o->e[i].from[k] = '\0';
}

static inline const char *origin_get(const origins_t *o, const char *field) {
  if (!o) return NULL;
  for (int i = 0; i < o->n; i++)
    if (!strcmp(o->e[i].field, field)) return o->e[i].from;
  return NULL;
}

/* ---- validation (config_validate.c) ------------------------------------------- */

/* zs_config_validate, with the origins of fields for messages and a prefix
 * ("<path>: " or "") before them. */
zs_status_t zs__config_validate(const zs_config_t *c, const origins_t *o, const char *prefix);

/* ---- values shared by the environment and JSON (config_env.c) ---------------- */

typedef enum {
  K_INT,      /* int */
  K_FLOAT,    /* float, finite */
  K_DOUBLE,   /* double, finite (the betas: 1 - beta in double, as PyTorch's) */
  K_SIZE,     /* size_t */
  K_BOOL,     /* int 0|1 */
  K_DTYPE,    /* zs_dtype_t from "fp32"|"bf16"|"fp16" */
  K_OPTIM,    /* zs_optim_kind_t from "adamw"|"adam"|"sgd"|"lion" */
  K_OFFLOAD,  /* zs_offload_t from "none"|"cpu"|"nvme" */
  K_STEPS,    /* int64_t step count from a whole number 0..2^53 */
  K_SCHED,    /* zs_sched_kind_t from "constant"|"cosine"|"linear"|"warmup"|... */
  K_WARMUP,   /* zs_warmup_type_t from "linear"|"log" */
  K_SDTYPE,   /* zs_state_dtype_t from "fp32"|"bf16"|"int8" */
  K_OVERLAP,  /* zs_overlap_t from "auto"|"on"|"off" (and the boolean words, JSON's true/false) */
  K_PATH,     /* environment: char[ZS_NVME_PATH_MAX], the text kept as given */
  K_FN,       /* JSON: a handler (sections and keys with their own rules) */
  K_ACCEPT,   /* JSON: known, not used; debug log with the note */
  K_ACCEPT_I, /* same, logged at info: the user may expect an effect */
} kind_t;

extern const char *const zs__config_kind_expect[];

/* What converting a value gave: the value, a wrong type or form (the message
 * says what is expected), or a number of the right form beyond what the field
 * holds (the message says the range: zs__config_range_text). */
enum { VAL_OK, VAL_TYPE, VAL_RANGE };
const char *zs__config_range_text(kind_t kind, double v);

int zs__config_word_offload(const char *s, zs_offload_t *out);
/* The word of a schedule kind ("cosine") and of a warmup type ("log"). */
const char *zs__config_sched_name(zs_sched_kind_t k);
const char *zs__config_warmup_name(zs_warmup_type_t w);
/* The word of an optimizer kind ("adamw") and of an offload target ("nvme");
 * "invalid" for a value outside the enum. */
const char *zs__config_optim_name(zs_optim_kind_t k);
const char *zs__config_offload_name(zs_offload_t f);

/* strtod in the C locale, whatever the process's locale. */
double zs__config_strtod(const char *s, char **end);

/* Stores a parsed value of `kind` into the field at byte offset `off`. */
void zs__config_store(zs_config_t *c, size_t off, kind_t kind, double num, int word);

/* 2^53: above it a JSON double no longer counts whole elements exactly. */
#define SIZE_LIMIT 9007199254740992.0

/* Parses one variable's text (numbers in the C locale, whatever the process
 * has set); VAL_*. Surrounding blanks are allowed. */
int zs__config_parse_text(const char *s, kind_t kind, double *num, int *word);

/* ---- JSON: limits and the strict syntax check (config_syntax.c) ---------------- */

/* What a config document may hold. A DeepSpeed config has about a hundred
 * values nested four deep; these bound what a wrong file can cost in time and
 * memory (cJSON takes ~80 bytes per value and recurses per level). */
#define JSON_MAX_BYTES (16u << 20) /* the text, NUL excluded, is shorter */
#define JSON_MAX_DEPTH 64
#define JSON_MAX_VALUES 100000
#define JSON_MAX_NUMBER 40 /* characters in one number */

/* ZS_OK if text[0..len) is one JSON value by RFC 8259 within the limits above,
 * with strings that hold no NUL, well-formed UTF-8 and paired surrogates, and
 * keys without control characters. Else ZS_ERR_INVALID with the line, column
 * and text there; `src` ("" or "<path>: ") starts the message. */
zs_status_t zs__config_check_syntax(const char *text, size_t len, const char *src);

/* The length of the well-formed UTF-8 character at p (RFC 3629: no overlong
 * forms, surrogates or code points past U+10FFFF) of 2 to 4 bytes, or 0; p[0]
 * is a byte of 0x80 or above, end the end of the text. */
int zs__utf8_len(const unsigned char *p, const unsigned char *end);
/* The offset of the first byte of s that does not start a well-formed UTF-8
 * character, or (size_t)-1 when s is UTF-8 throughout. */
size_t zs__utf8_bad(const char *s);

/* Copies s[0..len) into buf (n bytes, NUL-terminated) for a message: bytes
 * outside printable ASCII as \xNN, '\' as "\\", stopping before what would not
 * fit. Returns how many bytes of s it copied. Messages never carry raw control
 * bytes into a terminal. */
size_t zs__config_printable(char *buf, size_t n, const char *s, size_t len);

/* ---- JSON: parsing context and key tables (config_json.c) --------------------- */

typedef struct {
  zs_config_t cfg;
  origins_t org;
  char src[300];   /* "" or "<path>: ", before every message */
  int bf16_on, fp16_on;      /* -1 unset */
  char bf16_key[16];         /* "bf16" or "bfloat16", for messages */
  int ds_type;               /* -1 unset, else 0 Adam, 1 AdamW, 2 SGD */
  int adam_w_mode;           /* -1 unset */
  int ds_prefetch_seen;
  /* DeepSpeed's scheduler: "auto" step counts wait for our schedule keys */
  char auto_warmup[256], auto_total[256]; /* the key path, "" when not pending */
  const cJSON *ds_sched;     /* the "scheduler" section, applied after the other DeepSpeed keys */
  char ds_sched_path[64];
  int unknown; /* unknown keys met; the first few are logged one by one */
  int autos;                  /* "auto" values kept at zeroshard's (one warning names them) */
  char auto_keys[240];
  double ds_batch, ds_micro;  /* train_batch_size, train_micro_batch_size_per_gpu; 0 unset */
} ctx_t;

typedef zs_status_t (*key_fn)(ctx_t *x, const cJSON *item, const char *path);
/* After every key: DeepSpeed's batch sizes against gradient_accumulation_steps
 * (config_keys.c). */
zs_status_t zs__config_batch_finish(ctx_t *x);

typedef struct {
  const char *key;
  kind_t kind;
  size_t off;        /* K_INT..K_OFFLOAD: the field's offset */
  const char *field; /* the field name for origins ("stage", "optim.lr") */
  key_fn fn;         /* K_FN */
  int ds;            /* a DeepSpeed key: "auto" keeps the value; root pass 1 */
  const char *note;  /* K_ACCEPT*: why it is not used */
} spec_t;

#define OFF(f) offsetof(zs_config_t, f)
#define FIELD(key, kind, f, ds) {key, kind, OFF(f), #f, NULL, ds, NULL}
#define FN(key, fn, ds) {key, K_FN, 0, NULL, fn, ds, NULL}
#define ACCEPT(key, note) {key, K_ACCEPT, 0, NULL, NULL, 1, note}
#define ACCEPT_I(key, note) {key, K_ACCEPT_I, 0, NULL, NULL, 1, note}

zs_status_t zs__config_wrong(ctx_t *x, const cJSON *item, const char *path, const char *expect_fmt, ...)
    ZS_PRINTF(4, 5);
/* Converts a JSON value of `kind`; VAL_*. */
int zs__config_json_value(const cJSON *item, kind_t kind, double *num, int *word);
/* Converts a JSON value of `kind`, or fails naming `path`, the value and either
 * `expect` or the range the field holds. */
zs_status_t zs__config_get(ctx_t *x, const cJSON *item, const char *path, kind_t kind, const char *expect,
                           double *num, int *word);
/* A DeepSpeed value of "auto" keeps the current value; 1 if it was one. */
int zs__config_skip_auto(ctx_t *x, const cJSON *item, const char *path);
zs_status_t zs__config_need_object(ctx_t *x, const cJSON *item, const char *path);
/* Reads a flag (true/false, 0/1); "auto" leaves *out alone. */
zs_status_t zs__config_get_flag(ctx_t *x, const cJSON *item, const char *path, int *out);

enum { PASS_ALL, PASS_DS, PASS_OURS };

/* Applies every member of `obj` through `table`. At the root, pass PASS_DS
 * handles DeepSpeed keys and records unknown ones, PASS_OURS our own keys, so
 * ours win whatever the order in the document. */
zs_status_t zs__config_apply_object(ctx_t *x, const cJSON *obj, const char *prefix,
                                    const spec_t *table, size_t n, int pass);

/* Records an unknown key (the warning and zs_config_unknown_keys). */
void zs__config_unknown(ctx_t *x, const char *path);

#define APPLY(x, item, path, table) \
  zs__config_apply_object(x, item, path, table, sizeof table / sizeof table[0], PASS_ALL)

/* DeepSpeed's "scheduler" section and our "schedule" object (config_sched.c);
 * zs__config_sched_finish runs after both passes: an "auto" step count that
 * our keys did not fill is an error naming the key. */
zs_status_t zs__config_fn_scheduler(ctx_t *x, const cJSON *item, const char *path);
zs_status_t zs__config_fn_schedule(ctx_t *x, const cJSON *item, const char *path);
/* Applies the recorded DeepSpeed scheduler: after the optimizer section, whose
 * lr its warmup_max_lr replaces, wherever the two stand in the file. */
zs_status_t zs__config_sched_apply_ds(ctx_t *x);
zs_status_t zs__config_sched_finish(ctx_t *x);

/* The root table (config_keys.c): our keys and DeepSpeed's. */
extern const spec_t zs__config_root_keys[];
extern const size_t zs__config_root_count;

#endif
