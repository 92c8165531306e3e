// attnlab checkpoints: exact round trips (parameters, moments, config, metadata), the crash-safe
// protocol at every step (a simulated crash after each step leaves a loadable checkpoint, the
// next save recovers), refusals that protect the previous checkpoint and foreign directories,
// and load-time validation of every tensor. Also LoadAnyModel's format detection.
#include "formats/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "formats/load_model.h"
#include "model/gpt.h"
#include "model/test_models.h"
#include "formats/safetensors.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using internal::CheckpointCrashPoint;
using nlohmann::json;

ModelConfig SmallConfig() { return test_models::TinyConfig({.vocab_size = 23, .context = 9}); }

// A store for `c` filled with N(0, 1) values from `seed` (padding between slices stays 0).
ParameterStore RandomStore(const ModelConfig& c, uint64_t seed) {
  ParameterStore s(c);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  for (const ParamInfo& p : s.infos()) {
    float* x = s.Slice(p);
    for (int64_t i = 0; i < p.size; ++i) x[i] = nd(rng);
  }
  return s;
}

bool SameValues(const ParameterStore& a, const ParameterStore& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "attnlab_ckpt_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/ckpt";
  }
  void TearDown() override {
    internal::SetCheckpointCrashPointForTest(CheckpointCrashPoint::kNone);
    fs::remove_all(root_);
  }
  // Names in root_, sorted.
  std::vector<std::string> RootEntries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(root_)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
  // Saves `params` with meta {"step": step}.
  Status Save(const ParameterStore& params, int64_t step) {
    return SaveCheckpoint(dir_, cfg_, params, nullptr, nullptr, json{{"step", step}});
  }
  int64_t LoadedStep(const std::string& dir) {
    auto ck = LoadCheckpoint(dir);
    if (!ck.ok()) return -1;
    return ck->meta.at("step").get<int64_t>();
  }

  std::string root_, dir_;
  ModelConfig cfg_ = SmallConfig();
};

TEST_F(CheckpointTest, RoundTripsParametersConfigAndMeta) {
  ModelConfig c = cfg_;
  c.position = PositionEncoding::kLearned;
  c.softmax = SoftmaxKind::kSinkLogit;
  c.tie_embeddings = false;
  c.sink_token = true;
  c.residual_scale = ResidualScale::kReZero;
  const ParameterStore p = RandomStore(c, 7);
  const json meta = {
      {"step", 123}, {"tokenizer", {{"kind", "byte"}, {"vocab", 256}}}, {"lr", 3e-4}};
  ASSERT_TRUE(SaveCheckpoint(dir_ + "/", c, p, nullptr, nullptr, meta).ok());
  EXPECT_EQ(RootEntries(), std::vector<std::string>{"ckpt"});
  EXPECT_TRUE(fs::exists(dir_ + "/config.json"));
  EXPECT_TRUE(fs::exists(dir_ + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ + "/optimizer.safetensors"));
  EXPECT_TRUE(IsCheckpointDir(dir_));

  auto ck = LoadCheckpoint(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ModelConfigToJson(ck->config), ModelConfigToJson(c));
  EXPECT_TRUE(SameValues(ck->params, p));
  EXPECT_EQ(ck->meta, meta);
  EXPECT_FALSE(ck->has_optimizer);
  EXPECT_EQ(ck->loaded_from, dir_);

  // config.json: the model config at top level plus format, version, meta.
  auto text = ReadFileToString(dir_ + "/config.json", 1 << 20);
  ASSERT_TRUE(text.ok());
  const json j = json::parse(*text);
  EXPECT_EQ(j.at("format"), "attnlab-checkpoint");
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("d_model"), 16);
  EXPECT_EQ(j.at("meta"), meta);
  // model.safetensors: exactly the layout, F32, exact shapes.
  auto st = ReadSafetensors(dir_ + "/model.safetensors");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->tensors().size(), p.infos().size());
  for (const ParamInfo& info : p.infos()) {
    const SafetensorsTensor* t = st->Find(info.name);
    ASSERT_NE(t, nullptr) << info.name;
    EXPECT_EQ(t->shape, info.shape);
    EXPECT_EQ(t->dtype, SafetensorsDtype::kF32);
  }
}

