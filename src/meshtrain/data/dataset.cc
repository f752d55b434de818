#include "meshtrain/data/dataset.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/data/digest.h"

namespace meshtrain::data {
namespace {

// The shard's bytes must hash to what `data prepare` recorded: a flipped
// token that stays inside the vocabulary passes every other check. Hashed
// once per process and file version (the threads backend opens the same
// shard on every rank); hashing the mapping costs one pass over the file
// (docs/performance.md).
void verify_shard_digest(const ShardReader& s, const nlohmann::json& rec) {
  if (!rec.is_object() || !rec.contains("sha256")) return;
  const std::string want = rec["sha256"].is_string() ? rec["sha256"].get<std::string>() : "";
  struct stat st {};
  MT_REQUIRE(DataError, ::stat(s.path().c_str(), &st) == 0, "cannot stat ", s.path());
  const std::string key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                          std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                          std::to_string(st.st_mtim.tv_nsec) + ":" + want;
  static std::mutex mu;
  static std::set<std::string> verified;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (verified.count(key)) return;
  }
  const std::string got = sha256_hex({reinterpret_cast<const char*>(s.file_bytes()), s.file_size()});
  MT_REQUIRE(DataError, got == want, "shard ", s.path(), " hashes to SHA-256 ", got, " but its meta.json records ",
             want, ": the file changed after `meshtrain data prepare` (corrupted or edited); prepare the dataset again");
  std::lock_guard<std::mutex> lock(mu);
  verified.insert(key);
}

}  // namespace

std::string TokenDataset::content_digest() const {
  const auto splits = meta_.find("splits");
  if (splits == meta_.end() || !splits->is_object() || !splits->contains(split_)) return "";
  const nlohmann::json& rec = (*splits)[split_];
  return rec.is_object() && rec.contains("sha256") && rec["sha256"].is_string() ? rec["sha256"].get<std::string>() : "";
}

void TokenSpan::copy_to(int64_t begin, int64_t n, int32_t* out) const {
  MT_CHECK(begin >= 0 && n >= 0 && begin + n <= size_, "copy_to [", begin, ", +", n, ") of ", size_);
  if (dtype_ == TokenDType::U16) {
    const uint16_t* p = static_cast<const uint16_t*>(data_) + begin;
    for (int64_t i = 0; i < n; ++i) out[i] = int32_t(p[i]);
  } else {
    const int32_t* p = static_cast<const int32_t*>(data_) + begin;
    std::copy(p, p + n, out);
  }
}

std::vector<int32_t> TokenSpan::to_vector() const {
  std::vector<int32_t> v(static_cast<size_t>(size_));
  copy_to(0, size_, v.data());
  return v;
}

std::span<const uint16_t> TokenSpan::as_u16() const {
  MT_CHECK(dtype_ == TokenDType::U16, "token span is not u16");
  return {static_cast<const uint16_t*>(data_), size_t(size_)};
}

std::span<const int32_t> TokenSpan::as_i32() const {
  MT_CHECK(dtype_ == TokenDType::I32, "token span is not i32");
  return {static_cast<const int32_t*>(data_), size_t(size_)};
}

nlohmann::json read_dataset_meta(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "meta.json").string();
  std::ifstream in(path);
  MT_REQUIRE(DataError, in.good(), "cannot read ", path, " (is ", dir, " a prepared dataset? run `meshtrain data prepare`)");
  nlohmann::json meta;
  try {
    in >> meta;
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(DataError, path, ": malformed JSON: ", e.what());
  }
  MT_REQUIRE(DataError, meta.is_object() && meta.value("format", "") == "meshtrain-dataset", path,
             ": not a meshtrain dataset description (missing \"format\": \"meshtrain-dataset\")");
  return meta;
}

TokenDataset TokenDataset::open(const std::string& dir, const std::string& split) {
  MT_REQUIRE(DataError, split == "train" || split == "val", "unknown split '", split, "' (use train or val)");
  TokenDataset ds;
  ds.meta_ = read_dataset_meta(dir);
  ds.split_ = split;
  try {
    ds.tokenizer_ = make_tokenizer(ds.meta_.at("tokenizer"));
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(DataError, dir, "/meta.json: no tokenizer description: ", e.what());
  }
  ds.source_ = (std::filesystem::path(dir) / (split + ".bin")).string();
  ds.shard_ = std::make_shared<ShardReader>(ShardReader::open(ds.source_));
  const ShardReader& s = *ds.shard_;
  MT_REQUIRE(DataError, s.vocab_size() == ds.tokenizer_->vocab_size(), "shard ", ds.source_, ": vocab size ",
             s.vocab_size(), " differs from the tokenizer's ", ds.tokenizer_->vocab_size(), " in meta.json");
  const auto& rec = ds.meta_["splits"][split];
  if (rec.is_object()) {
    MT_REQUIRE(DataError, rec.value("documents", int64_t(-1)) == s.num_documents() &&
                              rec.value("tokens", int64_t(-1)) == s.num_tokens(),
               "shard ", ds.source_, " holds ", s.num_documents(), " documents / ", s.num_tokens(),
               " tokens but meta.json records ", rec.dump(), " (shard replaced?)");
  }
  verify_shard_digest(s, rec);
  ds.tokens_ = s.tokens();
  ds.index_ = s.index();
  ds.n_docs_ = s.num_documents();
  ds.dtype_ = s.dtype();
  return ds;
}

TokenDataset TokenDataset::from_documents(const std::vector<std::vector<int32_t>>& docs,
                                          std::unique_ptr<Tokenizer> tokenizer) {
  TokenDataset ds;
  ds.tokenizer_ = std::move(tokenizer);
  ds.owned_tokens_ = std::make_shared<std::vector<int32_t>>();
  ds.owned_index_ = std::make_shared<std::vector<uint64_t>>(1, 0);
  const int64_t vocab = ds.tokenizer_->vocab_size();
  for (size_t d = 0; d < docs.size(); ++d) {
    for (int32_t id : docs[d])
      MT_REQUIRE(DataError, id >= 0 && id < vocab, "document ", d, ": id ", id, " outside vocab [0, ", vocab, ")");
    ds.owned_tokens_->insert(ds.owned_tokens_->end(), docs[d].begin(), docs[d].end());
    ds.owned_index_->push_back(ds.owned_tokens_->size());
  }
  ds.tokens_ = ds.owned_tokens_->data();
  ds.index_ = ds.owned_index_->data();
  ds.n_docs_ = int64_t(docs.size());
  ds.dtype_ = TokenDType::I32;
  ds.split_ = "memory";
  ds.source_ = "<memory>";
  ds.meta_ = {{"format", "meshtrain-dataset"}, {"tokenizer", ds.tokenizer_->describe()}};
  return ds;
}

TokenSpan TokenDataset::document(int64_t i) const {
  MT_CHECK(i >= 0 && i < n_docs_, "document ", i, " of ", n_docs_);
  const size_t es = token_dtype_size(dtype_);
  return {static_cast<const char*>(tokens_) + index_[i] * es, document_length(i), dtype_};
}

}  // namespace meshtrain::data
