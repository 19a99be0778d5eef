/* zeroshard/engine.h: the ZeRO engine. The trainer declares units and
 * parameters once; the engine lays them out in flat sharded buffers, gathers
 * them before forward and backward, reduces gradients after, and steps the
 * optimizer on each rank's shard. Stage 0 is DDP, 1 shards optimizer state,
 * 2 also gradients, 3 also parameters.
 *
 * Life cycle (every call returns zs_status_t; ZS_ERR_STATE for calls out of order):
 *   zs_engine_create -> zs_unit_add / zs_param_add ... -> zs_engine_setup
 *   per step, grad_accum rounds of:
 *     zs_forward_begin; per unit: zs_gather(u) ... compute ... zs_release(u)
 *     zs_backward_begin; per unit in reverse: zs_gather(u) ... backward ... zs_reduce(u)
 *   then zs_step. An evaluation pass is zs_forward_begin ... zs_forward_end.
 *
 * Pointer slots: zs_param_add takes the address of the trainer's pointer for the
 * parameter (and its gradient). The engine writes the current address into it:
 * stages 0-2 keep parameters resident, so the slot is valid from setup on; at
 * stage 3 it is valid between zs_gather and zs_release/zs_reduce, NULL otherwise,
 * except for persistent units (persist_threshold: units of at most that many
 * elements stay gathered), whose slots are valid from setup on as at stages 0-2.
 * At stage 3 the address may differ at every gather (forward and backward of
 * one step too): read the slot again after each zs_gather; a copy kept past
 * zs_release reads another buffer, silently (ZS_POISON_RELEASED=1 fills
 * released buffers with NaN and holds them for the pass, to find such a copy).
 * A resident slot's address never changes, but its values are updated after each
 * zs_step on the engine's streams: zs_gather(u) orders the compute stream after
 * that update, so read a unit's parameters between zs_gather and zs_release.
 * Parameter slots are for reading: set values with zs_param_set (or a
 * checkpoint, an import). A value written through a slot is not the
 * parameter's: the fp32 master and the shards keep theirs, so a forward may
 * read the written value while zs_param_get and the next zs_step work from the
 * master, which undoes the write (a trial: 16-bit parameters at stages 0-2,
 * persistent stage-3 units; only fp32 at stages 0-2 happened to keep it).
 * Gradient slots are valid between zs_gather and zs_reduce in backward (stage 0-1:
 * always, but see the next sentence). Gradient buffers are zeroed by the engine
 * at the end of each zs_step (stages 0-1) or for each round (2-3); the trainer ADDS
 * its gradients into them. With 16-bit parameters, grad_accum > 1 and stage
 * 0-1, each zs_reduce adds the slot into an fp32 sum and zeroes it, so the slot
 * holds the current round only, and is the trainer's between zs_gather and
 * zs_reduce (the zeroing runs on the engine's stream until the next zs_gather).
 * Gradients are reduced with a sum and averaged (divided by ranks x grad_accum)
 * inside the optimizer step (where a sum could pass fp16's range, fp16
 * parameters at stages 0-1 or an fp16 reduce dtype, each rank's gradient is
 * divided first and the average summed): each round's gradient should be the
 * mean over that rank's micro-batch. zs_step zeroes every gradient slot when it
 * ends, ready for the next step: a slot read after zs_step holds zeros, not
 * the gradient (the step report's grad_norm is the global norm). A parameter
 * no trainer code adds into still takes a step, with a zero gradient: weight
 * decay and momentum move it (torch.optim skips a parameter whose .grad is
 * None); declare it ZS_PARAM_FROZEN to leave it as it is.
 *
 * Uneven data (a last batch that does not split evenly, a rank with no samples
 * left). The average is over ranks x rounds, not samples (ranks: the
 * data-parallel ranks, zs_engine_world): for the mean over the n samples that
 * exist in a step, scale each sample's gradient by ranks x grad_accum / n (n
 * over every data-parallel rank and round: all-reduce the counts over the
 * engine's comm, not a world that holds tensor or pipeline ranks too) instead
 * of taking the micro-batch mean (with fp16 gradients, a small n makes that
 * factor large: mind the loss scale). A rank or round with
 * no samples still runs the whole sequence, every zs_gather of forward and
 * backward included (at stage 3 the gathers are collectives), adding nothing.
 * A rank that calls zs_step after fewer rounds gets ZS_ERR_STATE and the others
 * wait in their collectives: run the missing rounds (empty) and call zs_step
 * again. A rank that stops for good while the others would still call
 * zs_comm_revoke(comm, ZS_OK, "out of data") before destroying its comms
 * (ZS_OK: it leaves without a failure; the comms' family is then over on
 * every rank, and an NCCL comm not made from MPI cannot tell the others): the
 * others' next operation fails
 * at once with ZS_ERR_PEER naming it and the reason, where it would otherwise
 * wait for ZS_COMM_TIMEOUT_S (300 s by default) and report a timeout. (A trial
 * measured each: the scaled gradients within 1.7e-7 of float64's true mean at
 * stages 0-3 on 2 and 3 ranks; unscaled, 67% low with 1 sample on 3 ranks.)
 *
 * Streams: engine work runs on its own streams (all-gather, reduce) ordered by
 * events against the compute stream (NULL: the caller's; see zs_engine_set_stream).
 * On the cpu device zs_gather blocks until the unit is gathered.
 *
 * Memory is bounded and does not depend on timing: at stage 3 the engine holds
 * at most `prefetch` units the trainer has not asked for yet, plus the units the
 * trainer holds (gathered and not released); with reshard_after_forward off,
 * also every unit gathered in this forward, until its backward. A released unit's buffer is freed
 * at the next zs_gather / zs_backward_begin / zs_step (after the compute stream
 * is done with it). Stage 2-3 full gradient buffers likewise after their reduction.
 *
 * Thread rules: one engine is driven from one thread at a time (it may be
 * handed to another between calls). A step call (zs_forward_begin/_end,
 * zs_backward_begin, zs_gather, zs_release, zs_reduce, zs_step, zs_step_group)
 * or another collective call on it (zs_param_get/_set, zs_param_set_scales,
 * zs_param_state_get/_set, zs_engine_set_step_count, zs_engine_set_lr/
 * _set_schedule, zs_checkpoint_save/_load, zs_export/import_safetensors,
 * zs_flush) made while another thread's runs on the same engine is
 * ZS_ERR_STATE, the message in that thread's zs_last_error() only, and
 * changes nothing. That refusal is local: a helper
 * thread's collective call between the main thread's calls is not refused,
 * and it runs its collectives in whatever order the threads reach them on
 * each rank, which the ranks need not share; so checkpoint from the thread
 * that trains (or hand the engine over and wait), and give a helper's own
 * collectives (a loss average, metrics) a comm of its own (zs_comm_split), not
 * zs_engine_comm's. Calls that only read this rank's state (zs_memory_stats,
 * zs_engine_estimate, zs_engine_step_count, zs_engine_lr, zs_comm_stats,
 * zs_comm_async_error) may come from any thread at any time after
 * zs_engine_setup (not while another thread declares). Two engines
 * stepped from two threads at once need comms of their own likewise: engines
 * sharing a comm would issue its collectives in whatever order the threads
 * reach them (a trial saw MPI_ERR_IN_STATUS); one after the other from one
 * thread, they may share it.
 */
