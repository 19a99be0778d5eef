/* The process mesh (zeroshard/mesh.h): named dimensions over a world comm, and
 * the sub-comms of groups of them, split from the world comm on demand.
 *
 * Everything collective goes through the world comm in an order every rank
 * agrees on, and is preceded by an all-gather that checks the agreement: a rank
 * that passed another shape, or asked for another group, turns into
 * ZS_ERR_MISMATCH on every rank instead of a split that some ranks enter and
 * others do not. Groups are bit masks over the dimensions; dimensions of size 1
 * are dropped from a mask first, since they do not change who is in a group, so
 * "dp" and "dp_shard" share one comm when dp_replicate = 1.
 *
 * A mesh position ("index", row-major over the coordinates) is the world rank,
 * except in the default mesh when the launcher did not number the ranks node by
 * node: there world_of/index_of translate, so that every dp_shard x tp block is
 * one node whatever the placement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "common/common.h"
#include "mesh/mesh_impl.h"

/* ---- the handle ---------------------------------------------------------------- */

static void unravel(const zs_mesh_t *m, int index, int *coords) {
  for (int i = m->ndims - 1; i >= 0; i--) {
    coords[i] = index % m->sizes[i];
    index /= m->sizes[i];
  }
}

/* Row-major index of coords over the dimensions in mask (0 for an empty mask). */
static int ravel(const zs_mesh_t *m, const int *coords, unsigned mask) {
  int x = 0;
  for (int i = 0; i < m->ndims; i++)
    if (mask & (1u << i)) x = x * m->sizes[i] + coords[i];
  return x;
}

static int group_size(const zs_mesh_t *m, unsigned mask) {
  int n = 1;
  for (int i = 0; i < m->ndims; i++)
    if (mask & (1u << i)) n *= m->sizes[i];
  return n;
}

static unsigned all_dims(int ndims) { return (1u << ndims) - 1u; }

/* "{dp_replicate,dp_shard}" */
static const char *mask_text(const zs_mesh_t *m, unsigned mask, char *buf, size_t cap) {
  size_t k = (size_t)snprintf(buf, cap, "{");
  int first = 1;
  for (int i = 0; i < m->ndims && k < cap; i++)
    if (mask & (1u << i)) {
      k += (size_t)snprintf(buf + k, cap - k, "%s%s", first ? "" : ",", m->names[i]);
      first = 0;
    }
  if (k < cap) snprintf(buf + k, cap - k, "}");
  return buf;
}

/* ---- roles ---------------------------------------------------------------------------- */

static const char *const role_names[ZS_MESH_ROLE_COUNT] = {"by_name", "dp_shard", "dp_replicate", "tp",
                                                            "pp",      "ep",       "mp"};
/* the names that carry a role (mesh.h's table) */
static const struct {
  const char *name;
  zs_mesh_role_t role;
} carriers[] = {{"dp", ZS_MESH_DP_SHARD}, {"dp_shard", ZS_MESH_DP_SHARD},         {"edp", ZS_MESH_DP_SHARD},
                {"dp_replicate", ZS_MESH_DP_REPLICATE}, {"tp", ZS_MESH_TP}, {"pp", ZS_MESH_PP}, {"ep", ZS_MESH_EP}};

const char *zs_mesh_role_name(zs_mesh_role_t r) {
  return (int)r >= 0 && r < ZS_MESH_ROLE_COUNT ? role_names[r] : "?";
}

/* The role a name carries, or ZS_MESH_ROLE_BY_NAME for none. */
static zs_mesh_role_t carried(const char *name) {
  for (size_t i = 0; i < sizeof carriers / sizeof carriers[0]; i++)
    if (!strcmp(name, carriers[i].name)) return carriers[i].role;
  return ZS_MESH_ROLE_BY_NAME;
}

static int dp_role(zs_mesh_role_t r) { return r == ZS_MESH_DP_SHARD || r == ZS_MESH_DP_REPLICATE; }

