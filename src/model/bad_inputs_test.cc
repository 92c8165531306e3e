// The bad-input catalogue (docs/BAD_INPUTS.md), file formats: every broken seed of the fuzz
// corpora (fuzz/corpus/<target>/, written by fuzz/make_corpus.py) goes through the loader a user
// reaches, which must refuse it with a message that names the problem; every valid seed loads.
// The CLI rows of the catalogue are tests/bad_inputs_cli_test.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "attnlab/tokenizer.h"
#include "core/npy.h"
#include "model/checkpoint.h"
#include "model/gpt.h"
#include "model/llmc.h"
#include "model/safetensors.h"
#include "train/token_data.h"
#include "train/train_config.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(ATTNLAB_SOURCE_DIR) / "fuzz" / "corpus";
constexpr std::string_view kSplit = "\n@@attnlab-fuzz-split@@\n";

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << "missing corpus file " << p;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> Split(const std::string& s, size_t max_parts) {
  std::vector<std::string> parts;
  std::string rest = s;
  while (parts.size() + 1 < max_parts) {
    const size_t at = rest.find(kSplit);
    if (at == std::string::npos) break;
    parts.push_back(rest.substr(0, at));
    rest = rest.substr(at + kSplit.size());
  }
  parts.push_back(rest);
  return parts;
}

class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "attnlab_bad_XXXXXX").string();
    ATTNLAB_CHECK(::mkdtemp(templ.data()) != nullptr);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One catalogue row: a corpus file and a phrase its error message must contain.
struct Row {
  const char* file;
  const char* needle;
};

void ExpectRefused(const std::string& what, const Status& st, const char* needle) {
  EXPECT_FALSE(st.ok()) << what << " was accepted";
  if (st.ok()) return;
  EXPECT_NE(st.message().find(needle), std::string::npos)
      << what << ": the message does not name the problem (expected \"" << needle
      << "\"): " << st.ToString();
}

void ExpectValidSeedsLoad(const std::string& target,
                          const std::function<Status(const fs::path&)>& load) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kCorpus / target)) {
    if (e.path().filename().string().rfind("valid", 0) != 0) continue;
    const Status st = load(e.path());
    EXPECT_TRUE(st.ok()) << e.path() << ": " << st.ToString();
    ++n;
  }
  EXPECT_GT(n, 0) << "no valid seeds for " << target;
}

// ---- safetensors ----------------------------------------------------------------------------

TEST(BadInputs, Safetensors) {
  const Row rows[] = {
      {"empty", "the file is 0 bytes"},
      {"truncated-length", "the file is 5 bytes"},
      {"truncated-header", "the header length field says 312 bytes but only 12 bytes follow"},
      {"truncated-data", "reach past the end of the"},
      {"huge-header-length", "the header length field says 4611686018427387904 bytes"},
      {"huge-shape", "has more elements than fit 63 bits"},
      {"header-not-object", "the header must be a JSON object"},
      {"wrong-dtype", "unknown dtype 'F33'"},
      {"shape-mismatch", "shape [3] of F32 needs 12 bytes, data_offsets [0, 8] hold 8"},
      {"overlap", "overlaps tensor 'a'"},
      {"duplicate-name", "names 'a' twice"},
  };
  for (const Row& r : rows) {
    const fs::path p = kCorpus / "safetensors" / r.file;
    ExpectRefused(p.string(), ParseSafetensors(Slurp(p), p.string()).status(), r.needle);
    ExpectRefused(p.string() + " (mmap)", ReadSafetensors(p.string()).status(), r.needle);
  }
  ExpectValidSeedsLoad("safetensors", [](const fs::path& p) { return ReadSafetensors(p).status(); });
  // NaN weights: the container holds any floats; the model loaders refuse them (HF GPT-2:
  // HfGpt2Test.InconsistentFilesAreClearErrors; attnlab: BadInputs.Checkpoint nan-weights).
  EXPECT_TRUE(ReadSafetensors((kCorpus / "safetensors" / "nan-weights").string()).ok());
}

// ---- attnlab checkpoints --------------------------------------------------------------------

// Writes config.json, model.safetensors and optimizer.safetensors from a corpus blob.
std::string MakeCheckpointDir(const TempDir& tmp, const fs::path& blob) {
  const std::string dir = tmp.path() + "/" + blob.filename().string();
  fs::create_directories(dir);
  const std::vector<std::string> parts = Split(Slurp(blob), 3);
  const char* names[] = {"config.json", "model.safetensors", "optimizer.safetensors"};
  for (size_t i = 0; i < parts.size(); ++i) {
    std::ofstream(dir + "/" + names[i], std::ios::binary) << parts[i];
  }
  return dir;
}

