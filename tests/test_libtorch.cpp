/* The libtorch adapter (zeroshard/torch.hpp) over MPI ranks on the cpu device:
 * the module's parameters are views of the engine's buffers (resident at
 * stages 0-2, empty outside gather at stage 3), gradients are views of the
 * engine's gradient buffers, a hand-written forward with UnitGuard (residual
 * connections, a unit unused in a step) trains like plain libtorch + AdamW,
 * checkpoints resume and the safetensors export carries the module's own
 * parameter names, bf16 parameters, and misuse reported as zs_torch::Error
 * with a status and a message; what a libtorch trainer does after wrapping
 * (module->to(), requires_grad_, a second wrapper, tied weights, ranks seeded
 * differently, BatchNorm buffers, reading weights after a delayed update's
 * flush) is an error or is made consistent, never silently wrong. */
#include <zeroshard/torch.hpp>
#include <zeroshard/zeroshard.h>

#include <cjson/cJSON.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "harness.h"

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;

#define expect_throws(expr, want_status, needle)                                                     \
  do {                                                                                               \
    bool zs_thrown_ = false;                                                                         \
    try {                                                                                            \
      expr;                                                                                          \
    } catch (const zs_torch::Error &e) {                                                             \
      zs_thrown_ = true;                                                                             \
      expect_str_contains(zs_status_name(e.status()), zs_status_name(want_status));                  \
      expect_str_contains(e.what(), needle);                                                         \
    } catch (const std::exception &e) {                                                              \
      zs_thrown_ = true;                                                                             \
      expect_str_contains(e.what(), needle);                                                         \
    }                                                                                                \
    if (!zs_thrown_) ZS_T_REPORT("expected %s to throw %s", #expr, zs_status_name(want_status));     \
  } while (0)

static zs_config_t config(int stage) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.optim.lr = 1e-2f;
  c.optim.weight_decay = 0.1f;
  return c;
}

static torch::nn::Sequential mlp() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 4));
}

/* ---- views: parameters and gradients in the engine's buffers ---------------- */

static void test_views_resident(void) {
  for (int stage = 0; stage <= 2; stage++) {
    auto model = mlp();
    std::map<std::string, torch::Tensor> init;
    for (auto &np : model->named_parameters()) init[np.key()] = np.value().detach().clone();
    zs_torch::ShardedSequential fsdp(model, config(stage), dev, world);
    assert_int_eq(fsdp.num_units(), 2); /* "0" and "2": Tanh holds no parameters */
    expect_true(fsdp.unit_name(1) == "2");
    int i = 0;
    for (auto &np : model->named_parameters()) {
      expect_true(np.key() == fsdp.param_name(i));
      expect_true(np.value().data_ptr() == fsdp.param_address(i)); /* the same memory, no copy */
      expect_true(torch::equal(np.value(), init[np.key()]));
      i++;
    }
    auto x = torch::randn({4, 8});
    auto loss = fsdp.forward(x).square().mean();
    loss.backward();
    i = 0;
    for (auto &p : model->parameters()) {
      if (stage <= 1) /* the resident gradient buffer, which autograd added into */
        expect_true(p.grad().defined() && p.grad().data_ptr() == fsdp.grad_address(i));
      else /* reduced into the shard: the full buffer is gone */
        expect_true(!p.grad().defined() && fsdp.grad_address(i) == nullptr);
      i++;
    }
    zs_step_report_t rep = fsdp.step();
    expect_int_eq(rep.step, 1);
    expect_true(rep.grad_norm > 0);
    /* the step's values, seen through the module once the unit is gathered */
    auto sd = fsdp.state_dict();
    {
      auto g = fsdp.gather(0);
      auto p = model->named_parameters();
      expect_true(torch::equal(p["0.weight"], sd[0].second));
      expect_true(!torch::equal(p["0.weight"], init["0.weight"]));
      g.release();
    }
    fsdp.forward_end();
  }
}

