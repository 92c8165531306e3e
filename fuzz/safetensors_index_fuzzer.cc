// ParseSafetensorsIndex (formats/safetensors_folder.h): any bytes give a map of tensor -> plain
// shard file name, or an error with a message.
#include "formats/safetensors_folder.h"
#include "fuzz_target.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(safetensors_index) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = ParseSafetensorsIndex(text, "model.safetensors.index.json");
  if (!r.ok()) {
    ATTNLAB_FUZZ_EXPECT(!r.status().message().empty(), "an error without a message");
    return 0;
  }
  ATTNLAB_FUZZ_EXPECT(!r->empty(), "an empty weight map was accepted");
  for (const auto& [tensor, file] : *r) {
    ATTNLAB_FUZZ_EXPECT(!tensor.empty(), "an empty tensor name was accepted");
    ATTNLAB_FUZZ_EXPECT(file.find('/') == std::string::npos && file != "..",
                        "a shard outside the folder was accepted: " + file);
  }
  return 0;
}