#ifndef ZEROSHARD_ENGINE_H
#define ZEROSHARD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard/comm.h"
#include "zeroshard/config.h"
#include "zeroshard/device.h"
#include "zeroshard/memory.h"
#include "zeroshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_engine zs_engine_t;

/* Parameter flags. */
#define ZS_PARAM_DEFAULT 0u
#define ZS_PARAM_NO_DECAY 1u /* no weight decay (biases, norms) */
/* never updated; its gradient slot stays NULL. A unit whose parameters are all
 * frozen costs only its parameters (sharded by the stage: 2psi/N at stage 3 in
 * bf16): no gradient buffer, no reduction (zs_reduce moves nothing), no master,
 * m or v, no regather after a step; checkpoints hold its values once. Frozen
 * parameters inside a unit with trainable ones are skipped by the optimizer
 * and the norm but keep the unit's buffers: put them in units of their own.
 * A unit all frozen keeps its values in the param dtype only (zs_param_get
 * and checkpoints give them rounded to it, e.g. fp16), where a frozen
 * parameter of a unit with trainable ones keeps an fp32 master. */
#define ZS_PARAM_FROZEN 2u
/* the same parameter on every rank of the tensor-parallel group (a LayerNorm
 * under tensor parallelism): its gradient counts once in the global norm, on
 * the group's rank 0 (over a mesh: the ranks whose coordinate on the dimension
 * of role ZS_MESH_TP is 0, whatever its name, so each pipeline stage's copy
 * counts once; on a mesh without one, every rank; with
 * zs_engine_set_model_parallel: rank 0 of that comm); without a model-parallel
 * group it changes nothing */
