#include "meshtrain/core/error.h"

#include <gtest/gtest.h>

using namespace meshtrain;

TEST(Errors, MessageCarriesThePartsAndTheLocationBesideIt) {
  try {
    MT_REQUIRE(ConfigError, 3 % 2 == 0, "model.n_heads = ", 3, " must be even");
    FAIL();
  } catch (const ConfigError& e) {
    // What a user reads names the problem only; where it was raised is
    // kept apart (printed by `meshtrain --debug`).
    EXPECT_STREQ(e.what(), "model.n_heads = 3 must be even");
    EXPECT_EQ(e.where().rfind("error_test.cc:", 0), std::string::npos) << "relative to src/ or the test tree";
    EXPECT_NE(e.where().find("error_test.cc:"), std::string::npos) << e.where();
  }
  EXPECT_EQ(ConfigError("plain").where(), "");
  EXPECT_THROW(MT_CHECK(1 == 2, "never"), InternalError);
  EXPECT_THROW(MT_THROW(CommTimeout, "x"), CommError);
}
