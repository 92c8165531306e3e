#include "formats/llmc.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/atomic_file.h"
#include "core/files.h"
#include "formats/hf_gpt2.h"

namespace attnlab {

static_assert(std::endian::native == std::endian::little,
              "llmc.cc reads little-endian data in place; port it for big-endian hosts");

namespace {

constexpr int64_t kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * 4;

std::string Str(int64_t x) { return std::to_string(x); }

// Reads consecutive tensors of an llm.c file, converting bf16 to float.
class TensorReader {
 public:
  TensorReader(const ReadOnlyFile& file, bool bf16)
      : file_(file), bf16_(bf16), offset_(kHeaderBytes) {}

  // Reads n elements into dst (floats).
  Status Read(float* dst, int64_t n, const char* tensor) {
    const int64_t item = bf16_ ? 2 : 4;
    if (!bf16_) return ReadBytes(reinterpret_cast<char*>(dst), n * item, tensor);
    // bf16: read in chunks, widen exactly.
    std::vector<uint16_t> buf(static_cast<size_t>(std::min<int64_t>(n, 1 << 20)));
    int64_t done = 0;
    while (done < n) {
      const int64_t k = std::min<int64_t>(n - done, static_cast<int64_t>(buf.size()));
      ATTNLAB_RETURN_IF_ERROR(ReadBytes(reinterpret_cast<char*>(buf.data()), k * 2, tensor));
      for (int64_t i = 0; i < k; ++i) {
        dst[done + i] = std::bit_cast<float>(static_cast<uint32_t>(buf[i]) << 16);
      }
      done += k;
    }
    return Status::Ok();
  }
  void Skip(int64_t n) { offset_ += n * (bf16_ ? 2 : 4); }

 private:
  Status ReadBytes(char* dst, int64_t bytes, const char* tensor) {
    ATTNLAB_RETURN_IF_ERROR(file_.ReadAt(offset_, dst, bytes, tensor));
    offset_ += bytes;
    return Status::Ok();
  }
  const ReadOnlyFile& file_;
  bool bf16_;
  int64_t offset_;
};

// dst [in, out] = transpose of src [out, in].
void Transpose(const float* src, int64_t out, int64_t in, float* dst) {
  for (int64_t o = 0; o < out; ++o) {
    const float* row = src + o * in;
    for (int64_t i = 0; i < in; ++i) dst[i * out + o] = row[i];
  }
}

Status CheckGpt2Shaped(const ModelConfig& c) {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("llm.c stores only GPT-2 shaped models: " + what);
  };
  if (c.position != PositionEncoding::kLearned || c.position_every_layer) {
    return bad("positions must be learned, added once at the input");
  }
  if (c.sink_token) return bad("no dedicated sink token");
  if (c.norm != NormPlacement::kPre || c.norm_type != NormType::kLayerNorm || !c.bias) {
    return bad("pre-LN LayerNorm with biases is required");
  }
  if (!c.mlp || c.hidden() != 4 * c.d_model)
    return bad("an MLP with hidden size 4 * d_model is required");
  if (!c.tie_embeddings) return bad("embeddings must be tied");
  if (c.softmax != SoftmaxKind::kStandard || c.output_gate || c.mask_first_key ||
      c.attention_window >= 0 || c.kv_heads() != c.n_head || !c.causal ||
      c.attention_type != AttentionType::kSoftmax) {
    return bad("standard full causal multi-head attention is required");
  }
  if (c.residual_scale != ResidualScale::kOne || !c.residual)
    return bad("plain residuals are required");
  return Status::Ok();
}

}  // namespace

int64_t LlmcHeader::NumParameters() const {
  const int64_t C = channels, L = layers;
  return int64_t{padded_vocab} * C + int64_t{max_t} * C + L * (12 * C * C + 13 * C) + 2 * C;
}

