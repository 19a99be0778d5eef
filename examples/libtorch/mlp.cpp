/* examples/libtorch/mlp.cpp: an ordinary libtorch training loop (an MLP in
 * torch::nn, AdamW with decoupled weight decay on the matrices only, gradient
 * clipping) and the same loop on zeroshard through the libtorch adapter, with
 * the global batch split over the MPI ranks and grad_accum micro-batches.
 * Every rank also runs the plain loop on the whole global batch and compares:
 * the losses of every step and the final parameters must agree to 1e-5
 * relative (fp32). The README's before/after excerpt is the two marked regions.
 *
 *   mpiexec -n N zs-libtorch-mlp [--stage S] [--offload] [--all] [--steps K] [--accum A]
 * --all runs stages 0-3 and offload at stages 1-3 in one launch. Exit 0 when
 * every configuration matches, 1 otherwise; a table on stdout (rank 0). */
#include <zeroshard/torch.hpp>
#include <zeroshard/zeroshard.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static const int64_t IN = 16, H = 64, OUT = 8, GLOBAL_BATCH = 24;
static const double LR = 1e-2, WD = 0.1, CLIP = 0.3;

static torch::nn::Sequential make_model() {
  torch::manual_seed(7); /* the same initial values on every rank and in both loops */
  return torch::nn::Sequential(torch::nn::Linear(IN, H), torch::nn::LayerNorm(torch::nn::LayerNormOptions({H})),
                               torch::nn::GELU(), torch::nn::Linear(H, H), torch::nn::Tanh(),
                               torch::nn::Linear(H, OUT));
}

struct Data {
  std::vector<torch::Tensor> x, y; /* per step: the global batch */
};

static Data make_data(int steps) {
  torch::manual_seed(1234);
  Data d;
  for (int s = 0; s < steps; s++) {
    d.x.push_back(torch::randn({GLOBAL_BATCH, IN}));
    d.y.push_back(torch::randn({GLOBAL_BATCH, OUT}));
  }
  return d;
}

struct Result {
  std::vector<double> losses;
  std::vector<std::pair<std::string, torch::Tensor>> params;
  double clipped_steps = 0;
};

/* ---- the plain libtorch loop: one process, the whole global batch ---------- */

static Result train_plain(const Data &data, int steps) {
  Result r;
  std::vector<torch::Tensor> decay, no_decay;
  // --- plain libtorch begins ---
  auto model = make_model();
  for (auto &p : model->parameters()) (p.dim() <= 1 ? no_decay : decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(LR).weight_decay(WD)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(LR).weight_decay(0)));
  torch::optim::AdamW opt(groups);

  for (int step = 0; step < steps; step++) {
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(data.x[step]), data.y[step]);
    loss.backward();
    auto norm = torch::nn::utils::clip_grad_norm_(model->parameters(), CLIP);
    opt.step();
    r.losses.push_back(loss.item<double>());
    r.clipped_steps += norm > CLIP;
  }
  // --- plain libtorch ends ---
  for (const auto &np : model->named_parameters()) r.params.emplace_back(np.key(), np.value().detach().clone());
  return r;
}

/* ---- the same loop on zeroshard -------------------------------------------- */

static Result train_sharded(const Data &data, int steps, zs_config_t cfg, zs_device_t *dev, zs_comm_t *comm) {
  Result r;
  const int rank = zs_comm_rank(comm), ranks = zs_comm_size(comm), accum = cfg.grad_accum;
  const int64_t mb = GLOBAL_BATCH / (ranks * accum); /* rows per micro-batch */
  std::vector<float> loss_sum((size_t)steps, 0.0f);
  // --- zeroshard begins ---
  auto model = make_model();
  cfg.optim.lr = LR;
  cfg.optim.weight_decay = WD;
  cfg.grad_clip = CLIP;
  zs_torch::ShardedSequential fsdp(model, cfg, dev, comm, {{}, zs_torch::no_decay_vectors});

  for (int step = 0; step < steps; step++) {
    for (int a = 0; a < accum; a++) { /* this rank's micro-batches of the global batch */
      int64_t row = (a * ranks + rank) * mb;
      auto loss = torch::mse_loss(fsdp.forward(data.x[step].narrow(0, row, mb)), data.y[step].narrow(0, row, mb));
      loss.backward();
      loss_sum[step] += loss.item<float>();
    }
    zs_step_report_t rep = fsdp.step(); /* norm, clip, AdamW on this rank's shard */
    r.clipped_steps += rep.clip_coef < 1;
  }
  // --- zeroshard ends ---
  /* the global batch's loss: the mean over ranks and micro-batches */
  if (zs_comm_all_reduce(comm, loss_sum.data(), loss_sum.data(), (size_t)steps, ZS_FP32, ZS_SUM, NULL) != ZS_OK)
    throw zs_torch::Error(ZS_ERR_COMM, std::string("loss all-reduce: ") + zs_last_error());
  for (float l : loss_sum) r.losses.push_back((double)l / (ranks * accum));
  r.params = fsdp.state_dict();
  return r;
}