TEST(BadInputs, Checkpoint) {
  const Row rows[] = {
      {"empty", "config.json: not valid JSON"},
      {"config-only", "model.safetensors: no such file"},
      {"truncated-config", "config.json: not valid JSON"},
      {"truncated-model", "model.safetensors: the header length field says"},
      {"truncated-optimizer", "optimizer.safetensors: the header length field says"},
      {"wrong-format", "expected \"format\": \"attnlab-checkpoint\""},
      {"wrong-version", "checkpoint version 2, this attnlab reads version 1"},
      {"huge-config", "exceeds"},
      {"huge-rope-factor", "rope_factor must be in [1, 1024]"},
      {"wrong-dtype", "tensor 'wte' has dtype F16, expected F32"},
      {"shape-mismatch", "tensor 'wte' has shape [8], expected [4, 2]"},
      {"nan-weights", "tensor 'wte' has NaN at index 0"},
      {"missing-tensor", "missing tensor 'wte'"},
      {"optimizer-other-step", "optimizer state is from step 4 but config.json says step 3"},
  };
  TempDir tmp;
  for (const Row& r : rows) {
    const std::string dir = MakeCheckpointDir(tmp, kCorpus / "checkpoint" / r.file);
    ExpectRefused(dir, LoadCheckpoint(dir).status(), r.needle);
  }
  ExpectValidSeedsLoad("checkpoint", [&](const fs::path& p) -> Status {
    const std::string dir = MakeCheckpointDir(tmp, p);
    ATTNLAB_ASSIGN_OR_RETURN(LoadedModel m, LoadAnyModel(dir));
    ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g, MakeGpt(m));
    const int32_t tokens[2] = {0, 1};
    return g->Forward(tokens, nullptr, 1, 2, nullptr);
  });
}

// ---- llm.c ------------------------------------------------------------------------------------

TEST(BadInputs, Llmc) {
  const Row rows[] = {
      {"empty", "0 bytes, shorter than llm.c's 1024-byte header"},
      {"truncated-header", "100 bytes, shorter than llm.c's 1024-byte header"},
      {"truncated-params", "(truncated)"},
      {"extra-bytes", "(extra bytes at the end)"},
      {"wrong-magic", "bad magic number: expected 20240326, found 20240327"},
      {"wrong-version", "checkpoint version 4 is not supported"},
      {"huge-sizes", "(truncated)"},
      {"negative-sizes", "header field channels = -2 is outside"},
      {"padded-below-vocab", "header field padded_vocab_size = 3 is outside [4,"},
      {"heads-do-not-divide", "channels (4) is not a multiple of num_heads (3)"},
      {"nan-weights", "has NaN at index"},
  };
  for (const Row& r : rows) {
    const fs::path p = kCorpus / "llmc" / r.file;
    ExpectRefused(p.string(), LoadLlmc(p.string()).status(), r.needle);
    ExpectRefused(p.string() + " (LoadAnyModel)", LoadAnyModel(p.string()).status(),
                  p.filename() == "empty" || p.filename() == "wrong-magic"
                      ? "not a model"
                      : r.needle);
  }
  ExpectValidSeedsLoad("llmc", [](const fs::path& p) { return LoadLlmc(p).status(); });
}

// ---- tokenizer files --------------------------------------------------------------------------

TEST(BadInputs, Gpt2TokenizerFiles) {
  const Row rows[] = {
      {"empty", "encoder.json: malformed JSON near byte 1"},
      {"encoder-only", "vocab.bpe: empty file"},
      {"truncated-encoder", "encoder.json: malformed JSON near byte 301"},
      {"truncated-vocab", "vocab.bpe line 3: expected two tokens separated by one space"},
      {"no-header-line", "vocab.bpe line 1: expected a header such as \"#version: 0.2\""},
      {"huge-id", "has id 1000000000000, outside [0, 264)"},
      {"duplicate-key", "key \"t\" appears twice"},
      {"wrong-type", "the value of \"th\" is the string \"256\"; expected an integer id"},
      {"unknown-merge", "the merged token \"qz\" is not in encoder.json"},
      {"repeated-merge", "the merge \"t h\" appears twice"},
  };
  for (const Row& r : rows) {
    const std::vector<std::string> parts = Split(Slurp(kCorpus / "gpt2_tokenizer" / r.file), 2);
    ExpectRefused(r.file, ParseGpt2Model(parts[0], parts.size() > 1 ? parts[1] : "").status(),
                  r.needle);
  }
  ExpectValidSeedsLoad("gpt2_tokenizer", [](const fs::path& p) -> Status {
    const std::vector<std::string> parts = Split(Slurp(p), 2);
    ATTNLAB_ASSIGN_OR_RETURN(BpeModel m, ParseGpt2Model(parts[0], parts.at(1)));
    return MakeBpeTokenizer(std::move(m)).status();
  });
}

