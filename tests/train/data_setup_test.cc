#include "meshtrain/train/data_setup.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/data/dataset.h"

using namespace meshtrain;
namespace fs = std::filesystem;

TEST(DataSetup, PreparesFromSourcesOnceAndMapsLoaderSettings) {
  const fs::path dir = fs::path(::testing::TempDir()) / "mt_data_setup";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "corpus.txt");
    for (int i = 0; i < 40; ++i) f << "fortune number " << i << "\n%\n";
  }
  train::DataConfig d;
  d.path = (dir / "prepared").string();
  d.format = "fortune";
  // No dataset and no sources: an actionable error.
  try {
    train::ensure_prepared(d);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("meshtrain data prepare"), std::string::npos) << e.what();
  }
  d.sources = {(dir / "corpus.txt").string()};
  train::ensure_prepared(d);
  const auto ds = data::TokenDataset::open(d.path, "train");
  EXPECT_GT(ds.num_documents(), 30);
  const auto stamp = fs::last_write_time(fs::path(d.path) / "meta.json");
  train::ensure_prepared(d);  // already there: untouched
  EXPECT_EQ(fs::last_write_time(fs::path(d.path) / "meta.json"), stamp);

  d.mode = "padded";
  d.seq_len = 64;
  d.bucket_pool = 8;
  const auto lc = train::loader_config(d);
  EXPECT_EQ(lc.mode, data::BatchMode::Padded);
  EXPECT_EQ(lc.seq_len, 64);
  EXPECT_EQ(lc.bucket_pool, 8);
}
