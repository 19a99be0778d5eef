/* zeroshard/mesh.h: a process mesh, the ranks of a world comm laid out on
 * dimensions that each have a role, and the sub-communicators of any dimension
 * or combination.
 *
 * Dimensions are listed outermost first and ranks fill them in row-major order:
 * with pp=2 x dp=2 x tp=2 over 8 ranks, world rank r has coordinates
 * (r / 4, r / 2 % 2, r % 2), so the innermost dimension (tp) joins neighbouring
 * ranks. Order them as Megatron does, pp, dp_replicate, dp_shard, tp: tp
 * innermost keeps tensor-parallel traffic inside a node, and a dp_shard x tp
 * block of a node (or of a pipeline stage smaller than a node: the default
 * mesh) keeps the shards' gathers on the node's links.
 *
 * Roles. Every dimension has a role (zs_mesh_role_t), and every rule of the
 * library follows the role, never the spelling of a name: the engine's
 * data-parallel group is the dimensions of a data-parallel role, hybrid
 * sharding needs one dimension of each data-parallel role, ZS_PARAM_MP_REPLICATED
 * is replicated over the tensor-parallel dimension, checkpoints' model-parallel
 * parts are the other dimensions. zs_mesh_create takes the role from the name,
 * which must then be one of the role names below; zs_mesh_create_roles takes
 * names of the caller's choice and a role for each. A dimension may not be named
 * after a role it does not have, and a mesh has at most one dimension of each
 * role except ZS_MESH_MP.
 *   role                  names that carry it   what it is
 *   ZS_MESH_DP_SHARD      dp, dp_shard, edp     data parallel: the shard group
 *   ZS_MESH_DP_REPLICATE  dp_replicate          data parallel: replicas of the shard group (hybrid)
 *   ZS_MESH_TP            tp                    tensor (and sequence) parallel
 *   ZS_MESH_PP            pp                    pipeline stages
 *   ZS_MESH_EP            ep                    expert parallel
 *   ZS_MESH_MP            (none)                model parallel of the trainer's own kind: the
 *                                               engine treats it as a pipeline's stages
 *                                               (parameters differ across it)
 *
 * Groups. A group is a set of dimensions; its comm joins the ranks whose
 * coordinates agree everywhere outside the set. A group is named by a string of
 * comma-separated names (spaces allowed, order irrelevant), each of them
 *   a dimension's name          one dimension ("tp", "model")
 *   a role's name               the dimension of that role, whatever its name:
 *                               dp_shard, dp_replicate, tp, pp, ep
 *   "dp"                        every dimension of a data-parallel role
 *   "mp"                        every other dimension (the model-parallel group)
 *   "world"                     every dimension
 * e.g. "dp_replicate,dp_shard". A group may be empty ("mp" on a mesh of
 * data-parallel dimensions only; "dp" on one without any): each rank is then its
 * own group of 1. A comm's rank is the rank's row-major index over the group's
 * dimensions (zs_mesh_coord), so "dp"'s rank is
 * dp_replicate_coord * dp_shard + dp_shard_coord. Dimensions of size 1 do not
 * change a group: "dp" and "dp_shard" are one comm when dp_replicate = 1.
 * A name that is neither is refused with a message listing the mesh's names.
 *
 * Names: 1 to ZS_MESH_NAME_MAX characters of [A-Za-z0-9_], unique; "mp" and
 * "world" are reserved, and a dimension named "dp" cannot sit beside another
 * data-parallel dimension (the alias would name them all).
 *
 * Agreement. Every rank must make the same calls with the same arguments; where
 * they differ the mesh says so on every rank instead of hanging: making a mesh
 * all-gathers a hash of each rank's shape (ZS_ERR_MISMATCH on every rank if any
 * differs), and an argument error on one rank is an error on every rank.
 *
 * Ownership and threads: the mesh borrows the world comm (destroy the mesh
 * first) and owns the sub-comms it makes. Use a mesh from one thread at a time.
 * A mesh over an nccl comm splits it with ncclCommSplit, over an mpi comm with
 * MPI_Comm_split (zs_comm_split); the sub-comms have the world comm's backend,
 * device and settings.
 */
