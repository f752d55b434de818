// Cost of the SHA-256 check when a dataset is opened (data/dataset.cc):
// a shard of N MiB of random byte tokens is written with its meta.json,
// then opened twice in this process; the first open maps, validates and
// hashes the file, the second finds it verified (same file version) and
// only maps and validates. Medians of 5 processes-worth of runs are not
// needed: the page cache is warm after the first write.
//   build/bench/data_bench [--mib N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "meshtrain/core/rng.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/digest.h"
#include "meshtrain/data/shard_format.h"
#include "meshtrain/data/tokenizer.h"

using namespace meshtrain;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  int64_t mib = 256;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--mib") && i + 1 < argc) mib = std::atoll(argv[++i]);
  const fs::path dir = fs::temp_directory_path() / ("mt_data_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const data::ByteTokenizer tok;
  {
    data::ShardWriter w((dir / "train.bin").string(), tok.vocab_size());
    CounterRng rng(1);
    std::vector<int32_t> doc(4096);
    const int64_t docs = mib * 1024 * 1024 / int64_t(doc.size() * 2);
    for (int64_t d = 0; d < docs; ++d) {
      for (size_t i = 0; i < doc.size(); ++i) doc[i] = int32_t(rng.bits(uint64_t(d), i)[0] % 256);
      w.add_document(doc);
    }
    w.finish();
    const auto shard = data::ShardReader::open((dir / "train.bin").string());
    nlohmann::json meta = {{"format", "meshtrain-dataset"},
                           {"version", 1},
                           {"tokenizer", tok.describe()},
                           {"splits",
                            {{"train",
                              {{"file", "train.bin"},
                               {"documents", shard.num_documents()},
                               {"tokens", shard.num_tokens()},
                               {"sha256", data::sha256_file((dir / "train.bin").string())}}}}}};
    std::ofstream(dir / "meta.json") << meta.dump();
  }
  const double bytes = double(fs::file_size(dir / "train.bin"));
  auto timed_open = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ds = data::TokenDataset::open(dir.string(), "train");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double first = timed_open(), second = timed_open();
  std::printf("dataset open, %.0f MiB shard (page cache warm): with SHA-256 check %.3f s, already verified %.3f s; "
              "the check costs %.3f s = %.2f GB/s\n",
              bytes / (1024 * 1024), first, second, first - second, bytes / (first - second) * 1e-9);
  fs::remove_all(dir);
  return 0;
}
