// The one JSON document every `attnlab bench` subcommand prints with --json (bench/README.md,
// "JSON schema", states it for users): the machine and the run, the baselines measured in the
// same run, and one row per measured kernel with its shape as an object, its rate, its ratio to a
// named same-run baseline and the checks that ran before it was timed.
//
//   {"schema": "attnlab-bench/1", "command": "bench decode", "cpu": "...", "threads": 2,
//    "onednn_threads": 2, "date": "2025-01-31T12:00:00Z", "version": "0.1.0 (commit abc)",
//    "simd": {"compiled": "SSE4.2", "kernels": "avx512 (x86-64-v4, 16 lanes, tile 6x64)",
//             "cpu": "AVX-512"},
//    "settings": {...what ran: the command's sizes and options, free-form per command...},
//    "memory_estimate_bytes": 123456789,
//    "definitions": {"rate": "...", "ratio": "...", ...},
//    "baselines": [{"id": "triad", "kernel": "triad", "shape": {...}, "shape_text": "...",
//                   "time_ms": 1.2, "rate": 10.5, "unit": "GB/s", "note": "..."}],
//    "rows": [{"kernel": "decode", "shape": {...}, "shape_text": "...", "time_ms": 0.1,
//              "rate": 9.1, "unit": "GB/s", "baseline": "triad", "ratio": 0.87,
//              "rate_in_baseline_unit": null,
//              "checks": [{"name": "out vs double reference", "holds": true,
//                          "value": 1e-7, "bound": 2e-6}],
//              "note": "", "skipped": null}],
//    "passed": true}
//
// The writer (BenchDocument, bench_json.cc) is part of the CLI; the validator below is
// header-only so that tests can check any document without linking the CLI.
#ifndef ATTNLAB_TOOLS_BENCH_JSON_H_
#define ATTNLAB_TOOLS_BENCH_JSON_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_table.h"

namespace attnlab::bench {

inline constexpr char kBenchSchema[] = "attnlab-bench/1";

// The document of one bench run. The header fields are filled on construction; the command adds
// its settings, definitions, baselines and rows, then prints it.
class BenchDocument {
 public:
  explicit BenchDocument(const std::string& command);  // e.g. "bench decode"

  nlohmann::ordered_json& settings() { return settings_; }
  void SetMemoryEstimate(int64_t bytes) { memory_estimate_ = bytes; }
  void Define(const std::string& key, const std::string& text) { definitions_[key] = text; }
  // A same-run baseline; rows name it by its id (TableRow::baseline). The id must be unique.
  void AddBaseline(const std::string& id, const TableRow& r);
  void AddRow(const TableRow& r);

  nlohmann::ordered_json ToJson() const;
  // The document on stdout, nothing else (--json).
  void Print() const;

  const std::string& cpu() const { return cpu_; }
  const std::string& date() const { return date_; }
  int threads() const { return threads_; }
  int onednn_threads() const { return onednn_threads_; }
  const std::string& simd_compiled() const { return simd_compiled_; }
  const std::string& simd_cpu() const { return simd_cpu_; }
  const std::string& simd_kernels() const { return simd_kernels_; }