static unsigned dp_mask(const zs_mesh_t *m) {
  unsigned dp = 0;
  for (int i = 0; i < m->ndims; i++)
    if (dp_role(m->roles[i])) dp |= 1u << i;
  return dp;
}

/* A role name used as a group name: the dimension of that role (0 if none). */
static int role_alias(const zs_mesh_t *m, const char *tok, unsigned *bits) {
  for (int r = ZS_MESH_DP_SHARD; r < ZS_MESH_MP; r++)
    if (!strcmp(tok, role_names[r])) {
      for (int i = 0; i < m->ndims; i++)
        if (m->roles[i] == (zs_mesh_role_t)r) {
          *bits = 1u << i;
          return 1;
        }
      return 0;
    }
  return 0;
}

/* ---- group names ------------------------------------------------------------------- */

/* dims ("tp", "dp_replicate, dp_shard", "dp", "mp", "world") -> a mask over m's
 * dimensions. err: the handle's buffer, or NULL for the const accessors. */
static zs_status_t parse_group(const zs_mesh_t *m, const char *fn, const char *dims, unsigned *mask, char *err) {
  if (!dims)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: dims is NULL (name a dimension, several separated by ',', or dp, mp, world)",
                   fn);
  unsigned dp = dp_mask(m), got = 0;
  const char *p = dims;
  for (;;) {
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    const char *a = p, *b = end;
    while (a < b && *a == ' ') a++;
    while (b > a && b[-1] == ' ') b--;
    size_t len = (size_t)(b - a);
    char tok[ZS_MESH_NAME_MAX + 2];
    snprintf(tok, sizeof tok, "%.*s", (int)(len < sizeof tok - 1 ? len : sizeof tok - 1), a);
    if (len == 0)
      return ZS_FAIL(err, ZS_ERR_INVALID, "%s: '%s' has an empty name: separate dimension names by single commas",
                     fn, dims);
    unsigned bits = 0;
    int known = 0;
    if (len <= ZS_MESH_NAME_MAX) {
      if (!strcmp(tok, "world")) bits = all_dims(m->ndims), known = 1;
      else if (!strcmp(tok, "dp")) bits = dp, known = 1;
      else if (!strcmp(tok, "mp")) bits = all_dims(m->ndims) & ~dp, known = 1;
      else
        for (int i = 0; i < m->ndims; i++)
          if (!strcmp(tok, m->names[i])) bits = 1u << i, known = 1;
      if (!known) known = role_alias(m, tok, &bits);
    }
    if (!known) {
      char list[sizeof m->desc];
      size_t k = 0;
      list[0] = 0;
      for (int i = 0; i < m->ndims; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, carried(m->names[i]) == m->roles[i] ? "%s%s" : "%s%s (%s)",
                              i ? ", " : "", m->names[i], role_names[m->roles[i]]);
      return ZS_FAIL(err, ZS_ERR_INVALID,
                     "%s: '%.*s' in '%s' is not a dimension of this mesh (%s), the role of one, nor an alias (dp, "
                     "mp, world)",
                     fn, (int)len, a, dims, list);
    }
    if (bits & got) {
      char t[sizeof m->desc];
      return ZS_FAIL(err, ZS_ERR_INVALID, "%s: '%s' names %s twice (through '%s'): name each dimension once", fn,
                     dims, mask_text(m, bits & got, t, sizeof t), tok);
    }
    got |= bits;
    if (!*end) break;
    p = end + 1;
  }
  *mask = got;
  return ZS_OK;
}

/* ---- agreement ---------------------------------------------------------------------- */

uint64_t zs__mesh_fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

/* One all-gather of (status, hash) over world, so that every rank leaves with
 * the same answer: ZS_ERR_MISMATCH everywhere if the hashes differ, else this
 * rank's own failure, else the first other rank's. `mine_text` says what this
 * rank passed. */
