#include "train/token_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/atomic_file.h"
#include "core/files.h"

namespace attnlab {

namespace {
constexpr char kMagic[8] = {'A', 'T', 'L', 'T', 'O', 'K', 'S', '1'};
constexpr int64_t kHeaderBytes = 32;

template <typename T>
void Put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
template <typename T>
T Get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Status WriteTokenFile(const std::string& path, const std::vector<int32_t>& tokens,
                      int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > (int64_t{1} << 31)) {
    return Status::InvalidArgument("token file: vocab_size out of range");
  }
  const uint32_t bpt = vocab_size <= 65536 ? 2 : 4;
  std::string out;
  out.reserve(kHeaderBytes + tokens.size() * bpt);
  out.append(kMagic, 8);
  Put<uint32_t>(out, 1);
  Put<uint32_t>(out, bpt);
  Put<uint32_t>(out, static_cast<uint32_t>(vocab_size));
  Put<uint32_t>(out, 0);
  Put<uint64_t>(out, tokens.size());
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab_size) {
      return Status::InvalidArgument("token file: token " + std::to_string(t) +
                                     " outside the vocabulary of " + std::to_string(vocab_size));
    }
    if (bpt == 2) {
      Put<uint16_t>(out, static_cast<uint16_t>(t));
    } else {
      Put<uint32_t>(out, static_cast<uint32_t>(t));
    }
  }
  return WriteFileAtomically(path, out);
}

Result<TokenFile> ReadTokenFile(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(ReadOnlyFile file,
                           ReadOnlyFile::Open(path, "", "token file '" + path + "'"));
  const int64_t size = file.size();
  if (size < kHeaderBytes) {
    return Status::Corrupt("token file '" + path + "' is " + std::to_string(size) +
                           " bytes, shorter than its 32-byte header");
  }
  char header[kHeaderBytes];
  ATTNLAB_RETURN_IF_ERROR(file.ReadAt(0, header, kHeaderBytes, "the header"));
  if (std::memcmp(header, kMagic, 8) != 0) {
    return Status::Corrupt("'" + path + "' is not an attnlab token file (bad magic: expected "
                           "ATLTOKS1)");
  }
  const uint32_t version = Get<uint32_t>(header + 8), bpt = Get<uint32_t>(header + 12);
  const uint32_t vocab = Get<uint32_t>(header + 16);
  const uint64_t count = Get<uint64_t>(header + 24);
  if (version != 1) {
    return Status::Corrupt("token file '" + path + "': unsupported version " +
                           std::to_string(version) + " (expected 1)");
  }
  if (bpt != 2 && bpt != 4) {
    return Status::Corrupt("token file '" + path + "': bytes per token must be 2 or 4, found " +
                           std::to_string(bpt));
  }
  // Token ids are int32: the writer's limit, 2^31, bounds the vocabulary.
  if (vocab == 0 || vocab > (uint32_t{1} << 31)) {
    return Status::Corrupt("token file '" + path + "': vocab_size " + std::to_string(vocab) +
                           " is outside [1, 2^31]");
  }
  const uint64_t avail = static_cast<uint64_t>(size - kHeaderBytes);
  // The declared count against the real size, before anything is allocated.
  if (count > avail / bpt || count * bpt != avail) {
    return Status::Corrupt("token file '" + path + "': header declares " + std::to_string(count) +
                           " tokens of " + std::to_string(bpt) + " bytes but the file holds " +
                           std::to_string(avail) + " bytes after the header (truncated?)");
  }
  TokenFile tf;
  tf.vocab_size = vocab;
  std::vector<char> raw(avail);
  ATTNLAB_RETURN_IF_ERROR(file.ReadAt(kHeaderBytes, raw.data(), static_cast<int64_t>(avail), "the tokens"));
  tf.tokens.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t t = bpt == 2 ? Get<uint16_t>(raw.data() + 2 * i) : Get<uint32_t>(raw.data() + 4 * i);
    if (t >= vocab) {
      return Status::Corrupt("token file '" + path + "': token " + std::to_string(t) + " at " +
                             std::to_string(i) + " is outside the vocabulary of " + std::to_string(vocab));
    }
    tf.tokens[i] = static_cast<int32_t>(t);
  }
  return tf;
}

void SampleBatch(const std::vector<int32_t>& tokens, uint64_t seed, int64_t step, int64_t B,
                 int64_t T, int32_t bos, int32_t* inputs, int32_t* targets) {
  SampleBatchAugmented(tokens, seed, step, B, T, bos, FirstTokenAugment{}, inputs, targets);
}

void SampleBatchAugmented(const std::vector<int32_t>& tokens, uint64_t seed, int64_t step,
                          int64_t B, int64_t T, int32_t bos, const FirstTokenAugment& aug,
                          int32_t* inputs, int32_t* targets) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const uint64_t range = static_cast<uint64_t>(n - T - 1 + 1);
  for (int64_t r = 0; r < B; ++r) {
    const uint64_t h = SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(step) * 1315423911ULL + r));
    const int64_t start = static_cast<int64_t>(h % range);
    int32_t* x = inputs + r * T;
    int32_t* y = targets + r * T;
    // Independent uniform draws for the augmentation (53-bit doubles from two more hashes).
    const double u1 = static_cast<double>(SplitMix64(h ^ 0xa5a5a5a5ULL) >> 11) * 0x1p-53;
    const uint64_t h2 = SplitMix64(h ^ 0x5a5a5a5aULL);
    const bool drop = bos >= 0 && u1 < aug.drop;
    const bool replace = bos >= 0 && !drop && u1 < aug.drop + aug.replace;
    if (bos >= 0 && !drop) {
      x[0] = replace ? static_cast<int32_t>(h2 % static_cast<uint64_t>(aug.vocab)) : bos;
      for (int64_t t = 1; t < T; ++t) x[t] = tokens[start + t - 1];
      for (int64_t t = 0; t < T; ++t) y[t] = tokens[start + t];
    } else {
      for (int64_t t = 0; t < T; ++t) {
        x[t] = tokens[start + t];
        y[t] = tokens[start + t + 1];
      }
    }
  }
}

bool EvalBatch(const std::vector<int32_t>& tokens, int64_t index, int64_t B, int64_t T,
               int32_t bos, int32_t* inputs, int32_t* targets) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t stride = T;  // each window predicts T new tokens
  for (int64_t r = 0; r < B; ++r) {
    const int64_t start = (index * B + r) * stride;
    if (start + T + 1 > n) return false;
    int32_t* x = inputs + r * T;
    int32_t* y = targets + r * T;
    if (bos >= 0) {
      x[0] = bos;
      for (int64_t t = 1; t < T; ++t) x[t] = tokens[start + t - 1];
      for (int64_t t = 0; t < T; ++t) y[t] = tokens[start + t];
    } else {
      for (int64_t t = 0; t < T; ++t) {
        x[t] = tokens[start + t];
        y[t] = tokens[start + t + 1];
      }
    }
  }
  return true;
}

}  // namespace attnlab
