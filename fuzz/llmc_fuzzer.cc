// llm.c .bin checkpoints (formats/llmc.h): the header checks, the size check before any
// allocation, the tensor walk. What loads has finite values, and loads back bit for bit
// after a WriteLlmc round trip (as fp32).
#include <cmath>
#include <cstring>

#include "formats/load_model.h"
#include "fuzz_target.h"
#include "param_compare.h"
#include "formats/checkpoint.h"
#include "formats/llmc.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(llmc) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string path = fuzz::WriteScratchFile("model.bin", bytes);
  if (size >= 1024) {
    int32_t header[256];
    std::memcpy(header, data, sizeof(header));
    (void)ParseLlmcHeader(header, "fuzz");
  }
  Result<LoadedModel> m = LoadLlmc(path);
  Result<LoadedModel> any = LoadAnyModel(path);
  if (!m.ok()) {
    ATTNLAB_FUZZ_EXPECT(!m.status().message().empty(), "an error without a message");
    return 0;
  }
  ATTNLAB_FUZZ_EXPECT(any.ok() && any->format == "llm.c", "LoadAnyModel disagrees with LoadLlmc");
  for (const ParamInfo& p : m->params.infos()) {
    const float* x = m->params.Slice(p);
    for (int64_t i = 0; i < p.size; ++i) {
      ATTNLAB_FUZZ_EXPECT(std::isfinite(x[i]), "a loaded parameter is not finite");
    }
  }
  // Write it back (fp32, the same padded vocabulary) and load again (one input in 8: the
  // write fsyncs).
  if (!fuzz::Sometimes(data, size, 8)) return 0;
  const int64_t padded = m->meta["padded_vocab_size"].get<int64_t>();
  const std::string out = fuzz::ScratchDir() + "/again.bin";
  const Status w = WriteLlmc(out, m->config, m->params, padded);
  ATTNLAB_FUZZ_EXPECT(w.ok(), "a loaded llm.c model does not write: " + w.ToString());
  Result<LoadedModel> back = LoadLlmc(out);
  ATTNLAB_FUZZ_EXPECT(back.ok() && fuzz::SameParameters(back->params, m->params),
                      "parameters changed in a write/load round trip");
  return 0;
}