int64_t LlmcHeader::ExpectedFileSize() const {
  return kHeaderBytes + NumParameters() * (version == kLlmcVersionBf16 ? 2 : 4);
}

Result<LlmcHeader> ParseLlmcHeader(const int32_t* h, const std::string& name) {
  if (h[0] != kLlmcMagic) {
    std::string hint;
    if (h[0] == 20240327) hint = " (20240327 is llm.c's debug state file, not a model)";
    if (h[0] == 20240328) hint = " (20240328 is llm.c's tokenizer file, not a model)";
    if (h[0] == 20240520 || h[0] == 20240522)
      hint = " (that is an llm.c token data file, not a model)";
    return Status::Corrupt(name + ": bad magic number: expected " + Str(kLlmcMagic) + ", found " +
                           Str(h[0]) + hint);
  }
  LlmcHeader r;
  r.version = h[1];
  if (r.version != kLlmcVersionFp32 && r.version != kLlmcVersionBf16) {
    return Status::InvalidArgument(name + ": llm.c checkpoint version " + Str(r.version) +
                                   " is not supported; expected 3 (fp32) or 5 (bf16). Hint: "
                                   "re-export with llm.c's current train_gpt2.py");
  }
  r.max_t = h[2];
  r.vocab = h[3];
  r.layers = h[4];
  r.heads = h[5];
  r.channels = h[6];
  r.padded_vocab = h[7];
  auto range = [&](const char* field, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) {
      return Status::Corrupt(name + ": header field " + field + " = " + Str(v) + " is outside [" +
                             Str(lo) + ", " + Str(hi) + "]");
    }
    return Status::Ok();
  };
  ATTNLAB_RETURN_IF_ERROR(range("maxT", r.max_t, 1, 1 << 20));
  ATTNLAB_RETURN_IF_ERROR(range("vocab_size", r.vocab, 2, 1 << 24));
  ATTNLAB_RETURN_IF_ERROR(range("num_layers", r.layers, 1, 1024));
  ATTNLAB_RETURN_IF_ERROR(range("channels", r.channels, 1, 1 << 16));
  ATTNLAB_RETURN_IF_ERROR(range("num_heads", r.heads, 1, r.channels));
  ATTNLAB_RETURN_IF_ERROR(range("padded_vocab_size", r.padded_vocab, r.vocab, 1 << 24));
  if (r.channels % r.heads != 0) {
    return Status::Corrupt(name + ": channels (" + Str(r.channels) +
                           ") is not a multiple of "
                           "num_heads (" +
                           Str(r.heads) + ")");
  }
  return r;
}