static void test_views_stage3(void) {
  auto model = mlp();
  auto w0 = model->named_parameters()["0.weight"];
  zs_torch::ShardedSequential fsdp(model, config(3), dev, world);
  for (auto &p : model->parameters()) expect_int_eq(p.numel(), 0); /* empty outside gather */
  {
    auto g = fsdp.gather("0");
    expect_int_eq(w0.numel(), 16 * 8);
    expect_true(w0.data_ptr() == fsdp.param_address(0));
    expect_int_eq(model->named_parameters()["2.weight"].numel(), 0); /* the other unit */
    g.release();
  }
  expect_int_eq(w0.numel(), 0);
  fsdp.forward_end();
  for (int step = 0; step < 2; step++) {
    auto loss = fsdp.forward(torch::randn({4, 8})).square().mean();
    for (auto &p : model->parameters()) expect_int_eq(p.numel(), 0); /* released after forward */
    loss.backward(); /* gathers again: forward's saved tensors read the new buffer */
    for (auto &p : model->parameters()) expect_true(p.numel() == 0 && !p.grad().defined());
    fsdp.step();
  }
  /* a unit under persist_threshold stays gathered, like stages 0-2 */
  auto m2 = mlp();
  zs_config_t c = config(3);
  c.persist_threshold = 100; /* unit "2": 16 x 4 + 4 = 68 elements */
  zs_torch::ShardedSequential f2(m2, c, dev, world);
  expect_int_eq(m2->named_parameters()["0.weight"].numel(), 0);
  expect_int_eq(m2->named_parameters()["2.weight"].numel(), 64);
  expect_true(m2->named_parameters()["2.weight"].data_ptr() == f2.param_address(2));
}

/* ---- a hand-written forward against plain libtorch ------------------------- */

struct NetImpl : torch::nn::Module {
  torch::nn::Linear embed{nullptr}, block1{nullptr}, block2{nullptr}, unused{nullptr}, head{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  NetImpl() {
    torch::manual_seed(11);
    embed = register_module("embed", torch::nn::Linear(6, 12));
    block1 = register_module("block1", torch::nn::Linear(12, 12));
    block2 = register_module("block2", torch::nn::Linear(12, 12));
    unused = register_module("unused", torch::nn::Linear(12, 12)); /* used on odd steps only */
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({12})));
    head = register_module("head", torch::nn::Linear(12, 3));
  }
  /* plain: h = embed(x); h = h + tanh(block(h)) twice; [unused]; head(norm(h)) */
  torch::Tensor forward(torch::Tensor x, bool use_unused) {
    auto h = embed(x);
    h = h + torch::tanh(block1(h));
    h = h + torch::tanh(block2(h));
    if (use_unused) h = h + torch::tanh(unused(h));
    return head(norm(h));
  }
};
TORCH_MODULE(Net);

/* the same forward, each unit inside its guard */
static torch::Tensor sharded_forward(zs_torch::Sharded &f, Net &net, torch::Tensor x, bool use_unused) {
  torch::Tensor h;
  {
    auto g = f.gather("embed");
    h = g.output(net->embed(x));
  }
  for (auto *blk : {&net->block1, &net->block2}) {
    auto g = f.gather(blk == &net->block1 ? "block1" : "block2");
    h = h + g.output(torch::tanh((*blk)(h)));
  }
  if (use_unused) {
    auto g = f.gather("unused");
    h = h + g.output(torch::tanh(net->unused(h)));
  }
  auto g = f.gather("tail");
  return g.output(net->head(net->norm(h)));
}

