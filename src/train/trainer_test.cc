// The trainer: it learns, it resumes exactly, it refuses NaN, and its batches are reproducible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "core/atomic_file.h"
#include "formats/checkpoint.h"
#include "formats/loaded_model.h"
#include "formats/safetensors.h"
#include "model/test_models.h"
#include "train/token_data.h"
#include "train/trainer.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

// The trainer's model: wider than the fixture's default, with GPT-2's MLP width (4 C) and
// init std (0.02), so that 60 steps of AdamW visibly learn the corpus.
ModelConfig TinyConfig() {
  return test_models::TinyConfig({.vocab_size = 24, .context = 16, .d_model = 32,
                                  .mlp_hidden = 0, .init_std = ModelConfig{}.init_std});
}

// A corpus with structure: repeated "words" over a small alphabet.
std::vector<int32_t> Corpus(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> words = {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}, {10, 2, 11}};
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < n) {
    const auto& w = words[rng() % words.size()];
    out.insert(out.end(), w.begin(), w.end());
    out.push_back(0);
  }
  out.resize(n);
  return out;
}

TrainOptions Options() {
  TrainOptions o;
  o.batch = 4;
  o.steps = 10;
  o.opt.lr = 3e-3f;
  o.opt.warmup_steps = 2;
  o.eval_every = 5;
  o.eval_batches = 2;
  o.quiet = true;
  return o;
}

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("attnlab_trainer_" + name + "_" +
                                                  std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

TEST(Trainer, LossFallsOnStructuredData) {
  ModelConfig c = TinyConfig();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 1);
  ASSERT_NE(g, nullptr);
  TrainOptions o = Options();
  o.steps = 60;
  o.eval_every = 0;
  Trainer t(g.get(), o, Corpus(4000, 1), Corpus(1000, 2));
  ASSERT_TRUE(t.Run().ok());
  const auto& h = t.history();
  ASSERT_EQ(h.size(), 60u);
  EXPECT_LT(h.back().loss, 0.6 * h.front().loss) << h.front().loss << " -> " << h.back().loss;
  EXPECT_GT(h.back().val_loss, 0);
}

TEST(Trainer, ResumedRunFollowsTheUninterruptedLossCurveExactly) {
  const ModelConfig c = TinyConfig();
  const auto train = Corpus(4000, 3), val = Corpus(1000, 4);
  // A: ten steps straight.
  std::unique_ptr<Gpt> a = test_models::TinyModel(c, 7);
  ASSERT_NE(a, nullptr);
  Trainer ta(a.get(), Options(), train, val);
  ASSERT_TRUE(ta.Run().ok());
  // B: the same run stopped after five steps, checkpointed.
  const std::string dir = TempDir("resume") + "/ckpt";
  std::unique_ptr<Gpt> b = test_models::TinyModel(c, 7);
  ASSERT_NE(b, nullptr);
  TrainOptions ob = Options();
  ob.out_dir = dir;
  Trainer tb(b.get(), ob, train, val);
  ASSERT_TRUE(tb.Run(5).ok());
  // C: a fresh process' view: load the checkpoint and finish.
  auto loaded = LoadCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE(loaded.value().has_optimizer);
  auto cgpt = Gpt::Create(loaded.value().config);
  ASSERT_TRUE(cgpt.ok());
  ASSERT_TRUE(CopyParameters(loaded.value().params, &cgpt.value()->params()).ok());
  Trainer tc(cgpt.value().get(), Options(), train, val);
  ASSERT_TRUE(tc.RestoreOptimizer(loaded.value().m, loaded.value().v,
                                  loaded.value().optimizer_step).ok());
  ASSERT_EQ(tc.step(), 5);
  ASSERT_TRUE(tc.Run().ok());
  ASSERT_EQ(tc.history().size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(tc.history()[i].loss, ta.history()[5 + i].loss) << "step " << 6 + i;  // bitwise
    EXPECT_EQ(tc.history()[i].grad_norm, ta.history()[5 + i].grad_norm);
  }
  EXPECT_EQ(tc.history().back().val_loss, ta.history().back().val_loss);
}

TEST(Trainer, NaNGradientsSkipTheUpdateAndRepeatedNaNStopsTraining) {
  ModelConfig c = TinyConfig();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 1);
  ASSERT_NE(g, nullptr);
  TrainOptions o = Options();
  o.max_bad_steps = 3;
  o.auxiliary = [](Gpt& m, double*) {
    m.grads().data()[0] = NAN;  // poison every step's gradient
    return Status::Ok();
  };
  std::vector<float> before(g->params().data(),
                            g->params().data() + g->params().size());
  Trainer t(g.get(), o, Corpus(4000, 1), Corpus(1000, 2));
  const Status st = t.Run();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("NaN"), std::string::npos) << st.ToString();
  // Parameters never moved.
  EXPECT_EQ(0, std::memcmp(before.data(), g->params().data(), before.size() * 4));
}