zs_status_t zs__mesh_agree(zs_comm_t *world, const char *fn, zs_status_t mine, uint64_t hash, const char *mine_text) {
  int n = zs_comm_size(world), me = zs_comm_rank(world);
  int64_t *all = calloc((size_t)n * 2, sizeof *all);
  if (!all) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory to compare %d ranks' arguments", fn, n);
  all[2 * me] = mine;
  all[2 * me + 1] = (int64_t)hash;
  zs_status_t st = zs__comm_host_coll(world, ZS_COLL_ALL_GATHER, all, 2, ZS_INT64, ZS_SUM);
  if (st != ZS_OK) goto out;
  for (int r = 1; r < n; r++)
    if (all[2 * r + 1] != all[1]) {
      st = ZS_FAIL(NULL, ZS_ERR_MISMATCH,
                   "%s: ranks passed different arguments: rank %d's differ from rank 0's (rank %d passed %s); every "
                   "rank must pass the same names and sizes",
                   fn, r, me, mine_text);
      goto out;
    }
  if ((st = mine) != ZS_OK) goto out; /* its message is set */
  for (int r = 0; r < n; r++)
    if (all[2 * r] != ZS_OK) {
      int64_t s = all[2 * r];
      st = s > 0 && s < ZS_STATUS_COUNT ? (zs_status_t)s : ZS_ERR_INTERNAL;
      st = ZS_FAIL(NULL, st, "%s: rank %d failed with %s (its log says why), so no rank made the mesh", fn, r,
                   zs_status_name(st));
      goto out;
    }
out:
  free(all);
  return st;
}

/* ---- making a mesh -------------------------------------------------------------------- */

static int name_ok(const char *s) {
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
  return 1;
}