TEST_F(CheckpointTest, RoundTripsOptimizerState) {
  const ParameterStore p = RandomStore(cfg_, 1), m = RandomStore(cfg_, 2), v = RandomStore(cfg_, 3);
  const json meta = {{"step", 42}, {"rng_state", "12345 678"}};
  ASSERT_TRUE(SaveCheckpoint(dir_, cfg_, p, &m, &v, meta).ok());
  auto ck = LoadCheckpoint(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  ASSERT_TRUE(ck->has_optimizer);
  EXPECT_TRUE(SameValues(ck->params, p));
  EXPECT_TRUE(SameValues(ck->m, m));
  EXPECT_TRUE(SameValues(ck->v, v));
  EXPECT_EQ(ck->optimizer_step, 42);
  EXPECT_EQ(ck->rng_state, "12345 678");
  auto opt = ReadSafetensors(dir_ + "/optimizer.safetensors");
  ASSERT_TRUE(opt.ok());
  EXPECT_NE(opt->Find("m.h.1.mlp.fc.weight"), nullptr);
  EXPECT_NE(opt->Find("v.wte"), nullptr);
  EXPECT_EQ(opt->metadata().at("step"), "42");

  // Saving without moments replaces the optimizer file too (a checkpoint is one unit).
  ASSERT_TRUE(Save(p, 43).ok());
  auto ck2 = LoadCheckpoint(dir_);
  ASSERT_TRUE(ck2.ok());
  EXPECT_FALSE(ck2->has_optimizer);
}

TEST_F(CheckpointTest, ReplacingLeavesNoDebris) {
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(Save(RandomStore(cfg_, step), step).ok());
    EXPECT_EQ(LoadedStep(dir_), step);
    EXPECT_EQ(RootEntries(), std::vector<std::string>{"ckpt"});
  }
  EXPECT_TRUE(SameValues(LoadCheckpoint(dir_)->params, RandomStore(cfg_, 3)));
}

// A crash after each step of the protocol leaves a loadable checkpoint (the old one before the
// new directory is renamed into place, the new one after), and the next save recovers.
TEST_F(CheckpointTest, CrashAtEveryStepLeavesALoadableCheckpoint) {
  struct Case {
    CheckpointCrashPoint point;
    int64_t visible_step;  // what a load sees after the crash
    bool dir_missing;      // only DIR.old is left
  };
  for (const Case& cs : {Case{CheckpointCrashPoint::kAfterTempWritten, 1, false},
                         Case{CheckpointCrashPoint::kAfterOldMoved, 1, true},
                         Case{CheckpointCrashPoint::kAfterNewMoved, 2, false}}) {
    SCOPED_TRACE(static_cast<int>(cs.point));
    fs::remove_all(root_);
    fs::create_directories(root_);
    ASSERT_TRUE(Save(RandomStore(cfg_, 1), 1).ok());
    internal::SetCheckpointCrashPointForTest(cs.point);
    const Status crashed = Save(RandomStore(cfg_, 2), 2);
    ASSERT_FALSE(crashed.ok());
    EXPECT_EQ(crashed.message(), "simulated crash");
    EXPECT_EQ(fs::exists(dir_), !cs.dir_missing);
    EXPECT_EQ(LoadedStep(dir_), cs.visible_step);
    EXPECT_TRUE(IsCheckpointDir(dir_));
    if (cs.dir_missing) {
      EXPECT_EQ(LoadCheckpoint(dir_)->loaded_from, dir_ + ".old");
      auto any = LoadAnyModel(dir_);
      ASSERT_TRUE(any.ok()) << any.status().ToString();
      EXPECT_EQ(any->path, dir_ + ".old");
      ASSERT_EQ(any->notes.size(), 1u);
      EXPECT_TRUE(SameValues(any->params, RandomStore(cfg_, 1)));
    }
    // The next save cleans up: only DIR remains, with the new contents.
    ASSERT_TRUE(Save(RandomStore(cfg_, 3), 3).ok());
    EXPECT_EQ(LoadedStep(dir_), 3);
    EXPECT_EQ(RootEntries(), std::vector<std::string>{"ckpt"});
  }
}