#define ZS_PARAM_MP_REPLICATED 4u
/* a copy of a parameter that another rank of the model-parallel group owns and
 * counts (the LM head tied to the embedding, held by the last pipeline stage
 * as well as the first): trained like any other, left out of the global norm.
 * The trainer keeps the copies equal: same initial values, and the two
 * gradients summed into both before zs_reduce (what Megatron does for its
 * embedding group). */
#define ZS_PARAM_TIED_COPY 8u
/* the backward does not read this parameter (an embedding table: its gradient
 * is the output gradient's rows). A unit whose parameters all say so is not
 * gathered in a backward where that would gather it now (stage 3, not
 * prefetched or kept from the forward) nor prefetched for one: zs_gather
 * there gives its gradient slots and NULL parameter slots, saving the
 * all-gather and its buffer (79 MiB of each a step for GPT-2 124M's wte in
 * bf16). Stages 0-2 keep parameters resident: no effect. */
#define ZS_PARAM_BACKWARD_UNREAD 16u

#define ZS_MAX_DIMS 8
#define ZS_NAME_MAX 96

/* Fills count fp32 values of parameter `param` (id from zs_param_add) starting at
 * element `offset` of the parameter (row-major). Called only for the ranges this
 * rank stores, so no rank ever materialises the whole model at stage 3. Return
 * non-zero to fail setup (zs_set_last_error first puts the reason in setup's
 * message): a zs_status_t is then setup's status on every rank (ZS_ERR_IO for
 * a weights file that cannot be read), any other value (-1, say) ZS_ERR_INVALID. Do not
 * return an errno: ENOENT's 2 would read as ZS_ERR_STATE. */
typedef int (*zs_init_fn)(void *user, int param, int64_t offset, int64_t count, float *dst);

typedef struct {
  int64_t step;      /* optimizer steps taken (skipped steps not counted) */
  float grad_norm;   /* global L2 norm of the averaged, unscaled gradient (before clipping) */
  float clip_coef;   /* factor applied by clipping: min(1, clip / (norm + 1e-6)); 1 without clipping */
  int skipped;       /* 1 if the step was skipped for non-finite gradients */
  float loss_scale;  /* the scale to multiply the next loss by (1 unless fp16) */
  float lr;          /* the learning rate of this step (a skipped step: the one it
                        would have used, which the next attempt uses again) */
} zs_step_report_t;

/* The engine keeps dev and comm until zs_engine_destroy: the caller keeps
 * ownership, and destroying either first only drops the caller's reference
 * (with a warning); the engine's destroy frees them then. comm's device must
 * be dev. cfg is copied. Collective over comm (every rank calls it): a config
 * any rank refuses (zs_config_validate, or one that does not fit the comm) is
 * that error on every rank, naming the refusing rank, and no rank gets an
 * engine. A rank without memory for the engine itself revokes the comm
 * (zs_comm_revoke) so that the others get ZS_ERR_PEER at once rather than
 * wait in the agreement. */
zs_status_t zs_engine_create(zs_engine_t **out, const zs_config_t *cfg, zs_device_t *dev,
                             zs_comm_t *comm);
