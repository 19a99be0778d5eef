/* Internal: the checkpoint format and the functions the checkpoint files share
 * (ckpt.c format helpers and collectives, ckpt_save.c, ckpt_read.c the manifest
 * parser and rank-file reader shared by loading and the offline tools,
 * ckpt_load.c, ckpt_safetensors.c).
 *
 * Checkpoints (zeroshard/checkpoint.h): every rank writes the part of each
 * tensor's fp32 master, m and v that lies in its nominal shard [r*S, (r+1)*S) of
 * the unit (at stage 0, where every rank holds everything, each still writes only
 * that part), as CRC-checked blocks in its own file; rank 0 writes the manifest
 * last. Loading reads, per rank, the blocks overlapping the flat range its
 * optimizer owns in the new layout, checks them, agrees with the other ranks that
 * everything was there, then writes master, m and v, rounds the parameters from
 * the master and regathers them (stages 1-2, persistent stage-3 units).
 *
 * Format version 2. The manifest is JSON closed by a "checksum" member in one
 * fixed form (CK_SEAL_*): the CRC-32 of every byte before it. Rank 0 makes the
 * manifest before any rank file is written (every rank file's size and block
 * count follow from the layout), so each rank file records that checksum too:
 * an edited manifest fails its own checksum, and one whose checksum was
 * recomputed fails every rank file's record.
 *
 * Rank file layout (little-endian): a 48-byte header {"ZSCKPT02", rank, world,
 * id, the file's size in bytes, nblocks, the manifest's checksum, 0, crc of the
 * header's first 44 bytes}, then per block a 40-byte header {magic "ZSBK",
 * tensor, kind, crc of the data, element offset, count, crc of the block
 * header's first 32 bytes, encoding} and the block's data, to the end of the
 * file. The encoding (CK_ENC_*) says what the data is: count fp32 values (the
 * master always; m and v of fp32 states, or of any state dtype in files saved
 * before compact states were written as they are kept), count bf16 values (m
 * and v of bf16 states), or, for int8 states, ceil(count / B) fp32 block scales
 * then count code bytes (B the manifest's state_block; the block's offset is a
 * multiple of B, so its blocks are the parameter's own, kernels/optim_state.h).
 * The data CRC of a coded block covers its encoding word, then its data (the
 * header's CRC stops before that word; fp32 blocks' CRCs are the data's, as
 * before). A coded block must match the manifest's state_dtype; readers decode it to
 * fp32, which re-encodes to the same codes, so a load into any state dtype,
 * layout or world size works as from fp32 files.
 *
 * Nothing read is trusted before it is checked: every number is bounded before
 * it is used in arithmetic, names are the ones the id implies, and the blocks of
 * every (tensor, kind) must tile the range wanted exactly (no overlap, no gap).
 * Version 1 (no manifest checksum) is refused as ZS_ERR_UNSUPPORTED. */
#ifndef ZS_CKPT_IMPL_H
#define ZS_CKPT_IMPL_H

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config_impl.h" /* defines: zs__config_optim_name (the manifest's optimizer names) */
#include "zero/engine_impl.h"
#include "zeroshard/checkpoint.h"

#define CK_FORMAT "zeroshard-checkpoint"
#define CK_VERSION 2
#define CK_FILE_MAGIC "ZSCKPT02"
#define CK_BLOCK_MAGIC 0x4B42535Au /* "ZSBK" */
#define CK_CHUNK ((size_t)1 << 20)  /* elements per staged device copy */
#define CK_PATH 4096
#define CK_MAX_WORLD (1 << 20)
#define CK_MAX_TENSORS (1 << 24)
#define CK_MAX_ELEMS ((int64_t)1 << 50) /* per tensor and over all tensors: 4 PiB of fp32 */
#define CK_MAX_BYTES ((int64_t)1 << 60) /* per rank file and over all rank files */

/* The manifest ends in exactly CK_SEAL_HEAD, 8 lowercase hex digits, CK_SEAL_TAIL. */
#define CK_SEAL_HEAD ",\n\t\"checksum\":\t\""
#define CK_SEAL_TAIL "\"\n}\n"
#define CK_SEAL_LEN (sizeof CK_SEAL_HEAD - 1 + 8 + sizeof CK_SEAL_TAIL - 1)