static void test_hand_written(void) {
  const int steps = 4, B = 4 * nranks;
  torch::manual_seed(5);
  auto X = torch::randn({steps, B, 6}), Y = torch::randn({steps, B, 3});
  /* plain libtorch, the whole batch */
  Net ref;
  torch::optim::AdamW opt(ref->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  std::vector<double> ref_loss;
  for (int s = 0; s < steps; s++) {
    opt.zero_grad();
    auto loss = torch::mse_loss(ref->forward(X[s], s % 2), Y[s]);
    loss.backward();
    /* a unit unused in a step: the engine steps it with a zero gradient (as
     * DDP does), torch::optim would skip it; give plain libtorch the zeros */
    for (auto &p : ref->parameters())
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    opt.step();
    ref_loss.push_back(loss.item<double>());
  }
  for (int stage = 0; stage <= 3; stage += 3) {
    Net net;
    zs_torch::Options o;
    o.units = {{"embed", {"embed"}}, {"block1", {"block1"}}, {"block2", {"block2"}}, {"unused", {"unused"}},
               {"tail", {"norm", "head"}}};
    zs_torch::Sharded f(net.ptr(), config(stage), dev, world, o);
    for (int s = 0; s < steps; s++) {
      auto x = X[s].narrow(0, rank * 4, 4), y = Y[s].narrow(0, rank * 4, 4);
      auto loss = torch::mse_loss(sharded_forward(f, net, x, s % 2), y);
      loss.backward();
      f.step();
      float l = loss.item<float>();
      assert_ok(zs_comm_all_reduce(world, &l, &l, 1, ZS_FP32, ZS_SUM, NULL));
      expect_near(l / nranks, ref_loss[(size_t)s], 1e-5, 0);
    }
    auto sd = f.state_dict();
    auto rp = ref->named_parameters();
    for (auto &kv : sd) expect_true(torch::allclose(kv.second, rp[kv.first], 1e-5, 1e-6));
  }
}

/* ---- checkpoints and the safetensors export -------------------------------- */

/* names, shapes and fp32 data of a safetensors file, read here with cJSON */
static std::map<std::string, torch::Tensor> read_safetensors(const std::string &path) {
  std::map<std::string, torch::Tensor> out;
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char *>(&n), 8);
  std::string hdr(n, '\0');
  f.read(&hdr[0], (std::streamsize)n);
  std::vector<char> body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  cJSON *h = cJSON_Parse(hdr.c_str());
  for (cJSON *e = h ? h->child : nullptr; e; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) continue;
    cJSON *dt = cJSON_GetObjectItem(e, "dtype"), *sh = cJSON_GetObjectItem(e, "shape"),
          *of = cJSON_GetObjectItem(e, "data_offsets");
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") || !cJSON_IsArray(sh) || cJSON_GetArraySize(of) != 2)
      continue;
    std::vector<int64_t> shape;
    for (cJSON *d = sh->child; d; d = d->next) shape.push_back((int64_t)d->valuedouble);
    int64_t a = (int64_t)cJSON_GetArrayItem(of, 0)->valuedouble, b = (int64_t)cJSON_GetArrayItem(of, 1)->valuedouble;
    auto t = torch::from_blob(body.data() + a, shape, torch::kFloat).clone();
    if (b - a == t.numel() * 4 && b <= (int64_t)body.size()) out[e->string] = t;
  }
  cJSON_Delete(h);
  return out;
}

