#include "formats/safetensors_folder.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "core/files.h"
#include "formats/safetensors.h"

namespace attnlab {

namespace {

using nlohmann::json;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class SafetensorsSource final : public TensorSource {
 public:
  // One entry per exposed tensor: which shard, and the tensor there.
  struct Entry {
    size_t shard = 0;
    const SafetensorsTensor* tensor = nullptr;
    SourceTensorInfo info;
  };
  std::vector<SafetensorsFile> shards;
  std::map<std::string, Entry> entries;

  std::vector<std::string> Names() const override {
    std::vector<std::string> out;
    out.reserve(entries.size());
    for (const auto& [name, e] : entries) out.push_back(name);
    return out;
  }
  const SourceTensorInfo* Find(const std::string& name) const override {
    auto it = entries.find(name);
    return it == entries.end() ? nullptr : &it->second.info;
  }
  Status ReadFloat(const std::string& name, std::span<float> out) const override {
    auto it = entries.find(name);
    if (it == entries.end()) return Status::NotFound("no tensor '" + name + "'");
    const Entry& e = it->second;
    return shards[e.shard].ReadFloat(*e.tensor, out.data(), static_cast<int64_t>(out.size()));
  }

  Mapped StoredRows(const std::string& name) const override {
    auto it = entries.find(name);
    if (it == entries.end() || it->second.info.shape.size() != 2) return {};
    const Entry& e = it->second;
    Mapped m;
    switch (e.tensor->dtype) {
      case SafetensorsDtype::kF32: m.dtype = KvDtype::kF32; break;
      case SafetensorsDtype::kF16: m.dtype = KvDtype::kF16; break;
      case SafetensorsDtype::kBF16: m.dtype = KvDtype::kBF16; break;
      default: return {};
    }
    m.bytes = shards[e.shard].Bytes(*e.tensor);
    m.keepalive = shards[e.shard].keepalive();
    return m;
  }

  Status Add(const std::string& name, size_t shard) {
    const SafetensorsTensor* t = shards[shard].Find(name);
    if (t == nullptr) {
      return Status::Corrupt(shards[shard].path() + ": has no tensor '" + name +
                             "' (the index says it is there)");
    }
    Entry e;
    e.shard = shard;
    e.tensor = t;
    e.info.shape = t->shape;
    e.info.dtype = SafetensorsDtypeName(t->dtype);
    e.info.file = shards[shard].path();
    entries[name] = std::move(e);
    return Status::Ok();
  }
};

}  // namespace

Result<std::map<std::string, std::string>> ParseSafetensorsIndex(const std::string& text,
                                                                 const std::string& name) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Corrupt(name + ": not valid JSON");
  if (!j.is_object()) return Status::Corrupt(name + ": expected a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) {
    return Status::Corrupt(name + ": expected a \"weight_map\" object (tensor -> shard file)");
  }
  std::map<std::string, std::string> out;
  std::map<std::string, int> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return Status::Corrupt(name + ": weight_map entry '" + it.key() + "' is not a file name");
    }
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos ||
        file.find('\\') != std::string::npos || file == "." || file == ".." ||
        !EndsWith(file, ".safetensors")) {
      return Status::Corrupt(name + ": weight_map entry '" + it.key() + "' names '" + file +
                             "', not a .safetensors file in the same folder");
    }
    if (it.key().empty()) return Status::Corrupt(name + ": weight_map has an empty tensor name");
    shards[file] = 0;
    if (shards.size() > static_cast<size_t>(kMaxShards)) {
      return Status::Corrupt(name + ": more than " + std::to_string(kMaxShards) + " shards");
    }
    out[it.key()] = file;
  }
  if (out.empty()) return Status::Corrupt(name + ": weight_map is empty");
  return out;
}

Result<std::unique_ptr<TensorSource>> OpenSafetensorsSource(const std::string& path) {
  auto src = std::make_unique<SafetensorsSource>();
  if (KindOf(path) == PathKind::kFile) {
    ATTNLAB_ASSIGN_OR_RETURN(SafetensorsFile f, ReadSafetensors(path));
    src->shards.push_back(std::move(f));
    for (const SafetensorsTensor& t : src->shards[0].tensors()) {
      ATTNLAB_RETURN_IF_ERROR(src->Add(t.name, 0));
    }
    return std::unique_ptr<TensorSource>(std::move(src));
  }
  if (KindOf(path) != PathKind::kDirectory) {
    return Status::NotFound(path + ": no such file or directory");
  }
  const std::string index = path + "/" + kSafetensorsIndexFile;
  if (KindOf(index) != PathKind::kFile) {
    const std::string single = path + "/model.safetensors";
    if (KindOf(single) != PathKind::kFile) {
      return Status::NotFound(path + ": has neither " + kSafetensorsIndexFile +
                              " nor model.safetensors");
    }
    return OpenSafetensorsSource(single);
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index, int64_t{64} << 20));
  ATTNLAB_ASSIGN_OR_RETURN(auto map, ParseSafetensorsIndex(text, index));
  std::map<std::string, size_t> shard_of_file;
  for (const auto& [tensor, file] : map) {
    if (shard_of_file.count(file)) continue;
    const std::string shard_path = path + "/" + file;
    if (KindOf(shard_path) != PathKind::kFile) {
      return Status::NotFound(index + ": shard " + file + " (holding '" + tensor +
                              "') is missing from " + path);
    }
    ATTNLAB_ASSIGN_OR_RETURN(SafetensorsFile f, ReadSafetensors(shard_path));
    shard_of_file[file] = src->shards.size();
    src->shards.push_back(std::move(f));
  }
  for (const auto& [tensor, file] : map) {
    ATTNLAB_RETURN_IF_ERROR(src->Add(tensor, shard_of_file.at(file)));
  }
  return std::unique_ptr<TensorSource>(std::move(src));
}

}  // namespace attnlab
