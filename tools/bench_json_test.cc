// Every `attnlab bench` subcommand's --json output is one document of the one schema
// (bench_json.h, bench/README.md "JSON schema"): each subcommand runs at its smallest settings,
// as a user runs it (the binary from $ATTNLAB_BIN, which CMake sets for this test binary; else
// the `attnlab` next to it), and stdout must parse as exactly one JSON document that
// ValidateBenchJson accepts, with notes only on stderr. Also: the validator rejects documents
// that break the schema, and out-of-range or contradictory options exit 2 (docs/CLI.md).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_json.h"
#include "cli_test_util.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using cli_test::RunResult;

// Runs `attnlab <args>` with stdout and stderr captured separately.
RunResult RunAttnlab(const std::string& args) { return cli_test::RunCli(args); }

std::string Join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

// The smallest run of every subcommand (2 threads; tiny triad, one repeat).
struct Case {
  const char* command;  // the document's "command"
  const char* args;
};
const Case kCases[] = {
    {"bench attention",
     "bench attention --n 64 --head-dim 16 --heads 2 --heads-kv 1 --causal --backward "
     "--repeats 1"},
    // Every softmax whose backward the bench's own double-precision check computes.
    {"bench attention",
     "bench attention --n 97 --head-dim 16 --heads 2 --causal --backward --softmax softpick "
     "--repeats 1"},
    {"bench attention",
     "bench attention --n 64 --head-dim 16 --heads 2 --backward --softmax sigmoid --repeats 1"},
    {"bench attention",
     "bench attention --n 64 --head-dim 16 --heads 2 --backward --softmax sink --repeats 1"},
    {"bench decode",
     "bench decode --len 64 --heads 2 --head-dim 16 --dtype f32,bf16 --repeats 1 --triad-mib 2"},
    {"bench model",
     "bench model --layers 1 --d-model 32 --heads 2 --vocab 64 --context 32 --batch 2 "
     "--seq-len 16 --steps 1 --decode 4 --kv-dtype bf16"},
    {"bench suite", "bench suite --quick --repeats 1 --triad-mib 2"},
};

TEST(BenchJson, EverySubcommandPrintsOneValidDocument) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.args);
    const RunResult r = RunAttnlab(std::string("--threads 2 ") + c.args + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(r.out);  // the whole of stdout: one document, nothing else
    } catch (const std::exception& e) {
      FAIL() << "stdout is not one JSON document: " << e.what() << "\n" << r.out.substr(0, 400);
    }
    const std::vector<std::string> errors = bench::ValidateBenchJson(doc);
    EXPECT_TRUE(errors.empty()) << Join(errors);
    EXPECT_EQ(doc["command"], c.command);
    EXPECT_EQ(doc["threads"], 2);
    EXPECT_TRUE(doc["passed"].get<bool>());
    EXPECT_FALSE(doc["baselines"].empty());
    // Every measured row names its baseline; the kernels validated before timing (all but the
    // reference itself and the model's inference rows) carry their checks.
    for (const auto& row : doc["rows"]) {
      if (!row["skipped"].is_null()) continue;
      EXPECT_TRUE(row["baseline"].is_string()) << row.dump();
      const std::string k = row["kernel"];
      const bool model_inference = c.command == std::string("bench model") && k != "train_step";
      if (k != "ref_fwd" && !model_inference) {
        EXPECT_FALSE(row["checks"].empty()) << row.dump();
      }
    }
    // What it runs is said up front, on stderr (stdout holds the document only).
    EXPECT_EQ(r.err.rfind("# attnlab " + std::string(c.command), 0), 0u) << r.err;
    EXPECT_NE(r.err.find("memory ~"), std::string::npos) << r.err;
  }
}