/* ---- comparison ------------------------------------------------------------ */

struct Diff {
  double loss = 0, param = 0; /* largest relative differences */
};

static Diff compare(const Result &a, const Result &ref) {
  Diff d;
  for (size_t s = 0; s < ref.losses.size(); s++)
    d.loss = std::max(d.loss, std::fabs(a.losses[s] - ref.losses[s]) / std::fabs(ref.losses[s]));
  for (size_t i = 0; i < ref.params.size(); i++) {
    /* relative to the tensor's largest value: elements near 0 are not singled out */
    const torch::Tensor &x = a.params.at(i).second, &y = ref.params[i].second;
    if (a.params[i].first != ref.params[i].first || !x.sizes().equals(y.sizes())) return Diff{1e9, 1e9};
    double scale = y.abs().max().item<double>();
    d.param = std::max(d.param, (x - y).abs().max().item<double>() / scale);
  }
  return d;
}

struct Config {
  int stage, offload, accum;
};

int main(int argc, char **argv) {
  int steps = 10, accum = 2, all = 0;
  Config one{3, 0, 0};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--stage") && i + 1 < argc) one.stage = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--offload")) one.offload = 1;
    else if (!strcmp(argv[i], "--all")) all = 1;
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--accum") && i + 1 < argc) accum = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--stage S] [--offload] [--all] [--steps K] [--accum A]\n", argv[0]);
      return 2;
    }
  }
  torch::set_num_threads(1); /* the ranks share the cores */
  zs_device_t *dev = nullptr;
  zs_comm_t *comm = nullptr;
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&comm, dev) != ZS_OK) {
    fprintf(stderr, "zs-libtorch-mlp: %s\n", zs_last_error());
    return 1;
  }
  const int rank = zs_comm_rank(comm), ranks = zs_comm_size(comm);
  if (GLOBAL_BATCH % (ranks * accum) != 0) {
    if (rank == 0) fprintf(stderr, "zs-libtorch-mlp: %d ranks x %d micro-batches do not divide the global batch %d\n",
                           ranks, accum, (int)GLOBAL_BATCH);
    zs_comm_destroy(comm);
    zs_device_destroy(dev);
    return 2;
  }
  std::vector<Config> configs;
  if (all) {
    for (int s = 0; s <= 3; s++) configs.push_back({s, 0, accum});
    for (int s = 1; s <= 3; s++) configs.push_back({s, 1, accum});
    configs.push_back({3, 0, 1}); /* without accumulation */
  } else {
    configs.push_back({one.stage, one.offload, accum});
  }

  Data data = make_data(steps);
  Result ref = train_plain(data, steps);
  int failed = 0;
  if (rank == 0)
    printf("%-22s %5s %6s %13s %13s %8s\n", "config (fp32)", "ranks", "steps", "loss rel diff", "param rel diff",
           "result");
  for (const Config &c : configs) {
    zs_config_t cfg = ZS_CONFIG_INIT;
    cfg.stage = c.stage;
    cfg.grad_accum = c.accum;
    cfg.offload_optimizer = c.offload ? ZS_OFFLOAD_CPU : ZS_OFFLOAD_NONE;
    char name[64];
    snprintf(name, sizeof name, "stage %d%s accum %d", c.stage, c.offload ? " offload" : "", c.accum);
    try {
      Result got = train_sharded(data, steps, cfg, dev, comm);
      Diff d = compare(got, ref);
      /* the clipping must have acted in both runs on the same steps */
      bool ok = d.loss <= 1e-5 && d.param <= 1e-5 && got.clipped_steps == ref.clipped_steps && ref.clipped_steps > 0;
      failed += !ok;
      if (rank == 0)
        printf("%-22s %5d %6d %13.2e %13.2e %8s\n", name, ranks, steps, d.loss, d.param, ok ? "ok" : "MISMATCH");
      if (!ok && rank == 0)
        fprintf(stderr, "%s: clipped steps %g (plain %g)\n", name, got.clipped_steps, ref.clipped_steps);
    } catch (const zs_torch::Error &e) {
      fprintf(stderr, "[rank %d] %s: %s (%s)\n", rank, name, e.what(), zs_status_name(e.status()));
      failed++;
    } catch (const std::exception &e) {
      fprintf(stderr, "[rank %d] %s: %s\n", rank, name, e.what());
      failed++;
    }
  }
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
  return failed ? 1 : 0;
}
