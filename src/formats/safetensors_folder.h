// A Hugging Face model folder's weights as one TensorSource (tensor_source.h): either one
// `model.safetensors` or the shards that `model.safetensors.index.json` names.
//
// The index (transformers' save_pretrained with max_shard_size):
//   { "metadata": {"total_size": 988097536},            (optional, ignored)
//     "weight_map": { "model.embed_tokens.weight": "model-00001-of-00002.safetensors", ... } }
// Checks (nothing in the file is trusted): valid JSON object with a "weight_map" object of
// string -> string; every shard name a plain file name (no '/', no "..", ends with .safetensors);
// at most kMaxShards distinct shards; every shard exists and parses (safetensors.h's checks);
// every tensor the index names is in its shard. Tensors of a shard that the index does not name
// are not exposed (transformers ignores them too). Each error names the index or shard file and
// the tensor. Shards are memory-mapped; nothing is copied until ReadFloat.
#ifndef ATTNLAB_FORMATS_SAFETENSORS_FOLDER_H_
#define ATTNLAB_FORMATS_SAFETENSORS_FOLDER_H_

#include <map>
#include <memory>
#include <string>

#include "attnlab/status.h"
#include "formats/tensor_source.h"

namespace attnlab {

inline constexpr int kMaxShards = 4096;
inline constexpr char kSafetensorsIndexFile[] = "model.safetensors.index.json";

// Parses an index's text: tensor name -> shard file name. `name` prefixes errors.
Result<std::map<std::string, std::string>> ParseSafetensorsIndex(const std::string& text,
                                                                 const std::string& name);

// `dir` holding model.safetensors.index.json (preferred) or model.safetensors; or a
// .safetensors file. NotFound when neither is there.
Result<std::unique_ptr<TensorSource>> OpenSafetensorsSource(const std::string& path);

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_SAFETENSORS_FOLDER_H_
