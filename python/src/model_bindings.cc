// attnlab._attnlab.Model: a loaded model (any format the CLI opens) with its tokenizer, a plain
// forward and a forward with hook points (model/forward_hooks.h). python/attnlab/model.py builds
// TransformerLens' API (run_with_cache, run_with_hooks, to_tokens ...) on top of it.
//
// Threads: every forward releases the GIL; a per-model mutex serialises forwards on one model
// (its activation buffers are shared), taken after the GIL is released so a hook that needs the
// GIL cannot deadlock with a second caller waiting for the model.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "attnlab/model_config.h"
#include "bindings.h"
#include "cache/streaming_cache.h"
#include "cli_model.h"
#include "inference/generate.h"
#include "model/forward_hooks.h"
#include "model/gpt.h"

namespace attnlab::python {
namespace {

using Tokens = py::array_t<int32_t, py::array::c_style>;

std::string HookName(HookPoint p, int64_t layer) {
  const std::string base(HookPointName(p));
  return HookPointIsPerLayer(p) ? "blocks." + std::to_string(layer) + "." + base : base;
}

// Whether this model has point p at all (model/forward_hooks.h's list).
bool ModelHasPoint(const Gpt& gpt, HookPoint p) {
  const ModelConfig& c = gpt.config();
  const bool softmax = c.attention_type != AttentionType::kLinear;
  switch (p) {
    case HookPoint::kPosEmbed: return gpt.params().ptrs().wpe != nullptr;
    case HookPoint::kRotQ:
    case HookPoint::kRotK: return gpt.rope() != nullptr;
    case HookPoint::kMlpOut: return c.mlp;
    case HookPoint::kLnFinal: return c.norm == NormPlacement::kPre;
    case HookPoint::kAttnScores:
    case HookPoint::kPattern:
    case HookPoint::kLse:
    case HookPoint::kFirstMass:
    case HookPoint::kEntropy: return softmax;
    default: return true;
  }
}

class LoadedModel {
 public:
  explicit LoadedModel(cli::CliModel m) : m_(std::move(m)) {}
  Gpt& gpt() { return *m_.gpt; }
  const cli::CliModel& cli() const { return m_; }
  std::mutex& mu() { return mu_; }
  // The thread running a forward of this model (a hook calling the same model would overwrite
  // the activations the forward is using).
  std::atomic<std::thread::id>& runner() { return runner_; }

 private:
  cli::CliModel m_;
  std::mutex mu_;
  std::atomic<std::thread::id> runner_{};
};

// The hooks of one forward: a table of wanted (point, layer) pairs (checked without the GIL)
// and one Python callback, callback(name, array) -> None | array, that sees a copy of the
// activation; the copy (edited in place) or the returned array goes back into the model.
class PyHooks : public ForwardHooks {
 public:
  PyHooks(int64_t n_layer, py::function callback)
      : n_layer_(n_layer), wanted_(kNumHookPoints * (n_layer + 1), 0), cb_(std::move(callback)) {}
  void Want(HookPoint p, int64_t layer) { wanted_[Index(p, layer)] = 1; }
  bool Wants(HookPoint p, int64_t layer) const override { return wanted_[Index(p, layer)]; }

  Status OnHook(const HookTensor& t) override {
    py::gil_scoped_acquire gil;
    const std::string name = HookName(t.point, t.layer);
    try {
      std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.begin() + t.rank);
      py::array_t<float> arr(shape);
      std::memcpy(arr.mutable_data(), t.data, sizeof(float) * t.size());
      py::object ret = cb_(name, arr);
      using Dense = py::array_t<float, py::array::c_style | py::array::forcecast>;
      Dense back = Dense::ensure(ret.is_none() ? py::object(arr) : ret);
      if (!back) {
        return Status::InvalidArgument("hook " + name +
                                       " returned something that is not an array of numbers");
      }
      bool same = back.ndim() == t.rank;
      for (int i = 0; same && i < t.rank; ++i) same = back.shape(i) == t.shape[i];
      if (!same) {
        return Status::InvalidArgument("hook " + name + " returned an array of shape " +
                                       ShapeString(back) + "; the activation's shape is " +
                                       ShapeString(arr));
      }
      std::memcpy(t.data, back.data(), sizeof(float) * t.size());
    } catch (py::error_already_set& e) {
      error_ = std::move(e);
      return Status::InvalidArgument("hook " + name + " raised");
    }
    return Status::Ok();
  }
  // The Python exception a hook raised, if any (re-raised by the caller with the GIL held).
  std::optional<py::error_already_set>& error() { return error_; }

