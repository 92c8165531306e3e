#include "formats/checkpoint.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "core/atomic_file.h"
#include "core/files.h"
#include "formats/loaded_model.h"
#include "formats/safetensors.h"

namespace attnlab {

namespace {

using nlohmann::json;

constexpr char kConfigFile[] = "config.json";
constexpr char kModelFile[] = "model.safetensors";
constexpr char kOptimizerFile[] = "optimizer.safetensors";
constexpr int64_t kMaxConfigBytes = 16 << 20;

internal::CheckpointCrashPoint g_crash_point = internal::CheckpointCrashPoint::kNone;

bool CrashHere(internal::CheckpointCrashPoint p) {
  if (g_crash_point != p) return false;
  g_crash_point = internal::CheckpointCrashPoint::kNone;
  return true;
}

// The files a checkpoint directory may hold, plus the temporary files of their atomic writes.
bool IsKnownCheckpointFile(const std::string& name) {
  for (const char* known : {kConfigFile, kModelFile, kOptimizerFile}) {
    const std::string k = known;
    if (name == k || name.rfind(k + ".tmp.", 0) == 0) return true;
  }
  return false;
}

// Removes the files attnlab writes in a checkpoint directory, then the directory. Refuses (and
// deletes nothing) if it holds anything else.
Status RemoveCheckpointDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return Status::Ok();
    return Status::IoError(dir + ": cannot list: " + ErrnoMessage(errno));
  }
  std::vector<std::string> known, unknown;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    (IsKnownCheckpointFile(name) ? known : unknown).push_back(name);
  }
  ::closedir(d);
  if (!unknown.empty()) {
    std::string list;
    for (size_t i = 0; i < unknown.size() && i < 5; ++i) list += (i ? ", " : "") + unknown[i];
    if (unknown.size() > 5) list += ", ...";
    return Status::InvalidArgument(dir + " holds files attnlab did not write (" + list +
                                   "); attnlab will not delete it. Hint: move those files "
                                   "elsewhere, or remove the directory by hand");
  }
  for (const std::string& name : known) {
    const std::string p = dir + "/" + name;
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) {
      return Status::IoError(p + ": cannot remove: " + ErrnoMessage(errno));
    }
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    return Status::IoError(dir + ": cannot remove the directory: " + ErrnoMessage(errno));
  }
  return Status::Ok();
}

// Removes DIR.tmp.<pid>.<n> directories left by processes that no longer exist.
void RemoveStaleTempDirs(const std::string& dir) {
  const std::string parent = ParentDirectory(dir);
  const std::string prefix = BaseName(dir) + ".tmp.";
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // "<pid>.<n>"
    const size_t dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || dot > 9) continue;
    bool digits = true;
    for (size_t i = 0; i < dot; ++i)
      digits = digits && std::isdigit(static_cast<unsigned char>(rest[i]));
    if (!digits) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dot)));
    if (pid <= 0) continue;
    // Our own pid: a save that stopped half-way in this process (saves to one DIR do not run
    // concurrently). Another pid: stale only if that process is gone.
    if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH)) {
      stale.push_back(parent + "/" + name);
    }
  }
  ::closedir(d);
  for (const std::string& s : stale) {
    if (KindOf(s) == PathKind::kDirectory) (void)RemoveCheckpointDirectory(s);
  }
}

// mkdir -p.
Status MakeDirectories(const std::string& dir) {
  if (dir.empty() || dir == "." || dir == "/") return Status::Ok();
  if (KindOf(dir) == PathKind::kDirectory) return Status::Ok();
  ATTNLAB_RETURN_IF_ERROR(MakeDirectories(ParentDirectory(dir)));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::IoError(dir + ": cannot create the directory: " + ErrnoMessage(errno));
  }
  return Status::Ok();
}