static void test_checkpoint_export(void) {
  const std::string dir = "libtorch_ckpt_np" + std::to_string(nranks), st = dir + ".safetensors";
  auto x = torch::randn({4, 8}, torch::TensorOptions().dtype(torch::kFloat));
  assert_ok(zs_comm_broadcast(world, x.data_ptr(), x.data_ptr(), 32, ZS_FP32, 0, NULL));
  auto model = mlp();
  zs_torch::ShardedSequential a(model, config(3), dev, world);
  for (int s = 0; s < 2; s++) {
    a.forward(x).square().mean().backward();
    a.step();
  }
  a.save(dir);
  a.export_safetensors(st);
  auto sd = a.state_dict();
  /* the export: the module's own parameter names, the master values */
  if (rank == 0) {
    auto t = read_safetensors(st);
    expect_int_eq(t.size(), sd.size());
    for (auto &kv : sd) expect_true(t.count(kv.first) && t[kv.first].defined() && torch::equal(t[kv.first], kv.second));
    /* a plain libtorch module loads it by name and computes what the sharded one does */
    auto plain = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 4));
    torch::NoGradGuard ng;
    for (auto &np : plain->named_parameters()) np.value().copy_(t.at(np.key()));
    auto want = plain->forward(x);
    auto got = a.forward(x); /* an evaluation pass (no grad): forward_end inside */
    expect_true(torch::allclose(got, want, 1e-6, 1e-6));
  } else {
    torch::NoGradGuard ng;
    a.forward(x);
  }
  /* resume: another model (other values) loads the checkpoint and continues
   * exactly as the first one does */
  torch::manual_seed(99);
  auto model2 = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 4));
  zs_torch::ShardedSequential b(model2, config(1), dev, world); /* another stage: resharded */
  b.load(dir);
  auto sd2 = b.state_dict();
  for (size_t i = 0; i < sd.size(); i++) expect_true(torch::equal(sd[i].second, sd2[i].second));
  auto la = a.forward(x).square().mean(), lb = b.forward(x).square().mean();
  expect_true(torch::equal(la, lb));
  la.backward();
  lb.backward();
  a.step();
  b.step();
  auto sa = a.state_dict(), sb = b.state_dict();
  for (size_t i = 0; i < sa.size(); i++) expect_true(torch::allclose(sa[i].second, sb[i].second, 1e-6, 1e-7));
  if (rank == 0) std::remove(st.c_str());
}

/* ---- bf16 parameters, fp32 master ------------------------------------------- */

static void test_bf16(void) {
  auto model = mlp();
  zs_config_t c = config(3);
  c.param_dtype = ZS_BF16;
  zs_torch::ShardedSequential f(model, c, dev, world);
  auto x = torch::randn({4, 8}).to(torch::kBFloat16);
  assert_ok(zs_comm_broadcast(world, x.data_ptr(), x.data_ptr(), 32, ZS_BF16, 0, NULL));
  {
    auto g = f.gather(0);
    expect_true(model->named_parameters()["0.weight"].scalar_type() == torch::kBFloat16);
  }
  f.forward_end();
  float first = 0, last = 0;
  for (int s = 0; s < 10; s++) {
    auto loss = f.forward(x).to(torch::kFloat).square().mean();
    loss.backward();
    f.step();
    (s == 0 ? first : last) = loss.item<float>();
  }
  expect_true(last < first); /* it trains */
}

/* ---- parameter groups (Options::scales) ------------------------------------------ */

/* The first layer's weight at lr x 0 stays as it was; its bias, at lr x 2 and
 * weight decay x 0, moves; so does the rest at the defaults. */
static void test_scales(void) {
  auto model = mlp();
  auto w0 = model->named_parameters()["0.weight"].detach().clone();
  auto v0 = model->named_parameters()["2.weight"].detach().clone();
  zs_torch::Options o;
  o.scales = [](const std::string &name, const torch::Tensor &) {
    return name == "0.weight" ? std::make_pair(0.0f, 1.0f)
           : name == "0.bias" ? std::make_pair(2.0f, 0.0f)
                              : std::make_pair(1.0f, 1.0f);
  };
  zs_torch::ShardedSequential f(model, config(1), dev, world, o);
  auto b0 = model->named_parameters()["0.bias"].detach().clone();
  auto x = torch::randn({4, 8});
  assert_ok(zs_comm_broadcast(world, x.data_ptr(), x.data_ptr(), 32, ZS_FP32, 0, NULL));
  for (int s = 0; s < 3; s++) {
    f.forward(x).square().mean().backward();
    f.step();
  }
  auto sd = f.state_dict();
  std::map<std::string, torch::Tensor> m(sd.begin(), sd.end());
  expect_true(torch::equal(m["0.weight"], w0));
  expect_true(!torch::equal(m["0.bias"], b0));
  expect_true(!torch::equal(m["2.weight"], v0));
}

/* ---- offload with the delayed parameter update ---------------------------------- */

