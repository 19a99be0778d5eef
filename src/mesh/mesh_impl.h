/* The mesh's handle and what mesh.c and mesh_default.c share. */
#ifndef ZS_MESH_IMPL_H
#define ZS_MESH_IMPL_H

#include <stdint.h>

#include "common/common.h"
#include "zeroshard/mesh.h"

enum { NGROUPS = 1 << ZS_MESH_MAX_DIMS };

struct zs_mesh {
  zs_comm_t *world; /* borrowed */
  int ndims, nranks, me; /* me: this rank's mesh index */
  char names[ZS_MESH_MAX_DIMS][ZS_MESH_NAME_MAX + 1];
  zs_mesh_role_t roles[ZS_MESH_MAX_DIMS];
  int sizes[ZS_MESH_MAX_DIMS];
  int coords[ZS_MESH_MAX_DIMS]; /* this rank's */
  unsigned nontrivial;          /* dimensions of size > 1 */
  int *world_of, *index_of;     /* index -> world rank and back; NULL: the identity */
  zs_comm_t *comms[NGROUPS];    /* by (nontrivial) mask, made on demand (world: borrowed) */
  unsigned made[NGROUPS];       /* masks in the order their comms were made (owned ones) */
  int nmade;
  char desc[ZS_MESH_MAX_DIMS * (ZS_MESH_NAME_MAX + 32)];
  char err[ZS_ERRBUF];
};

/* FNV-1a over n bytes, continuing h. */
uint64_t zs__mesh_fnv(uint64_t h, const void *p, size_t n);
/* One all-gather of (status, hash) over world: ZS_ERR_MISMATCH everywhere if
 * the hashes differ, else this rank's failure, else the first other rank's. */
zs_status_t zs__mesh_agree(zs_comm_t *world, const char *fn, zs_status_t mine, uint64_t hash, const char *mine_text);
/* The handle of an agreed, valid shape. world_of: index -> world rank (taken;
 * NULL for the identity). */
zs_status_t zs__mesh_new(zs_mesh_t **out, zs_comm_t *world, int ndims, const char *const *names, const int *sizes,
                         const zs_mesh_role_t *roles, int *world_of);

#endif