#ifndef ZEROSHARD_MESH_H
#define ZEROSHARD_MESH_H

#include "zeroshard/comm.h"
#include "zeroshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_MESH_MAX_DIMS 8  /* dimensions of a mesh */
#define ZS_MESH_NAME_MAX 31 /* characters of a dimension's name */

typedef struct zs_mesh zs_mesh_t;

/* What a dimension is for (the table above). */
typedef enum {
  ZS_MESH_ROLE_BY_NAME = 0, /* zs_mesh_create_roles: the role the name carries */
  ZS_MESH_DP_SHARD,
  ZS_MESH_DP_REPLICATE,
  ZS_MESH_TP,
  ZS_MESH_PP,
  ZS_MESH_EP,
  ZS_MESH_MP,
  ZS_MESH_ROLE_COUNT
} zs_mesh_role_t;

/* A mesh of ndims dimensions, outermost first, over the ranks of world in
 * row-major order, each dimension's role taken from its name (dp, dp_shard,
 * edp, dp_replicate, tp, pp, ep; any other name is ZS_ERR_INVALID, with a
 * message listing the role names: use zs_mesh_create_roles for names of your
 * own). sizes[i] >= 1, except that at most one may be -1 for "what
 * is left": the world size divided by the product of the others, which must
 * divide it. The product must equal the world size.
 * Collective over world (one all-gather of a shape hash; blocks until done).
 * Errors, on every rank: ZS_ERR_INVALID for bad arguments, naming them (NULL
 * pointers, ndims outside 1..ZS_MESH_MAX_DIMS, a bad or duplicate name, a size
 * below 1 other than -1, more than one -1, a product that is not the world
 * size); ZS_ERR_MISMATCH when ranks passed different shapes; where one rank
 * fails alone (out is NULL there), the others report its status and rank. A NULL
 * world returns ZS_ERR_INVALID at once, without communicating. *out is NULL on
 * failure. */
zs_status_t zs_mesh_create(zs_mesh_t **out, zs_comm_t *world, int ndims, const char *const *names,
                           const int *sizes);

/* zs_mesh_create with names of the caller's choice: roles[i] is dimension i's
 * role (ZS_MESH_ROLE_BY_NAME: the one its name carries). ZS_ERR_INVALID, on every
 * rank, for a role out of range, a second dimension of a role other than
 * ZS_MESH_MP, a name that carries another role than the one given ("tp" as
 * ZS_MESH_PP), ZS_MESH_ROLE_BY_NAME on a name that carries none, and the
 * errors of zs_mesh_create. roles NULL: zs_mesh_create. */
zs_status_t zs_mesh_create_roles(zs_mesh_t **out, zs_comm_t *world, int ndims, const char *const *names,
                                 const int *sizes, const zs_mesh_role_t *roles);

/* The mesh the node layout suggests: pp x dp_replicate x dp_shard x tp (all
 * four dimensions, size 1 where unused), with tp and dp_shard inside a node and
 * each dp_shard x tp block a whole node, or a whole pipeline stage when a stage
 * is smaller than a node:
 *   block = min(ranks per node, world / pp),  dp_shard = block / tp,
 *   dp_replicate = world / (pp * block).
 * On one machine (one node) with pp = tp = 1 that is dp_shard = world. Ranks
 * are laid out node by node (nodes in the order of their lowest rank, a node's
 * ranks in rank order), whatever order the launcher placed them in, so a rank's
 * mesh position may differ from its world rank when nodes do not hold
 * consecutive ranks (zs_mesh_rank_of and zs_mesh_coords_of translate).
 * pp, tp >= 1. Collective over world (an all-gather of the arguments' hash,
 * then zs_comm_node's query the first time it is made on world).
 * Errors, on every rank: ZS_ERR_INVALID for pp or tp below 1, nodes holding
 * different numbers of ranks, tp not dividing the ranks of a node (or of a
 * stage), pp not dividing the world size, or stages that would cut nodes
 * unevenly; each message names the numbers and what to change (or to name the
 * shape with zs_mesh_create). ZS_ERR_MISMATCH when ranks passed different
 * pp or tp. */
