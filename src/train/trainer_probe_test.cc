// The trainer's probe hook (TrainOptions::probe): called on schedule with the same validation
// batch, its records land in the history, its errors stop the run, and a schedule without a
// probe is refused. The trainer itself measures nothing (diagnostics pass the first-token probe).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "model/test_models.h"
#include "train/trainer.h"

namespace attnlab {
namespace {

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

TrainOptions Options(int64_t steps, int64_t probe_every) {
  TrainOptions o;
  o.batch = 2;
  o.steps = steps;
  o.eval_every = 0;
  o.eval_batches = 1;
  o.quiet = true;
  o.probe_every = probe_every;
  return o;
}

TEST(TrainerProbe, RunsOnScheduleOnTheSameBatchAndIsRecorded) {
  const ModelConfig c = test_models::TinyConfig();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 3);
  ASSERT_NE(g, nullptr);
  TrainOptions o = Options(/*steps=*/10, /*probe_every=*/3);
  struct Call {
    int64_t batch, len;
    std::vector<int32_t> tokens;
  };
  std::vector<Call> calls;
  o.probe.measure = [&](Gpt& model, const int32_t* tokens, int64_t batch,
                        int64_t len) -> Result<nlohmann::json> {
    EXPECT_EQ(&model, g.get());
    calls.push_back({batch, len, std::vector<int32_t>(tokens, tokens + batch * len)});
    return nlohmann::json{{"call", static_cast<int64_t>(calls.size())}};
  };
  Trainer t(g.get(), o, RandomTokens(2000, c.vocab_size, 1), RandomTokens(500, c.vocab_size, 2));
  ASSERT_TRUE(t.Run().ok());
  // Steps 3, 6, 9 (every 3) and 10 (the last).
  ASSERT_EQ(calls.size(), 4u);
  for (const Call& call : calls) {
    EXPECT_EQ(call.batch, o.batch);
    EXPECT_GT(call.len, 1);
    EXPECT_LE(call.len, c.context);
    EXPECT_EQ(call.tokens, calls[0].tokens) << "the probe must see the same batch every time";
  }
  std::vector<int64_t> probed_steps;
  for (const TrainRecord& r : t.history()) {
    if (!r.probe.is_null()) {
      probed_steps.push_back(r.step);
      EXPECT_EQ(r.probe["call"].get<int64_t>(), static_cast<int64_t>(probed_steps.size()));
    }
  }
  EXPECT_EQ(probed_steps, (std::vector<int64_t>{3, 6, 9, 10}));
  // Trainer::Probe runs it once more, on the same batch.
  auto direct = t.Probe();
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  EXPECT_EQ((*direct)["call"].get<int64_t>(), 5);
  EXPECT_EQ(calls.back().tokens, calls[0].tokens);
}

TEST(TrainerProbe, AScheduleWithoutAProbeIsRefused) {
  const ModelConfig c = test_models::TinyConfig();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 3);
  ASSERT_NE(g, nullptr);
  Trainer t(g.get(), Options(4, 2), RandomTokens(2000, c.vocab_size, 1),
            RandomTokens(500, c.vocab_size, 2));
  const Status st = t.Run();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("probe"), std::string::npos) << st.ToString();
  EXPECT_TRUE(t.history().empty()) << "refused before the first step";
  EXPECT_FALSE(t.Probe().ok());
}

TEST(TrainerProbe, AProbeErrorStopsTheRun) {
  const ModelConfig c = test_models::TinyConfig();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 3);
  ASSERT_NE(g, nullptr);
  TrainOptions o = Options(6, 2);
  o.probe.measure = [](Gpt&, const int32_t*, int64_t, int64_t) -> Result<nlohmann::json> {
    return Status::Internal("probe broke");
  };
  Trainer t(g.get(), o, RandomTokens(2000, c.vocab_size, 1), RandomTokens(500, c.vocab_size, 2));
  const Status st = t.Run();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("probe broke"), std::string::npos) << st.ToString();
  EXPECT_EQ(t.step(), 2) << "stopped at the first probe";
}

}  // namespace
}  // namespace attnlab