 private:
  size_t Index(HookPoint p, int64_t layer) const {
    return static_cast<size_t>(static_cast<int>(p) * (n_layer_ + 1) + (layer + 1));
  }
  static std::string ShapeString(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + ")";
  }
  int64_t n_layer_;
  std::vector<char> wanted_;
  py::function cb_;
  std::optional<py::error_already_set> error_;
};

// (point, layer) of a hook name; ValueError for a name this model does not have.
std::pair<HookPoint, int64_t> ParseHookName(const Gpt& gpt, const std::string& name) {
  const int64_t L = gpt.config().n_layer;
  for (int i = 0; i < kNumHookPoints; ++i) {
    const auto p = static_cast<HookPoint>(i);
    if (!ModelHasPoint(gpt, p)) continue;
    if (!HookPointIsPerLayer(p)) {
      if (name == HookPointName(p)) return {p, -1};
      continue;
    }
    for (int64_t l = 0; l < L; ++l) {
      if (name == HookName(p, l)) return {p, l};
    }
  }
  throw py::value_error("unknown hook name '" + name + "' for this model (" + std::to_string(L) +
                        " layers; Model.hook_names() lists them)");
}

std::vector<std::string> HookNames(const Gpt& gpt) {
  std::vector<std::string> names;
  for (HookPoint p : {HookPoint::kEmbed, HookPoint::kPosEmbed}) {
    if (ModelHasPoint(gpt, p)) names.push_back(HookName(p, -1));
  }
  for (int64_t l = 0; l < gpt.config().n_layer; ++l) {
    for (int i = 0; i < kNumHookPoints; ++i) {
      const auto p = static_cast<HookPoint>(i);
      if (HookPointIsPerLayer(p) && ModelHasPoint(gpt, p)) names.push_back(HookName(p, l));
    }
  }
  if (ModelHasPoint(gpt, HookPoint::kLnFinal)) names.push_back(HookName(HookPoint::kLnFinal, -1));
  return names;
}

// Runs the model on tokens [B, T] (int32) and returns the logits [B, Tm, V].
py::array_t<float> Forward(LoadedModel& m, const Tokens& tokens, PyHooks* hooks) {
  if (tokens.ndim() != 2) {
    throw py::value_error("tokens: expected a [batch, pos] array, got " +
                          std::to_string(tokens.ndim()) + " dimensions");
  }
  const int64_t B = tokens.shape(0), T = tokens.shape(1);
  Gpt& gpt = m.gpt();
  if (m.runner().load() == std::this_thread::get_id()) {
    throw py::value_error("this model is running a forward already (a hook cannot call the "
                          "model it hooks; load a second copy for that)");
  }
  Status st;
  {
    py::gil_scoped_release release;
    KernelLock kernels;
    std::lock_guard<std::mutex> lock(m.mu());
    m.runner().store(std::this_thread::get_id());
    gpt.set_hooks(hooks);
    st = gpt.Forward(tokens.data(), nullptr, B, T, nullptr);
    gpt.set_hooks(nullptr);
    m.runner().store(std::thread::id());
  }
  if (hooks && hooks->error()) {
    py::error_already_set e = std::move(*hooks->error());
    hooks->error().reset();
    throw e;
  }
  ThrowIfError(st);
  const int64_t Tm = gpt.last_len(), V = gpt.config().vocab_size;
  py::array_t<float> logits({B, Tm, V});
  std::memcpy(logits.mutable_data(), gpt.logits(), sizeof(float) * B * Tm * V);
  return logits;
}

// Generates after prompt [P] (int32): the new ids, without the prompt (inference/generate.h).
py::array_t<int32_t> GenerateTokens(LoadedModel& m, const Tokens& prompt, GenerationConfig gc) {
  if (prompt.ndim() != 1) {
    throw py::value_error("generate: expected one prompt, [pos] or [1, pos]");
  }
  if (m.runner().load() == std::this_thread::get_id()) {
    throw py::value_error("this model is running a forward already (a hook cannot call the "
                          "model it hooks; load a second copy for that)");
  }
  Result<Generation> r = Status::Internal("generate did not run");
  {
    py::gil_scoped_release release;
    KernelLock kernels;
    std::lock_guard<std::mutex> lock(m.mu());
    m.runner().store(std::this_thread::get_id());
    r = Generate(m.gpt(), std::span<const int32_t>(prompt.data(), prompt.size()), gc);
    m.runner().store(std::thread::id());
  }
  ThrowIfError(r.status());
  return py::array_t<int32_t>(static_cast<py::ssize_t>(r->tokens.size()), r->tokens.data());
}

}  // namespace

