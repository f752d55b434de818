// A fresh, empty directory for the running test: under gtest's TempDir()
// (this build's test-tmp), named after the process and the test so that
// tests running at the same time never share one.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace meshtrain::testing {

inline std::filesystem::path fresh_test_dir(const std::string& prefix) {
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   (prefix + std::to_string(::getpid()) + "_" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace meshtrain::testing