// Whether ParameterStore `s` is laid out for `c`.
Status CheckStoreLayout(const ParameterStore& s, const ModelConfig& c, const std::string& what) {
  const std::vector<ParamInfo> layout = ParameterLayout(c);
  if (s.infos().size() != layout.size()) {
    return Status::InvalidArgument(what + " has " + std::to_string(s.infos().size()) +
                                   " tensors, the config implies " + std::to_string(layout.size()));
  }
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamInfo& a = s.infos()[i];
    const ParamInfo& b = layout[i];
    if (a.name != b.name || a.shape != b.shape || a.offset != b.offset) {
      return Status::InvalidArgument(what + ": tensor " + std::to_string(i) + " is '" + a.name +
                                     "' " + TensorShapeString(a.shape) + ", the config implies '" +
                                     b.name + "' " + TensorShapeString(b.shape));
    }
  }
  return Status::Ok();
}

Status CheckStoreFinite(const ParameterStore& s, const std::string& what) {
  for (const ParamInfo& p : s.infos())
    ATTNLAB_RETURN_IF_ERROR(CheckFinite(s.Slice(p), p.size, what, p.name));
  return Status::Ok();
}

std::vector<NamedTensor> StoreTensors(const ParameterStore& s, const std::string& prefix) {
  std::vector<NamedTensor> out;
  for (const ParamInfo& p : s.infos())
    out.push_back(NamedTensor::F32(prefix + p.name, p.shape, s.Slice(p)));
  return out;
}

// Checks that `f` holds exactly the tensors of `layout` under each prefix, as F32 with the exact
// shapes (no allocation, so a config that disagrees with the file fails before anything large is
// allocated).
Status CheckFileMatchesLayout(const SafetensorsFile& f, const std::vector<ParamInfo>& layout,
                              const std::vector<std::string>& prefixes) {
  std::set<std::string> expected;
  for (const std::string& prefix : prefixes) {
    for (const ParamInfo& p : layout) {
      const std::string name = prefix + p.name;
      expected.insert(name);
      const SafetensorsTensor* t = f.Find(name);
      if (t == nullptr) {
        return Status::Corrupt(f.path() + ": missing tensor '" + name + "' (expected F32 " +
                               TensorShapeString(p.shape) + " for the model in config.json)");
      }
      if (t->dtype != SafetensorsDtype::kF32) {
        return Status::Corrupt(f.path() + ": tensor '" + name + "' has dtype " +
                               SafetensorsDtypeName(t->dtype) + ", expected F32");
      }
      if (t->shape != p.shape) {
        return Status::Corrupt(f.path() + ": tensor '" + name + "' has shape " +
                               TensorShapeString(t->shape) + ", expected " +
                               TensorShapeString(p.shape) + " for the model in config.json");
      }
    }
  }
  for (const SafetensorsTensor& t : f.tensors()) {
    if (!expected.count(t.name)) {
      return Status::Corrupt(f.path() + ": unexpected tensor '" + t.name + "' " +
                             TensorShapeString(t.shape) +
                             " (not part of the model config.json describes; is config.json "
                             "from another model?)");
    }
  }
  return Status::Ok();
}

Status FillStore(const SafetensorsFile& f, const std::string& prefix, ParameterStore* s) {
  for (const ParamInfo& p : s->infos()) {
    const SafetensorsTensor* t = f.Find(prefix + p.name);
    ATTNLAB_CHECK(t != nullptr);  // CheckFileMatchesLayout ran first
    ATTNLAB_RETURN_IF_ERROR(f.ReadFloat(*t, s->Slice(p), p.size));
    ATTNLAB_RETURN_IF_ERROR(CheckFinite(s->Slice(p), p.size, f.path(), prefix + p.name));
  }
  return Status::Ok();
}

Result<json> ReadJsonObject(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxConfigBytes));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  // (nlohmann stops at a NUL byte; JSON text has none.)
  if (j.is_discarded() || text.find('\0') != std::string::npos) {
    return Status::Corrupt(path + ": not valid JSON");
  }
  if (!j.is_object()) return Status::Corrupt(path + ": expected a JSON object");
  return j;
}

bool IsCheckpointConfig(const json& j) {
  auto f = j.find("format");
  return f != j.end() && f->is_string() && f->get<std::string>() == kCheckpointFormat;
}

// The directory LoadCheckpoint reads for `dir` ("" if neither dir nor dir.old exists).
std::string ResolveCheckpointDir(const std::string& dir) {
  if (KindOf(dir) != PathKind::kMissing) return dir;
  if (KindOf(dir + ".old") == PathKind::kDirectory) return dir + ".old";
  return "";
}

