#include "experiments/experiment_data.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "attnlab/tokenizer.h"
#include "core/resources.h"
#include "tokenizer/tokenizer_spec.h"
#include "train/corpus.h"
#include "train/token_data.h"

namespace attnlab::experiments {

Result<TokenData> ReadPreparedData(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("no data directory given");
  ATTNLAB_ASSIGN_OR_RETURN(TokenFile train, ReadTokenFile(dir + "/train.tok"));
  ATTNLAB_ASSIGN_OR_RETURN(TokenFile val, ReadTokenFile(dir + "/val.tok"));
  TokenData d;
  d.train = std::move(train.tokens);
  d.val = std::move(val.tokens);
  d.vocab = std::max(train.vocab_size, val.vocab_size);
  d.source = dir;
  return d;
}

Result<TokenData> LoadTextData(const ExperimentOptions& o) {
  if (!o.data.empty()) return ReadPreparedData(o.data);
  const std::string dir = FindResource(kBrownCorpusPath);
  if (dir.empty()) {
    return Status::NotFound(std::string("no --data DIR given and the Brown corpus (") +
                            kBrownCorpusPath + ") is not installed: run scripts/setup.sh, or "
                            "make a data directory with `attnlab prepare --text FILE --out DIR`");
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::vector<std::string> docs, LoadBrownCorpus(dir));
  std::unique_ptr<Tokenizer> tok = MakeByteTokenizer();
  TokenData d;
  for (size_t i = 0; i < docs.size(); ++i) {
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(docs[i]));
    std::vector<int32_t>& dst = i % 20 == 19 ? d.val : d.train;
    dst.insert(dst.end(), ids.begin(), ids.end());
    dst.push_back(*tok->eos_id());
  }
  d.vocab = tok->vocab_size();
  d.source = "the Brown corpus as bytes (" + std::to_string(docs.size()) + " documents, every 20th held out)";
  return d;
}

Result<double> UnigramValLoss(const TokenData& d) {
  if (d.train.empty() || d.val.empty() || d.vocab <= 0) {
    return Status::InvalidArgument("unigram loss: empty training or validation split");
  }
  auto outside = [&](int32_t t) { return t < 0 || t >= d.vocab; };
  if (std::any_of(d.train.begin(), d.train.end(), outside) ||
      std::any_of(d.val.begin(), d.val.end(), outside)) {
    return Status::InvalidArgument("unigram loss: a token id outside [0, " + std::to_string(d.vocab) + ")");
  }
  std::vector<double> count(d.vocab, 1.0);
  for (int32_t t : d.train) count[t] += 1.0;
  const double total = static_cast<double>(d.train.size() + d.vocab);
  double loss = 0;
  for (int32_t t : d.val) loss -= std::log(count[t] / total);
  return loss / static_cast<double>(d.val.size());
}

Result<TrainOptions> ScheduledTrainOptions(const TrainingSchedule& s) {
  if (s.batch <= 0 || s.seq_len <= 0 || s.steps <= 0 || s.eval_batches <= 0 || s.warmup_steps < 0 ||
      !(s.lr > 0) || !(s.min_lr >= 0)) {
    return Status::InvalidArgument("training schedule: sizes and the learning rate must be positive");
  }
  TrainOptions to;
  to.batch = s.batch;
  to.seq_len = s.seq_len;
  to.steps = s.steps;
  to.seed = s.seed;
  to.opt.lr = static_cast<float>(s.lr);
  to.opt.min_lr = static_cast<float>(s.min_lr);
  to.opt.warmup_steps = s.warmup_steps;
  to.eval_every = 0;
  to.eval_batches = s.eval_batches;
  to.quiet = true;
  return to;
}

}  // namespace attnlab::experiments