enum { K_MASTER = 0, K_M, K_V, K_COUNT };
extern const char *const zs__ck_kind_names[K_COUNT];

typedef struct {
  char magic[8];
  uint32_t rank, world;
  uint64_t id, bytes;
  uint32_t nblocks, manifest_crc, reserved, crc;
} ck_file_head_t;

typedef struct {
  uint32_t magic, tensor, kind, data_crc;
  int64_t offset, count;
  uint32_t head_crc, enc; /* CK_ENC_* */
} ck_block_head_t;

/* A block's data: fp32 values, bf16 values, or int8 block scales and codes. */
enum { CK_ENC_F32 = 0, CK_ENC_BF16 = 1, CK_ENC_Q8 = 2, CK_ENC_COUNT };

_Static_assert(sizeof(ck_file_head_t) == 48, "file header layout");
_Static_assert(sizeof(ck_block_head_t) == 40, "block header layout");

uint32_t zs__ck_crc(const void *p, size_t n);
uint32_t zs__ck_crc_more(uint32_t c, const void *p, size_t n);
zs_status_t zs__ck_max_i64(zs_engine_t *zs, int64_t *v, int n);
/* mesh 0: over the engine's data-parallel comm only (what one part's files share) */
zs_status_t zs__ck_max_i64_in(zs_engine_t *zs, int64_t *v, int n, int mesh);
zs_status_t zs__ck_agree(zs_engine_t *zs, zs_status_t mine, const char *what);
/* The model-parallel group's size when it has more than one rank, else 0. With
 * one, every agreement above spans the mesh, and each model-parallel rank keeps
 * its part of the model in its own checkpoint under dir/mp<rank> (zs__ck_dir):
 * a whole checkpoint of that part, its manifest naming the group's size and rank. */
int zs__ck_mp_size(const zs_engine_t *zs);
/* The range of parameter p whose master and optimizer state this rank owns
 * (element offsets [*a, *b) of the parameter); 0 when it owns none. */
int zs__ck_owned_range(const zs_engine_t *zs, const zs_param_t *p, int64_t *a, int64_t *b);
/* "[5, 13]" into buf (n bytes); returns buf. */
const char *zs__ck_shape_str(char *buf, size_t n, int ndim, const int64_t *shape);
/* Whether s is a layout zs_checkpoint_set_layout takes (printable ASCII, shorter
 * than ZS_CKPT_LAYOUT_MAX). */
int zs__ck_layout_ok(const char *s);
/* dir, or dir/mp<rank>: a string to free(), NULL without memory. */
char *zs__ck_dir(const zs_engine_t *zs, const char *dir);
/* Records the part's folder (zs__ck_dir's) as the one this engine last saved
 * into or loaded from (ck_own: zs_checkpoint_save's folder check). */
void zs__ck_own(zs_engine_t *zs, const char *dir);
zs_status_t zs__ck_check_call(zs_engine_t *zs, const char *path, const char *fn);
/* Whether the unit keeps state of a kind. The master is fp32 (zs__eng_master_get
 * / _set read and write it wherever it lives); m and v are in the state dtype
 * (zs__eng_state_get / _set / _raw). */
int zs__ck_unit_keeps(const zs_engine_t *zs, const zs_unit_t *u, int kind);
int zs__ck_kind_present(const zs_engine_t *zs, int kind);
/* Bytes of a block of count elements in encoding enc (blk: the int8 block size). */
int64_t zs__ck_block_bytes(uint32_t enc, int64_t count, int blk);
/* The encoding this engine saves kind k in. */
uint32_t zs__ck_kind_enc(const zs_engine_t *zs, int k);
/* count values of kind k (K_M or K_V) from a block's data raw in encoding enc
 * (not CK_ENC_F32), decoded to fp32 into out, as zs__eng_state_get decodes. */
void zs__ck_decode(uint32_t enc, int k, int blk, const void *raw, int64_t count, float *out);
zs_status_t zs__ck_commit_file(char *err_buf, FILE *f, const char *tmp, const char *final);
void zs__ck_rank_file_name(char *buf, size_t n, uint64_t id, int rank);
/* Subdirectories of top that hold checkpoints (a trainer that keeps one per
 * engine, as the example MoE trainer's dense/ and experts/): "; it holds
 * checkpoints in its subdirectories a, b: name one of them" into out (n
 * bytes), or "" when none. */