/* An engine over a process mesh (zeroshard/mesh.h), by the dimensions' roles:
 * data parallel over the "dp" group (the dimensions of roles ZS_MESH_DP_SHARD
 * and ZS_MESH_DP_REPLICATE); with a dimension of each and a replicate size
 * above 1, stages 1-3 shard over the shard dimension and replicate over the
 * other (hybrid sharding: cfg->shard_group must be 0 or the shard dimension's
 * size); the model-parallel group ("mp": every other dimension, e.g. tp, pp)
 * joins the gradient norm and names checkpoints' parts
 * (zs_engine_set_model_parallel), and ZS_PARAM_MP_REPLICATED follows the
 * ZS_MESH_TP dimension. Collective over the mesh's world (the mesh makes the
 * groups' comms the first time). The engine keeps the mesh's comms it uses
 * (the mesh may be destroyed first).
 * A pipeline trainer runs one engine round per pipeline step around zs_pp_run,
 * each rank declaring its own stages' parameters: the contract is in
 * zeroshard/pipeline.h ("With the engine"); tensor parallelism's replicated
 * parameters in zeroshard/tp.h. */
typedef struct zs_mesh zs_mesh_t;
zs_status_t zs_engine_create_mesh(zs_engine_t **out, const zs_config_t *cfg, zs_device_t *dev, zs_mesh_t *mesh);
/* Waits for queued work, frees everything the engine allocated and sets every
 * pointer slot to NULL. NULL is a no-op. In the middle of a step (after
 * zs_forward_begin, or between accumulation rounds) the other ranks may be
 * waiting in its collectives: they wait until ZS_COMM_TIMEOUT_S unless this
 * rank calls zs_comm_revoke first (which tells them at once, and ends the comm);
 * destroy warns then, and does not revoke the caller's comm itself. */
void zs_engine_destroy(zs_engine_t *zs);
const char *zs_engine_last_error(const zs_engine_t *zs);
/* Compute stream the trainer works on (default NULL: the caller's). Between
 * steps only (ZS_ERR_STATE in one). The new stream is ordered after the work
 * the old one holds (the last zs_step's update and gradient zeroing run there)
 * by an event, without a host wait; work the trainer queues on the old stream
 * afterwards is its own to order. */
zs_status_t zs_engine_set_stream(zs_engine_t *zs, zs_stream_t *compute);
/* The model-parallel group this rank belongs to (tensor or pipeline parallel:
 * ranks holding different parts of one model; the engine's comm is then its
 * data-parallel group). Before setup; the engine keeps the comm. The
 * gradient norm, hence clipping and the inf/NaN skip, then covers the whole
 * model: the sums of squares are added over it, parameters flagged
 * ZS_PARAM_MP_REPLICATED counted on its rank 0 only, ZS_PARAM_TIED_COPY not at
 * all. NULL: no model-parallel group (the default; it drops one set before). */
zs_status_t zs_engine_set_model_parallel(zs_engine_t *zs, zs_comm_t *mp);

/* Declaration (before setup). Names are copied; a name longer than ZS_NAME_MAX-1
 * bytes, not UTF-8 (checkpoints and exports record names as UTF-8), or one
 * already used (unit names among units, parameter names across the whole
 * model), is ZS_ERR_INVALID. A refused declaration leaves nothing behind. */
zs_status_t zs_unit_add(zs_engine_t *zs, const char *name, int *unit_out);
/* Adds a parameter to `unit`, which must be the last unit declared (ZS_ERR_STATE
 * otherwise): declare each unit's parameters right after the unit; a unit's flat
 * buffer holds them in declaration order.
 * param_slot and grad_slot: addresses of the trainer's pointers (either may be
 * NULL); each slot may be given once, to one parameter as one kind
 * (ZS_ERR_INVALID otherwise: the engine writes every slot) and must stay valid
 * until zs_engine_destroy, which sets it to NULL. A model holds at
 * most 2^56 elements (each parameter counted rounded up to 64), so that every
 * byte size fits in 64 bits. param_out (may be NULL) receives the parameter's id. */
zs_status_t zs_param_add(zs_engine_t *zs, int unit, const char *name, int ndim,
                         const int64_t *shape, unsigned flags, void **param_slot,
                         void **grad_slot, int *param_out);

