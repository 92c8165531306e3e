// One entry point that loads any model file attnlab reads: attnlab checkpoints
// (formats/checkpoint.h), Hugging Face GPT-2 safetensors (formats/hf_gpt2.h) and llm.c .bin
// files (formats/llmc.h). The only file that knows every format; no format includes it.
#ifndef ATTNLAB_FORMATS_LOAD_MODEL_H_
#define ATTNLAB_FORMATS_LOAD_MODEL_H_

#include <string>

#include "attnlab/status.h"
#include "formats/loaded_model.h"

namespace attnlab {

// Detects the format of `path` by content:
//   a directory with config.json saying "format": "attnlab-checkpoint" (or only DIR.old)
//     -> LoadCheckpoint
//   a directory with model.safetensors, or a safetensors file -> LoadHfGpt2 (hf_gpt2.h)
//   a file starting with llm.c's magic 20240326 -> LoadLlmc (llmc.h)
// Anything else: InvalidArgument "not a model: expected ..." (NotFound when nothing is there).
// options.keep_stored (inference): HF decoder folders and GGUF files stored in BF16/F16 keep
// their linear layers 16-bit (LoadedModel::matrices); other formats ignore it.
Result<LoadedModel> LoadAnyModel(const std::string& path, const LoadOptions& options = {});

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_LOAD_MODEL_H_