static void test_delayed_update(void) {
  auto model = mlp();
  zs_config_t c = config(3);
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.delayed_param_update = 1;
  zs_torch::ShardedSequential f(model, c, dev, world);
  auto x = torch::randn({4, 8});
  assert_ok(zs_comm_broadcast(world, x.data_ptr(), x.data_ptr(), 32, ZS_FP32, 0, NULL));
  float first = 0, last = 0;
  for (int s = 0; s < 8; s++) {
    auto loss = f.forward(x).square().mean();
    loss.backward();
    f.step(); /* the CPU step runs while the next forward/backward do */
    (s == 0 ? first : last) = loss.item<float>();
  }
  f.flush();
  auto sd = f.state_dict();
  {
    torch::NoGradGuard ng; /* after flush the module computes with the current values */
    auto g = f.gather("0");
    expect_true(torch::equal(model->named_parameters()["0.weight"], sd[0].second));
  }
  f.forward_end();
  expect_true(last < first);
}

/* ---- an engine the trainer made (e.g. over a mesh) --------------------------- */

static void test_own_engine(void) {
  zs_config_t c = config(2);
  zs_engine_t *zs = nullptr;
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  {
    auto model = mlp();
    zs_torch::Sharded f(model.ptr(), zs, c);
    expect_true(f.engine() == zs);
    expect_int_eq(zs_engine_unit_count(zs), 2);
    expect_true(std::string(zs_param_name(zs, 3)) == "2.bias");
    auto x = torch::randn({2, 8});
    torch::Tensor h;
    {
      auto g = f.gather("0");
      h = g.output(torch::tanh(model->at<torch::nn::LinearImpl>(0).forward(x)));
    }
    {
      auto g = f.gather("2");
      h = g.output(model->at<torch::nn::LinearImpl>(2).forward(h));
    }
    h.sum().backward();
    expect_int_eq(f.step().step, 1);
    expect_int_eq(zs_engine_step_count(zs), 1);
  } /* the adapter destroys the engine it took over */
  /* a constructor that fails destroys it too (ASan sees a leak or a stray write otherwise) */
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  zs_torch::Options o;
  o.units = {{"a", {"0"}}};
  expect_throws(zs_torch::Sharded(mlp().ptr(), zs, c, o), ZS_ERR_INVALID, "in none of the units");
}

/* ---- misuse --------------------------------------------------------------- */

static void test_errors(void) {
  zs_torch::Options o;
  o.units = {{"a", {"0"}}, {"b", {"nope"}}};
  expect_throws(zs_torch::ShardedSequential(mlp(), config(2), dev, world, o), ZS_ERR_INVALID,
                "names module 'nope', which the model does not have");
  o.units = {{"a", {"0"}}};
  expect_throws(zs_torch::ShardedSequential(mlp(), config(2), dev, world, o), ZS_ERR_INVALID,
                "parameter '2.weight' is in none of the units");
  o.units = {{"a", {"0", "2"}}, {"b", {"1"}}};
  expect_throws(zs_torch::ShardedSequential(mlp(), config(2), dev, world, o), ZS_ERR_INVALID,
                "unit 'b' holds no parameters");
  o.units = {{"a", {"0"}}, {"a", {"2"}}};
  expect_throws(zs_torch::ShardedSequential(mlp(), config(2), dev, world, o), ZS_ERR_INVALID, "used twice");
  auto meta = std::make_shared<torch::nn::Module>();
  meta->register_parameter("w", torch::empty({4}, torch::TensorOptions().device(torch::kMeta)));
  expect_throws(zs_torch::Sharded(meta, config(2), dev, world), ZS_ERR_UNSUPPORTED, "parameter 'w' is on meta");
  zs_config_t bad = config(2);
  bad.stage = 7;
  expect_throws(zs_torch::ShardedSequential(mlp(), bad, dev, world), ZS_ERR_INVALID, "zs_engine_create");

  auto model = mlp();
  zs_torch::ShardedSequential f(model, config(0), dev, world);
  expect_throws(f.gather(9), ZS_ERR_INVALID, "the model has 2 units");
  expect_throws(f.unit("x"), ZS_ERR_INVALID, "no unit or parameter 'x'");
  auto loss = f.forward(torch::randn({2, 8})).sum();
  expect_throws(f.step(), ZS_ERR_STATE, "call loss.backward() first");
  loss.backward();
  f.step();
  /* parameters used outside their unit's guard: backward says what to do */
  auto stray = model->forward(torch::randn({2, 8})).sum();
  expect_throws(stray.backward(), ZS_ERR_STATE, "compute the unit inside its UnitGuard");
}