void BindModel(py::module_& m) {
  py::class_<LoadedModel, std::shared_ptr<LoadedModel>>(m, "Model")
      .def_static(
          "load",
          [](const std::string& path, const std::string& tokenizer) {
            try {
              return std::make_shared<LoadedModel>(cli::LoadCliModel(path, tokenizer, false));
            } catch (const std::exception& e) {
              throw py::value_error(e.what());
            }
          },
          py::arg("path") = "", py::arg("tokenizer") = "")
      .def_property_readonly("config_json",
                             [](LoadedModel& self) { return ModelConfigToJson(self.gpt().config()); })
      .def_property_readonly("path", [](LoadedModel& self) { return self.cli().path; })
      .def_property_readonly("format", [](LoadedModel& self) { return self.cli().format; })
      .def_property_readonly("trained_with_bos",
                             [](LoadedModel& self) { return cli::TrainedWithBos(self.cli()); })
      .def_property_readonly("has_tokenizer",
                             [](LoadedModel& self) { return self.cli().tokenizer != nullptr; })
      .def_property_readonly("bos_id",
                             [](LoadedModel& self) -> std::optional<int32_t> {
                               const auto& t = self.cli().tokenizer;
                               return t ? t->bos_id() : std::nullopt;
                             })
      .def("encode",
           [](LoadedModel& self, const py::bytes& text) {
             const auto& t = self.cli().tokenizer;
             if (!t) throw py::value_error("this model carries no tokenizer; pass tokenizer= to load()");
             Result<std::vector<int32_t>> ids = t->Encode(std::string(text));
             ThrowIfError(ids.status());
             return py::array_t<int32_t>(static_cast<py::ssize_t>(ids->size()), ids->data());
           })
      .def("decode",
           [](LoadedModel& self, const Tokens& ids) {
             const auto& t = self.cli().tokenizer;
             if (!t) throw py::value_error("this model carries no tokenizer; pass tokenizer= to load()");
             if (ids.ndim() != 1) throw py::value_error("decode: expected a 1-D array of token ids");
             Result<std::string> s = t->Decode(std::span<const int32_t>(ids.data(), ids.size()));
             ThrowIfError(s.status());
             return py::bytes(s.value());
           })
      .def("hook_names", [](LoadedModel& self) { return HookNames(self.gpt()); })
      .def_property_readonly("eos_id",
                             [](LoadedModel& self) -> std::optional<int32_t> {
                               const auto& t = self.cli().tokenizer;
                               return t ? t->eos_id() : std::nullopt;
                             })
      .def(
          "generate",
          [](LoadedModel& self, const Tokens& prompt, int64_t max_new_tokens, float temperature,
             int64_t top_k, float top_p, uint64_t seed, const std::string& policy, int64_t sinks,
             int64_t window, std::optional<int32_t> eos) {
            GenerationConfig gc;
            gc.max_new_tokens = max_new_tokens;
            gc.sampler = SamplerConfig{temperature, top_k, top_p, seed};
            Result<CachePolicy> p = ParseCachePolicy(policy);
            ThrowIfError(p.status());
            gc.policy = *p;
            gc.n_sink = sinks;
            gc.window = window;
            gc.eos = eos;
            return GenerateTokens(self, prompt, gc);
          },
          py::arg("prompt"), py::arg("max_new_tokens"), py::arg("temperature"), py::arg("top_k"),
          py::arg("top_p"), py::arg("seed"), py::arg("policy"), py::arg("sinks"),
          py::arg("window"), py::arg("eos"))
      .def("forward",
           [](LoadedModel& self, const Tokens& tokens) { return Forward(self, tokens, nullptr); },
           py::arg("tokens"))
      .def(
          "forward_hooked",
          [](LoadedModel& self, const Tokens& tokens, const std::vector<std::string>& names,
             py::function callback) {
            PyHooks hooks(self.gpt().config().n_layer, std::move(callback));
            for (const std::string& n : names) {
              const auto [p, l] = ParseHookName(self.gpt(), n);
              hooks.Want(p, l);
            }
            return Forward(self, tokens, &hooks);
          },
          py::arg("tokens"), py::arg("names"), py::arg("callback"));
}

}  // namespace attnlab::python
