// The bad-input catalogue (docs/BAD_INPUTS.md), file formats: every broken seed of the fuzz
// corpora (fuzz/corpus/<target>/, written by fuzz/make_corpus.py) goes through the loader a user
// reaches, which must refuse it with a message that names the problem; every valid seed loads.
// The CLI rows of the catalogue are tests/bad_inputs_cli_test.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "attnlab/tokenizer.h"
#include "core/npy.h"
#include "formats/checkpoint.h"
#include "formats/load_model.h"
#include "model/gpt.h"
#include "formats/hf_gpt2.h"
#include "formats/llmc.h"
#include "formats/safetensors.h"
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
  // The top-level value of the wrong type, and an id of the wrong type (a float).
  ExpectRefused("an array", ParseGpt2Model("[0, 1]", "#version: 0.2\n").status(),
                "expected one JSON object mapping tokens to ids, found an array");
  ExpectRefused("a float id", ParseGpt2Model("{\"a\": 0.5}", "#version: 0.2\n").status(),
                "the value of \"a\" is the number 0.5; expected an integer id");
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
  // The two preamble sections between the magic and the header dict, cut.
  ExpectRefused("cut in the version", ParseNpy(std::string("\x93NUMPY\x01", 7), "x").status(),
                "7 bytes end before the format version");
  ExpectRefused("cut in the header length",
                ParseNpy(std::string("\x93NUMPY\x01\x00\x10", 9), "x").status(),
                "9 bytes end inside the header length field");
  ExpectValidSeedsLoad("npy", [](const fs::path& p) { return ReadNpy(p).status(); });
  // NaN values: .npy holds data, not weights; the file reads, and the engine computes with NaN
  // as IEEE arithmetic and PyTorch do: AttentionFlash.NaNInputsPoisonExactlyTheRowsThatUseThem
  // (kernels) and the attention/nan-input row of tests/bad_inputs_cli_test.py (the CLI).
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
  // JSON has no NaN; Python's json.dumps writes one anyway.
  ExpectRefused("NaN", ModelConfigFromJson("{\"norm_eps\": NaN}").status(), "not valid JSON");
  // Shapes that do not fit together.
  ExpectRefused("d_model % n_head",
                ModelConfigFromJson("{\"d_model\": 6, \"n_head\": 4}").status(),
                "d_model (6) must be a multiple of n_head (4)");
  ExpectRefused("n_head % n_kv_head",
                ModelConfigFromJson("{\"d_model\": 12, \"n_head\": 6, \"n_kv_head\": 4}").status(),
                "n_head (6) must be a multiple of n_kv_head (4)");
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
      {R"({"train": {"lr": 1e300}})",
       "'lr' = 1e+300 is not a finite float number; it must be > 0"},
      {R"({"train": {"lr": -1}})", "'lr' = -1 must be > 0"},
      {R"({"train": {"beta2": 1}})", "'beta2' = 1 must be in (0, 1)"},
      {R"({"train": {"bos": 1}})", "'bos' must be true or false"},
      {R"({"train": {"batch": 65537}})", "'batch' = 65537 is outside [1, 65536]"},
      {R"({"train": {"grad_clip": -0.5}})", "'grad_clip' = -0.5 must be >= 0"},
      {R"({"data": 7})", "\"data\" must be a string"},
      {R"({"train": []})", "\"train\" must be an object"},
      {R"({"train": {"lr": NaN}})", "not valid JSON"},
      {R"({"train": {"lr": 1e-400}})", "'lr' = 0.0 must be > 0"},
  };
  for (const auto& [text, needle] : values) {
    ExpectRefused(text, ParseTrainConfig(text, "cfg.json").status(), needle);
  }
}

// ---- Rows made here from valid seeds ------------------------------------------------------------
// The corpus seeds break the headers; these break the data sections, put +Inf where the seeds
// have NaN, and make files larger than their reader accepts (sparse files: a reader that
// allocated before checking the size would fail the test, or the machine).

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A safetensors file as editable tensors, and back.
struct EditableTensor {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  std::string bytes;
  void SetFloat(int64_t i, float x) {
    ASSERT_EQ(dtype, SafetensorsDtype::kF32);
    std::memcpy(&bytes[4 * i], &x, 4);
  }
};

std::vector<EditableTensor> TensorsOf(const std::string& file) {
  Result<SafetensorsFile> f = ParseSafetensors(file, "seed");
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  std::vector<EditableTensor> out;
  if (!f.ok()) return out;
  for (const SafetensorsTensor& t : f->tensors()) {
    const std::span<const uint8_t> b = f->Bytes(t);
    out.push_back({t.name, t.dtype, t.shape, std::string(b.begin(), b.end())});
  }
  return out;
}

std::string Encode(const std::vector<EditableTensor>& ts,
                   const std::map<std::string, std::string>& metadata = {}) {
  std::vector<NamedTensor> named;
  for (const EditableTensor& t : ts) named.push_back({t.name, t.shape, t.bytes.data(), t.dtype});
  Result<std::string> header = EncodeSafetensorsHeader(named, metadata);
  EXPECT_TRUE(header.ok()) << header.status().ToString();
  std::string out = header.ok() ? *header : "";
  for (const EditableTensor& t : ts) out += t.bytes;
  return out;
}

