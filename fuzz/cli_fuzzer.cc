// The command line (tools/cli_app.h), run in-process on a fuzzed argument vector.
//
// Input: the arguments after "attnlab", separated by NUL bytes, e.g. "eval\0--model\0ckpt".
// Each run gets a fresh copy of small fixture files as its working directory (a checkpoint
// "ckpt", an llm.c file "model.bin", a data directory "data", text.txt, q/k/v/dout/mask/sink .npy
// files, a BPE vocabulary vocab.json, GPT-2 files in gpt2dir/, a train config train.json, a batch
// file batch.json), built with the library at start-up, so nothing is read from or written to
// outside the scratch directory and nothing touches the network. Stdin is /dev/null and stdout
// is discarded.
//
// Inputs are skipped (not run) when they could leave the scratch directory or legitimately run
// for long, which would be a timeout, not a bug:
//   - an argument containing '/', or equal to ".." or "-" (stdin);
//   - a number (any piece of an argument split at ',', '=' or ' ') with 64 < |x| < 2^62: small
//     values exercise the commands, huge ones their range checks, the middle only costs time;
//   - a work-size flag (--steps --max-tokens --repeats --decode --prefill --merges
//     --eval-batches --chunk --threads) above 64 (4 for --threads);
//   - `bench` (it times kernels at N = 4096 by default), `prepare` without --text (it would read
//     the Brown corpus), `train` without --steps (1000 steps by default).
// Out-of-range values in the skipped middle are covered by tests/bad_inputs_cli_test.py.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "attnlab/thread_pool.h"
#include "attnlab/tokenizer.h"
#include "cli_app.h"
#include "core/atomic_file.h"
#include "core/npy.h"
#include "fuzz_target.h"
#include "formats/checkpoint.h"
#include "formats/llmc.h"
#include "formats/hf_gpt2.h"
#include "train/token_data.h"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {

void Must(const Status& st, const char* what) {
  if (!st.ok()) fuzz::FuzzFail(std::string("fixture ") + what + ": " + st.ToString());
}

void WriteText(const std::string& path, const std::string& text) {
  Must(WriteFileAtomically(path, text), path.c_str());
}

// The fixture files, built once into ScratchDir()/fixtures.
std::string MakeFixtures() {
  const std::string dir = fuzz::ScratchDir() + "/fixtures";
  fs::create_directories(dir + "/data");
  fs::create_directories(dir + "/gpt2dir");
  const nlohmann::json byte_spec = {{"type", "byte"}};
  // A tiny model with the byte tokenizer (vocabulary 257), with optimizer state (resumable).
  ModelConfig c;
  c.vocab_size = 257;
  c.context = 16;
  c.d_model = 8;
  c.n_layer = 1;
  c.n_head = 2;
  ParameterStore p(c), m(c), v(c);
  p.Initialize(c, 1);
  nlohmann::json train = {{"batch", 2}, {"seq_len", 0}, {"accum", 1}, {"steps", 2},
                          {"lr", 1e-3},  {"seed", 1},    {"bos", false}};
  Must(SaveCheckpoint(dir + "/ckpt", c, p, &m, &v,
                      {{"tokenizer", byte_spec}, {"step", 0}, {"train", train}}),
       "ckpt");
  // An llm.c file of a GPT-2 shaped tiny model.
  ModelConfig g = MakeGpt2Config(257, 8, 8, 1, 2, 32);
  ParameterStore gp(g);
  gp.Initialize(g, 2);
  Must(WriteLlmc(dir + "/model.bin", g, gp), "model.bin");
  // A data directory as attnlab prepare writes it.
  const std::string text =
      "the jury said the city of atlanta and the election was conducted.\n\n"
      "a second paragraph with other words, numbers 12 and 345.\n\n";
  std::string corpus;
  for (int i = 0; i < 6; ++i) corpus += text;
  std::vector<int32_t> toks(corpus.begin(), corpus.end());
  Must(WriteTokenFile(dir + "/data/train.tok", toks, 257), "train.tok");
  Must(WriteTokenFile(dir + "/data/val.tok", std::vector<int32_t>(toks.begin(), toks.begin() + 200),
                      257),
       "val.tok");
  WriteText(dir + "/data/tokenizer.json", byte_spec.dump());
  WriteText(dir + "/data/corpus.json", "{\"unigram_val_loss\": 3.0}\n");
  WriteText(dir + "/text.txt", corpus);
  WriteText(dir + "/batch.json", "[\"hello\", \"world \\u00e9\"]");
  WriteText(dir + "/train.json",
            "{\"model\": {\"n_layer\": 1, \"d_model\": 8, \"n_head\": 2, \"context\": 16}, "
            "\"train\": {\"batch\": 2, \"steps\": 2, \"eval_every\": 1, \"eval_batches\": 1}}");
  // A BPE vocabulary and GPT-2 style files.
  BpeTrainer trainer;
  trainer.AddText(corpus);
  BpeTrainerOptions topts;
  topts.num_merges = 20;
  Result<BpeVocabulary> vocab = trainer.Train(topts);
  Must(vocab.status(), "vocab");
  Must(SaveBpeVocabulary(*vocab, dir + "/vocab.json"), "vocab.json");
  nlohmann::ordered_json enc = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) enc[Gpt2RenderBytes(std::string(1, static_cast<char>(b)))] = b;
  enc["th"] = 256;
  enc["the"] = 257;
  enc["<|endoftext|>"] = 258;
  WriteText(dir + "/gpt2dir/encoder.json", enc.dump());
  WriteText(dir + "/gpt2dir/vocab.bpe", "#version: 0.2\nt h\nth e\n");
  // .npy inputs for attention: q, k, v, dout [1, 2, 4, 8], a mask [4, 4], sink logits [2].
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  const int64_t shape[4] = {1, 2, 4, 8};
  for (const char* name : {"q.npy", "k.npy", "v.npy", "dout.npy"}) {
    Must(WriteNpyFloat(dir + "/" + name, x.data(), shape), name);
  }
  const uint8_t mask[16] = {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1};
  const int64_t mshape[2] = {4, 4};
  Must(WriteNpyUint8(dir + "/mask.npy", mask, mshape), "mask.npy");
  const int64_t sshape[1] = {2};
  Must(WriteNpyFloat(dir + "/sink.npy", x.data(), sshape), "sink.npy");
  return dir;
}