 private:
  std::string command_, cpu_, date_, version_, simd_compiled_, simd_cpu_, simd_kernels_;
  int threads_ = 0, onednn_threads_ = 0;
  int64_t memory_estimate_ = -1;
  nlohmann::ordered_json settings_ = nlohmann::ordered_json::object();
  nlohmann::ordered_json definitions_ = nlohmann::ordered_json::object();
  nlohmann::ordered_json baselines_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json rows_ = nlohmann::ordered_json::array();
  bool passed_ = true;
};

// The row's JSON object (every key always present; null where it does not apply).
nlohmann::ordered_json RowJson(const TableRow& r);

// The units a rate may have.
inline bool IsBenchUnit(const std::string& u) {
  return u == "GFLOP/s" || u == "GB/s" || u == "tokens/s";
}

// Every way `doc` departs from the schema, one line each; empty when it conforms. Checks types,
// required keys, that every row's baseline names a baseline of the document and that its ratio
// is its rate (or rate_in_baseline_unit when the units differ) over that baseline's rate, and
// that "passed" is the conjunction of the rows' checks.
inline std::vector<std::string> ValidateBenchJson(const nlohmann::json& doc) {
  std::vector<std::string> errors;
  auto err = [&](const std::string& where, const std::string& what) {
    errors.push_back(where + ": " + what);
  };
  auto need = [&](const nlohmann::json& o, const std::string& where, const char* key,
                  nlohmann::json::value_t type, bool nullable = false) -> const nlohmann::json* {
    if (!o.is_object() || !o.contains(key)) {
      err(where, std::string("missing \"") + key + "\"");
      return nullptr;
    }
    const nlohmann::json& v = o[key];
    if (nullable && v.is_null()) return &v;
    const bool ok = type == nlohmann::json::value_t::number_float ? v.is_number()
                    : type == nlohmann::json::value_t::number_integer
                        ? v.is_number_integer()
                        : v.type() == type;
    if (!ok) {
      err(where, std::string("\"") + key + "\" has the wrong type (" + v.type_name() + ")");
      return nullptr;
    }
    return &v;
  };
  using T = nlohmann::json::value_t;
  if (!doc.is_object()) return {"the document is not a JSON object"};
  if (const auto* v = need(doc, "document", "schema", T::string); v && *v != kBenchSchema) {
    err("document", "schema is " + v->dump() + ", expected \"" + kBenchSchema + "\"");
  }
  if (const auto* v = need(doc, "document", "command", T::string);
      v && v->get<std::string>().rfind("bench ", 0) != 0) {
    err("document", "command " + v->dump() + " is not a bench subcommand");
  }
  need(doc, "document", "cpu", T::string);
  need(doc, "document", "version", T::string);
  for (const char* k : {"threads", "onednn_threads"}) {
    if (const auto* v = need(doc, "document", k, T::number_integer); v && v->get<int64_t>() < 1) {
      err("document", std::string(k) + " < 1");
    }
  }
  if (const auto* v = need(doc, "document", "date", T::string)) {
    const std::string d = *v;  // YYYY-MM-DDTHH:MM:SSZ
    bool ok = d.size() == 20 && d[4] == '-' && d[7] == '-' && d[10] == 'T' && d[13] == ':' &&
              d[16] == ':' && d[19] == 'Z';
    for (int i : {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18}) {
      ok = ok && d.size() == 20 && d[i] >= '0' && d[i] <= '9';
    }
    if (!ok) err("document", "date '" + d + "' is not YYYY-MM-DDTHH:MM:SSZ");
  }
  if (const auto* v = need(doc, "document", "simd", T::object)) {
    need(*v, "simd", "compiled", T::string);
    need(*v, "simd", "cpu", T::string);
  }
  need(doc, "document", "settings", T::object);
  if (const auto* v = need(doc, "document", "memory_estimate_bytes", T::number_integer, true);
      v && !v->is_null() && v->get<int64_t>() < 0) {
    err("document", "memory_estimate_bytes < 0");
  }
  if (const auto* v = need(doc, "document", "definitions", T::object)) {
    for (const auto& [k, d] : v->items()) {
      if (!d.is_string()) err("definitions", "\"" + k + "\" is not a string");
    }
  }
  // Baselines.
  struct Base {
    double rate;
    std::string unit;
  };
  std::map<std::string, Base> bases;
  const auto* baselines = need(doc, "document", "baselines", T::array);
  for (size_t i = 0; baselines && i < baselines->size(); ++i) {
    const nlohmann::json& b = (*baselines)[i];
    const std::string where = "baselines[" + std::to_string(i) + "]";
    if (!b.is_object()) {
      err(where, "not an object");
      continue;
    }
    const auto* id = need(b, where, "id", T::string);
    need(b, where, "kernel", T::string);
    if (const auto* s = need(b, where, "shape", T::object); s && s->empty()) {
      err(where, "empty shape");
    }
    need(b, where, "shape_text", T::string);
    need(b, where, "note", T::string);
    const auto* t = need(b, where, "time_ms", T::number_float);
    const auto* rate = need(b, where, "rate", T::number_float);
    const auto* unit = need(b, where, "unit", T::string);
    if (t && !(t->get<double>() > 0)) err(where, "time_ms <= 0");
    if (rate && !(rate->get<double>() > 0)) err(where, "rate <= 0");
    if (unit && !IsBenchUnit(*unit)) err(where, "unknown unit " + unit->dump());
    if (id && rate && unit) {
      if (bases.count(*id)) err(where, "duplicate id " + id->dump());
      bases[*id] = {rate->get<double>(), unit->get<std::string>()};
    }
  }
  // Rows.
  bool all_hold = true;
  const auto* rows = need(doc, "document", "rows", T::array);
  if (rows && rows->empty()) err("document", "no rows");
  for (size_t i = 0; rows && i < rows->size(); ++i) {
    const nlohmann::json& r = (*rows)[i];
    const std::string where = "rows[" + std::to_string(i) + "]";
    if (!r.is_object()) {
      err(where, "not an object");
      continue;
    }
    need(r, where, "kernel", T::string);
    if (const auto* s = need(r, where, "shape", T::object); s && s->empty()) {
      err(where, "empty shape");
    }
    need(r, where, "shape_text", T::string);
    need(r, where, "note", T::string);
    const auto* skipped = need(r, where, "skipped", T::string, true);
    const auto* t = need(r, where, "time_ms", T::number_float, true);
    const auto* rate = need(r, where, "rate", T::number_float, true);
    const auto* unit = need(r, where, "unit", T::string);
    const auto* base = need(r, where, "baseline", T::string, true);
    const auto* ratio = need(r, where, "ratio", T::number_float, true);
    const auto* in_base = need(r, where, "rate_in_baseline_unit", T::number_float, true);
    if (unit && !IsBenchUnit(*unit)) err(where, "unknown unit " + unit->dump());
    if (const auto* checks = need(r, where, "checks", T::array)) {
      for (size_t c = 0; c < checks->size(); ++c) {
        const std::string cw = where + ".checks[" + std::to_string(c) + "]";
        need((*checks)[c], cw, "name", T::string);
        need((*checks)[c], cw, "value", T::number_float, true);
        need((*checks)[c], cw, "bound", T::number_float, true);
        if (const auto* h = need((*checks)[c], cw, "holds", T::boolean)) {
          all_hold = all_hold && h->get<bool>();
        }
      }
    }
    if (!skipped || !t || !rate || !unit || !base || !ratio || !in_base) continue;
    if (!skipped->is_null()) {  // a skipped row has no numbers
      if (!t->is_null() || !rate->is_null() || !ratio->is_null()) {
        err(where, "skipped, but has time_ms, rate or ratio");
      }
      continue;
    }
    if (t->is_null() || !(t->get<double>() > 0)) err(where, "time_ms missing or <= 0");
    if (rate->is_null() || !(rate->get<double>() > 0)) {
      err(where, "rate missing or <= 0");
      continue;
    }
    if (base->is_null()) {
      if (!ratio->is_null()) err(where, "ratio without a baseline");
      continue;
    }
    const auto b = bases.find(*base);
    if (b == bases.end()) {
      err(where, "baseline " + base->dump() + " is not in baselines");
      continue;
    }
    if (ratio->is_null()) {
      err(where, "a baseline without a ratio");
      continue;
    }
    double num = rate->get<double>();
    if (b->second.unit != unit->get<std::string>()) {
      if (in_base->is_null()) {
        err(where, "unit " + unit->dump() + " differs from its baseline's (" + b->second.unit +
                       ") but rate_in_baseline_unit is null");
        continue;
      }
      num = in_base->get<double>();
    }
    const double want = num / b->second.rate;
    if (!(std::abs(ratio->get<double>() - want) <= 1e-6 * std::max(1.0, std::abs(want)))) {
      err(where, "ratio " + ratio->dump() + " is not rate / baseline rate (" +
                     std::to_string(want) + ")");
    }
  }
  if (const auto* p = need(doc, "document", "passed", T::boolean); p && *p != all_hold) {
    err("document", "\"passed\" is not the conjunction of the rows' checks");
  }
  return errors;
}

}  // namespace attnlab::bench

#endif  // ATTNLAB_TOOLS_BENCH_JSON_H_