/* Collective: lays out and allocates every buffer, checks that every rank made
 * the same declaration (ZS_ERR_MISMATCH on every rank, naming the first
 * difference), and initialises parameters through init (NULL: zeros; then use
 * zs_param_set before the first step). What fails on some ranks only (an
 * allocation, the init callback, which at stage 3 runs on each rank's own
 * ranges) fails setup on every rank with the lowest failing rank's status and
 * message ("zs_engine_setup failed on rank R: ..."); a failed setup frees what
 * it made, and the engine can be set up again. Ranks that keep the same ranges
 * (every rank at stage 0; the replicas of a shard with hybrid sharding) must be
 * given the same values: otherwise ZS_ERR_MISMATCH on every rank (a rank seeded
 * differently would train its replica apart; a hash of the values each rank
 * stored, compared across them). Before any rank allocates anything, each
 * rank compares what it will take from the host (zs_engine_estimate: host-domain
 * state and staging, plus where the device's memory is the host's, the cpu
 * device, the larger of a step's peak and what zs_param_get/_set and the state
 * calls hold between steps) with what the kernel will give it before refusing or
 * killing: the least of MemAvailable and its memory cgroup's limit (every
 * ancestor; cgroup v1 or v2), both split among the node's ranks, and RLIMIT_AS;
 * more is ZS_ERR_NOMEM naming the numbers and the limit on every rank, so that
 * the OOM killer never picks a process (maybe another job's) for a model that
 * cannot fit. What the program allocates after setup is its own: leave room.
 * ZS_MEM_CHECK=0 skips the check. */
zs_status_t zs_engine_setup(zs_engine_t *zs, zs_init_fn init, void *user);
/* Collective (every rank, same parameter, same values): copies this rank's part
 * of the parameter's full fp32 data (numel values) into its storage; a delayed
 * update pending lands first (zs_flush), and a persistent stage-3 unit is
 * gathered again. A bad argument on any rank (NULL, an undeclared parameter,
 * a value that is not finite or, with 16-bit parameters, one their type
 * rounds to inf: fp16 from 65520, bf16 from 3.3961776e38) is that error on
 * every rank, nothing set;
 * values that differ between the data-parallel ranks (a hash of each rank's
 * numel values, compared) are ZS_ERR_MISMATCH on every rank of the engine's
 * comm, nothing set. With model parallelism both are decided per data-parallel
 * group: another part's ranks, which pass their own part's values, go on. */
zs_status_t zs_param_set(zs_engine_t *zs, int param, const float *full);
/* Parameter groups: the parameter's update uses the learning rate (optim.lr,
 * zs_engine_set_lr's, or the schedule's) x lr_scale and optim.weight_decay x
 * wd_scale: layer-wise rates, an embedding's own rate, muP's per-tensor rates,
 * a group's own weight decay (ZS_PARAM_NO_DECAY makes it 0 whatever wd_scale).
 * Both finite and >= 0 (ZS_ERR_INVALID); 1 and 1 until set. Before
 * zs_engine_setup it is part of the declaration, which setup compares across
 * the ranks (ZS_ERR_MISMATCH naming the parameter and both values); after it,
 * collective between steps (ZS_ERR_STATE in a step): every data-parallel rank
 * passes the same values (ZS_ERR_MISMATCH on every rank otherwise, nothing
 * changed), which apply from the next zs_step (a delayed update pending lands
 * first, with the old ones). The gradient norm and clipping do not see them.
 * Not saved in checkpoints: set them again after zs_checkpoint_load, as the
 * declaration itself. */
zs_status_t zs_param_set_scales(zs_engine_t *zs, int param, float lr_scale, float wd_scale);
/* Writes the parameter's full fp32 master values into out (numel). Collective at
 * stages 1-3 (it all-gathers the unit's master shards, counted in the comm
 * stats; a bad argument on any rank is that error on every rank); local at
 * stage 0. */
zs_status_t zs_param_get(zs_engine_t *zs, int param, float *out);