void zs__ck_held_below(const char *top, char *out, size_t n);
/* json (a printed JSON object) closed by its checksum member: a new string
 * (free with free()), or NULL without memory; *crc the checksum. */
char *zs__ck_manifest_seal(const char *json, uint32_t *crc);
/* Whether text[0..n) ends in the checksum member; then *crc is the checksum it
 * records and *body the length of the text it covers. */
int zs__ck_manifest_sealed(const char *text, size_t n, uint32_t *crc, size_t *body);

/* ---- ckpt_save.c: a save's steps; ckpt_async.c runs them apart ---- */

/* One save in the making. */
typedef struct {
  const char *fn; /* the public call, in messages */
  uint64_t id;
  uint32_t mcrc;  /* the manifest's checksum (every rank's copy) */
  char *text;     /* the manifest (rank 0 of each part; NULL elsewhere) */
  long long step; /* the step saved */
} ck_save_t;

/* The call's checks and agreements (path, layout words, the folder's owner),
 * after finishing a background save still pending: *dir (to free()) is top
 * or top/mp<rank>. ZS_ERR_STATE (not set up, in a step) returns at once,
 * without a collective. */
zs_status_t zs__ck_save_start(zs_engine_t *zs, const char *top, const char *fn, char **dir);
/* Pending work finished, the id agreed, the directory made, the manifest made
 * (s->text on rank 0) and its checksum shared. On failure s->text is freed. */
zs_status_t zs__ck_save_prepare(zs_engine_t *zs, const char *top, const char *dir, ck_save_t *s);
/* ---- ckpt_lock.c: a folder's writer across processes ---- */

/* Takes (and keeps until zs_engine_destroy) the exclusive lock of the existing
 * folder top; ZS_ERR_STATE with who holds it when another process does. Held
 * already, or no lock possible there: ZS_OK. Local: one process of a run
 * calls it, and the run agrees on the outcome. */
zs_status_t zs__ck_lock_folder(zs_engine_t *zs, const char *top, const char *fn);
/* A warning when another process holds top's lock (a load from a live run's
 * folder); returns whether it does. */
int zs__ck_lock_peek(const zs_engine_t *zs, const char *top, const char *fn);
/* For a load's fix-ups of top (renames a cut save left, the other layout's
 * older save): 1 when they may run, holding top's lock in *fd (-1: this
 * process holds it already, or the file system has no flock; close *fd
 * after); 0 when another live run holds it (warned) or top takes no writes. */
int zs__ck_lock_fixups(const char *top, int *fd, const char *fn);

/* After a save in one layout (mp_size > 1: parts mp0..; else one part in top):
 * the older save another layout left in top removed (ckpt_save.c). */
void zs__ck_remove_other_layout(const char *top, int mp_size);
/* ---- ckpt_write.c: a rank file's bytes ---- */

/* Rank r's file: its size and block count, which follow from the layout alone
 * (so rank 0 can name them in the manifest before any file is written). */
void zs__ck_rank_file_layout(const zs_engine_t *zs, int r, int64_t *bytes, int64_t *blocks);
/* This rank's file of save `id` in dir, written under a temporary name,
 * fsynced and renamed. */
zs_status_t zs__ck_write_rank_file(zs_engine_t *zs, const char *dir, uint64_t id, uint32_t manifest_crc);
/* A rank file's copy in host memory: buf holds its bytes, at an address and
 * padded (with zeros) to a length that are multiples of CK_DIRECT_ALIGN, so
 * that it can be written with direct I/O; mem and mem_bytes are the
 * allocation (counted ZS_MEM_OTHER; free with zs_device_host_free). */
#define CK_DIRECT_ALIGN 4096
typedef struct {
  void *mem;
  size_t mem_bytes;
  unsigned char *buf;
  int64_t bytes, padded;
} ck_copy_t;
/* This rank's file, whole, in a copy, its blocks' CRCs not yet computed:
 * zs__ck_seal_snapshot computes them (any thread; blk the int8 state block, 0
 * without), ZS_ERR_INTERNAL with the message in err (n bytes) when the copy's
 * blocks do not end where it ends. */
