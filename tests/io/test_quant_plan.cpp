// The quantization plan over real folders written by our writer: the load rule, shape inference,
// cross-checks and backend routes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/quant_plan.h"
#include "quant/quantize.h"

using namespace mlxcel;
namespace fs = std::filesystem;

namespace {

Tensor randn(const Shape& s, DType dt, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.05f);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(s)));
  for (auto& x : v) x = n(rng);
  return Tensor::from_f32(v, s, dt);
}

void add_quantized(std::vector<std::pair<std::string, Tensor>>* ts, const std::string& p, const Shape& s,
                   QuantParams q, unsigned seed) {
  QuantizedTensor t = quantize(randn(s, DType::kBF16, seed), q);
  ts->emplace_back(p + ".weight", t.weight);
  ts->emplace_back(p + ".scales", t.scales);
  if (t.biases.defined()) ts->emplace_back(p + ".biases", t.biases);
}

struct Folder {
  fs::path dir;
  explicit Folder(const std::string& name) {
    dir = fs::temp_directory_path() / ("mlxcel_plan_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Folder() { fs::remove_all(dir); }
  void write(const std::vector<std::pair<std::string, Tensor>>& ts, const std::string& config) const {
    write_safetensors((dir / "model.safetensors").string(), ts, {{"format", "mlx"}});
    std::ofstream(dir / "config.json") << config;
  }
  QuantPlan plan() const { return plan_quantization(Checkpoint::open(dir.string()), ModelConfig::load(dir.string())); }
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(QuantPlan, LoadRuleOverridesAndInference) {
  Folder f("rule");
  std::vector<std::pair<std::string, Tensor>> ts;
  add_quantized(&ts, "model.layers.0.self_attn.q_proj", {64, 128}, {QuantMode::kMxfp4, 4, 32}, 1);
  add_quantized(&ts, "model.layers.0.mlp.gate", {8, 128}, {QuantMode::kAffine, 8, 64}, 2);
  add_quantized(&ts, "model.layers.0.mlp.up_proj", {64, 128}, default_params(QuantMode::kNvfp4), 3);  // no entry
  add_quantized(&ts, "model.layers.1.mlp.up_proj", {64, 128}, {QuantMode::kAffine, 4, 32}, 4);      // no entry
  ts.emplace_back("model.layers.0.self_attn.k_proj.weight", randn({64, 128}, DType::kBF16, 5));
  ts.emplace_back("model.norm.weight", randn({128}, DType::kBF16, 6));
  f.write(ts, R"({"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4",
      "model.layers.0.mlp.gate": {"group_size": 64, "bits": 8},
      "model.layers.0.self_attn.k_proj": false}})");
  QuantPlan plan = f.plan();
  ASSERT_EQ(plan.modules.size(), 4u);
  std::map<std::string, QuantizedModule> by;
  for (const auto& m : plan.modules) by[m.path] = m;
  EXPECT_EQ(by["model.layers.0.mlp.gate"].params, (QuantParams{QuantMode::kAffine, 8, 64}));
  EXPECT_EQ(by["model.layers.0.mlp.gate"].origin, QuantOrigin::kOverride);
  EXPECT_EQ(by["model.layers.0.self_attn.q_proj"].origin, QuantOrigin::kDefault);
  EXPECT_EQ(by["model.layers.0.self_attn.q_proj"].shape, (Shape{64, 128}));
  // Shapes that contradict the top level are recovered as mlx-lm's infer_quant_config does.
  EXPECT_EQ(by["model.layers.0.mlp.up_proj"].params, default_params(QuantMode::kNvfp4));
  EXPECT_EQ(by["model.layers.0.mlp.up_proj"].origin, QuantOrigin::kInferred);
  EXPECT_EQ(by["model.layers.1.mlp.up_proj"].params, (QuantParams{QuantMode::kAffine, 4, 32}));
  EXPECT_EQ(plan.dense_tensors, 2u);
  std::uint64_t total = 0;
  for (const auto& [n, t] : ts) total += t.nbytes();
  EXPECT_EQ(plan.total_bytes, total);

  // Routes on a GPU backend: nvfp4 converts to affine 8-bit gs 32, the others are native.
  Checkpoint ck = Checkpoint::open(f.dir.string());
  LoadedQuantized l = load_quantized(ck, by["model.layers.0.mlp.up_proj"], BackendKind::kRocm);
  EXPECT_EQ(l.route.kind, RouteKind::kConvert);
  EXPECT_EQ(l.params, (QuantParams{QuantMode::kAffine, 8, 32}));
  EXPECT_EQ(l.tensors.weight.shape(), (Shape{64, 32}));
  LoadedQuantized n = load_quantized(ck, by["model.layers.0.self_attn.q_proj"], BackendKind::kCpu);
  EXPECT_EQ(n.route.kind, RouteKind::kNative);
  EXPECT_EQ(n.params, (QuantParams{QuantMode::kMxfp4, 4, 32}));
}

TEST(QuantPlan, InconsistentCheckpointsAreRefusedByName) {
  {
    Folder f("false_but_scales");
    std::vector<std::pair<std::string, Tensor>> ts;
    add_quantized(&ts, "lm_head", {64, 128}, {QuantMode::kAffine, 4, 64}, 1);
    f.write(ts, R"({"quantization": {"group_size": 64, "bits": 4, "lm_head": false}})");
    EXPECT_NE(message_of([&] { f.plan(); }).find("lm_head"), std::string::npos);
  }
  {
    Folder f("override_mismatch");
    std::vector<std::pair<std::string, Tensor>> ts;
    add_quantized(&ts, "lm_head", {64, 128}, {QuantMode::kAffine, 4, 64}, 1);
    f.write(ts, R"({"quantization": {"group_size": 64, "bits": 4, "lm_head": {"bits": 8, "group_size": 64}}})");
    const std::string m = message_of([&] { f.plan(); });
    EXPECT_NE(m.find("lm_head"), std::string::npos) << m;
    EXPECT_NE(m.find("affine 8-bit gs 64"), std::string::npos) << m;
  }
  {
    Folder f("missing_biases");
    std::vector<std::pair<std::string, Tensor>> ts;
    QuantizedTensor t = quantize(randn({8, 64}, DType::kBF16, 3), {QuantMode::kAffine, 4, 64});
    ts = {{"x.weight", t.weight}, {"x.scales", t.scales}};
    f.write(ts, R"({"quantization": {"group_size": 64, "bits": 4}})");
    EXPECT_NE(message_of([&] { f.plan(); }).find("biases"), std::string::npos);
  }
  {
    Folder f("no_quant_section");
    std::vector<std::pair<std::string, Tensor>> ts;
    add_quantized(&ts, "x", {8, 64}, {QuantMode::kAffine, 4, 64}, 1);
    f.write(ts, R"({"hidden_size": 64})");
    EXPECT_NE(message_of([&] { f.plan(); }).find("declares no quantization"), std::string::npos);
  }
  {
    Folder f("override_without_tensors");
    std::vector<std::pair<std::string, Tensor>> ts = {{"y.weight", randn({8, 64}, DType::kBF16, 1)}};
    f.write(ts, R"({"quantization": {"group_size": 64, "bits": 4, "y": {"bits": 8, "group_size": 64}}})");
    EXPECT_NE(message_of([&] { f.plan(); }).find("no y.scales"), std::string::npos);
  }
}