/* ---- optimizer state per parameter --------------------------------------------
 * An optimizer moment of one parameter as full fp32 values (numel), to inspect
 * it or to carry a run's state from or to another trainer (PyTorch's
 * optimizer.state[p], DeepSpeed's safe_get/set_full_optimizer_state):
 *   ZS_MOMENT_M: Adam's and AdamW's exp_avg, Lion's exp_avg, SGD's momentum_buffer;
 *   ZS_MOMENT_V: Adam's and AdamW's exp_avg_sq.
 * Values as the optimizer uses them (no bias correction; moments of the
 * averaged, unscaled gradient): compact states (optim.state_dtype bf16, int8)
 * are decoded on the way out and encoded on the way in (bf16 rounded to
 * nearest; int8 with its block's scale from the values set), wherever they
 * live (device, host offload, the NVMe tier). Both between steps, like
 * zs_param_get / zs_param_set (set collective; get collective at stages 1-3,
 * local at stage 0): a bad argument on any rank is that error on every rank
 * taking part (ZS_ERR_STATE before setup or in a step; ZS_ERR_INVALID for an
 * undeclared parameter, a NULL pointer, a moment the optimizer does not keep:
 * SGD without momentum, Lion's v; a frozen parameter (ZS_PARAM_FROZEN, which
 * the optimizer never reads); set's values not finite, or a negative v); set's
 * values must be the same on every data-parallel rank (ZS_ERR_MISMATCH on
 * every rank otherwise, nothing set); a delayed update
 * pending lands first. At stages 1-3 get all-gathers the unit's moment over the
 * shard group (fp32, counted in the comm stats) and set writes each rank's part. With
 * model parallelism, each part's engine addresses its own part's values.
 * Not a step: the moments of a run carried over also need its step count
 * (zs_engine_set_step_count), which Adam's bias correction and the schedule use. */
typedef enum { ZS_MOMENT_M = 1, ZS_MOMENT_V = 2 } zs_moment_t;
zs_status_t zs_param_state_get(zs_engine_t *zs, int param, zs_moment_t which, float *out);
zs_status_t zs_param_state_set(zs_engine_t *zs, int param, zs_moment_t which, const float *in);
/* Sets the engine's optimizer step count, as if `step` steps had been taken
 * (zs_engine_step_count): the next zs_step is step + 1 for Adam's bias
 * correction (1 - beta^t) and uses the schedule's rate at `step` (zs_engine_lr).
 * step >= 0 (ZS_ERR_INVALID); collective between steps, the same on every
 * data-parallel rank (ZS_ERR_MISMATCH on every rank otherwise, nothing set);
 * a delayed update pending lands first. SGD with momentum starts its buffer
 * from the gradient at step 1, as PyTorch does when it has none: a momentum
 * buffer set with zs_param_state_set is used when the step count is >= 1. */
zs_status_t zs_engine_set_step_count(zs_engine_t *zs, int64_t step);

/* The step's calls, in order (README "The step"): zs_forward_begin; per unit
 * zs_gather (its parameters are in their slots once it returns, on the
 * compute stream's order) and zs_release (the slots may be freed: stage 3's
 * non-persistent units); zs_backward_begin; per unit in reverse zs_gather,
 * the gradients added into the gradient slots, then zs_reduce (which starts
 * the unit's reduction and releases it); then zs_step (or another
 * accumulation round from zs_forward_begin). Each returns ZS_OK, or
 * ZS_ERR_STATE naming the rule a call out of order breaks (changing nothing),
 * ZS_ERR_INVALID for a unit id out of range or a NULL engine, or a comm's
 * failure (ZS_ERR_PEER, ZS_ERR_TIMEOUT, ZS_ERR_COMM: after one, every later
 * call reports it, and the engine can only be destroyed). Gathers and reduces
 * are collective over the engine's comms; one engine is driven by one thread
 * at a time (a second thread's call is ZS_ERR_STATE). */
zs_status_t zs_forward_begin(zs_engine_t *zs);
zs_status_t zs_gather(zs_engine_t *zs, int unit);
zs_status_t zs_release(zs_engine_t *zs, int unit);
/* Ends a forward-only pass (evaluation): every unit gathered in it must have been
 * released; no backward, no reduction, no step follows. Allowed between steps or
 * between accumulation rounds. */