zs_status_t zs__ck_snapshot(zs_engine_t *zs, const char *dir, const ck_save_t *s, ck_copy_t *c);
zs_status_t zs__ck_seal_snapshot(void *buf, int64_t bytes, int blk, char *err, size_t n);
/* From `st`, this rank's outcome of writing its file (wrote: the file is in
 * place): agreed, then the manifest put in place (or every new rank file
 * removed), older saves removed, the folder recorded as this engine's. Frees
 * s->text. */
zs_status_t zs__ck_save_commit(zs_engine_t *zs, const char *top, const char *dir, ck_save_t *s, zs_status_t st,
                               int wrote);
/* A file size limit (RLIMIT_FSIZE) makes a write past it raise SIGXFSZ, whose
 * default action ends the process (a new-user trial's job died so): the
 * public calls that write files hold SIGXFSZ blocked on the calling thread
 * (the background writer on its own), and take back one their writes raised
 * before restoring the mask, so the write's EFBIG is a ZS_ERR_IO. A SIGXFSZ
 * already pending when the call began is left to the program. */
typedef struct {
  sigset_t old;
  int pending; /* already pending at the start */
} ck_xfsz_t;
void zs__ck_xfsz_hold(ck_xfsz_t *h);
void zs__ck_xfsz_release(ck_xfsz_t *h);
/* return expr's status, evaluated with SIGXFSZ held */
#define ZS__CK_WRITES(expr)                   \
  do {                                        \
    ck_xfsz_t ck_x_;                          \
    zs__ck_xfsz_hold(&ck_x_);                 \
    const zs_status_t ck_wst_ = (expr);       \
    zs__ck_xfsz_release(&ck_x_);              \
    return ck_wst_;                           \
  } while (0)

/* Finishes a background save (zs_checkpoint_wait's work) if one is pending:
 * ZS_OK when none; else its outcome, its message prefixed by fn. */
zs_status_t zs__ck_async_finish(zs_engine_t *zs, const char *fn);

/* ---- ckpt_split.c: how a tensor is split (zs_split_t, checked and resolved) ---- */

/* A tensor's place in its whole tensor: vndim 0 is the whole tensor `whole`
 * itself (or a copy of it); else the view view[0..vndim) of the whole
 * tensor's elements, of which it holds [start, start + count) along dim,
 * padded to padded there. inner / outer: the view's extent after / before dim. */
typedef struct zs_ck_split {
  char whole[ZS_NAME_MAX];
  int wndim, vndim, dim, set;
  int64_t wshape[ZS_MAX_DIMS], view[ZS_MAX_DIMS];
  int64_t start, count, padded, inner, outer, wnumel;
} zs_ck_split_t;

/* Checks s against a tensor of numel elements named name and fills inner,
 * outer, wnumel; ZS_ERR_INVALID (from the API) or code, with the message. */
zs_status_t zs__ck_split_check(zs_ck_split_t *s, const char *name, int ndim, const int64_t *shape, int64_t numel,
                               zs_status_t code, char *err, const char *fn);
/* The whole tensor's element that element e of a tensor split by s holds (-1: padding). */
int64_t zs__ck_to_whole(const zs_ck_split_t *s, int64_t e);
/* The element of a tensor split by s that holds whole element g (-1: none). */
int64_t zs__ck_from_whole(const zs_ck_split_t *s, int64_t g);
/* Parameter i's split: declared, or itself whole. */
void zs__ck_param_split(const zs_engine_t *zs, int i, zs_ck_split_t *out);
/* The manifest member of a declared split (NULL when whole and its own). */
cJSON *zs__ck_split_json(const zs_ck_split_t *s);
/* A manifest tensor's "split" member (NULL: whole and its own) into out; ZS_ERR_CORRUPT. */
zs_status_t zs__ck_split_parse(const cJSON *j, const char *name, int ndim, const int64_t *shape, int64_t numel,
                               zs_ck_split_t *out, const char *path, char *err, const char *fn);

/* ---- ckpt_manifest.c ---- */