TEST_F(CheckpointTest, RefusesWhatCouldNotBeLoadedAndKeepsThePrevious) {
  ASSERT_TRUE(Save(RandomStore(cfg_, 1), 1).ok());
  ParameterStore bad = RandomStore(cfg_, 2);
  bad.Slice(*bad.Find("h.1.attn.proj.weight"))[5] = NAN;
  const Status st = Save(bad, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'h.1.attn.proj.weight' has NaN at index 5"), std::string::npos)
      << st.ToString();
  ParameterStore m = RandomStore(cfg_, 3), v = RandomStore(cfg_, 4);
  v.Slice(*v.Find("wte"))[0] = -INFINITY;
  const Status st2 = SaveCheckpoint(dir_, cfg_, RandomStore(cfg_, 2), &m, &v, json{{"step", 2}});
  ASSERT_FALSE(st2.ok());
  EXPECT_NE(st2.message().find("moment v"), std::string::npos) << st2.ToString();
  EXPECT_NE(st2.message().find("-Inf"), std::string::npos) << st2.ToString();
  EXPECT_EQ(LoadedStep(dir_), 1);
  EXPECT_EQ(RootEntries(), std::vector<std::string>{"ckpt"});
}

TEST_F(CheckpointTest, RejectsBadArguments) {
  const ParameterStore p = RandomStore(cfg_, 1);
  ModelConfig other = cfg_;
  other.d_model = 32;
  const ParameterStore q = RandomStore(other, 1);
  EXPECT_EQ(SaveCheckpoint(dir_, cfg_, q, nullptr, nullptr, {}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveCheckpoint(dir_, cfg_, p, &p, nullptr, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveCheckpoint(dir_, cfg_, p, &p, &q, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveCheckpoint(dir_, cfg_, p, nullptr, nullptr, json::array()).code(),
            StatusCode::kInvalidArgument);
  ModelConfig invalid = cfg_;
  invalid.n_head = 5;
  EXPECT_EQ(SaveCheckpoint(dir_, invalid, p, nullptr, nullptr, {}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveCheckpoint(".", cfg_, p, nullptr, nullptr, {}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveCheckpoint("", cfg_, p, nullptr, nullptr, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(RootEntries().empty());
  // Null meta is stored as {}; parent directories are created.
  ASSERT_TRUE(SaveCheckpoint(root_ + "/a/b/ckpt", cfg_, p, nullptr, nullptr, nullptr).ok());
  EXPECT_EQ(LoadCheckpoint(root_ + "/a/b/ckpt")->meta, json::object());
}

TEST_F(CheckpointTest, NeverDeletesForeignDirectories) {
  const ParameterStore p = RandomStore(cfg_, 1);
  // A directory with someone else's files.
  fs::create_directories(dir_);
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/notes.txt", "precious").ok());
  Status st = Save(p, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not an attnlab checkpoint"), std::string::npos) << st.ToString();
  EXPECT_EQ(*ReadFileToString(dir_ + "/notes.txt", 100), "precious");
  EXPECT_EQ(RootEntries(), std::vector<std::string>{"ckpt"});
  // A plain file.
  fs::remove_all(dir_);
  ASSERT_TRUE(WriteFileAtomically(dir_, "file").ok());
  EXPECT_EQ(Save(p, 1).code(), StatusCode::kInvalidArgument);
  fs::remove(dir_);
  // An empty directory is fine.
  fs::create_directories(dir_);
  ASSERT_TRUE(Save(p, 1).ok());
  // A foreign file put inside a checkpoint survives the next save (in DIR.old), and the save
  // after that stops with a clear message rather than deleting it.
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/tokenizer.json", "{}").ok());
  st = Save(p, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("new checkpoint is saved"), std::string::npos) << st.ToString();
  EXPECT_EQ(LoadedStep(dir_), 2);
  EXPECT_TRUE(fs::exists(dir_ + ".old/tokenizer.json"));
  st = Save(p, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tokenizer.json"), std::string::npos) << st.ToString();
  EXPECT_EQ(LoadedStep(dir_), 2);
}

// Rewrites one file of a saved checkpoint.
class CheckpointCorruptionTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    p_ = RandomStore(cfg_, 5);
    m_ = RandomStore(cfg_, 6);
    v_ = RandomStore(cfg_, 7);
    ASSERT_TRUE(SaveCheckpoint(dir_, cfg_, p_, &m_, &v_, json{{"step", 9}}).ok());
  }
  // model.safetensors rewritten from p_'s tensors after `edit`.
  void RewriteModel(const std::function<void(std::vector<NamedTensor>&)>& edit) {
    std::vector<NamedTensor> t;
    for (const ParamInfo& i : p_.infos())
      t.push_back(NamedTensor::F32(i.name, i.shape, p_.Slice(i)));
    edit(t);
    ASSERT_TRUE(WriteSafetensors(dir_ + "/model.safetensors", t).ok());
  }
  void ExpectLoadError(const std::string& want) {
    auto ck = LoadCheckpoint(dir_);
    ASSERT_FALSE(ck.ok()) << "expected: " << want;
    EXPECT_NE(ck.status().message().find(want), std::string::npos) << ck.status().ToString();
  }
  ParameterStore p_, m_, v_;
};

TEST_F(CheckpointCorruptionTest, MissingTensor) {
  RewriteModel([](std::vector<NamedTensor>& t) {
    t.erase(std::find_if(t.begin(), t.end(), [](auto& x) { return x.name == "h.1.mlp.fc.bias"; }));
  });
  ExpectLoadError("missing tensor 'h.1.mlp.fc.bias' (expected F32 [24]");
}

TEST_F(CheckpointCorruptionTest, ExtraTensor) {
  const float x = 1;
  RewriteModel([&](std::vector<NamedTensor>& t) {
    t.push_back(NamedTensor::F32("h.2.ln1.weight", {1}, &x));
  });
  ExpectLoadError("unexpected tensor 'h.2.ln1.weight'");
}

TEST_F(CheckpointCorruptionTest, WrongShape) {
  RewriteModel([](std::vector<NamedTensor>& t) {
    for (auto& x : t) {
      if (x.name == "h.0.attn.qkv.weight") x.shape = {48, 16};  // transposed
    }
  });
  ExpectLoadError("'h.0.attn.qkv.weight' has shape [48, 16], expected [16, 48]");
}

TEST_F(CheckpointCorruptionTest, WrongDtype) {
  const ParamInfo& wpe_info = *p_.Find("ln_f.bias");
  std::vector<double> d(wpe_info.size, 0.5);
  RewriteModel([&](std::vector<NamedTensor>& t) {
    for (auto& x : t) {
      if (x.name == "ln_f.bias") x = NamedTensor{x.name, x.shape, d.data(), SafetensorsDtype::kF64};
    }
  });
  ExpectLoadError("'ln_f.bias' has dtype F64, expected F32");
}

TEST_F(CheckpointCorruptionTest, NonFiniteValue) {
  p_.Slice(*p_.Find("h.0.ln2.weight"))[3] = INFINITY;
  RewriteModel([](std::vector<NamedTensor>&) {});
  ExpectLoadError("tensor 'h.0.ln2.weight' has +Inf at index 3");
}

TEST_F(CheckpointCorruptionTest, TruncatedModelFile) {
  const std::string path = dir_ + "/model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 4);
  ExpectLoadError("model.safetensors");
}

TEST_F(CheckpointCorruptionTest, OptimizerFromAnotherStep) {
  std::vector<NamedTensor> t;
  for (const ParamInfo& i : m_.infos())
    t.push_back(NamedTensor::F32("m." + i.name, i.shape, m_.Slice(i)));
  for (const ParamInfo& i : v_.infos())
    t.push_back(NamedTensor::F32("v." + i.name, i.shape, v_.Slice(i)));
  ASSERT_TRUE(WriteSafetensors(dir_ + "/optimizer.safetensors", t, {{"step", "8"}}).ok());
  ExpectLoadError("optimizer state is from step 8 but config.json says step 9");
  ASSERT_TRUE(WriteSafetensors(dir_ + "/optimizer.safetensors", t, {{"step", "x"}}).ok());
  ExpectLoadError("metadata step 'x'");
  t.pop_back();
  ASSERT_TRUE(WriteSafetensors(dir_ + "/optimizer.safetensors", t, {{"step", "9"}}).ok());
  ExpectLoadError("missing tensor 'v.");
}

TEST_F(CheckpointCorruptionTest, BadConfigJson) {
  const std::string path = dir_ + "/config.json";
  const json good = json::parse(*ReadFileToString(path, 1 << 20));
  ASSERT_TRUE(WriteFileAtomically(path, "{not json").ok());
  ExpectLoadError("not valid JSON");
  json j = good;
  j["version"] = 2;
  ASSERT_TRUE(WriteFileAtomically(path, j.dump()).ok());
  ExpectLoadError("checkpoint version 2");
  j = good;
  j.erase("format");
  ASSERT_TRUE(WriteFileAtomically(path, j.dump()).ok());
  ExpectLoadError("not an attnlab checkpoint");
  j = good;
  j["d_modle"] = 3;
  ASSERT_TRUE(WriteFileAtomically(path, j.dump()).ok());
  ExpectLoadError("unknown model config key 'd_modle'");
  // A config that disagrees with the weights: caught before anything large is allocated.
  j = good;
  j["vocab_size"] = 1 << 24;
  j["d_model"] = 1 << 14;
  ASSERT_TRUE(WriteFileAtomically(path, j.dump()).ok());
  ExpectLoadError("'wte' has shape [23, 16], expected [16777216, 16384]");
  j = good;
  j["meta"] = 3;
  ASSERT_TRUE(WriteFileAtomically(path, j.dump()).ok());
  ExpectLoadError("\"meta\" must be an object");
  fs::remove(path);
  auto ck = LoadCheckpoint(dir_);
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, LoadMissing) {
  auto ck = LoadCheckpoint(dir_);
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(IsCheckpointDir(dir_));
}

// The loaded model runs exactly like the one that was saved.
TEST_F(CheckpointTest, MakeGptReproducesTheForward) {
  std::unique_ptr<Gpt> g = test_models::TinyModel(cfg_, 11);
  ASSERT_NE(g, nullptr);
  const std::vector<int32_t> tokens = {1, 5, 22, 0, 7, 3};
  const int64_t T = static_cast<int64_t>(tokens.size()), V = cfg_.vocab_size;
  ASSERT_TRUE(g->Forward(tokens.data(), nullptr, 1, T, nullptr).ok());
  const std::vector<float> want(g->logits(), g->logits() + T * V);
  ASSERT_TRUE(SaveCheckpoint(dir_, cfg_, g->params(), nullptr, nullptr, {}).ok());
  auto m = LoadAnyModel(dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->format, "attnlab-checkpoint");
  auto h = MakeGpt(*m);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE((*h)->Forward(tokens.data(), nullptr, 1, T, nullptr).ok());
  for (int64_t i = 0; i < T * V; ++i) ASSERT_EQ((*h)->logits()[i], want[i]) << i;
  // CopyParameters refuses a different layout.
  ModelConfig other = cfg_;
  other.n_layer = 3;
  ParameterStore dst(other);
  EXPECT_EQ(CopyParameters(m->params, &dst).code(), StatusCode::kInvalidArgument);
}

TEST_F(CheckpointTest, LoadAnyModelDetection) {
  ASSERT_TRUE(Save(RandomStore(cfg_, 1), 1).ok());
  auto a = LoadAnyModel(dir_);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->meta.at("step"), 1);
  // config.json of a checkpoint stands for its directory.
  auto b = LoadAnyModel(dir_ + "/config.json");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->format, "attnlab-checkpoint");

  // A checkpoint that lost its config.json: the weights alone are recognised and explained.
  fs::copy(dir_, root_ + "/noconfig", fs::copy_options::recursive);
  fs::remove(root_ + "/noconfig/config.json");
  auto noconfig = LoadAnyModel(root_ + "/noconfig");
  ASSERT_FALSE(noconfig.ok());
  EXPECT_NE(noconfig.status().message().find("attnlab checkpoint, which needs its config.json"),
            std::string::npos)
      << noconfig.status().ToString();
  ASSERT_TRUE(WriteFileAtomically(root_ + "/noconfig/config.json", "{broken").ok());
  auto broken = LoadAnyModel(root_ + "/noconfig");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("config.json: not valid JSON"), std::string::npos)
      << broken.status().ToString();

  auto missing = LoadAnyModel(root_ + "/nothing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  fs::create_directories(root_ + "/empty");
  auto empty = LoadAnyModel(root_ + "/empty");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("not a model: expected"), std::string::npos)
      << empty.status().ToString();

  ASSERT_TRUE(WriteFileAtomically(root_ + "/text.txt", "hello, world: not a model").ok());
  auto text = LoadAnyModel(root_ + "/text.txt");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("not a model: expected"), std::string::npos);
  ASSERT_TRUE(WriteFileAtomically(root_ + "/tiny", "ab").ok());
  EXPECT_FALSE(LoadAnyModel(root_ + "/tiny").ok());
  ASSERT_TRUE(WriteFileAtomically(root_ + "/empty.bin", "").ok());
  EXPECT_FALSE(LoadAnyModel(root_ + "/empty.bin").ok());
  ASSERT_TRUE(WriteFileAtomically(root_ + "/model.pt", std::string("PK\x03\x04rest", 8)).ok());
  auto zip = LoadAnyModel(root_ + "/model.pt");
  ASSERT_FALSE(zip.ok());
  EXPECT_NE(zip.status().message().find("safetensors"), std::string::npos);
  fs::create_directories(root_ + "/torch");
  ASSERT_TRUE(WriteFileAtomically(root_ + "/torch/pytorch_model.bin", "PK").ok());
  auto torch = LoadAnyModel(root_ + "/torch");
  ASSERT_FALSE(torch.ok());
  EXPECT_NE(torch.status().message().find("pytorch_model.bin"), std::string::npos);
}

TEST(CheckFinite, NamesKindAndIndex) {
  const float x[] = {0.0f, 1.0f, NAN};
  EXPECT_TRUE(CheckFinite(x, 2, "f", "t").ok());
  const Status st = CheckFinite(x, 3, "file.safetensors", "wte");
  EXPECT_EQ(st.message(), "file.safetensors: tensor 'wte' has NaN at index 2 (of 3 values)");
}

}  // namespace
}  // namespace attnlab