TEST(BadInputs, BpeVocabulary) {
  const Row rows[] = {
      {"empty", "malformed JSON near byte 1"},
      {"truncated", "malformed JSON near byte 61"},
      {"wrong-format", "\"format\" is \"gpt2\"; expected \"attnlab-bpe\""},
      {"wrong-version", "format version 2; this build of attnlab reads version 1"},
      {"unknown-key", "unknown key \"extra\""},
      {"merge-before-definition", "\"th\" is not a token defined by an earlier merge"},
      {"duplicate-result", "its result is already a token"},
      {"wrong-type", "merge 0 is not a string"},
      {"duplicate-special", "special token 1 \"<s>\" appears twice"},
      {"duplicate-key", "key \"version\" appears twice"},
  };
  for (const Row& r : rows) {
    const fs::path p = kCorpus / "bpe_vocab" / r.file;
    ExpectRefused(r.file, LoadBpeTokenizer(p.string()).status(), r.needle);
  }
  ExpectValidSeedsLoad("bpe_vocab", [](const fs::path& p) { return LoadBpeTokenizer(p).status(); });
}

// ---- .npy -------------------------------------------------------------------------------------

TEST(BadInputs, Npy) {
  const Row rows[] = {
      {"empty", "the file is empty (0 bytes)"},
      {"truncated-magic", "truncated: 4 bytes end inside the magic"},
      {"truncated-header", "truncated header: the header length field says 118 bytes"},
      {"truncated-data", "needs 6 x 4 = 24 bytes, but the file holds 22 bytes"},
      {"wrong-magic", "not a .npy file: expected the magic"},
      {"wrong-version", "unsupported .npy format version 4.0"},
      {"huge-header-length", "the header length field says 65535 bytes"},
      {"wrong-dtype", "unsupported dtype '<c8'"},
      {"big-endian", "is big-endian"},
      {"fortran", "fortran_order is True"},
      {"shape-mismatch", "needs 9 x 4 = 36 bytes, but the file holds 24 bytes"},
      {"huge-shape", "has more elements than fit in 64 bits"},
      {"overflow-shape", "does not fit in 64 bits"},
      {"negative-shape", "negative dimension -1"},
  };
  for (const Row& r : rows) {
    const fs::path p = kCorpus / "npy" / r.file;
    ExpectRefused(r.file, ParseNpy(Slurp(p), p.string()).status(), r.needle);
    ExpectRefused(std::string(r.file) + " (file)", ReadNpy(p.string()).status(), r.needle);
  }
  ExpectValidSeedsLoad("npy", [](const fs::path& p) { return ReadNpy(p).status(); });
  // NaN values: .npy holds data, not weights; the engine computes with them as IEEE arithmetic
  // does (NaN in, NaN out), like PyTorch. The file reads.
  EXPECT_TRUE(ReadNpy((kCorpus / "npy" / "nan-values").string()).ok());
}

// ---- token files ------------------------------------------------------------------------------

TEST(BadInputs, TokenFile) {
  const Row rows[] = {
      {"empty", "is 0 bytes, shorter than its 32-byte header"},
      {"truncated-header", "is 20 bytes, shorter than its 32-byte header"},
      {"truncated-tokens", "header declares 40 tokens of 2 bytes but the file holds 77 bytes"},
      {"wrong-magic", "is not an attnlab token file (bad magic"},
      {"wrong-version", "unsupported version 2"},
      {"wrong-width", "bytes per token must be 2 or 4, found 3"},
      {"huge-count", "header declares 4611686018427387904 tokens"},
      {"token-outside-vocab", "token 300 at 1 is outside the vocabulary of 257"},
      {"huge-vocab", "vocab_size 4294967295 is outside [1, 2^31]"},
  };
  for (const Row& r : rows) {
    ExpectRefused(r.file, ReadTokenFile((kCorpus / "token_file" / r.file).string()).status(),
                  r.needle);
  }
  ExpectRefused("a directory", ReadTokenFile(kCorpus.string()).status(), "not a regular file");
  ExpectRefused("a missing file", ReadTokenFile((kCorpus / "nothere.tok").string()).status(),
                "no such file");
  ExpectValidSeedsLoad("token_file", [](const fs::path& p) { return ReadTokenFile(p).status(); });
}