zs_status_t zs_forward_end(zs_engine_t *zs);
zs_status_t zs_backward_begin(zs_engine_t *zs);
zs_status_t zs_reduce(zs_engine_t *zs, int unit);
/* Waits for reductions, computes the global gradient norm, clips (with
 * grad_clip > 0 the gradients are multiplied by min(1, grad_clip / (norm + 1e-6))
 * in fp32, torch.nn.utils.clip_grad_norm_'s rule), skips on
 * non-finite gradients (fp16 loss scaling: backs off; ZS_ERR_OVERFLOW when the
 * scale is already at min_scale and the overflow would halve it), updates every
 * shard and regathers parameters
 * (stages 1-2). rep may be NULL. Non-finite means a non-finite norm, whose
 * sum of squares is totalled in double (per segment, over segments, over
 * ranks), so finite gradients give a finite norm and every stage the same
 * norm to the fp32 bit but for a rounding tie with grad_accum 1 (with more
 * rounds, stages 0-1 add the rounds into the full gradient and 2-3 into the
 * shard in another order: the norms may differ in the last fp32 bit); rank 0
 * logs one warning per skipped step. It also compares the ranks' calls since
 * the last step (stage 3's zs_gather and every zs_reduce that issues a
 * collective: collectives matched by their order) inside the norm's own
 * all-reduces: where a rank's program skipped, added or reordered one while
 * the collectives still matched in number, the step is ZS_ERR_MISMATCH on
 * every rank of the model (data-parallel, replicas, model-parallel), its
 * gradients dropped and nothing updated (the ranks may have exchanged other
 * units' data), the message naming the ranks and their first call that
 * differs; the next step gathers in the order called; rep says skipped,
 * grad_norm NaN. At stage 3 the prefetch turns most such differences into
 * another number of all-gathers: a comm error or timeout instead. */
zs_status_t zs_step(zs_engine_t *zs, zs_step_report_t *rep);
/* One step of a model whose parameters live in several engines, e.g. a
 * mixture of experts (DeepSpeed-MoE's layout): a dense engine over the whole
 * data-parallel world and an expert engine over the expert-data-parallel group
 * (the ranks holding the same experts) with the expert-parallel group as its
 * model-parallel group (zs_engine_set_model_parallel), so that its sum of
 * squares counts each expert once. zs_step(zs) is zs_step_group(&zs, 1).
 *
 * Order: every engine's reductions are waited for (the checks of zs_step, in
 * array order); then each engine's global sum of squares over its own groups
 * (collective over them, engines in array order: every rank passes its engines
 * in the same order); then one norm, sqrt(sum over engines of (engine norm)^2),
 * each engine's part averaged by its own world x grad_accum x loss scale. A
 * gradient an engine sums over more ranks than its world (an expert engine's:
 * each expert's gradient already holds the tokens of its whole expert-parallel
 * group) is the trainer's to scale (by 1 / ep there) before zs_reduce. That one
 * norm gives every engine the same clip coefficient and the same inf/NaN
 * decision (a NaN in one engine skips the step in all); then each engine
 * updates and regathers as zs_step does. rep (may be NULL) gets the combined
 * norm, and engines[0]'s step, rate and loss scale.
 *
 * Errors: engines NULL, n < 1, a NULL or repeated engine, or engines whose
 * grad_clip, param_dtype or current loss scale differ are ZS_ERR_INVALID before
 * anything communicates (the same on every rank when every rank passes the same
 * engines); the message is in zs_last_error and, where there is one, in
 * engines[0]'s last error. Errors of one engine's phases are zs_step's, in that
 * engine's last error; ZS_ERR_OVERFLOW (fp16 at the minimum scale) is returned
 * after every engine has stepped. The group is one model: each engine's comm
 * must span ranks that step the same group, so that every rank computes the
 * same norm (checked over each engine's comm before anything is updated:
 * ZS_ERR_MISMATCH). Where the ranks' calls differ on any engine (zs_step), no
 * engine of the group is updated on any rank: each rank's verdict goes into
 * that check, over every engine's comm. Two separate models (a distillation's teacher and
 * student, an actor and a critic) are stepped each with zs_step: a group
 * would clip one by the other's norm. */
zs_status_t zs_step_group(zs_engine_t *const *engines, int n, zs_step_report_t *rep);
/* Delayed parameter update (config delayed_param_update, with offload): zs_step
 * starts the CPU optimizer of step t in the background and returns; forward and
 * backward of step t+1 run on the parameters of step t-1, and step t's result
 * reaches the device at the next zs_step. This changes the numerics (gradients
 * are one step stale). zs_flush waits for the running update and puts its
 * parameters on the device, so the next forward sees current values: call it
 * between steps, before evaluation or saving. No-op without the option.
 * zs_param_get waits for the update (it returns current master values);
 * zs_param_set flushes first. */
zs_status_t zs_flush(zs_engine_t *zs);