static void shape_text(char *buf, size_t cap, int ndims, const char *const *names, const int *sizes) {
  size_t k = 0;
  buf[0] = 0;
  if (ndims < 1 || ndims > ZS_MESH_MAX_DIMS || !names || !sizes) {
    snprintf(buf, cap, "%d dimensions%s%s", ndims, names ? "" : ", names NULL", sizes ? "" : ", sizes NULL");
    return;
  }
  for (int i = 0; i < ndims && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%.32s=%d", i ? " x " : "", names[i] ? names[i] : "(NULL)", sizes[i]);
}

/* Checks the shape against the world size; fills resolved[] (the -1 worked out). */
static zs_status_t check_roles(const char *fn, int ndims, const char *const *names, const zs_mesh_role_t *given,
                               zs_mesh_role_t *roles);

static zs_status_t check_shape(const char *fn, int nranks, int ndims, const char *const *names, const int *sizes,
                               const zs_mesh_role_t *given, int *resolved, zs_mesh_role_t *roles) {
  if (ndims < 1 || ndims > ZS_MESH_MAX_DIMS)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: ndims is %d: a mesh has 1 to %d dimensions", fn, ndims,
                   ZS_MESH_MAX_DIMS);
  if (!names) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: names is NULL (pass %d dimension names)", fn, ndims);
  if (!sizes) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: sizes is NULL (pass %d sizes)", fn, ndims);
  for (int i = 0; i < ndims; i++) {
    const char *s = names[i];
    if (!s) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: names[%d] is NULL", fn, i);
    size_t len = strlen(s);
    if (len == 0 || len > ZS_MESH_NAME_MAX)
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: names[%d] ('%.40s%s') has %zu characters: a name has 1 to %d", fn,
                     i, s, len > 40 ? "..." : "", len, ZS_MESH_NAME_MAX);
    if (!name_ok(s))
      return ZS_FAIL(NULL, ZS_ERR_INVALID,
                     "%s: names[%d] ('%s') may hold only letters, digits and '_' (names are joined by ',' in "
                     "group names like \"dp_replicate,dp_shard\")",
                     fn, i, s);
    if (!strcmp(s, "world") || !strcmp(s, "mp"))
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: names[%d] is '%s', which is reserved for the group of %s", fn, i, s,
                     s[0] == 'w' ? "every dimension" : "every dimension that is not data parallel");
    for (int j = 0; j < i; j++)
      if (!strcmp(names[j], s))
        return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: names[%d] and names[%d] are both '%s': names must be unique", fn,
                       j, i, s);
  }
  ZS_CHECK(check_roles(fn, ndims, names, given, roles));
  int rest = -1;
  for (int i = 0; i < ndims; i++) {
    if (sizes[i] == -1) {
      if (rest >= 0)
        return ZS_FAIL(NULL, ZS_ERR_INVALID,
                       "%s: sizes[%d] ('%s') and sizes[%d] ('%s') are both -1: at most one dimension may take what "
                       "is left",
                       fn, rest, names[rest], i, names[i]);
      rest = i;
    } else if (sizes[i] < 1) {
      return ZS_FAIL(NULL, ZS_ERR_INVALID,
                     "%s: sizes[%d] ('%s') is %d: a size is at least 1, or -1 for what the others leave", fn, i,
                     names[i], sizes[i]);
    } else if (sizes[i] > nranks) {
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: sizes[%d] ('%s') is %d, more than the world comm's %d ranks", fn,
                     i, names[i], sizes[i], nranks);
    }
  }
  long long prod = 1; /* stops past nranks: each factor is at most nranks, so no overflow */
  for (int i = 0; i < ndims && prod <= nranks; i++)
    if (i != rest) prod *= sizes[i];
  char shape[ZS_MESH_MAX_DIMS * 48];
  shape_text(shape, sizeof shape, ndims, names, sizes);
  if (rest >= 0 && prod > nranks)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: %s: the dimensions other than '%s' multiply to more than the world comm's %d ranks, so it "
                   "has no size",
                   fn, shape, names[rest], nranks);
  if (rest >= 0 && nranks % prod)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: %s: the dimensions other than '%s' multiply to %lld, which does not divide the world comm's "
                   "%d ranks, so it has no size",
                   fn, shape, names[rest], prod, nranks);
  if (rest < 0 && prod > nranks)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: %s multiplies to more than the world comm's %d ranks: the sizes must multiply to the world "
                   "size (or give one dimension -1)",
                   fn, shape, nranks);
  if (rest < 0 && prod < nranks)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: %s multiplies to %lld, but the world comm has %d ranks: the sizes must multiply to the "
                   "world size (or give one dimension -1)",
                   fn, shape, prod, nranks);
  for (int i = 0; i < ndims; i++) resolved[i] = i == rest ? (int)(nranks / prod) : sizes[i];
  return ZS_OK;
}

/* Each dimension's role (given, or carried by its name) into roles[]: one
 * dimension per role but ZS_MESH_MP, no name that carries another role, a
 * dimension named "dp" alone among the data-parallel ones. */