EditableTensor& Named(std::vector<EditableTensor>& ts, const std::string& name) {
  for (EditableTensor& t : ts) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return ts.front();
}

TEST(BadInputs, HfGpt2Model) {
  // A Hugging Face GPT-2 directory: model.safetensors (the hf-gpt2-tiny seed, C = 2) and a
  // config.json giving n_head (C % 64 != 0, so it cannot be inferred).
  TempDir tmp;
  const std::string dir = tmp.path() + "/gpt2";
  fs::create_directories(dir);
  WriteBytes(dir + "/config.json", R"({"model_type": "gpt2", "n_head": 1})");
  const std::string good = Slurp(kCorpus / "safetensors" / "hf-gpt2-tiny");
  const std::string model = dir + "/model.safetensors";
  WriteBytes(model, good);
  {
    Result<LoadedModel> m = LoadAnyModel(dir);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->format, "hf-gpt2");
  }
  struct Case {
    const char* what;
    std::function<std::string()> bytes;
    const char* needle;
  };
  const Case cases[] = {
      {"empty", [] { return std::string(); }, "the file is 0 bytes"},
      {"truncated data section", [&] { return good.substr(0, good.size() - 4); },
       "reach past the end of the"},
      {"huge header length",
       [] { return Slurp(kCorpus / "safetensors" / "huge-header-length"); },
       "the header length field says 4611686018427387904 bytes"},
      {"wrong dtype",
       [&] {
         auto ts = TensorsOf(good);
         Named(ts, "h.0.mlp.c_fc.weight").dtype = SafetensorsDtype::kI32;
         return Encode(ts);
       },
       "tensor 'h.0.mlp.c_fc.weight' has dtype I32; expected a floating-point dtype"},
      {"shape mismatch",
       [&] {
         auto ts = TensorsOf(good);
         Named(ts, "h.0.attn.c_attn.weight").shape = {6, 2};
         return Encode(ts);
       },
       "tensor 'h.0.attn.c_attn.weight' has shape [6, 2], expected [2, 6]"},
      {"NaN weight",
       [&] {
         auto ts = TensorsOf(good);
         Named(ts, "wpe.weight").SetFloat(1, std::numeric_limits<float>::quiet_NaN());
         return Encode(ts);
       },
       "tensor 'wpe.weight' has NaN at index 1"},
      {"Inf weight",
       [&] {
         auto ts = TensorsOf(good);
         Named(ts, "ln_f.bias").SetFloat(0, std::numeric_limits<float>::infinity());
         return Encode(ts);
       },
       "tensor 'ln_f.bias' has +Inf at index 0"},
  };
  for (const Case& c : cases) {
    WriteBytes(model, c.bytes());
    ExpectRefused(std::string("HF GPT-2 directory, model.safetensors ") + c.what,
                  LoadAnyModel(dir).status(), c.needle);
  }
  // No magic: a file that is not safetensors at all (a PNG) is not taken for a model.
  const std::string png = tmp.path() + "/model.safetensors";
  WriteBytes(png, std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16));
  ExpectRefused("a PNG named .safetensors", LoadAnyModel(png).status(), "not a model");
}

TEST(BadInputs, CheckpointDataSections) {
  TempDir tmp;
  const fs::path seed = kCorpus / "checkpoint" / "valid-minimal";
  const std::vector<std::string> parts = Split(Slurp(seed), 3);
  ASSERT_EQ(parts.size(), 3u);
  struct Case {
    const char* what;
    std::function<void(const std::string& dir)> damage;
    const char* needle;
  };
  const Case cases[] = {
      {"empty model.safetensors",
       [](const std::string& d) { WriteBytes(d + "/model.safetensors", ""); },
       "model.safetensors: the file is 0 bytes"},
      {"model.safetensors cut in the tensor data",
       [&](const std::string& d) {
         WriteBytes(d + "/model.safetensors", parts[1].substr(0, parts[1].size() - 4));
       },
       "reach past the end of the"},
      {"optimizer.safetensors cut in the tensor data",
       [&](const std::string& d) {
         WriteBytes(d + "/optimizer.safetensors", parts[2].substr(0, parts[2].size() - 4));
       },
       "optimizer.safetensors: tensor"},
      {"model.safetensors declaring a huge shape",
       [](const std::string& d) {
         WriteBytes(d + "/model.safetensors", Slurp(kCorpus / "safetensors" / "huge-shape"));
       },
       "has more elements than fit 63 bits"},
      {"+Inf weight",
       [&](const std::string& d) {
         auto ts = TensorsOf(parts[1]);
         Named(ts, "wte").SetFloat(3, std::numeric_limits<float>::infinity());
         WriteBytes(d + "/model.safetensors", Encode(ts, {{"format", "attnlab-checkpoint"}}));
       },
       "model.safetensors: tensor 'wte' has +Inf at index 3"},
      {"-Inf optimizer moment",
       [&](const std::string& d) {
         Result<SafetensorsFile> f = ParseSafetensors(parts[2], "optimizer");
         ASSERT_TRUE(f.ok());
         auto ts = TensorsOf(parts[2]);
         Named(ts, "m.wte").SetFloat(0, -std::numeric_limits<float>::infinity());
         WriteBytes(d + "/optimizer.safetensors", Encode(ts, f->metadata()));
       },
       "tensor 'm.wte' has -Inf at index 0"},
  };
  for (const Case& c : cases) {
    const std::string dir = MakeCheckpointDir(tmp, seed);
    ASSERT_TRUE(LoadCheckpoint(dir).ok());
    c.damage(dir);
    ExpectRefused(c.what, LoadCheckpoint(dir).status(), c.needle);
    ExpectRefused(std::string(c.what) + " (LoadAnyModel)", LoadAnyModel(dir).status(), c.needle);
  }
  // The wrong kind of path: a regular file where the directory belongs.
  const std::string dir = MakeCheckpointDir(tmp, seed);
  ExpectRefused("a file", LoadCheckpoint(dir + "/model.safetensors").status(),
                "a checkpoint is a directory; this is a file");
}