// ---- JSON configs -----------------------------------------------------------------------------

TEST(BadInputs, ModelConfigJson) {
  const Row rows[] = {
      {"empty", "model config is not valid JSON"},
      {"truncated", "model config is not valid JSON"},
      {"not-object", "model config must be a JSON object"},
      {"deep-nesting", "model config must be a JSON object"},
      {"unknown-key", "unknown model config key 'colour'"},
      {"wrong-type", "config key 'd_model' must be an integer"},
      {"out-of-range", "vocab_size = 1099511627776 is outside [2, 16777216]"},
      {"huge-rope-factor", "rope_factor must be in [1, 1024]"},
      {"infinite-eps", "model config is not valid JSON"},
  };
  for (const Row& r : rows) {
    ExpectRefused(r.file, ModelConfigFromJson(Slurp(kCorpus / "model_config" / r.file)).status(),
                  r.needle);
  }
  ExpectValidSeedsLoad("model_config", [](const fs::path& p) -> Status {
    ATTNLAB_ASSIGN_OR_RETURN(ModelConfig c, ModelConfigFromJson(Slurp(p)));
    return Gpt::Create(c).status();
  });
  // Values JSON can spell but a float cannot hold, and NaN-producing ones.
  ExpectRefused("norm_eps 1e300", ModelConfigFromJson("{\"norm_eps\": 1e300}").status(),
                "'norm_eps' = 1e+300 is not a finite number");
  ExpectRefused("rope_base 1e308 (finite double)",
                ModelConfigFromJson("{\"rope_base\": 1e308, \"rope_factor\": 1}").status(),
                "rope");
}

TEST(BadInputs, TrainConfigJson) {
  const Row rows[] = {
      {"empty", "not valid JSON"},
      {"truncated", "not valid JSON"},
      {"unknown-key", "unknown top-level key \"optimizer\""},
      {"unknown-train-key", "unknown training option \"batch_size\""},
      {"wrong-type", "training option 'batch' must be an integer"},
      {"huge-values", "training option 'batch' must be an integer"},
      {"negative-seed", "training option 'seed' = -1 is outside [0,"},
      {"model-not-object", "\"model\" must be an object"},
  };
  for (const Row& r : rows) {
    ExpectRefused(r.file,
                  ParseTrainConfig(Slurp(kCorpus / "train_config" / r.file), r.file).status(),
                  r.needle);
  }
  ExpectValidSeedsLoad("train_config", [](const fs::path& p) {
    return ParseTrainConfig(Slurp(p), p.string()).status();
  });
  // Ranges, one key at a time (each message names the key and the range).
  const std::pair<const char*, const char*> values[] = {
      {R"({"train": {"steps": 18446744073709551615}})", "'steps' = 18446744073709551615 is outside"},
      {R"({"train": {"steps": 0}})", "'steps' = 0 is outside [1,"},
      {R"({"train": {"lr": 1e300}})", "'lr' = 1e+300 must be > 0"},
      {R"({"train": {"lr": -1}})", "'lr' = -1 must be > 0"},
      {R"({"train": {"beta2": 1}})", "'beta2' = 1 must be in (0, 1)"},
      {R"({"train": {"bos": 1}})", "'bos' must be true or false"},
      {R"({"train": {"batch": 65537}})", "'batch' = 65537 is outside [1, 65536]"},
      {R"({"train": {"grad_clip": -0.5}})", "'grad_clip' = -0.5 must be >= 0"},
      {R"({"data": 7})", "\"data\" must be a string"},
      {R"({"train": []})", "\"train\" must be an object"},
  };
  for (const auto& [text, needle] : values) {
    ExpectRefused(text, ParseTrainConfig(text, "cfg.json").status(), needle);
  }
}

}  // namespace
}  // namespace attnlab
