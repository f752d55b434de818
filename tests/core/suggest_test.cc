// Did-you-mean suggestions (core/suggest.h): the edit distance and when a
// name is close enough to suggest.
#include "meshtrain/core/suggest.h"

#include <gtest/gtest.h>

using namespace meshtrain;

TEST(Suggest, EditDistanceCountsEditsAndAdjacentSwaps) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("train", "train"), 0);
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("trian", "train"), 1) << "a swap of neighbours is one edit";
  EXPECT_EQ(edit_distance("d_modle", "d_model"), 1);
  EXPECT_EQ(edit_distance("stpes", "steps"), 1);
  EXPECT_EQ(edit_distance("ab", "ba"), 1);
  EXPECT_EQ(edit_distance("abc", "ca"), 3);
}

TEST(Suggest, OnlyCloseNamesAreSuggested) {
  const std::vector<std::string> keys = {"d_model", "n_layers", "n_heads", "n_kv_heads", "vocab_size"};
  EXPECT_EQ(closest_name("d_modle", keys), "d_model");
  EXPECT_EQ(closest_name("n_head", keys), "n_heads") << "the closest, not the first close one";
  EXPECT_EQ(closest_name("layers", keys), "n_layers");
  EXPECT_EQ(closest_name("batch_size", keys), "") << "another word, not a typo";
  EXPECT_EQ(did_you_mean("vocab_sise", keys), " (did you mean 'vocab_size'?)");
  EXPECT_EQ(did_you_mean("xyz", keys), "");
  EXPECT_EQ(did_you_mean("a", {"b"}), " (did you mean 'b'?)") << "one edit is always close";
}
