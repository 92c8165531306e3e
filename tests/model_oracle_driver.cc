// model_oracle_driver: runs attnlab's GPT once for the PyTorch oracle (model_torch_oracle_test.py).
// A test helper, not part of the CLI.
//
//   model_oracle_driver --config config.json --weights model.safetensors --tokens t.npy
//                       --targets y.npy --out-logits L.npy --out-grads G.safetensors
//                       [--loss-out loss.txt]
//
// config.json: ModelConfigToJson's format (model_config.h). model.safetensors: every parameter
// of ParameterLayout(config) by name, F32, with exactly its shape; a missing, extra or misshapen
// tensor is an error. tokens/targets: int32 (or int64) [B, T]; target -1 is ignored.
// Writes:
//   L.npy           float32 [B, T, V]: raw logits of Forward without targets (the sink-token row
//                   is dropped when config.sink_token)
//   G.safetensors   d(mean loss)/d(parameter) for every parameter, F32, same names and shapes
//                   (Forward with targets, then Backward(1))
//   loss.txt        the mean loss, "%.17g\n"
// Exit status 0 on success, 1 with a message on stderr otherwise.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "attnlab/status.h"
#include "core/npy.h"
#include "model/gpt.h"
#include "model/parameters.h"
#include "formats/safetensors.h"

namespace attnlab {
namespace {

struct Args {
  std::string config, weights, tokens, targets, out_logits, out_grads, loss_out;
};

Status ParseArgs(int argc, char** argv, Args* a) {
  std::map<std::string, std::string*> flags = {
      {"--config", &a->config},         {"--weights", &a->weights},
      {"--tokens", &a->tokens},         {"--targets", &a->targets},
      {"--out-logits", &a->out_logits}, {"--out-grads", &a->out_grads},
      {"--loss-out", &a->loss_out}};
  for (int i = 1; i < argc; ++i) {
    auto it = flags.find(argv[i]);
    if (it == flags.end() || i + 1 >= argc) {
      return Status::InvalidArgument(std::string("unknown flag or missing value: '") + argv[i] +
                                     "'");
    }
    *it->second = argv[++i];
  }
  for (const auto& [flag, dst] : flags) {
    if (dst->empty() && flag != "--loss-out") {
      return Status::InvalidArgument("missing required flag " + flag);
    }
  }
  return Status::Ok();
}

Result<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Reads a [B, T] integer array as int32.
Status ReadTokens(const std::string& path, std::vector<int32_t>* out, int64_t* B, int64_t* T) {
  ATTNLAB_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(path));
  if (a.shape.size() != 2) {
    return Status::InvalidArgument(path + ": expected a [B, T] array, found shape " +
                                   a.ShapeString());
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::vector<int64_t> v, a.ToInt64(path));
  out->assign(v.begin(), v.end());
  *B = a.shape[0];
  *T = a.shape[1];
  return Status::Ok();
}

// Fills params from the file: exactly the layout's tensors, F32, exact shapes.
Status LoadWeights(const std::string& path, ParameterStore* params) {
  ATTNLAB_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(path));
  std::set<std::string> expected;
  for (const ParamInfo& p : params->infos()) {
    expected.insert(p.name);
    const SafetensorsTensor* t = file.Find(p.name);
    if (!t) {
      return Status::InvalidArgument(path + ": parameter '" + p.name + "' " +
                                     TensorShapeString(p.shape) + " is missing");
    }
    if (t->dtype != SafetensorsDtype::kF32) {
      return Status::InvalidArgument(path + ": parameter '" + p.name + "' has dtype " +
                                     SafetensorsDtypeName(t->dtype) + ", expected F32");
    }
    if (t->shape != p.shape) {
      return Status::InvalidArgument(path + ": parameter '" + p.name + "' has shape " +
                                     TensorShapeString(t->shape) + ", expected " +
                                     TensorShapeString(p.shape));
    }
    ATTNLAB_RETURN_IF_ERROR(file.ReadFloat(*t, params->Slice(p), p.size));
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    if (!expected.count(t.name)) {
      return Status::InvalidArgument(path + ": tensor '" + t.name +
                                     "' is not a parameter of this configuration");
    }
  }
  return Status::Ok();
}

Status Run(const Args& args) {
  ATTNLAB_ASSIGN_OR_RETURN(std::string json, ReadText(args.config));
  ATTNLAB_ASSIGN_OR_RETURN(ModelConfig config, ModelConfigFromJson(json));
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(config));
  ATTNLAB_RETURN_IF_ERROR(LoadWeights(args.weights, &gpt->params()));

  std::vector<int32_t> tokens, targets;
  int64_t B = 0, T = 0, Bt = 0, Tt = 0;
  ATTNLAB_RETURN_IF_ERROR(ReadTokens(args.tokens, &tokens, &B, &T));
  ATTNLAB_RETURN_IF_ERROR(ReadTokens(args.targets, &targets, &Bt, &Tt));
  if (Bt != B || Tt != T) {
    return Status::InvalidArgument("targets shape [" + std::to_string(Bt) + ", " +
                                   std::to_string(Tt) + "] differs from tokens shape [" +
                                   std::to_string(B) + ", " + std::to_string(T) + "]");
  }

  // Raw logits: Forward without targets; drop the sink row (position 0) if there is one.
  ATTNLAB_RETURN_IF_ERROR(gpt->Forward(tokens.data(), nullptr, B, T, nullptr));
  const int64_t V = config.vocab_size, Tm = gpt->last_len(), off = Tm - T;
  std::vector<float> logits(B * T * V);
  for (int64_t b = 0; b < B; ++b) {
    std::memcpy(logits.data() + b * T * V, gpt->logits() + (b * Tm + off) * V,
                sizeof(float) * T * V);
  }
  const int64_t logits_shape[3] = {B, T, V};
  ATTNLAB_RETURN_IF_ERROR(WriteNpyFloat(args.out_logits, logits.data(), logits_shape));

  // Loss and gradients.
  double loss = 0.0;
  ATTNLAB_RETURN_IF_ERROR(gpt->Forward(tokens.data(), targets.data(), B, T, &loss));
  gpt->grads().Zero();
  ATTNLAB_RETURN_IF_ERROR(gpt->Backward(1.0f));
  std::vector<NamedTensor> grads;
  for (const ParamInfo& p : gpt->grads().infos()) {
    grads.push_back(NamedTensor::F32(p.name, p.shape, gpt->grads().Slice(p)));
  }
  ATTNLAB_RETURN_IF_ERROR(WriteSafetensors(args.out_grads, grads));
  if (!args.loss_out.empty()) {
    std::FILE* f = std::fopen(args.loss_out.c_str(), "w");
    if (!f) return Status::IoError("cannot write '" + args.loss_out + "'");
    std::fprintf(f, "%.17g\n", loss);
    if (std::fclose(f) != 0) return Status::IoError("cannot write '" + args.loss_out + "'");
  }
  return Status::Ok();
}

}  // namespace
}  // namespace attnlab

int main(int argc, char** argv) {
  attnlab::Args args;
  attnlab::Status st = attnlab::ParseArgs(argc, argv, &args);
  if (st.ok()) st = attnlab::Run(args);
  if (!st.ok()) {
    std::fprintf(stderr, "model_oracle_driver: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
