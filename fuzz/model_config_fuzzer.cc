// ModelConfigFromJson (attnlab/model_config.h): what parses is valid, round-trips through
// ModelConfigToJson unchanged, has a parameter layout matching ModelParameterCount, and (when
// small) builds a model that runs a forward pass.
#include "attnlab/model_config.h"
#include "fuzz_target.h"
#include "model/gpt.h"
#include "model/parameters.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(model_config) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<ModelConfig> c = ModelConfigFromJson(text);
  if (!c.ok()) {
    ATTNLAB_FUZZ_EXPECT(!c.status().message().empty(), "an error without a message");
    return 0;
  }
  ATTNLAB_FUZZ_EXPECT(ValidateModelConfig(*c).ok(), "a parsed config is invalid");
  const std::string json = ModelConfigToJson(*c);
  Result<ModelConfig> again = ModelConfigFromJson(json);
  ATTNLAB_FUZZ_EXPECT(again.ok(), "ModelConfigToJson output does not parse: " +
                                      again.status().ToString());
  ATTNLAB_FUZZ_EXPECT(ModelConfigToJson(*again) == json, "the config changed in a round trip");
  const int64_t n = ModelParameterCount(*c);
  int64_t sum = 0;
  for (const ParamInfo& p : ParameterLayout(*c)) sum += p.size;
  ATTNLAB_FUZZ_EXPECT(sum == n, "ParameterLayout disagrees with ModelParameterCount");
  if (n > (int64_t{1} << 16) || c->max_positions() * c->rope_factor > 4096) return 0;
  Result<std::unique_ptr<Gpt>> g = Gpt::Create(*c);
  ATTNLAB_FUZZ_EXPECT(g.ok(), "a valid config does not build: " + g.status().ToString());
  (*g)->params().Initialize(*c, 1);
  const int32_t tokens[2] = {1, 0};
  const int32_t targets[2] = {0, 1};
  double loss = 0;
  const Status st = (*g)->Forward(tokens, targets, 1, std::min<int64_t>(2, c->context), &loss);
  ATTNLAB_FUZZ_EXPECT(st.ok(), "forward failed: " + st.ToString());
  return 0;
}