/* The manifest, checked (see zs__ck_parse_manifest_text). */
typedef struct {
  uint64_t id;
  uint32_t crc; /* its checksum, which every rank file records */
  int world, nfiles, stage;
  int mp_size, mp_rank; /* the model-parallel part this is (1, 0 without) */
  char layout[ZS_CKPT_LAYOUT_MAX]; /* zs_checkpoint_set_layout's words ("" when not recorded) */
  int64_t step, good_steps, hysteresis_left;
  double loss_scale;
  int has[K_COUNT];
  char optimizer[16], param_dtype[16];
  char state_dtype[16]; /* "fp32" when the manifest predates compact states */
  int state_block;      /* int8: its block size, else 0 */
  char (*file)[64];
  int64_t *file_bytes, *file_blocks;
  /* the tensors as saved */
  int ntensors;
  char (*tname)[ZS_NAME_MAX];
  int *tndim;
  int64_t (*tshape)[ZS_MAX_DIMS];
  int64_t *tnumel;
  unsigned char *tfrozen; /* "frozen": true: the master blocks only (the values of a frozen unit) */
  zs_ck_split_t *tsplit;  /* each tensor's split ("split"; absent: whole, its own) */
  unsigned char *trep;    /* "replicated": true: a copy on every model-parallel part (ZS_PARAM_MP_REPLICATED) */
  int nattr;
  char attr[ZS_CKPT_ATTRS][2][64]; /* "attrs": zs_checkpoint_set_attr's keys and values */
} manifest_t;

void zs__ck_manifest_free(manifest_t *m);
/* Checks text[0..n) (NUL-terminated; path names it in messages) on its own
 * terms, no engine: its checksum, then every field in range and consistent with
 * the others (rank-file names from the id, sizes that can hold their blocks,
 * shapes without overflow, unique tensor names, known dtype, optimizer and state
 * names). Messages go to err (ZS_ERRBUF, may be NULL) prefixed with fn.
 * ZS_ERR_CORRUPT, ZS_ERR_UNSUPPORTED (another format version), ZS_ERR_NOMEM. */
zs_status_t zs__ck_parse_manifest_text(const char *text, size_t n, const char *path, manifest_t *m, char *err,
                                       const char *fn);
/* The same for dir/manifest.json (ZS_ERR_IO when it cannot be read). */
zs_status_t zs__ck_parse_manifest(const char *dir, manifest_t *m, char *err, const char *fn);
/* The same for dir/name (a manifest.json.tmp a save left). */
zs_status_t zs__ck_parse_manifest_named(const char *dir, const char *name, manifest_t *m, char *err, const char *fn);
/* dir/name parsed as a manifest where it exists (1; free m), else 0: a probe,
 * which leaves the thread's last error as it was. */
int zs__ck_probe_manifest(const char *dir, const char *name, manifest_t *m);
/* Whether top holds a save in one part (its manifest there) and one in
 * model-parallel parts (mp0/manifest.json) at once: a save cut before it
 * removed the other layout's. Fills the two saves' ids and steps (parts: mp0's). */
int zs__ck_two_layouts(const char *top, uint64_t *one_id, long long *one_step, uint64_t *parts_id,
                       long long *parts_step, int *nparts);

/* ---- ckpt_read.c ---- */

/* What arrived of one (tensor, kind): element ranges [lo, hi), with where the
 * data lies (rank file r, byte pos) and its CRC when the sink only indexes. */
typedef struct {
  int64_t lo, hi, pos;
  int r;
  uint32_t crc, enc;
} ck_span_t;

typedef struct {
  ck_span_t *s;
  size_t n, cap;
} ck_spans_t;

/* Where the blocks read go. dest() returns where element *a of tensor t's kind
 * k goes, [*a, *e) being the range wanted, or NULL if none of it is; what
 * arrives is recorded in spans, which must tile the range wanted exactly.
 * verify_all: every block is read and CRC-checked, and [0, numel) of every
 * kind the manifest lists is wanted. index_only: the same ranges wanted, every
 * block recorded with its position, no data read (nor CRC-checked). */
typedef struct {
  float *(*dest)(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e);
  void *ctx;
  ck_spans_t *spans; /* [tensor * K_COUNT + kind], from zs__ck_spans_new */
  int verify_all, index_only;
} sink_t;

ck_spans_t *zs__ck_spans_new(int ntensors);
void zs__ck_spans_free(ck_spans_t *sp, int ntensors);
/* Rank file r of the manifest through the sink: its header against the
 * manifest, every block header in range, the data of the blocks wanted. */
