// HfDecoderConfig (formats/hf_decoder.h): a Hugging Face config.json of any family becomes a
// valid ModelConfig or an error with a message; a small one builds a model that runs a forward.
#include <nlohmann/json.hpp>

#include "formats/hf_decoder.h"
#include "fuzz_target.h"
#include "model/gpt.h"
#include "model/parameters.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(hf_config) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  std::vector<std::string> notes;
  Result<ModelConfig> c = HfDecoderConfig(j, "config.json", &notes);
  if (!c.ok()) {
    ATTNLAB_FUZZ_EXPECT(!c.status().message().empty(), "an error without a message");
    return 0;
  }
  ATTNLAB_FUZZ_EXPECT(ValidateModelConfig(*c).ok(), "a converted config is invalid");
  if (ModelParameterCount(*c) > (int64_t{1} << 16) || c->context > 4096) return 0;
  Result<std::unique_ptr<Gpt>> g = Gpt::Create(*c);
  ATTNLAB_FUZZ_EXPECT(g.ok(), "a valid config does not build: " + g.status().ToString());
  (*g)->params().Initialize(*c, 1);
  const int32_t tokens[2] = {1, 0};
  double loss = 0;
  const Status st = (*g)->Forward(tokens, nullptr, 1, std::min<int64_t>(2, c->context), &loss);
  ATTNLAB_FUZZ_EXPECT(st.ok(), "forward failed: " + st.ToString());
  return 0;
}
