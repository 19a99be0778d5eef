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
 * Rank file layout (little-endian): a 32-byte header {"ZSCKPT01", rank, world,
 * id, nblocks, crc of the header's first 28 bytes}, then per block a 40-byte
 * header {magic "ZSBK", tensor, kind, crc of the data, element offset, count,
 * crc of the block header's first 32 bytes, 0} and count fp32 values. */
#ifndef ZS_CKPT_IMPL_H
#define ZS_CKPT_IMPL_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

#include "zero/engine_impl.h"
#include "zeroshard/checkpoint.h"

#define CK_FORMAT "zeroshard-checkpoint"
#define CK_VERSION 1
#define CK_FILE_MAGIC "ZSCKPT01"
#define CK_BLOCK_MAGIC 0x4B42535Au /* "ZSBK" */
#define CK_CHUNK ((size_t)1 << 20)  /* elements per staged device copy */
#define CK_PATH 4096

enum { K_MASTER = 0, K_M, K_V, K_COUNT };
extern const char *const zs__ck_kind_names[K_COUNT];

typedef struct {
  char magic[8];
  uint32_t rank, world;
  uint64_t id;
  uint32_t nblocks, crc;
} ck_file_head_t;

typedef struct {
  uint32_t magic, tensor, kind, data_crc;
  int64_t offset, count;
  uint32_t head_crc, reserved;
} ck_block_head_t;

_Static_assert(sizeof(ck_file_head_t) == 32, "file header layout");
_Static_assert(sizeof(ck_block_head_t) == 40, "block header layout");

uint32_t zs__ck_crc(const void *p, size_t n);
uint32_t zs__ck_crc_more(uint32_t c, const void *p, size_t n);
zs_status_t zs__ck_max_i64(zs_engine_t *zs, int64_t *v, int n);
zs_status_t zs__ck_agree(zs_engine_t *zs, zs_status_t mine, const char *what);
zs_status_t zs__ck_check_call(zs_engine_t *zs, const char *path, const char *fn);
zs_status_t zs__ck_drain(zs_engine_t *zs);
float *zs__ck_state_base(const zs_unit_t *u, int kind);
int zs__ck_kind_present(const zs_engine_t *zs, int kind);
zs_status_t zs__ck_commit_file(char *err_buf, FILE *f, const char *tmp, const char *final);
void zs__ck_rank_file_name(char *buf, size_t n, uint64_t id, int rank);
const char *zs__ck_optim_name(zs_optim_kind_t k);

/* ---- ckpt_read.c ---- */

typedef struct {
  uint64_t id;
  int world, nfiles;
  int64_t step, good_steps, hysteresis_left;
  double loss_scale;
  int has[K_COUNT];
  char optimizer[16];
  char (*file)[64];
  int64_t *file_bytes, *file_blocks;
  /* the tensors as saved */
  int ntensors;
  char (*tname)[ZS_NAME_MAX];
  int *tndim;
  int64_t (*tshape)[ZS_MAX_DIMS];
  int64_t *tnumel;
} manifest_t;

void zs__ck_manifest_free(manifest_t *m);
/* Reads and checks dir/manifest.json on its own terms (no engine). Messages go
 * to err (ZS_ERRBUF, may be NULL) prefixed with fn. */
zs_status_t zs__ck_parse_manifest(const char *dir, manifest_t *m, char *err, const char *fn);

/* Where the blocks read go. dest() returns where element *a of tensor t's kind
 * k goes, [*a, *e) being the range wanted, or NULL if none of it is. covered
 * counts arrivals per (tensor, kind); verify_all also CRC-checks blocks nobody
 * wants. */
typedef struct {
  float *(*dest)(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e);
  void *ctx;
  int64_t *covered; /* [tensor * K_COUNT + kind] */
  int verify_all;
  /* index mode (when set): called per valid block header with the data's file
   * position; the data is skipped, not read (nor CRC-checked) */
  zs_status_t (*index)(void *ctx, int r, const ck_block_head_t *bh, int64_t pos);
} sink_t;

zs_status_t zs__ck_read_rank_file(const char *dir, const manifest_t *m, int r, sink_t *sink, char *err,
                                  const char *fn);
/* Every rank file through the sink, then every wanted range complete. */
zs_status_t zs__ck_read_files(const char *dir, const manifest_t *m, sink_t *sink, char *err, const char *fn);
/* A sink's dest() that wants nothing. */
float *zs__ck_null_dest(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e);

#endif