/* ---- learning rate and weight decay between steps ----------------------------
 * zs_step uses the learning rate of the config's schedule (config.schedule,
 * zeroshard/config.h) at the engine's step count, so a run resumed by
 * zs_checkpoint_load continues its schedule exactly. With the default schedule
 * (ZS_SCHED_CONSTANT) the rate is optim.lr, which zs_engine_set_lr changes. Who
 * wins: a schedule owns the rate. zs_engine_set_lr with a rate while a schedule
 * other than CONSTANT is set is ZS_ERR_STATE (switch it off first with
 * zs_engine_set_schedule and ZS_SCHED_CONSTANT, or set it to the schedule you
 * want); the weight decay is never scheduled and may always be set.
 *
 * Both setters are collective over the engine's world comm: every rank calls
 * them between the same two steps with the same values. They run one small
 * all-reduce (no allocation; it waits for the NULL stream) and return on every
 * rank the lowest failing rank's error, or ZS_ERR_MISMATCH on every rank when
 * the ranks passed different values (they would otherwise update their shards
 * with different rates). Allowed after zs_engine_create and between steps:
 * ZS_ERR_STATE inside a step (after zs_forward_begin or zs_backward_begin of a
 * round, until zs_step; an evaluation pass's zs_forward_end returns to between
 * steps). The value applies from the next zs_step on, on the device optimizer, on
 * the offloaded CPU optimizer, and with delayed_param_update to the update that
 * next zs_step launches (the running one keeps the value it started with).
 * Values are not saved in checkpoints: after zs_checkpoint_load set them again
 * (a config schedule needs nothing). */
#define ZS_HYPER_KEEP (-1.0f) /* leaves the value as it is */
/* lr: finite >= 0, or ZS_HYPER_KEEP; weight_decay: finite >= 0, or ZS_HYPER_KEEP.
 * Bad values are ZS_ERR_INVALID (on every rank). */
zs_status_t zs_engine_set_lr(zs_engine_t *zs, float lr, float weight_decay);
/* Replaces the schedule (checked as zs_config_validate checks config.schedule
 * against optim.lr); collective as above, ZS_ERR_MISMATCH when ranks differ. A
 * schedule counts from step 0 of the run, not from the call: set total_steps
 * to the whole run's length. */
zs_status_t zs_engine_set_schedule(zs_engine_t *zs, const zs_schedule_t *schedule);
/* The learning rate the next zs_step will use (the schedule at
 * zs_engine_step_count); NAN for NULL. */
float zs_engine_lr(const zs_engine_t *zs);
/* The schedule's rate after `step` optimizer steps with peak rate `lr`, in
 * double (the engine rounds it to float, and passes the config's float
 * optim.lr widened: (float)zs_schedule_lr(&s, (double)cfg.optim.lr, step) is
 * zs_engine_lr's value to the bit; a peak of 0.01 as a double can give a
 * float an ulp away), by the formulas in zeroshard/config.h.
 * Pure: no engine, no state. NAN for a NULL or unknown schedule, or step < 0. */
double zs_schedule_lr(const zs_schedule_t *schedule, double lr, int64_t step);

/* The comm the engine shards and reduces over: the one given to
 * zs_engine_create, or the mesh's data-parallel group (zs_engine_create_mesh).
 * Owned by the caller (or the mesh); NULL for NULL. What a trainer uses for its
 * own data-parallel collectives (e.g. a loss average, or broadcasting its
 * initial values from rank 0 before zs_engine_setup). */
zs_comm_t *zs_engine_comm(const zs_engine_t *zs);
/* The device the engine was made on (the caller's); NULL for NULL. */
zs_device_t *zs_engine_device(const zs_engine_t *zs);
/* Blocks until everything the engine queued on its streams and the compute
 * stream is done: resident parameters (stages 0-2, persistent units) then hold
 * the last zs_step's or zs_flush's values for the host to read directly,
 * without zs_gather (what the libtorch adapter does before handing its module
 * back). Between steps; a host wait, so not where the GPU should run ahead. */
zs_status_t zs_engine_synchronize(zs_engine_t *zs);

#ifdef __cplusplus
}
#endif

/* what an engine holds and did: counts, layout, memory, estimate, traffic */
#include "zeroshard/engine_info.h"
#endif