/* t on this rank equals rank 0's t (collective) */
static bool same_as_rank0(const torch::Tensor &t) {
  torch::Tensor c = t.detach().to(torch::kFloat).contiguous().clone();
  if (zs_comm_broadcast(world, c.data_ptr(), c.data_ptr(), (size_t)c.numel(), ZS_FP32, 0, NULL) != ZS_OK) return false;
  return torch::equal(c, t.detach().to(torch::kFloat));
}

static void test_after_wrap(void) {
  auto x = torch::randn({4, 8});
  assert_ok(zs_comm_broadcast(world, x.data_ptr(), x.data_ptr(), 32, ZS_FP32, 0, NULL));
  /* tied weights: refused (two names for one buffer) */
  auto tied = std::make_shared<torch::nn::Module>();
  auto w = torch::randn({4, 4}).requires_grad_();
  tied->register_parameter("a", w);
  tied->register_parameter("b", w);
  expect_throws(zs_torch::Sharded(tied, config(0), dev, world), ZS_ERR_UNSUPPORTED, "tied weights");
  {
    /* a second wrapper over a wrapped module */
    auto model = mlp();
    zs_torch::ShardedSequential f(model, config(0), dev, world);
    expect_throws(zs_torch::ShardedSequential(model, config(0), dev, world), ZS_ERR_STATE, "already wrapped");
  }
  for (int stage : {0, 3}) {
    auto model = mlp();
    zs_torch::ShardedSequential f(model, config(stage), dev, world);
    model->to(torch::kDouble); /* after wrapping: its tensors would no longer be the engine's */
    expect_throws(f.forward(x), ZS_ERR_STATE, "changed its dtype");
  }
  {
    auto model = mlp();
    zs_torch::ShardedSequential f(model, config(1), dev, world);
    model->named_parameters()["2.weight"].requires_grad_(false); /* the engine would still step it */
    expect_throws(f.forward(x), ZS_ERR_STATE, "requires_grad false now");
  }
  {
    /* ranks seeded differently, BatchNorm statistics of each rank's own data:
     * rank 0's values everywhere at construction, its buffers after each step */
    torch::manual_seed(11 + rank);
    torch::nn::Sequential bn(torch::nn::Linear(8, 8), torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 4));
    torch::Tensor w0 = bn->named_parameters()["0.weight"].detach().clone();
    assert_ok(zs_comm_broadcast(world, w0.data_ptr(), w0.data_ptr(), (size_t)w0.numel(), ZS_FP32, 0, NULL));
    zs_torch::ShardedSequential f(bn, config(1), dev, world);
    expect_true(torch::equal(f.state_dict()[0].second, w0)); /* rank 0's, not a mix of the ranks' shards */
    auto mine = torch::randn({6, 8}) + rank;
    f.forward(mine).square().mean().backward();
    f.step();
    expect_true(same_as_rank0(bn->named_buffers()["1.running_mean"]));
    expect_true(same_as_rank0(bn->named_parameters()["0.weight"]));
  }
  {
    /* the delayed update: the module's weights are current after flush(),
     * whatever came before it (state_dict() first used to leave them a step old) */
    auto model = mlp();
    zs_config_t c = config(1);
    c.offload_optimizer = ZS_OFFLOAD_CPU;
    c.delayed_param_update = 1;
    zs_torch::ShardedSequential f(model, c, dev, world);
    for (int s = 0; s < 3; s++) {
      f.forward(x).square().mean().backward();
      f.step();
    }
    auto sd = f.state_dict();
    f.flush();
    expect_true(torch::equal(model->named_parameters()["0.weight"], sd[0].second));
  }
}