// Step 1 of the protocol: everything into `tmp`.
Status WriteCheckpointFiles(const std::string& tmp, const ModelConfig& config,
                            const ParameterStore& params, const ParameterStore* m,
                            const ParameterStore* v, const json& meta) {
  json cfg = json::parse(ModelConfigToJson(config));
  cfg["format"] = kCheckpointFormat;
  cfg["version"] = kCheckpointVersion;
  cfg["meta"] = meta;
  std::string text;
  try {
    text = cfg.dump(2) + "\n";
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("checkpoint meta is not serialisable: ") + e.what());
  }
  ATTNLAB_RETURN_IF_ERROR(WriteFileAtomically(tmp + "/" + kConfigFile, text));
  ATTNLAB_RETURN_IF_ERROR(WriteSafetensors(tmp + "/" + kModelFile, StoreTensors(params, ""),
                                           {{"format", kCheckpointFormat}}));
  if (m != nullptr) {
    std::vector<NamedTensor> t = StoreTensors(*m, "m.");
    std::vector<NamedTensor> tv = StoreTensors(*v, "v.");
    t.insert(t.end(), tv.begin(), tv.end());
    std::map<std::string, std::string> md{{"format", "attnlab-optimizer"}};
    auto step = meta.find("step");
    if (step != meta.end() && step->is_number_integer())
      md["step"] = std::to_string(step->get<int64_t>());
    auto rng = meta.find("rng_state");
    if (rng != meta.end())
      md["rng_state"] = rng->is_string() ? rng->get<std::string>() : rng->dump();
    ATTNLAB_RETURN_IF_ERROR(WriteSafetensors(tmp + "/" + kOptimizerFile, t, md));
  }
  return SyncDirectory(tmp);
}

Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return Status::IoError("cannot rename " + from + " to " + to + ": " + ErrnoMessage(errno));
  }
  return Status::Ok();
}

}  // namespace

namespace internal {
void SetCheckpointCrashPointForTest(CheckpointCrashPoint p) { g_crash_point = p; }
}  // namespace internal

Result<std::string> NormalizeCheckpointDir(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  const std::string base = slash == std::string::npos ? d : d.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") {
    return Status::InvalidArgument("checkpoint directory '" + dir +
                                   "' has no name of its own; give a path like runs/ckpt");
  }
  return d;
}

Result<bool> IsCheckpointConfigFile(const std::string& config_path) {
  ATTNLAB_ASSIGN_OR_RETURN(json j, ReadJsonObject(config_path));
  return IsCheckpointConfig(j);
}

// ---------------------------------------------------------------------------------------------
// Save.