static zs_status_t check_roles(const char *fn, int ndims, const char *const *names, const zs_mesh_role_t *given,
                               zs_mesh_role_t *roles) {
  for (int i = 0; i < ndims; i++) {
    zs_mesh_role_t want = given ? given[i] : ZS_MESH_ROLE_BY_NAME, has = carried(names[i]);
    if ((int)want < 0 || want >= ZS_MESH_ROLE_COUNT)
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: roles[%d] ('%s') is %d, not a zs_mesh_role_t", fn, i, names[i],
                     (int)want);
    if (want == ZS_MESH_ROLE_BY_NAME && has == ZS_MESH_ROLE_BY_NAME)
      return ZS_FAIL(NULL, ZS_ERR_INVALID,
                     "%s: names[%d] is '%s', which names no role: name each dimension after its role (dp or "
                     "dp_shard, dp_replicate, tp, pp, ep, edp) or give the roles with zs_mesh_create_roles "
                     "(ZS_MESH_DP_SHARD, ZS_MESH_DP_REPLICATE, ZS_MESH_TP, ZS_MESH_PP, ZS_MESH_EP, ZS_MESH_MP)",
                     fn, i, names[i]);
    if (want != ZS_MESH_ROLE_BY_NAME && has != ZS_MESH_ROLE_BY_NAME && want != has)
      return ZS_FAIL(NULL, ZS_ERR_INVALID,
                     "%s: names[%d] is '%s', the name of role %s, but roles[%d] is %s: rename the dimension or give "
                     "it its name's role",
                     fn, i, names[i], role_names[has], i, role_names[want]);
    roles[i] = want != ZS_MESH_ROLE_BY_NAME ? want : has;
    for (int j = 0; j < i; j++) {
      if (roles[j] == roles[i] && roles[i] != ZS_MESH_MP)
        return ZS_FAIL(NULL, ZS_ERR_INVALID,
                       "%s: names[%d] ('%s') and names[%d] ('%s') both have role %s: a mesh has one dimension of "
                       "each role (ZS_MESH_MP excepted)",
                       fn, j, names[j], i, names[i], role_names[roles[i]]);
      int a = !strcmp(names[i], "dp") ? i : !strcmp(names[j], "dp") ? j : -1, b = a == i ? j : i;
      if (a >= 0 && dp_role(roles[b]))
        return ZS_FAIL(NULL, ZS_ERR_INVALID,
                       "%s: names[%d] is 'dp' and names[%d] ('%s') is data parallel too, so the alias 'dp' would "
                       "name both: rename one (e.g. dp_replicate and dp_shard)",
                       fn, a, b, names[b]);
    }
  }
  return ZS_OK;
}

/* The handle, once every rank has agreed on a valid shape. world_of: index ->
 * world rank (taken; NULL for the identity). */
zs_status_t zs__mesh_new(zs_mesh_t **out, zs_comm_t *world, int ndims, const char *const *names,
                            const int *sizes, const zs_mesh_role_t *roles, int *world_of) {
  int n = zs_comm_size(world);
  zs_mesh_t *m = calloc(1, sizeof *m);
  int *index_of = world_of ? malloc(sizeof(int) * (size_t)n) : NULL;
  if (!m || (world_of && !index_of)) {
    free(m);
    free(index_of);
    free(world_of);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_mesh_create: out of host memory for a mesh of %d ranks", n);
  }
  m->world = world;
  zs__comm_hold(world); /* until zs_mesh_destroy */
  m->ndims = ndims;
  m->nranks = n;
  size_t k = 0;
  for (int i = 0; i < ndims; i++) {
    snprintf(m->names[i], sizeof m->names[i], "%s", names[i]);
    m->roles[i] = roles[i];
    m->sizes[i] = sizes[i];
    if (sizes[i] > 1) m->nontrivial |= 1u << i;
    k += (size_t)snprintf(m->desc + k, sizeof m->desc - k, "%s%s", i ? " x " : "", names[i]);
    if (carried(names[i]) != roles[i])
      k += (size_t)snprintf(m->desc + k, sizeof m->desc - k, "(%s)", role_names[roles[i]]);
    k += (size_t)snprintf(m->desc + k, sizeof m->desc - k, "=%d", sizes[i]);
  }
  if (world_of)
    for (int i = 0; i < n; i++) index_of[world_of[i]] = i;
  m->world_of = world_of;
  m->index_of = index_of;
  m->me = index_of ? index_of[zs_comm_rank(world)] : zs_comm_rank(world);
  unravel(m, m->me, m->coords);
  *out = m;
  return ZS_OK;
}

zs_status_t zs_mesh_create(zs_mesh_t **out, zs_comm_t *world, int ndims, const char *const *names,
                           const int *sizes) {
  return zs_mesh_create_roles(out, world, ndims, names, sizes, NULL);
}