zs_status_t zs_mesh_create_default(zs_mesh_t **out, zs_comm_t *world, int pp, int tp);

/* Destroys the sub-comms the mesh made (each as zs_comm_destroy does: waits for
 * its queued work), then the mesh; the world comm stays. Call it on every rank
 * (a sub-comm's destroy may wait for its peers, as NCCL's finalize does). */
void zs_mesh_destroy(zs_mesh_t *mesh);

/* The comm of a group (names above) that this rank belongs to, in *out: owned
 * by the mesh, valid until zs_mesh_destroy. The group of every dimension is the
 * world comm itself when the mesh keeps world rank order (always for
 * zs_mesh_create), else a split of it.
 * The first call for each group is collective over world: every rank must make
 * it, in the same order relative to the other first calls and the world comm's
 * other operations. It all-gathers which group each rank asked for
 * (ZS_ERR_MISMATCH on every rank if they differ, naming both groups; nothing is
 * made) and then splits world (zs_comm_split: MPI_Comm_split or ncclCommSplit)
 * unless the group is the world comm. Later calls for the group, under any of
 * its names, return the same comm without communicating.
 * ZS_ERR_INVALID, at once and without communicating, for a name that is not a
 * dimension or alias of this mesh (the message lists them) or a dimension named
 * twice (also through an alias); *out is NULL on failure. */
zs_status_t zs_mesh_comm(zs_mesh_t *mesh, const char *dims, zs_comm_t **out);

/* ---- shape and coordinates (local; no communication) ---- */

zs_comm_t *zs_mesh_world(const zs_mesh_t *mesh);
int zs_mesh_ndims(const zs_mesh_t *mesh);
/* Name of dimension i (0 = outermost), or NULL out of range. */
const char *zs_mesh_dim_name(const zs_mesh_t *mesh, int i);
/* Role of dimension i (ZS_MESH_ROLE_BY_NAME out of range). */
zs_mesh_role_t zs_mesh_dim_role(const zs_mesh_t *mesh, int i);
/* The dimension of a role (other than ZS_MESH_MP), or -1 where the mesh has none. */
int zs_mesh_role_dim(const zs_mesh_t *mesh, zs_mesh_role_t role);
/* A role's name: "dp_shard", "dp_replicate", "tp", "pp", "ep", "mp"; "by_name"
 * for ZS_MESH_ROLE_BY_NAME, "?" out of range. */
const char *zs_mesh_role_name(zs_mesh_role_t role);
/* Size of a group: the product of its dimensions' sizes (1 for an empty group;
 * "world" gives the world size). 0 for a bad group name (zs_last_error says why). */
int zs_mesh_size(const zs_mesh_t *mesh, const char *dims);
/* This rank's coordinate in a group: its rank in zs_mesh_comm's comm of the
 * group (row-major over the group's dimensions; 0 for an empty group). -1 for a
 * bad group name. */
int zs_mesh_coord(const zs_mesh_t *mesh, const char *dims);
/* The world rank at coords[0..ndims-1] (outermost first). ZS_ERR_INVALID for a
 * coordinate out of range, naming it. */
zs_status_t zs_mesh_rank_of(const zs_mesh_t *mesh, const int *coords, int *world_rank);
/* The coordinates (coords[0..ndims-1]) of a world rank. ZS_ERR_INVALID out of
 * range. */
zs_status_t zs_mesh_coords_of(const zs_mesh_t *mesh, int world_rank, int *coords);
/* The shape as text, e.g. "pp=1 x dp_replicate=2 x dp_shard=4 x tp=1" ("" for
 * NULL); a dimension whose name is not its role's shows it, "model(tp)=2". */
const char *zs_mesh_describe(const zs_mesh_t *mesh);
/* The detailed message of the last failed call on this mesh, or "". */
const char *zs_mesh_last_error(const zs_mesh_t *mesh);

#ifdef __cplusplus
}
#endif
#endif