zs_status_t zs__ck_read_rank_file(const char *dir, const manifest_t *m, int r, sink_t *sink, char *err,
                                  const char *fn);
/* Every rank file through the sink, then every range wanted tiled exactly once
 * (the spans end sorted by element). */
zs_status_t zs__ck_read_files(const char *dir, const manifest_t *m, sink_t *sink, char *err, const char *fn);
/* A sink's dest() that wants nothing. */
float *zs__ck_null_dest(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e);

/* ---- ckpt_any.c: a checkpoint of any layout, read by whole tensors ----
 *
 * Every part of a save (dir, or dir/mp0 .. mp<n-1>): their manifests (checked
 * to be of one save), an index of every block (headers only), and the tensors
 * holding each whole tensor. Reads go through one cached block (decoded to
 * fp32, CRC-checked), so memory is the largest block, not the model. */
typedef struct {
  char dir[CK_PATH + 32];
  manifest_t m;
  ck_spans_t *spans; /* [tensor * K_COUNT + kind], sorted, tiling each tensor */
  FILE **files;      /* opened on first read */
} ck_part_t;

typedef struct {
  const char *whole; /* the part's tsplit[t].whole */
  int part, t;
} ck_holder_t;

typedef struct {
  int nparts;
  ck_part_t *part;
  ck_holder_t *h; /* sorted by whole name, then part */
  int nh, nwhole; /* holders, distinct whole tensors */
  float *blk;     /* the cached block, decoded */
  void *raw;
  size_t cap, rcap;
  int bpart, br, bvalid;
  int64_t bpos;
  char *err; /* messages (may be NULL) */
  const char *fn;
} ck_source_t;

/* Opens top: its manifest, or else the parts top/mp<i> that top/mp0's names;
 * every part indexed. ZS_ERR_IO (none there), ZS_ERR_CORRUPT, ZS_ERR_NOMEM. */
zs_status_t zs__ck_source_open(const char *top, ck_source_t *s, char *err, const char *fn);
void zs__ck_source_close(ck_source_t *s);
/* The holders of whole tensor `whole`: [*lo, *hi) of s->h (empty: none). */
void zs__ck_source_find(const ck_source_t *s, const char *whole, int *lo, int *hi);
/* Elements [a, b) of a tensor split by `want` (named name), kind k, assembled from
 * the parts into dst (padding 0). ZS_ERR_MISMATCH when the checkpoint holds
 * no such whole tensor, holds it in another shape, or (k not the master) only
 * frozen; ZS_ERR_CORRUPT, ZS_ERR_IO. */
zs_status_t zs__ck_source_gather(ck_source_t *s, const zs_ck_split_t *want, const char *name, int k, int64_t a,
                                 int64_t b, float *dst);

/* A source's whole tensor: its first holder. */
typedef struct {
  const char *name;
  int part, t;
} ck_whole_t;
/* The source's nwhole whole tensors in the order they first appear, part by
 * part (a model's own order, whatever its split); NULL without memory. */
ck_whole_t *zs__ck_source_wholes(const ck_source_t *s);
/* The whole tensor itself, as a split of nothing (for zs__ck_source_gather). */
void zs__ck_whole_split(const ck_source_t *s, const ck_whole_t *w, zs_ck_split_t *out);
int zs__ck_whole_frozen(const ck_source_t *s, const ck_whole_t *w);

/* ---- ckpt_safetensors.c ---- */

typedef struct {
  const char *name;
  int ndim;
  const int64_t *shape;
  int64_t numel;
} ck_tensor_t;

/* Creates tmp and writes a safetensors header: 8-byte little-endian length,
 * the JSON (tensors in order, laid end to end, F32; "__metadata__" with the
 * step, and with hf "format": "pt", which transformers asks for), padded with
 * spaces to a multiple of 8. ZS_ERR_INVALID for two tensors of one name. */
zs_status_t zs__ck_st_begin(const char *tmp, const ck_tensor_t *t, int n, int64_t step, int hf, char *err,
                            const char *fn, FILE **out);

/* Whole tensors [w0, w1) of s (fp32 masters, named names[i] or their own) into
 * one safetensors file at path, written to path.tmp, fsynced and renamed; buf
 * holds the largest (zs__ck_largest_whole). */
