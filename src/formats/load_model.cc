#include "formats/load_model.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/atomic_file.h"
#include "core/files.h"
#include "formats/checkpoint.h"
#include "formats/gguf_model.h"
#include "formats/hf_decoder.h"
#include "formats/hf_gpt2.h"
#include "formats/llmc.h"

namespace attnlab {

namespace {
constexpr char kConfigFile[] = "config.json";
constexpr char kModelFile[] = "model.safetensors";

// A GGUF file: its metadata as the Hugging Face config.json it stands for, its tensors under HF
// names (gguf_model.h), through the one decoder loader; the embedded vocabulary travels as a
// tokenizer spec (tokenizer_spec.h's {"type": "embedded"}).
Result<LoadedModel> LoadGgufModel(const std::string& path, const LoadOptions& options) {
  ATTNLAB_ASSIGN_OR_RETURN(GgufAsHf g, OpenGgufAsHf(path));
  ATTNLAB_ASSIGN_OR_RETURN(LoadedModel m, LoadHfDecoder(g.hf_config, path + " (GGUF metadata)",
                                                        *g.tensors, path, options));
  m.format = "gguf";
  m.meta["gguf_architecture"] = g.architecture;
  m.meta["hf_config"] = g.hf_config;
  const GgufVocabulary& v = g.vocabulary;
  if (!v.tokens.empty()) {
    nlohmann::json t = {{"type", "embedded"}, {"model", v.model},   {"pre", v.pre},
                        {"tokens", v.tokens}, {"scores", v.scores}, {"token_types", v.token_type},
                        {"merges", v.merges}, {"add_bos", v.add_bos_token.value_or(false)}};
    t["bos"] = v.bos_token_id ? nlohmann::json(*v.bos_token_id) : nlohmann::json(nullptr);
    t["eos"] = v.eos_token_id ? nlohmann::json(*v.eos_token_id) : nlohmann::json(nullptr);
    m.meta["tokenizer"] = std::move(t);
  } else {
    m.notes.push_back(path + " has no embedded vocabulary: pass --tokenizer for commands that "
                      "read text");
  }
  return m;
}

// config.json's "model_type" ("" when absent or when the file is not a JSON object: other
// loaders then report what is wrong with it).
Result<std::string> HfModelType(const std::string& cfg_path) {
  ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(cfg_path, int64_t{16} << 20));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::string();
  auto it = j.find("model_type");
  if (it == j.end() || !it->is_string()) return std::string();
  return it->get<std::string>();
}
}  // namespace

Result<LoadedModel> LoadAnyModel(const std::string& path, const LoadOptions& options) {
  const std::string expected =
      "expected an attnlab checkpoint directory (config.json with \"format\": "
      "\"attnlab-checkpoint\"), a Hugging Face GPT-2 directory (model.safetensors [+ "
      "config.json]), a Hugging Face llama/mistral/qwen2/qwen3/gpt_neox directory (config.json "
      "+ safetensors, sharded or not), a llama.cpp .gguf file, a .safetensors file, or an llm.c "
      ".bin file (magic 20240326)";
  auto from_checkpoint = [&](const std::string& dir) -> Result<LoadedModel> {
    ATTNLAB_ASSIGN_OR_RETURN(LoadedCheckpoint ck, LoadCheckpoint(dir));
    LoadedModel m;
    m.config = ck.config;
    m.params = std::move(ck.params);
    m.format = kCheckpointFormat;
    m.path = ck.loaded_from;
    m.meta = std::move(ck.meta);
    if (ck.loaded_from != dir && ck.loaded_from == dir + ".old") {
      m.notes.push_back(dir + " is missing; loaded " + ck.loaded_from +
                        ", the previous checkpoint kept by an interrupted save");
    }
    return m;
  };
  switch (KindOf(path)) {
    case PathKind::kMissing: {
      auto d = NormalizeCheckpointDir(path);
      if (d.ok() && KindOf(*d + ".old") == PathKind::kDirectory && IsCheckpointDir(*d)) {
        return from_checkpoint(*d);
      }
      return Status::NotFound(path + ": no such file or directory");
    }
    case PathKind::kOther:
      return Status::InvalidArgument(path + ": not a model: not a regular file or directory; " +
                                     expected);
    case PathKind::kDirectory: {
      const Result<std::string> normalized = NormalizeCheckpointDir(path);
      const std::string dir = normalized.ok() ? normalized.value() : path;
      const std::string cfg = dir + "/" + kConfigFile;
      if (KindOf(cfg) == PathKind::kFile) {
        ATTNLAB_ASSIGN_OR_RETURN(const bool is_checkpoint, IsCheckpointConfigFile(cfg));
        if (is_checkpoint) return from_checkpoint(dir);
        ATTNLAB_ASSIGN_OR_RETURN(const std::string model_type, HfModelType(cfg));
        if (model_type != "" && model_type != "gpt2") return LoadHfDecoderFolder(dir, options);
      }
      if (KindOf(dir + "/" + kModelFile) == PathKind::kFile) return LoadHfGpt2(dir);
      if (KindOf(dir + "/pytorch_model.bin") == PathKind::kFile) {
        return Status::InvalidArgument(
            path +
            ": not a model attnlab reads: only pytorch_model.bin (a pickle) is there. Hint: "
            "save it as safetensors (model.save_pretrained(dir, safe_serialization=True))");
      }
      return Status::InvalidArgument(path + ": not a model: " + expected);
    }
    case PathKind::kFile:
      break;
  }
  // Detect by the first bytes.
  std::string first;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return Status::IoError(path + ": cannot open: " + ErrnoMessage(errno));
    char buf[16];
    const size_t r = std::fread(buf, 1, sizeof(buf), f);
    std::fclose(f);
    first.assign(buf, r);
  }
  if (first.size() >= 4) {
    int32_t magic;
    std::memcpy(&magic, first.data(), 4);
    if (magic == kLlmcMagic) return LoadLlmc(path);
  }
  if (first.rfind("GGUF", 0) == 0) return LoadGgufModel(path, options);
  if (first.size() >= 9 && first[8] == '{') return LoadHfGpt2(path);
  if (BaseName(path) == kConfigFile) {
    auto is_checkpoint = IsCheckpointConfigFile(path);
    if (is_checkpoint.ok() && *is_checkpoint) return from_checkpoint(ParentDirectory(path));
  }
  if (first.rfind("PK\x03\x04", 0) == 0) {
    return Status::InvalidArgument(path +
                                   ": not a model attnlab reads: a zip file (PyTorch's "
                                   "torch.save format?). Hint: save the state dict as safetensors");
  }
  return Status::InvalidArgument(path + ": not a model: " + expected);
}

}  // namespace attnlab
