#include "meshtrain/core/error.h"

#include <gtest/gtest.h>

using namespace meshtrain;

TEST(Errors, MessageCarriesLocationAndParts) {
  try {
    MT_REQUIRE(ConfigError, 3 % 2 == 0, "model.n_heads = ", 3, " must be even");
    FAIL();
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("model.n_heads = 3 must be even"), std::string::npos);
    EXPECT_NE(m.find("error_test.cc:"), std::string::npos);
  }
  EXPECT_THROW(MT_CHECK(1 == 2, "never"), InternalError);
  EXPECT_THROW(MT_THROW(CommTimeout, "x"), CommError);
}