Status SaveCheckpoint(const std::string& dir_in, const ModelConfig& config,
                      const ParameterStore& params, const ParameterStore* m,
                      const ParameterStore* v, const nlohmann::json& meta_in) {
  ATTNLAB_ASSIGN_OR_RETURN(const std::string dir, NormalizeCheckpointDir(dir_in));
  const std::string what = "saving checkpoint " + dir;
  ATTNLAB_RETURN_IF_ERROR(ValidateModelConfig(config).WithContext(what));
  ATTNLAB_RETURN_IF_ERROR(CheckStoreLayout(params, config, "the parameters").WithContext(what));
  if ((m == nullptr) != (v == nullptr)) {
    return Status::InvalidArgument(what + ": give both optimizer moments m and v, or neither");
  }
  if (m != nullptr) {
    ATTNLAB_RETURN_IF_ERROR(CheckStoreLayout(*m, config, "moment m").WithContext(what));
    ATTNLAB_RETURN_IF_ERROR(CheckStoreLayout(*v, config, "moment v").WithContext(what));
  }
  if (!meta_in.is_object() && !meta_in.is_null()) {
    return Status::InvalidArgument(what + ": meta must be a JSON object");
  }
  const json meta = meta_in.is_null() ? json::object() : meta_in;
  // Refuse to write what could not be loaded back; the previous checkpoint stays.
  ATTNLAB_RETURN_IF_ERROR(CheckStoreFinite(params, what + ": refusing to save parameters"));
  if (m != nullptr) {
    ATTNLAB_RETURN_IF_ERROR(CheckStoreFinite(*m, what + ": refusing to save moment m"));
    ATTNLAB_RETURN_IF_ERROR(CheckStoreFinite(*v, what + ": refusing to save moment v"));
  }

  // Where we are going: DIR must be absent, empty, or an attnlab checkpoint.
  const std::string old = dir + ".old";
  const PathKind kind = KindOf(dir);
  if (kind == PathKind::kFile || kind == PathKind::kOther) {
    return Status::InvalidArgument(what + ": " + dir + " exists and is not a directory");
  }
  if (kind == PathKind::kDirectory && !IsCheckpointDir(dir)) {
    if (::rmdir(dir.c_str()) != 0) {  // succeeds only if empty
      return Status::InvalidArgument(
          what + ": " + dir +
          " exists and is not an attnlab checkpoint (no config.json with "
          "\"format\": \"attnlab-checkpoint\"); refusing to replace it. Hint: choose another path");
    }
  }
  ATTNLAB_RETURN_IF_ERROR(MakeDirectories(ParentDirectory(dir)).WithContext(what));
  RemoveStaleTempDirs(dir);

  // 1. Everything into a fresh sibling directory.
  const std::string tmp = AtomicTempPath(dir);
  if (::mkdir(tmp.c_str(), 0755) != 0) {
    return Status::IoError(what + ": cannot create " + tmp + ": " + ErrnoMessage(errno));
  }
  auto fail = [&](const Status& st) {
    (void)RemoveCheckpointDirectory(tmp);
    return st.WithContext(what);
  };
  Status st = WriteCheckpointFiles(tmp, config, params, m, v, meta);
  if (!st.ok()) return fail(st);
  const std::string parent = ParentDirectory(dir);
  st = SyncDirectory(parent);
  if (!st.ok()) return fail(st);
  if (CrashHere(internal::CheckpointCrashPoint::kAfterTempWritten))
    return Status::Internal("simulated crash");

  // 2. The current checkpoint (if any) to DIR.old. If DIR exists it is complete, so an existing
  // DIR.old is stale; if DIR is missing, DIR.old may be the only good copy and is kept until 3.
  if (KindOf(dir) == PathKind::kDirectory) {
    if (KindOf(old) != PathKind::kMissing) {
      st = RemoveCheckpointDirectory(old);
      if (!st.ok()) return fail(st.WithContext("removing the stale " + old));
    }
    st = Rename(dir, old);
    if (st.ok()) st = SyncDirectory(parent);
    if (!st.ok()) return fail(st);
  }
  if (CrashHere(internal::CheckpointCrashPoint::kAfterOldMoved))
    return Status::Internal("simulated crash");

  // 3. The new checkpoint into place.
  st = Rename(tmp, dir);
  if (!st.ok()) return fail(st);  // DIR.old still holds the previous checkpoint
  st = SyncDirectory(parent);
  if (!st.ok()) return st.WithContext(what + " (the new checkpoint is in place)");
  if (CrashHere(internal::CheckpointCrashPoint::kAfterNewMoved))
    return Status::Internal("simulated crash");

  // 4. Drop the previous checkpoint.
  if (KindOf(old) != PathKind::kMissing) {
    st = RemoveCheckpointDirectory(old);
    if (st.ok()) st = SyncDirectory(parent);
    if (!st.ok()) {
      return st.WithContext(what + ": the new checkpoint is saved, but the previous one (" + old +
                            ") could not be removed");
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Load.

bool IsCheckpointDir(const std::string& dir_in) {
  auto dir = NormalizeCheckpointDir(dir_in);
  if (!dir.ok()) return false;
  const std::string d = ResolveCheckpointDir(*dir);
  if (d.empty()) return false;
  auto j = ReadJsonObject(d + "/" + kConfigFile);
  return j.ok() && IsCheckpointConfig(*j);
}

Result<LoadedCheckpoint> LoadCheckpoint(const std::string& dir_in) {
  ATTNLAB_ASSIGN_OR_RETURN(const std::string dir_norm, NormalizeCheckpointDir(dir_in));
  const std::string dir = ResolveCheckpointDir(dir_norm);
  if (dir.empty()) {
    return Status::NotFound("no checkpoint at " + dir_norm + " (nor " + dir_norm + ".old)");
  }
  if (KindOf(dir) != PathKind::kDirectory) {
    return Status::InvalidArgument(dir + ": a checkpoint is a directory; this is a file");
  }
  const std::string config_path = dir + "/" + kConfigFile;
  auto cfg_or = ReadJsonObject(config_path);
  if (!cfg_or.ok()) {
    if (cfg_or.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(dir + ": no config.json; not an attnlab checkpoint");
    }
    return cfg_or.status();
  }
  json cfg = std::move(cfg_or).value();
  if (!IsCheckpointConfig(cfg)) {
    return Status::InvalidArgument(config_path + ": expected \"format\": \"" +
                                   std::string(kCheckpointFormat) +
                                   "\"; not an attnlab checkpoint");
  }
  auto ver = cfg.find("version");
  if (ver == cfg.end() || !ver->is_number_integer()) {
    return Status::Corrupt(config_path + ": \"version\" must be an integer");
  }
  if (ver->get<int64_t>() != kCheckpointVersion) {
    return Status::OutOfRange(config_path + ": checkpoint version " +
                              std::to_string(ver->get<int64_t>()) +
                              ", this attnlab reads version " + std::to_string(kCheckpointVersion));
  }
  LoadedCheckpoint out;
  out.loaded_from = dir;
  auto meta = cfg.find("meta");
  if (meta != cfg.end()) {
    if (!meta->is_object()) return Status::Corrupt(config_path + ": \"meta\" must be an object");
    out.meta = *meta;
  }
  cfg.erase("format");
  cfg.erase("version");
  cfg.erase("meta");
  auto config = ModelConfigFromJson(cfg.dump());
  if (!config.ok()) return config.status().WithContext(config_path);
  out.config = *config;

  // model.safetensors: names, dtypes and shapes first (no allocation), then the values.
  const std::vector<ParamInfo> layout = ParameterLayout(out.config);
  ATTNLAB_ASSIGN_OR_RETURN(SafetensorsFile model, ReadSafetensors(dir + "/" + kModelFile));
  ATTNLAB_RETURN_IF_ERROR(CheckFileMatchesLayout(model, layout, {""}));
  out.params = ParameterStore(out.config);
  ATTNLAB_RETURN_IF_ERROR(FillStore(model, "", &out.params));

  const std::string opt_path = dir + "/" + kOptimizerFile;
  if (KindOf(opt_path) != PathKind::kMissing) {
    ATTNLAB_ASSIGN_OR_RETURN(SafetensorsFile opt, ReadSafetensors(opt_path));
    ATTNLAB_RETURN_IF_ERROR(CheckFileMatchesLayout(opt, layout, {"m.", "v."}));
    out.m = ParameterStore(out.config);
    out.v = ParameterStore(out.config);
    ATTNLAB_RETURN_IF_ERROR(FillStore(opt, "m.", &out.m));
    ATTNLAB_RETURN_IF_ERROR(FillStore(opt, "v.", &out.v));
    out.has_optimizer = true;
    auto step = opt.metadata().find("step");
    if (step != opt.metadata().end()) {
      const std::string& s = step->second;
      char* end = nullptr;
      errno = 0;
      const long long x = s.empty() ? -1 : std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || errno != 0 || x < 0) {
        return Status::Corrupt(opt_path + ": metadata step '" + s +
                               "' is not a non-negative integer");
      }
      out.optimizer_step = x;
      auto ms = out.meta.find("step");
      if (ms != out.meta.end() && ms->is_number_integer() && ms->get<int64_t>() != x) {
        return Status::Corrupt(opt_path + ": optimizer state is from step " + s +
                               " but config.json says step " + std::to_string(ms->get<int64_t>()) +
                               " (files from different saves?)");
      }
    }
    auto rng = opt.metadata().find("rng_state");
    if (rng != opt.metadata().end()) out.rng_state = rng->second;
  }
  return out;
}

}  // namespace attnlab
