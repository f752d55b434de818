#include "meshtrain/data/prepare.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/data/digest.h"
#include "meshtrain/data/prepare_output.h"
#include "meshtrain/data/shard_format.h"

namespace meshtrain::data {
namespace fs = std::filesystem;
namespace {

double split_hash(uint64_t seed, int64_t index) {
  const auto b = CounterRng(seed).bits(stream_id("data.split"), uint64_t(index));
  const uint64_t u = (uint64_t(b[0]) << 32) | b[1];
  return double(u >> 11) * 0x1p-53;
}

// Removes a temp directory unless released (scope guard for atomic output).
struct TempDir {
  std::string path;
  bool keep = false;
  ~TempDir() {
    if (!keep && !path.empty()) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
};

int64_t file_bytes(const std::string& path) {  // for progress only: 0 when unknown
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? 0 : int64_t(n);
}

void write_json_durably(const std::string& path, const nlohmann::json& j) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    MT_REQUIRE(DataError, out.good(), "cannot write ", path);
    out << j.dump(2) << "\n";
    out.flush();
    MT_REQUIRE(DataError, out.good(), "error writing ", path);
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f) {
    ::fsync(::fileno(f));
    std::fclose(f);
  }
}

}  // namespace

std::vector<uint8_t> split_documents(int64_t n, uint64_t seed, double val_fraction) {
  MT_REQUIRE(ConfigError, val_fraction > 0.0 && val_fraction < 1.0, "validation fraction ", val_fraction,
             " must be in (0, 1)");
  std::vector<uint8_t> is_val(static_cast<size_t>(n), 0);
  int64_t n_val = 0, lo = 0, hi = 0;
  double u_lo = 2.0, u_hi = -1.0;
  for (int64_t i = 0; i < n; ++i) {
    const double u = split_hash(seed, i);
    is_val[size_t(i)] = u < val_fraction;
    n_val += is_val[size_t(i)];
    if (u < u_lo) u_lo = u, lo = i;
    if (u > u_hi) u_hi = u, hi = i;
  }
  if (n >= 2 && n_val == 0) is_val[size_t(lo)] = 1;
  if (n >= 2 && n_val == n) is_val[size_t(hi)] = 0;
  return is_val;
}

PrepareResult prepare_dataset(const PrepareOptions& opts, const Tokenizer& tokenizer) {
  const auto t0 = std::chrono::steady_clock::now();
  MT_REQUIRE(ConfigError, !opts.out_dir.empty(), "data prepare: no output directory (--out DIR)");
  MT_REQUIRE(ConfigError, opts.val_fraction > 0.0 && opts.val_fraction < 1.0, "validation fraction ",
             opts.val_fraction, " must be in (0, 1)");
  std::string out = opts.out_dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const std::vector<SourceFile> sources = expand_inputs(opts.inputs, opts.format);
  check_prepare_output(out, opts.overwrite, sources);
  std::error_code ec;

  // Pass 1: parse everything to count documents (the split needs n) and to
  // fail on bad input before anything is written.
  int64_t total_bytes = 0;
  for (const auto& src : sources) total_bytes += file_bytes(src.path);
  // Input bytes done: whole files before this one, plus its documents so far.
  auto report = [&](const char* phase, int64_t done) {
    if (opts.progress) opts.progress(phase, std::min(done, total_bytes), total_bytes);
  };
  std::vector<int64_t> per_source;
  int64_t n_docs = 0, files_done = 0;
  for (const auto& src : sources) {
    int64_t in_file = 0;
    per_source.push_back(for_each_document(src, [&](std::string_view doc) {
      in_file += int64_t(doc.size());
      report("reading", files_done + in_file);
    }));
    n_docs += per_source.back();
    files_done += file_bytes(src.path);
  }
  MT_REQUIRE(DataError, n_docs > 0, "no documents found in the inputs (", sources.size(),
             " file(s), all empty or whitespace-only)");
  const std::vector<uint8_t> is_val = split_documents(n_docs, opts.seed, opts.val_fraction);

  const fs::path parent = fs::absolute(out).parent_path();
  fs::create_directories(parent, ec);
  MT_REQUIRE(DataError, !ec, "cannot create ", parent.string(), ": ", ec.message());
  remove_stale_prepare_temps(out);  // left by a killed prepare
  TempDir tmp{make_prepare_temp(out)};

  // Pass 2: encode and stream into both shards.
  ShardWriter train((fs::path(tmp.path) / "train.bin").string(), tokenizer.vocab_size());
  ShardWriter val((fs::path(tmp.path) / "val.bin").string(), tokenizer.vocab_size());
  int64_t index = 0;
  nlohmann::json source_list = nlohmann::json::array();
  files_done = 0;
  for (size_t s = 0; s < sources.size(); ++s) {
    int64_t in_file = 0;
    const int64_t got = for_each_document(sources[s], [&](std::string_view text) {
      ShardWriter& shard = is_val[size_t(index)] ? val : train;
      shard.begin_document();
      tokenizer.encode_document_to(text, [&](std::span<const int32_t> ids) { shard.add_tokens(ids); });
      shard.end_document();
      ++index;
      in_file += int64_t(text.size());
      report("tokenizing", files_done + in_file);
    });
    files_done += file_bytes(sources[s].path);
    MT_REQUIRE(DataError, got == per_source[s], sources[s].path, " changed while being read");
    source_list.push_back({{"path", fs::absolute(sources[s].path).string()},
                           {"format", input_format_name(sources[s].format)},
                           {"documents", got}});
  }
  train.finish();
  val.finish();

  PrepareResult r;
  r.out_dir = out;
  r.source_files = int64_t(sources.size());
  r.documents = n_docs;
  r.train_documents = train.num_documents();
  r.val_documents = val.num_documents();
  r.train_tokens = train.num_tokens();
  r.val_tokens = val.num_tokens();

  nlohmann::json meta = {
      {"format", "meshtrain-dataset"},
      {"version", 1},
      {"tokenizer", tokenizer.describe()},
      {"document_layout", "bos + tokens + eos"},
      {"seed", opts.seed},
      {"val_fraction", opts.val_fraction},
      {"documents", n_docs},
      {"splits",
       {{"train", {{"file", "train.bin"}, {"documents", r.train_documents}, {"tokens", r.train_tokens},
                   {"sha256", sha256_file((fs::path(tmp.path) / "train.bin").string())}}},
        {"val", {{"file", "val.bin"}, {"documents", r.val_documents}, {"tokens", r.val_tokens},
                 {"sha256", sha256_file((fs::path(tmp.path) / "val.bin").string())}}}}},
      {"sources", source_list}};
  write_json_durably((fs::path(tmp.path) / "meta.json").string(), meta);

  publish_prepared(tmp.path, out);
  tmp.keep = true;

  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace meshtrain::data
