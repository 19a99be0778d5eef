/* Uses the installed libtorch adapter: an MLP trained 6 steps with
 * zs_torch::ShardedSequential at stage 3 (one process: MPI's singleton) equals
 * the same steps of plain libtorch + AdamW, loss by loss, to 1e-5 relative.
 * Prints "consumer ok". */
#include <zeroshard/torch.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

static torch::nn::Sequential make_model() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(6, 12), torch::nn::Tanh(), torch::nn::Linear(12, 3));
}

int main() {
  const int steps = 6;
  torch::manual_seed(11);
  std::vector<torch::Tensor> xs, ys;
  for (int s = 0; s < steps; s++) xs.push_back(torch::randn({8, 6})), ys.push_back(torch::randn({8, 3}));

  std::vector<double> plain, sharded;
  auto ref = make_model();
  torch::optim::AdamW opt(ref->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  for (int s = 0; s < steps; s++) {
    opt.zero_grad();
    auto loss = torch::mse_loss(ref->forward(xs[s]), ys[s]);
    loss.backward();
    opt.step();
    plain.push_back(loss.item<double>());
  }

  zs_device_t *dev = nullptr;
  zs_comm_t *comm = nullptr;
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&comm, dev) != ZS_OK) {
    std::printf("consumer FAILED: %s\n", zs_last_error());
    return 1;
  }
  double worst = 0;
  try {
    zs_config_t cfg = zs_config_defaults();
    cfg.stage = 3;
    cfg.optim.lr = 1e-2f;
    cfg.optim.weight_decay = 0.1f;
    auto model = make_model();
    zs_torch::ShardedSequential fsdp(model, cfg, dev, comm);
    for (int s = 0; s < steps; s++) {
      auto loss = torch::mse_loss(fsdp.forward(xs[s]), ys[s]);
      loss.backward();
      fsdp.step();
      sharded.push_back(loss.item<double>());
      worst = std::max(worst, std::fabs(sharded[s] - plain[s]) / std::fabs(plain[s]));
    }
  } catch (const zs_torch::Error &e) {
    std::printf("consumer FAILED: %s (%s)\n", e.what(), zs_status_name(e.status()));
    worst = 1;
  }
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
  bool ok = worst <= 1e-5 && plain.back() < plain.front();
  std::printf("%s: %d steps, loss %.6f -> %.6f, largest relative difference %.2e\n", ok ? "consumer ok" : "consumer FAILED",
              steps, plain.front(), plain.back(), worst);
  return ok ? 0 : 3;
}