zs_status_t zs__ck_write_wholes(ck_source_t *s, const ck_whole_t *w, int w0, int w1, const char *const *names,
                                int hf, float *buf, const char *path, const char *fn);
int64_t zs__ck_largest_whole(const ck_source_t *s, const ck_whole_t *w);

/* ---- ckpt_names.c ---- */

/* examples/gpt's name `ours` as Hugging Face GPT-2's (GPT2LMHeadModel's
 * "transformer." names) into hf: 1, or 0 when it is not one of GPT-2's. */
int zs__ck_hf_gpt2_name(const char *ours, char *hf, size_t cap);

/* ---- ckpt_st_read.c: safetensors files and Hugging Face indexes, read and checked ----
 *
 * A safetensors file: an 8-byte little-endian header length N (at most
 * ST_MAX_HEADER), N bytes of JSON ({name: {"dtype", "shape", "data_offsets":
 * [begin, end]}, optional "__metadata__"}, padded with spaces), then the data:
 * offsets relative to byte 8 + N, each tensor's range exactly dtype x shape
 * bytes, the ranges tiling the data to the end of the file (no hole, no
 * overlap). Nothing is trusted before it is checked; the files stay open (one
 * descriptor each) until zs__st_close, so what was checked is what is read. */

#define ST_MAX_HEADER ((int64_t)100 << 20) /* the reference implementation's limit */
#define ST_MAX_DIMS 8
#define ST_BLOCK ((int64_t)1 << 20) /* elements per converted read */

enum { ST_F32 = 0, ST_F16, ST_BF16, ST_F64, ST_NONFLOAT };

typedef struct {
  char *name;
  int file;          /* index into the set's files */
  int kind;          /* ST_F32 .. ST_F64, ST_NONFLOAT for every other dtype */
  char dtype[16];    /* as written */
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  int64_t numel;
  int64_t pos, bytes; /* absolute position of its data in the file, and its size */
} st_tensor_t;

typedef struct {
  int nfiles;
  char **path;
  int *fd;
  int ntensors, cap;
  st_tensor_t *t;
  int *by_name; /* tensor indices sorted by name */
  int index;    /* opened through an index */
} st_set_t;

/* Opens a safetensors file, an index (*.json) or a directory holding
 * model.safetensors.index.json or model.safetensors, and checks every header
 * (and the index against them). ZS_ERR_IO, ZS_ERR_CORRUPT, ZS_ERR_NOMEM; messages
 * to err prefixed with fn. On failure the set is empty (zs__st_close is safe). */
zs_status_t zs__st_open(const char *path, st_set_t *set, char *err, const char *fn);
void zs__st_close(st_set_t *set);
/* The tensor named name, or -1. */
int zs__st_find(const st_set_t *set, const char *name);
/* Elements [first, first + count) of float tensor t as fp32 into dst, reading
 * at most ST_BLOCK elements at a time through block (ST_BLOCK * 8 bytes; unused
 * for F32 sources, which are read in place). */
zs_status_t zs__st_read_f32(const st_set_t *set, int t, int64_t first, int64_t count, float *dst, void *block,
                            char *err, const char *fn);

/* ---- ckpt_st_nul.c: NUL characters in a header's or an index's JSON ---- */

/* Where the first NUL of text[0..n) is: a "\u0000" escape or a raw 0 byte in a
 * string, or a raw 0 byte between tokens. Spans are [begin, end) byte offsets
 * of strings as written, between their quotes ({0, 0}: none). */
typedef struct {
  size_t at;         /* the NUL's offset (an escape's backslash) */
  int in_string;     /* inside the string s (else between tokens) */
  int escaped;       /* "\u0000" (else a raw 0 byte) */
  int is_key;        /* s is an object's key */
  int depth;         /* objects and arrays open around it: 1 for a top-level key */
  size_t s[2];       /* the string */
  size_t k1[2], k2[2]; /* the last key at depth 1 (a tensor name) and at depth 2 */
} json_nul_t;
/* 1 and *o filled when text[0..n) holds a NUL, else 0. */
int zs__json_find_nul(const char *text, size_t n, json_nul_t *o);
/* text[span) as written, bytes outside printable ASCII as \xNN, cut at 72
 * characters with "..."; NUL-terminated in out (cap bytes). */
void zs__json_printable(char *out, size_t cap, const char *text, const size_t *span);

#endif