TEST(BadInputs, LlmcNonFiniteWeights) {
  TempDir tmp;
  // fp32: the sixth float of wte (the first tensor after the 1024-byte header) is +Inf.
  std::string fp32 = Slurp(kCorpus / "llmc" / "valid-fp32");
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(&fp32[1024 + 4 * 5], &inf, 4);
  WriteBytes(tmp.path() + "/inf.bin", fp32);
  ExpectRefused("llm.c fp32 +Inf", LoadAnyModel(tmp.path() + "/inf.bin").status(),
                "tensor 'wte' has +Inf at index 5");
  // bf16: the first value of wte is a quiet NaN (0x7fc0).
  std::string bf16 = Slurp(kCorpus / "llmc" / "valid-bf16");
  bf16[1024] = '\xc0';
  bf16[1025] = '\x7f';
  WriteBytes(tmp.path() + "/nan.bin", bf16);
  ExpectRefused("llm.c bf16 NaN", LoadAnyModel(tmp.path() + "/nan.bin").status(),
                "tensor 'wte' has NaN at index 0");
}

// A sparse file of `bytes` bytes: no disk space, and reading it would take seconds.
std::string SparseFile(const TempDir& tmp, const std::string& name, int64_t bytes) {
  const std::string path = tmp.path() + "/" + name;
  WriteBytes(path, "{");
  fs::resize_file(path, static_cast<uintmax_t>(bytes));
  return path;
}

TEST(BadInputs, TextFilesLargerThanTheirReaderAcceptsAreRefusedUnread) {
  TempDir tmp;
  constexpr int64_t kGiB = int64_t{1} << 30, kMiB = int64_t{1} << 20;
  const std::string vocab_bpe = tmp.path() + "/vocab.bpe";
  WriteBytes(vocab_bpe, "#version: 0.2\n");
  ExpectRefused("encoder.json of 1 GiB + 1",
                LoadGpt2Tokenizer(SparseFile(tmp, "encoder.json", kGiB + 1), vocab_bpe).status(),
                "1073741825 bytes is more than the 1073741824 bytes expected");
  ExpectRefused("vocabulary of 1 GiB + 1",
                LoadBpeTokenizer(SparseFile(tmp, "vocab.json", kGiB + 1)).status(),
                "1073741825 bytes is more than the 1073741824 bytes expected");
  // Checkpoint and Hugging Face config.json: 16 MiB.
  const std::string dir = MakeCheckpointDir(tmp, kCorpus / "checkpoint" / "valid-minimal");
  fs::remove(dir + "/config.json");
  SparseFile(tmp, fs::path(dir).filename().string() + "/config.json", 16 * kMiB + 1);
  ExpectRefused("checkpoint config.json of 16 MiB + 1", LoadCheckpoint(dir).status(),
                "16777217 bytes is more than the 16777216 bytes expected");
  ExpectRefused("model directory config.json of 16 MiB + 1", LoadAnyModel(dir).status(),
                "16777217 bytes is more than the 16777216 bytes expected");
}

TEST(BadInputs, BpeVocabularyWithMoreIdsThanTheLimit) {
  // No size is declared in the file: the ids are the merges and special tokens present. Their
  // count is checked before any of them is looked at (kMaxBpeVocabSize = 2^22 ids).
  std::string text = R"({"format": "attnlab-bpe", "version": 1, "pre_tokenizer": "gpt2", )"
                     R"("special_tokens": [], "merges": [0)";
  const int64_t merges = kMaxBpeVocabSize - 256 + 1;
  text.reserve(text.size() + 2 * merges + 4);
  for (int64_t i = 1; i < merges; ++i) text += ",0";
  text += "]}";
  ExpectRefused("2^22 + 1 ids", ParseBpeVocabulary(text, "v.json").status(),
                "4194049 merges and 0 special tokens exceed 4194304 ids");
}

}  // namespace
}  // namespace attnlab