TEST(Trainer, NaNLossSkipsStepsAndRepeatedNaNStopsWithoutACheckpoint) {
  // NaN weights make every loss NaN (a NaN that got in some other way than a loaded file, which
  // LoadCheckpoint refuses): each step is skipped, and after max_bad_steps the run stops with a
  // message; nothing is saved, so the previous checkpoint (none here) stays the last good one.
  ModelConfig c = TinyConfig();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 1);
  ASSERT_NE(g, nullptr);
  const ParamInfo& wte = *g->params().Find("wte");
  g->params().Slice(wte)[5] = NAN;
  TrainOptions o = Options();
  o.max_bad_steps = 4;
  o.out_dir = TempDir("nanloss") + "/ckpt";
  Trainer t(g.get(), o, Corpus(4000, 1), Corpus(1000, 2));
  const Status st = t.Run();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("4 consecutive steps with NaN/Inf loss"), std::string::npos)
      << st.ToString();
  ASSERT_EQ(t.history().size(), 3u);  // the fourth bad step stops before it is recorded
  for (const TrainRecord& r : t.history()) {
    EXPECT_TRUE(r.skipped);
    EXPECT_TRUE(std::isnan(r.loss));
  }
  EXPECT_FALSE(fs::exists(o.out_dir));
}

TEST(Trainer, AnInfGradientSkipsOneStepAndTrainingGoesOn) {
  // One step's gradient is +Inf: that update is skipped (parameters and moments untouched, the
  // step still advances so later batches stay those of the uninterrupted schedule), the run
  // finishes, and what it saves is finite and loads.
  const ModelConfig c = TinyConfig();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 3);
  ASSERT_NE(g, nullptr);
  TrainOptions o = Options();
  o.steps = 6;
  o.out_dir = TempDir("infgrad") + "/ckpt";
  int calls = 0;
  std::vector<float> before_bad, after_bad;
  o.auxiliary = [&](Gpt& m, double*) {
    ++calls;
    if (calls == 3) {
      before_bad.assign(m.params().data(), m.params().data() + m.params().size());
      m.grads().data()[7] = INFINITY;
    }
    if (calls == 4) after_bad.assign(m.params().data(), m.params().data() + m.params().size());
    return Status::Ok();
  };
  Trainer t(g.get(), o, Corpus(4000, 5), Corpus(1000, 6));
  ASSERT_TRUE(t.Run().ok());
  ASSERT_EQ(t.history().size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(t.history()[i].skipped, i == 2) << "step " << i + 1;
    EXPECT_EQ(t.history()[i].step, static_cast<int64_t>(i + 1));
  }
  EXPECT_TRUE(std::isinf(t.history()[2].grad_norm));
  EXPECT_EQ(before_bad, after_bad);  // the skipped step changed nothing
  EXPECT_EQ(t.step(), 6);
  auto loaded = LoadCheckpoint(o.out_dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded.value().optimizer_step, 6);
  // The log marks the skipped step.
  auto log = ReadFileToString(o.out_dir + ".log.jsonl", 1 << 20);
  ASSERT_TRUE(log.ok());
  EXPECT_NE(log.value().find("\"skipped\":true,\"step\":3"), std::string::npos) << log.value();
}

TEST(Trainer, ResumeRefusesNonFiniteOptimizerState) {
  // A checkpoint whose optimizer moments hold NaN (written by something other than attnlab,
  // which refuses to save them) is refused at load, naming the file and the tensor.
  const ModelConfig c = TinyConfig();
  ParameterStore p(c), m(c), v(c);
  p.Initialize(c, 1);
  const std::string dir = TempDir("nanopt") + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(dir, c, p, &m, &v, {{"step", 2}}).ok());
  v.data()[v.Find("h.1.mlp.fc.weight")->offset + 3] = NAN;
  std::vector<NamedTensor> t;
  for (const ParamInfo& i : m.infos()) t.push_back(NamedTensor::F32("m." + i.name, i.shape, m.Slice(i)));
  for (const ParamInfo& i : v.infos()) t.push_back(NamedTensor::F32("v." + i.name, i.shape, v.Slice(i)));
  ASSERT_TRUE(WriteSafetensors(dir + "/optimizer.safetensors", t, {{"step", "2"}}).ok());
  auto r = LoadCheckpoint(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor 'v.h.1.mlp.fc.weight' has NaN at index 3"),
            std::string::npos)
      << r.status().ToString();
}

TEST(TokenData, FileRoundTripAndCorruptFiles) {
  const std::string dir = TempDir("tokfile");
  const std::vector<int32_t> toks = {0, 5, 70000, 3};
  ASSERT_TRUE(WriteTokenFile(dir + "/a.tok", toks, 70001).ok());
  auto r = ReadTokenFile(dir + "/a.tok");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().tokens, toks);
  EXPECT_FALSE(WriteTokenFile(dir + "/b.tok", {1, 9}, 5).ok());  // token outside the vocab
  EXPECT_FALSE(ReadTokenFile(dir + "/missing.tok").ok());
  // Truncate: the header's count no longer matches.
  fs::resize_file(dir + "/a.tok", fs::file_size(dir + "/a.tok") - 2);
  EXPECT_FALSE(ReadTokenFile(dir + "/a.tok").ok());
}

TEST(TokenData, BatchesArePureFunctionsOfSeedAndStep) {
  const auto toks = Corpus(500, 9);
  std::vector<int32_t> x1(4 * 8), y1(4 * 8), x2(4 * 8), y2(4 * 8);
  SampleBatch(toks, 42, 17, 4, 8, -1, x1.data(), y1.data());
  SampleBatch(toks, 42, 17, 4, 8, -1, x2.data(), y2.data());
  EXPECT_EQ(x1, x2);
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t + 1 < 8; ++t) EXPECT_EQ(x1[r * 8 + t + 1], y1[r * 8 + t]);
  }
  SampleBatch(toks, 42, 17, 4, 8, 23, x1.data(), y1.data());  // BOS first
  for (int r = 0; r < 4; ++r) EXPECT_EQ(x1[r * 8], 23);
}

}  // namespace
}  // namespace attnlab