/* BatchNorm's running statistics in checkpoints: a model of other values and
 * statistics loads them with the engine's state and evaluates as the saved
 * one; an extra buffer is refused on every rank and changes no buffer; a
 * checkpoint without the file leaves the buffers (a warning) */
static void test_buffers_checkpoint(void) {
  const std::string dir = "libtorch_bn_ckpt_np" + std::to_string(nranks);
  auto make = [] { return torch::nn::Sequential(torch::nn::Linear(8, 8), torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 4)); };
  torch::manual_seed(5);
  auto bn = make();
  zs_torch::ShardedSequential a(bn, config(3), dev, world);
  auto x = torch::randn({6, 8}) + rank; /* each rank's own statistics: rank 0's win after a step */
  for (int s = 0; s < 2; s++) {
    a.forward(x).square().mean().backward();
    a.step();
  }
  a.save(dir);
  std::map<std::string, torch::Tensor> want;
  for (auto &nb : bn->named_buffers()) want[nb.key()] = nb.value().clone();
  expect_true(want.size() == 3 && want["1.num_batches_tracked"].item<int64_t>() == 2);
  torch::manual_seed(6);
  auto bn2 = make();
  zs_torch::ShardedSequential b(bn2, config(1), dev, world);
  b.load(dir);
  for (auto &nb : bn2->named_buffers()) expect_true(torch::equal(nb.value(), want[nb.key()]));
  {
    torch::NoGradGuard ng;
    bn->eval(), bn2->eval();
    expect_true(torch::allclose(a.forward(x), b.forward(x), 1e-6, 1e-7));
  }
  /* a buffer the checkpoint lacks */
  auto bn3 = make();
  bn3.ptr()->register_buffer("extra", torch::zeros({3}));
  zs_torch::ShardedSequential c3(bn3, config(1), dev, world);
  expect_throws(c3.load(dir), ZS_ERR_MISMATCH, "holds no buffer 'extra'");
  expect_true(torch::equal(bn3->named_buffers()["1.running_mean"], torch::zeros({8})));
  /* no file (a checkpoint of an older adapter): the buffers stay */
  zs_comm_barrier(world, NULL);
  if (rank == 0) expect_int_eq(std::remove((dir + "/buffers.step2.pt").c_str()), 0);
  zs_comm_barrier(world, NULL);
  auto bn4 = make();
  zs_torch::ShardedSequential d(bn4, config(1), dev, world);
  d.load(dir);
  expect_true(torch::equal(bn4->named_buffers()["1.running_var"], torch::ones({8})));
}

/* an exception out of a test is that test's failure (its message printed) */
static void (*current_test)(void);
static void guarded(void) {
  try {
    current_test();
  } catch (const std::exception &e) {
    ZS_T_REPORT("unexpected exception: %s", e.what());
  }
}
#define run_test(fn) (current_test = (fn), zs_test_run_named(#fn, guarded))

int main(void) {
  torch::set_num_threads(1);
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&world, dev) != ZS_OK) {
    fprintf(stderr, "setup: %s\n", zs_last_error());
    return 1;
  }
  rank = zs_t_rank = zs_comm_rank(world);
  nranks = zs_comm_size(world);
  run_test(test_views_resident);
  run_test(test_views_stage3);
  run_test(test_hand_written);
  run_test(test_checkpoint_export);
  run_test(test_bf16);
  run_test(test_scales);
  run_test(test_delayed_update);
  run_test(test_own_engine);
  run_test(test_errors);
  run_test(test_after_wrap);
  run_test(test_buffers_checkpoint);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return zs_test_finish();
}