Result<LoadedModel> LoadLlmc(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(path));
  const int64_t size = file.size();
  if (size < kHeaderBytes) {
    return Status::Corrupt(path + ": " + Str(size) + " bytes, shorter than llm.c's " +
                           Str(kHeaderBytes) + "-byte header (truncated, or not an llm.c file)");
  }
  int32_t header[kHeaderInts];
  ATTNLAB_RETURN_IF_ERROR(file.ReadAt(0, header, kHeaderBytes, "the header"));
  ATTNLAB_ASSIGN_OR_RETURN(const LlmcHeader h, ParseLlmcHeader(header, path));
  if (size != h.ExpectedFileSize()) {
    return Status::Corrupt(
        path + ": the header (version " + Str(h.version) + ", maxT " + Str(h.max_t) + ", V " +
        Str(h.vocab) + ", Vp " + Str(h.padded_vocab) + ", L " + Str(h.layers) + ", NH " +
        Str(h.heads) + ", C " + Str(h.channels) + ") implies " + Str(h.NumParameters()) +
        " parameters = " + Str(h.ExpectedFileSize()) + " bytes, the file has " + Str(size) +
        (size < h.ExpectedFileSize() ? " (truncated)" : " (extra bytes at the end)"));
  }
  const int64_t V = h.vocab, Vp = h.padded_vocab, C = h.channels, L = h.layers, T = h.max_t;
  const ModelConfig c = MakeGpt2Config(V, T, C, L, h.heads, 4 * C);
  ATTNLAB_RETURN_IF_ERROR(ValidateModelConfig(c).WithContext(path));

  LoadedModel out;
  out.config = c;
  out.format = "llm.c";
  out.path = path;
  out.params = ParameterStore(c);
  ParameterStore& P = out.params;
  const ModelParams& ptr = P.ptrs();
  const bool bf16 = h.version == kLlmcVersionBf16;
  TensorReader rd(file, bf16);

  // In llm.c's order. Per-layer tensors are [L, ...] blocks: layer l of tensor X comes before
  // layer l + 1 of X, and all of X before the next tensor.
  ATTNLAB_RETURN_IF_ERROR(rd.Read(ptr.wte, V * C, "wte"));
  rd.Skip((Vp - V) * C);  // padding rows
  ATTNLAB_RETURN_IF_ERROR(rd.Read(ptr.wpe, T * C, "wpe"));
  std::vector<float> tmp;
  // [L, n] vectors straight into each layer's slice.
  auto vec = [&](float* LayerParams::*field, int64_t n, const char* what) -> Status {
    for (int64_t l = 0; l < L; ++l) ATTNLAB_RETURN_IF_ERROR(rd.Read(ptr.layers[l].*field, n, what));
    return Status::Ok();
  };
  // [L, out, in] matrices, transposed into each layer's [in, out] slice.
  auto mat = [&](float* LayerParams::*field, int64_t rows_out, int64_t cols_in,
                 const char* what) -> Status {
    tmp.resize(static_cast<size_t>(rows_out * cols_in));
    for (int64_t l = 0; l < L; ++l) {
      ATTNLAB_RETURN_IF_ERROR(rd.Read(tmp.data(), rows_out * cols_in, what));
      Transpose(tmp.data(), rows_out, cols_in, ptr.layers[l].*field);
    }
    return Status::Ok();
  };
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::ln1_w, C, "ln1w"));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::ln1_b, C, "ln1b"));
  ATTNLAB_RETURN_IF_ERROR(mat(&LayerParams::qkv_w, 3 * C, C, "qkvw"));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::qkv_b, 3 * C, "qkvb"));
  ATTNLAB_RETURN_IF_ERROR(mat(&LayerParams::proj_w, C, C, "attprojw"));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::proj_b, C, "attprojb"));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::ln2_w, C, "ln2w"));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::ln2_b, C, "ln2b"));
  ATTNLAB_RETURN_IF_ERROR(mat(&LayerParams::fc_w, 4 * C, C, "fcw"));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::fc_b, 4 * C, "fcb"));
  ATTNLAB_RETURN_IF_ERROR(mat(&LayerParams::fcproj_w, C, 4 * C, "fcprojw"));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::fcproj_b, C, "fcprojb"));
  ATTNLAB_RETURN_IF_ERROR(rd.Read(ptr.lnf_w, C, "lnfw"));
  ATTNLAB_RETURN_IF_ERROR(rd.Read(ptr.lnf_b, C, "lnfb"));
  for (const ParamInfo& p : P.infos())
    ATTNLAB_RETURN_IF_ERROR(CheckFinite(P.Slice(p), p.size, path, p.name));

  out.meta = nlohmann::json::object();
  out.meta["source"] = "llm.c";
  out.meta["file"] = path;
  out.meta["version"] = h.version;
  out.meta["padded_vocab_size"] = h.padded_vocab;
  if (bf16) out.notes.push_back("llm.c version 5: bf16 parameters widened to float exactly");
  return out;
}