bool Skip(const std::vector<std::string>& args) {
  static const std::set<std::string> kWorkFlags = {"--steps",   "--max-tokens", "--repeats",
                                                   "--decode",  "--prefill",    "--merges",
                                                   "--eval-batches", "--chunk"};
  if (args.empty()) return false;
  const std::string& cmd = args[0];
  auto has = [&](const char* flag) {
    for (const std::string& a : args) {
      if (a == flag || a.rfind(std::string(flag) + "=", 0) == 0) return true;
    }
    return false;
  };
  if (cmd == "bench") return true;
  if (cmd == "prepare" && !has("--text")) return true;
  if (cmd == "train" && !has("--steps")) return true;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.find('/') != std::string::npos || a == ".." || a == "-") return true;
    // Flag with its value: "--steps 100" or "--steps=100".
    std::string flag = a, value;
    if (const size_t eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[i + 1];
    }
    // Every numeric piece of the argument.
    std::string piece;
    for (size_t k = 0; k <= a.size(); ++k) {
      if (k == a.size() || a[k] == ',' || a[k] == '=' || a[k] == ' ') {
        if (!piece.empty()) {
          char* end = nullptr;
          const double x = std::strtod(piece.c_str(), &end);
          if (end != piece.c_str() && *end == '\0') {
            const double mag = std::fabs(x);
            if (std::isnan(x) || (mag > 64 && mag < 4.6e18)) return true;
          }
        }
        piece.clear();
      } else {
        piece += a[k];
      }
    }
    if (kWorkFlags.count(flag) || flag == "--threads") {
      char* end = nullptr;
      const double x = std::strtod(value.c_str(), &end);
      if (end != value.c_str() && std::fabs(x) > (flag == "--threads" ? 4 : 64)) return true;
    }
  }
  return false;
}

}  // namespace

ATTNLAB_FUZZ_TARGET(cli) {
  static const std::string fixtures = [] {
    ::setenv("ATTNLAB_NUM_THREADS", "1", 1);
    const int null_in = ::open("/dev/null", O_RDONLY);
    if (null_in >= 0) ::dup2(null_in, 0);
    return MakeFixtures();
  }();
  if (size > 4096) return 0;
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == 0) {
      args.push_back(cur);
      cur.clear();
      if (args.size() > 32) return 0;
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  if (Skip(args)) return 0;
  // A fresh copy of the fixtures as the working directory.
  const std::string run = fuzz::ScratchDir() + "/run";
  std::error_code ec;
  fs::remove_all(run, ec);
  fs::copy(fixtures, run, fs::copy_options::recursive, ec);
  if (ec) fuzz::FuzzFail("cannot copy the fixtures: " + ec.message());
  const fs::path home = fs::current_path();
  fs::current_path(run);
  std::vector<char*> argv;
  std::string prog = "attnlab";
  argv.push_back(prog.data());
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  const int saved_out = ::dup(1);
  const int null_out = ::open("/dev/null", O_WRONLY);
  ::dup2(null_out, 1);
  const int rc = cli::RunCli(static_cast<int>(argv.size() - 1), argv.data());
  std::fflush(stdout);
  ::dup2(saved_out, 1);
  ::close(saved_out);
  ::close(null_out);
  fs::current_path(home);
  if (DefaultThreadCount() != 1) SetDefaultThreadCount(1);
  (void)rc;
  return 0;
}
