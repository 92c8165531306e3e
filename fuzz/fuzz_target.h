// One macro for a fuzz target, built two ways (fuzz/README.md):
//   - with ATTNLAB_LIBFUZZER (the ATTNLAB_FUZZ=ON clang build): the target is the program's
//     LLVMFuzzerTestOneInput, one libFuzzer executable per *_fuzzer.cc;
//   - otherwise (every normal build): the target registers itself by name in the replay driver
//     (replay_main.cc), which runs committed corpora through every target under ctest.
// A target returns 0 and must not crash, leak, hang or trip a sanitizer on any input. Findings
// that are not sanitizer reports (a broken round trip, say) call FuzzFail, which aborts.
#ifndef ATTNLAB_FUZZ_FUZZ_TARGET_H_
#define ATTNLAB_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnlab::fuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);

struct Target {
  const char* name;
  TargetFn fn;
};
// Every registered target (replay build only).
std::vector<Target>& Registry();
struct Registrar {
  Registrar(const char* name, TargetFn fn) { Registry().push_back({name, fn}); }
};

// Prints "fuzz target broke an invariant: <what>" and aborts (a crash libFuzzer records).
[[noreturn]] void FuzzFail(const std::string& what);
#define ATTNLAB_FUZZ_EXPECT(cond, what)                                          \
  do {                                                                           \
    if (!(cond)) ::attnlab::fuzz::FuzzFail(std::string(#cond) + ": " + (what)); \
  } while (0)

// A private temporary directory for this process (created on first use, removed at exit).
const std::string& ScratchDir();
// Writes bytes to ScratchDir()/name (creating subdirectories); returns the path.
std::string WriteScratchFile(const std::string& name, std::string_view bytes);
// Removes everything under ScratchDir()/name (a file or a directory tree).
void RemoveScratch(const std::string& name);

// True for about one input in `one_in`, always the same ones (a hash of the bytes): for checks
// that write files with fsync, which would otherwise dominate the time per input.
bool Sometimes(const uint8_t* data, size_t size, uint32_t one_in);

// Splits an input into at most `max_parts` parts at the separator line kSplit (so mutations keep
// the parts apart): "config.json" kSplit "model.safetensors" kSplit ...
inline constexpr std::string_view kSplit = "\n@@attnlab-fuzz-split@@\n";
std::vector<std::string_view> SplitInput(std::string_view input, size_t max_parts);

}  // namespace attnlab::fuzz

#ifdef ATTNLAB_LIBFUZZER
#define ATTNLAB_FUZZ_TARGET(name) \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#else
#define ATTNLAB_FUZZ_TARGET(name)                                                       \
  static int AttnlabFuzzTarget_##name(const uint8_t* data, size_t size);                \
  static const ::attnlab::fuzz::Registrar attnlab_fuzz_registrar_##name(                \
      #name, AttnlabFuzzTarget_##name);                                                 \
  static int AttnlabFuzzTarget_##name(const uint8_t* data, size_t size)
#endif

#endif  // ATTNLAB_FUZZ_FUZZ_TARGET_H_