Status WriteLlmc(const std::string& path, const ModelConfig& c, const ParameterStore& params,
                 int64_t padded_vocab) {
  ATTNLAB_RETURN_IF_ERROR(ValidateModelConfig(c).WithContext(path));
  ATTNLAB_RETURN_IF_ERROR(CheckGpt2Shaped(c).WithContext(path));
  if (params.infos().size() != ParameterLayout(c).size() || params.ptrs().wte == nullptr) {
    return Status::InvalidArgument(path + ": the parameters are not laid out for this config");
  }
  const int64_t V = c.vocab_size, C = c.d_model, L = c.n_layer, T = c.context;
  if (padded_vocab == 0) padded_vocab = (V + 127) / 128 * 128;
  if (padded_vocab < V || padded_vocab > (1 << 24)) {
    return Status::InvalidArgument(path + ": padded_vocab (" + Str(padded_vocab) +
                                   ") must be in [vocab_size = " + Str(V) + ", 2^24]");
  }
  for (int64_t v : {T, V, L, C, c.n_head}) {
    if (v > INT32_MAX) return Status::InvalidArgument(path + ": a size does not fit int32");
  }
  int32_t header[kHeaderInts] = {};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersionFp32;
  header[2] = static_cast<int32_t>(T);
  header[3] = static_cast<int32_t>(V);
  header[4] = static_cast<int32_t>(L);
  header[5] = static_cast<int32_t>(c.n_head);
  header[6] = static_cast<int32_t>(C);
  header[7] = static_cast<int32_t>(padded_vocab);
  const ModelParams& ptr = params.ptrs();
  AtomicFileWriter w;
  ATTNLAB_RETURN_IF_ERROR(w.Open(path));
  ATTNLAB_RETURN_IF_ERROR(w.Append(header, sizeof(header)));
  auto put = [&](const float* x, int64_t n) { return w.Append(x, static_cast<size_t>(n) * 4); };
  ATTNLAB_RETURN_IF_ERROR(put(ptr.wte, V * C));
  const std::vector<float> zeros(static_cast<size_t>((padded_vocab - V) * C), 0.0f);
  ATTNLAB_RETURN_IF_ERROR(put(zeros.data(), static_cast<int64_t>(zeros.size())));
  ATTNLAB_RETURN_IF_ERROR(put(ptr.wpe, T * C));
  std::vector<float> tmp;
  auto vec = [&](float* LayerParams::*field, int64_t n) -> Status {
    for (int64_t l = 0; l < L; ++l) ATTNLAB_RETURN_IF_ERROR(put(ptr.layers[l].*field, n));
    return Status::Ok();
  };
  // attnlab [in, out] -> llm.c [out, in].
  auto mat = [&](float* LayerParams::*field, int64_t in, int64_t out) -> Status {
    tmp.resize(static_cast<size_t>(in * out));
    for (int64_t l = 0; l < L; ++l) {
      Transpose(ptr.layers[l].*field, in, out, tmp.data());
      ATTNLAB_RETURN_IF_ERROR(put(tmp.data(), in * out));
    }
    return Status::Ok();
  };
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::ln1_w, C));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::ln1_b, C));
  ATTNLAB_RETURN_IF_ERROR(mat(&LayerParams::qkv_w, C, 3 * C));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::qkv_b, 3 * C));
  ATTNLAB_RETURN_IF_ERROR(mat(&LayerParams::proj_w, C, C));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::proj_b, C));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::ln2_w, C));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::ln2_b, C));
  ATTNLAB_RETURN_IF_ERROR(mat(&LayerParams::fc_w, C, 4 * C));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::fc_b, 4 * C));
  ATTNLAB_RETURN_IF_ERROR(mat(&LayerParams::fcproj_w, 4 * C, C));
  ATTNLAB_RETURN_IF_ERROR(vec(&LayerParams::fcproj_b, C));
  ATTNLAB_RETURN_IF_ERROR(put(ptr.lnf_w, C));
  ATTNLAB_RETURN_IF_ERROR(put(ptr.lnf_b, C));
  return w.Commit();
}

}  // namespace attnlab