zs_status_t zs_mesh_create_roles(zs_mesh_t **out, zs_comm_t *world, int ndims, const char *const *names,
                                 const int *sizes, const zs_mesh_role_t *given) {
  const char *fn = given ? "zs_mesh_create_roles" : "zs_mesh_create";
  if (out) *out = NULL;
  ZS_CHECK_HANDLE(world, fn);
  int resolved[ZS_MESH_MAX_DIMS];
  zs_mesh_role_t roles[ZS_MESH_MAX_DIMS];
  zs_status_t mine = out ? check_shape(fn, zs_comm_size(world), ndims, names, sizes, given, resolved, roles)
                         : ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  /* the hash covers what the caller passed, whatever it is (NULL names too) */
  uint64_t h = zs__mesh_fnv(14695981039346656037ull, "mesh", 4);
  h = zs__mesh_fnv(h, &ndims, sizeof ndims);
  for (int i = 0; ndims >= 1 && ndims <= ZS_MESH_MAX_DIMS && i < ndims; i++) {
    const char *s = names ? names[i] : NULL;
    h = s ? zs__mesh_fnv(h, s, strlen(s) + 1) : zs__mesh_fnv(h, "\xff", 1);
    int v = sizes ? sizes[i] : -2;
    h = zs__mesh_fnv(h, &v, sizeof v);
    v = given ? (int)given[i] : 0;
    h = zs__mesh_fnv(h, &v, sizeof v);
  }
  char text[ZS_MESH_MAX_DIMS * 48];
  shape_text(text, sizeof text, ndims, names, sizes);
  ZS_CHECK(zs__mesh_agree(world, fn, mine, h, text));
  ZS_CHECK(zs__mesh_new(out, world, ndims, names, resolved, roles, NULL));
  ZS_LOG_D("%s: %s", fn, (*out)->desc);
  return ZS_OK;
}

void zs_mesh_destroy(zs_mesh_t *m) {
  if (!m) return;
  for (int i = m->nmade - 1; i >= 0; i--) zs_comm_destroy(m->comms[m->made[i]]);
  free(m->world_of);
  free(m->index_of);
  zs_comm_t *world = m->world;
  free(m);
  zs__comm_release(world);
}

/* ---- sub-comms ---------------------------------------------------------------------- */