TEST(BenchJson, TableOutputSaysWhatItRunsFirst) {
  const RunResult r = RunAttnlab("--threads 2 bench decode --len 64 --heads 2 --head-dim 16 "
                          "--dtype f32 --repeats 1 --triad-mib 2 --no-cold");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("# attnlab bench decode: KV lengths 64", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("memory ~"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("triad"), std::string::npos) << r.out;
}

TEST(BenchJson, BadOptionsAreUsageErrors) {
  // Out of range (CLI11 checks) and contradictory (UsageError): exit 2, one message, no run.
  for (const char* args : {
           "bench attention --n 0",
           "bench attention --n 64,x",
           "bench attention --head-dim 0",
           "bench attention --heads 6 --heads-kv 4",
           "bench attention --softmax nope",
           "bench attention --repeats 0",
           "bench decode --len 0",
           "bench decode --dtype f8",
           "bench decode --heads 6 --heads-kv 4",
           "bench decode --triad-mib 0",
           "bench model --preset gpt3",
           "bench model --steps -1",
           "bench model --d-model 64",
           "bench model --prefill 250 --decode 64",
           "bench model --seq-len 512",
           "bench model --layers 1 --d-model 30 --heads 4",
           "bench suite --repeats 0",
           "bench suite --quick --full",
       }) {
    SCOPED_TRACE(args);
    const RunResult r = RunAttnlab(args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_FALSE(r.err.empty());
  }
}

// A minimal valid document, then one break at a time.
nlohmann::json ValidDoc() {
  return nlohmann::json::parse(R"json({
    "schema": "attnlab-bench/1", "command": "bench decode", "cpu": "x", "threads": 2,
    "onednn_threads": 2, "date": "2025-01-31T12:00:00Z", "version": "0.1.0 (commit abc)",
    "simd": {"compiled": "AVX2+FMA", "cpu": "AVX2+FMA"}, "settings": {},
    "memory_estimate_bytes": 1000, "definitions": {"ratio": "r"},
    "baselines": [{"id": "triad", "kernel": "triad", "shape": {"elements": 10},
                   "shape_text": "t", "time_ms": 1.0, "rate": 10.0, "unit": "GB/s",
                   "note": ""}],
    "rows": [{"kernel": "decode", "shape": {"len_k": 64}, "shape_text": "s", "time_ms": 0.5,
              "rate": 5.0, "unit": "GB/s", "baseline": "triad", "ratio": 0.5,
              "rate_in_baseline_unit": null,
              "checks": [{"name": "c", "holds": true, "value": 1e-7, "bound": 1e-6}],
              "note": "", "skipped": null},
             {"kernel": "x", "shape": {"n": 1}, "shape_text": "s", "time_ms": null,
              "rate": null, "unit": "GFLOP/s", "baseline": null, "ratio": null,
              "rate_in_baseline_unit": null, "checks": [], "note": "", "skipped": "why"}],
    "passed": true})json");
}

TEST(BenchJson, ValidatorAcceptsTheSchemaAndRejectsBreaks) {
  EXPECT_TRUE(bench::ValidateBenchJson(ValidDoc()).empty())
      << Join(bench::ValidateBenchJson(ValidDoc()));
  const auto broken = [](auto edit) {
    nlohmann::json d = ValidDoc();
    edit(d);
    return !bench::ValidateBenchJson(d).empty();
  };
  using J = nlohmann::json;
  EXPECT_TRUE(broken([](J& d) { d["schema"] = "attnlab-bench/0"; }));
  EXPECT_TRUE(broken([](J& d) { d.erase("cpu"); }));
  EXPECT_TRUE(broken([](J& d) { d["threads"] = 0; }));
  EXPECT_TRUE(broken([](J& d) { d["date"] = "2025-01-31 12:00:00 UTC"; }));
  EXPECT_TRUE(broken([](J& d) { d["rows"][0]["shape"] = "H=2 KV=64"; }));  // shape as text
  EXPECT_TRUE(broken([](J& d) { d["rows"][0].erase("checks"); }));
  EXPECT_TRUE(broken([](J& d) { d["rows"][0]["gflops"] = 1; d["rows"][0].erase("rate"); }));
  EXPECT_TRUE(broken([](J& d) { d["rows"][0]["unit"] = "flops"; }));
  EXPECT_TRUE(broken([](J& d) { d["rows"][0]["ratio"] = 0.7; }));       // not rate / baseline
  EXPECT_TRUE(broken([](J& d) { d["rows"][0]["baseline"] = "sgemm"; }));  // no such baseline
  EXPECT_TRUE(broken([](J& d) { d["rows"][0]["ratio"] = nullptr; }));
  EXPECT_TRUE(broken([](J& d) { d["rows"][0]["unit"] = "tokens/s"; }));  // needs in-unit rate
  EXPECT_TRUE(broken([](J& d) { d["rows"][0]["checks"][0]["holds"] = false; }));  // passed
  EXPECT_TRUE(broken([](J& d) { d["rows"][1]["time_ms"] = 1.0; }));  // skipped with a time
  EXPECT_TRUE(broken([](J& d) { d["baselines"].push_back(d["baselines"][0]); }));  // dup id
  EXPECT_TRUE(broken([](J& d) { d["rows"] = J::array(); }));
  // A rate in another unit than its baseline's is fine with rate_in_baseline_unit.
  EXPECT_FALSE(broken([](J& d) {
    d["rows"][0]["unit"] = "tokens/s";
    d["rows"][0]["rate"] = 1000.0;
    d["rows"][0]["rate_in_baseline_unit"] = 2.0;
    d["rows"][0]["ratio"] = 0.2;
  }));
}

}  // namespace
}  // namespace attnlab
