// The attnlab checkpoint loader (formats/checkpoint.h) on a directory built from the input:
//   config.json  kSplit  model.safetensors  [kSplit  optimizer.safetensors]
// LoadCheckpoint and LoadAnyModel must agree; what loads has finite values laid out for its
// config, runs a forward when small, and survives a save/load round trip bit for bit.
#include <cmath>
#include <cstring>

#include "formats/load_model.h"
#include "fuzz_target.h"
#include "param_compare.h"
#include "formats/checkpoint.h"
#include "model/gpt.h"

using namespace attnlab;

namespace {

bool Small(const ModelConfig& c) {
  return ModelParameterCount(c) <= (int64_t{1} << 16) && c.max_positions() * c.rope_factor <= 4096;
}

}  // namespace

ATTNLAB_FUZZ_TARGET(checkpoint) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> parts = fuzz::SplitInput(input, 3);
  fuzz::RemoveScratch("ckpt");
  fuzz::RemoveScratch("ckpt2");
  const std::string dir = fuzz::ScratchDir() + "/ckpt";
  fuzz::WriteScratchFile("ckpt/config.json", parts[0]);
  if (parts.size() > 1) fuzz::WriteScratchFile("ckpt/model.safetensors", parts[1]);
  if (parts.size() > 2) fuzz::WriteScratchFile("ckpt/optimizer.safetensors", parts[2]);

  Result<LoadedCheckpoint> ck = LoadCheckpoint(dir);
  Result<LoadedModel> any = LoadAnyModel(dir);
  if (!ck.ok()) {
    ATTNLAB_FUZZ_EXPECT(!ck.status().message().empty(), "an error without a message");
    return 0;
  }
  ATTNLAB_FUZZ_EXPECT(any.ok(), "LoadCheckpoint succeeds but LoadAnyModel fails: " +
                                    any.status().ToString());
  const LoadedCheckpoint& c = *ck;
  ATTNLAB_FUZZ_EXPECT(ValidateModelConfig(c.config).ok(), "a loaded config is invalid");
  int64_t count = 0;
  for (const ParamInfo& p : c.params.infos()) {
    count += p.size;
    const float* x = c.params.Slice(p);
    for (int64_t i = 0; i < p.size; ++i) {
      ATTNLAB_FUZZ_EXPECT(std::isfinite(x[i]), "a loaded parameter is not finite");
    }
  }
  ATTNLAB_FUZZ_EXPECT(count == ModelParameterCount(c.config), "wrong parameter count");
  if (!Small(c.config)) return 0;
  // A forward pass on the loaded weights.
  Result<std::unique_ptr<Gpt>> gpt = MakeGpt(*any);
  ATTNLAB_FUZZ_EXPECT(gpt.ok(), "a loaded model does not build: " + gpt.status().ToString());
  const int32_t tokens[2] = {0, static_cast<int32_t>(c.config.vocab_size - 1)};
  const int64_t T = std::min<int64_t>(2, c.config.context);
  const Status fwd = (*gpt)->Forward(tokens, nullptr, 1, T, nullptr);
  ATTNLAB_FUZZ_EXPECT(fwd.ok(), "forward failed: " + fwd.ToString());
  // Save and load again: the same parameters, bit for bit (one input in 8: saves fsync).
  if (!fuzz::Sometimes(data, size, 8)) return 0;
  const std::string dir2 = fuzz::ScratchDir() + "/ckpt2";
  const Status saved = SaveCheckpoint(dir2, c.config, c.params, c.has_optimizer ? &c.m : nullptr,
                                      c.has_optimizer ? &c.v : nullptr, c.meta);
  ATTNLAB_FUZZ_EXPECT(saved.ok(), "a loaded checkpoint does not save: " + saved.ToString());
  Result<LoadedCheckpoint> back = LoadCheckpoint(dir2);
  ATTNLAB_FUZZ_EXPECT(back.ok(), "a saved checkpoint does not load: " + back.status().ToString());
  ATTNLAB_FUZZ_EXPECT(fuzz::SameParameters(back->params, c.params),
                      "parameters changed in a save/load round trip");
  ATTNLAB_FUZZ_EXPECT(back->has_optimizer == c.has_optimizer, "optimizer state lost");
  return 0;
}