zs_status_t zs_mesh_comm(zs_mesh_t *m, const char *dims, zs_comm_t **out) {
  static const char fn[] = "zs_mesh_comm";
  ZS_CHECK_HANDLE(m, fn);
  if (!out) return ZS_FAIL(m->err, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  unsigned mask;
  ZS_CHECK(parse_group(m, fn, dims, &mask, m->err));
  unsigned g = mask & m->nontrivial;
  if (m->comms[g]) {
    *out = m->comms[g];
    return ZS_OK;
  }

  /* every rank must be asking for this group now */
  int n = m->nranks, me = zs_comm_rank(m->world);
  int64_t *all = calloc((size_t)n, sizeof *all);
  if (!all) return ZS_FAIL(m->err, ZS_ERR_NOMEM, "%s: out of host memory to compare %d ranks' groups", fn, n);
  all[me] = g;
  zs_status_t st = zs__comm_host_coll(m->world, ZS_COLL_ALL_GATHER, all, 1, ZS_INT64, ZS_SUM);
  for (int r = 1; st == ZS_OK && r < n; r++)
    if (all[r] != all[0]) {
      char a[sizeof m->desc], b[sizeof m->desc];
      st = ZS_FAIL(m->err, ZS_ERR_MISMATCH,
                   "%s: ranks asked for different groups: rank 0 for %s, rank %d for %s (this rank, %d, asked for "
                   "'%s'): every rank must make its first zs_mesh_comm call for each group in the same order",
                   fn, mask_text(m, (unsigned)all[0], a, sizeof a), r, mask_text(m, (unsigned)all[r], b, sizeof b),
                   me, dims);
    }
  free(all);
  if (st != ZS_OK) return st;

  /* every dimension, in world rank order: the world comm itself (not owned) */
  if (g == m->nontrivial && !m->world_of) {
    *out = m->comms[g] = m->world;
    return ZS_OK;
  }
  /* the ranks that agree outside the group share a color; keys order them by
   * their coordinates inside it */
  zs_comm_t *c = NULL;
  ZS_CHECK(zs_comm_split(m->world, ravel(m, m->coords, ~g & all_dims(m->ndims)), ravel(m, m->coords, g), &c));
  if (!c || zs_comm_size(c) != group_size(m, g) || zs_comm_rank(c) != ravel(m, m->coords, g)) {
    char t[sizeof m->desc];
    st = ZS_FAIL(m->err, ZS_ERR_INTERNAL, "%s: the split for %s gave rank %d of %d, expected %d of %d", fn,
                 mask_text(m, g, t, sizeof t), zs_comm_rank(c), zs_comm_size(c), ravel(m, m->coords, g),
                 group_size(m, g));
    zs_comm_destroy(c);
    return st;
  }
  m->comms[g] = c;
  m->made[m->nmade++] = g;
  *out = c;
  return ZS_OK;
}

/* ---- shape and coordinates ---------------------------------------------------------------- */

zs_comm_t *zs_mesh_world(const zs_mesh_t *m) { return m ? m->world : NULL; }
int zs_mesh_ndims(const zs_mesh_t *m) { return m ? m->ndims : 0; }
const char *zs_mesh_dim_name(const zs_mesh_t *m, int i) { return m && i >= 0 && i < m->ndims ? m->names[i] : NULL; }
const char *zs_mesh_describe(const zs_mesh_t *m) { return m ? m->desc : ""; }
zs_mesh_role_t zs_mesh_dim_role(const zs_mesh_t *m, int i) {
  return m && i >= 0 && i < m->ndims ? m->roles[i] : ZS_MESH_ROLE_BY_NAME;
}

int zs_mesh_role_dim(const zs_mesh_t *m, zs_mesh_role_t role) {
  for (int i = 0; m && role != ZS_MESH_ROLE_BY_NAME && role != ZS_MESH_MP && i < m->ndims; i++)
    if (m->roles[i] == role) return i;
  return -1;
}
const char *zs_mesh_last_error(const zs_mesh_t *m) { return m ? m->err : ""; }

int zs_mesh_size(const zs_mesh_t *m, const char *dims) {
  unsigned mask;
  if (!m || parse_group(m, "zs_mesh_size", dims, &mask, NULL) != ZS_OK) return 0;
  return group_size(m, mask);
}

int zs_mesh_coord(const zs_mesh_t *m, const char *dims) {
  unsigned mask;
  if (!m || parse_group(m, "zs_mesh_coord", dims, &mask, NULL) != ZS_OK) return -1;
  return ravel(m, m->coords, mask);
}

zs_status_t zs_mesh_rank_of(const zs_mesh_t *m, const int *coords, int *world_rank) {
  static const char fn[] = "zs_mesh_rank_of";
  ZS_CHECK_HANDLE(m, fn);
  if (!coords || !world_rank)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: %s is NULL", fn, coords ? "world_rank" : "coords");
  *world_rank = -1;
  for (int i = 0; i < m->ndims; i++)
    if (coords[i] < 0 || coords[i] >= m->sizes[i])
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: coords[%d] ('%s') is %d, outside 0..%d", fn, i, m->names[i],
                     coords[i], m->sizes[i] - 1);
  int x = ravel(m, coords, all_dims(m->ndims));
  *world_rank = m->world_of ? m->world_of[x] : x;
  return ZS_OK;
}

zs_status_t zs_mesh_coords_of(const zs_mesh_t *m, int world_rank, int *coords) {
  static const char fn[] = "zs_mesh_coords_of";
  ZS_CHECK_HANDLE(m, fn);
  if (!coords) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: coords is NULL", fn);
  if (world_rank < 0 || world_rank >= m->nranks)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: world rank %d is outside 0..%d", fn, world_rank, m->nranks - 1);
  unravel(m, m->index_of ? m->index_of[world_rank] : world_rank, coords);
  return ZS_OK;
}
