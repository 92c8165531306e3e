#include "experiments/model_source.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/files.h"
#include "core/resources.h"
#include "formats/load_model.h"
#include "tokenizer/tokenizer_spec.h"
#include "train/token_data.h"

namespace attnlab::experiments {

Result<Source> LoadSource(const ExperimentOptions& o) {
  Source s;
  const std::string model_path = o.data.empty() ? FindResource(kDefaultModelPath) : o.data;
  const std::string text_path = FindResource(kSampleTextPath);
  if (model_path.empty() && !o.quick) {
    return Status::NotFound(std::string("the default model (") + kDefaultModelPath +
                            ") was not found; pass --data MODEL_DIR");
  }
  if (model_path.empty()) {
    // CI without the default model: a tiny random-init byte-level model.
    ModelConfig c;
    c.vocab_size = 257;  // bytes + BOS
    c.context = 128;
    c.d_model = 32;
    c.n_layer = 2;
    c.n_head = 4;
    ATTNLAB_ASSIGN_OR_RETURN(s.g, Gpt::Create(c));
    s.g->params().Initialize(c, o.seed);
    s.bos = 256;
    s.model = "random-init byte model (2 layers, d_model 32, 4 heads, seed " + std::to_string(o.seed) + ")";
    s.model_kind = "random-init";
    if (!text_path.empty()) {
      ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(text_path, int64_t{1} << 30));
      for (unsigned char ch : text) s.ids.push_back(ch);
      s.text = text_path;
    } else {
      for (int64_t i = 0; i < 4096; ++i) s.ids.push_back(static_cast<int32_t>(SplitMix64(o.seed * 7919 + i) % 256));
      s.text = "pseudo-random bytes (no data/sample.txt found)";
    }
    return s;
  }
  if (text_path.empty()) {
    return Status::NotFound(std::string("the sample text (") + kSampleTextPath + ") was not found");
  }
  ATTNLAB_ASSIGN_OR_RETURN(LoadedModel loaded, LoadAnyModel(model_path));
  LoadedModel m;  // everything but the weights, which move into the model (not held twice)
  m.format = loaded.format, m.path = loaded.path, m.meta = loaded.meta;
  ATTNLAB_ASSIGN_OR_RETURN(s.g, MakeGpt(std::move(loaded)));
  if (!m.meta.is_object() || !m.meta.contains("tokenizer")) {
    return Status::InvalidArgument(
        "the model " + model_path +
        " carries no tokenizer (the experiment needs an attnlab checkpoint or a Hugging Face folder with "
        "tokenizer.json)");
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, TokenizerFromJson(m.meta["tokenizer"]));
  // Released models pad their vocabulary past the tokenizer's ids (tools/cli_model.cc).
  const bool padded = m.format.rfind("hf-", 0) == 0 || m.format == "gguf" || m.meta.contains("from");
  const int64_t vocab = s.g->config().vocab_size;
  if (padded ? tok->vocab_size() > vocab : tok->vocab_size() != vocab) {
    return Status::InvalidArgument("the model's tokenizer does not match its vocabulary");
  }
  auto it = m.meta.find("trainer");
  const bool trained_with_bos = it != m.meta.end() && it->is_object() && it->contains("bos") &&
                                (*it)["bos"].is_number_integer() &&
                                (*it)["bos"].get<int64_t>() >= 0;
  if ((trained_with_bos || tok->adds_bos()) && tok->bos_id()) s.bos = *tok->bos_id();
  ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(text_path, int64_t{1} << 30));
  ATTNLAB_ASSIGN_OR_RETURN(s.ids, tok->Encode(text));
  s.model = m.path;
  s.model_kind = o.data.empty() ? "default" : "checkpoint";
  s.text = text_path;
  return s;
}

std::vector<Window> MakeWindows(const std::vector<int32_t>& ids, int32_t bos, int64_t T) {
  std::vector<Window> out;
  const int64_t N = static_cast<int64_t>(ids.size());
  const int64_t step = bos >= 0 ? T - 1 : T;
  for (int64_t s = 0; s + step + (bos >= 0 ? 0 : 1) <= N; s += step) {
    Window w;
    if (bos >= 0) {
      w.x.push_back(bos);
      for (int64_t t = s; t < s + T - 1; ++t) w.x.push_back(ids[t]);
      for (int64_t t = s; t < s + T; ++t) w.y.push_back(ids[t]);
    } else {
      for (int64_t t = s; t < s + T; ++t) w.x.push_back(ids[t]);
      for (int64_t t = s + 1; t < s + T + 1; ++t) w.y.push_back(ids[t]);
    }
    out.push_back(std::move(w));
  }
  return out;
}

Result<double> MeanLoss(Gpt& g, const std::vector<Window>& ws) {
  const int64_t T = static_cast<int64_t>(ws.front().x.size());
  double sum = 0;
  int64_t n = 0;
  for (size_t b0 = 0; b0 < ws.size(); b0 += 8) {
    const size_t b1 = std::min(ws.size(), b0 + 8);
    std::vector<int32_t> x, y;
    for (size_t i = b0; i < b1; ++i) {
      x.insert(x.end(), ws[i].x.begin(), ws[i].x.end());
      y.insert(y.end(), ws[i].y.begin(), ws[i].y.end());
    }
    double loss = 0;
    const int64_t B = static_cast<int64_t>(b1 - b0);
    ATTNLAB_RETURN_IF_ERROR(g.Forward(x.data(), y.data(), B, T, &loss));
    int64_t scored = 0;  // the forward's loss is the mean over these
    for (int32_t t : y) scored += t >= 0;
    sum += loss * static_cast<double>(scored);
    n += scored;
  }
  return sum / static_cast<double>(n);
}

}  // namespace attnlab::experiments
