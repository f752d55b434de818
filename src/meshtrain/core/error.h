// Error types and check macros. Library code never exits: it throws one of
// these with an actionable message; the CLI turns it into one stderr line.
// The source location travels beside the message (where()), not in it: a
// user reads what to do, `meshtrain --debug` adds where it was thrown.
// Policy: docs/errors.md.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace meshtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  Error(const std::string& message, std::string where) : std::runtime_error(message), where_(std::move(where)) {}
  // "train/run.cc:42" for errors thrown by the macros below, else "".
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};
class InternalError : public Error { public: using Error::Error; };
class ConfigError : public Error { public: using Error::Error; };
class DataError : public Error { public: using Error::Error; };
class CheckpointError : public Error { public: using Error::Error; };
// The run could not do what it was asked (every step skipped, metrics lost).
class TrainingError : public Error { public: using Error::Error; };
class CommError : public Error { public: using Error::Error; };
class CommAborted : public CommError { public: using CommError::CommError; };
class CommTimeout : public CommError { public: using CommError::CommError; };
class CommMismatch : public CommError { public: using CommError::CommError; };

namespace detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename E, typename... Args>
[[noreturn]] void throw_at(const char* file, int line, const Args&... args) {
  std::string where(file);
  auto slash = where.find("src/meshtrain/");
  if (slash != std::string::npos) where = where.substr(slash + 4);
  throw E(concat(args...), where + ":" + std::to_string(line));
}

}  // namespace detail
}  // namespace meshtrain

// MT_CHECK(cond, parts...): InternalError on violated invariants.
#define MT_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::meshtrain::detail::throw_at<::meshtrain::InternalError>(                         \
          __FILE__, __LINE__, "check failed: " #cond ": " __VA_OPT__(, ) __VA_ARGS__);   \
  } while (0)

// MT_REQUIRE(ErrorType, cond, parts...): user-facing errors (bad config, data...).
#define MT_REQUIRE(E, cond, ...)                                                         \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::meshtrain::detail::throw_at<E>(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__);   \
  } while (0)

// MT_THROW(ErrorType, parts...)
#define MT_THROW(E, ...) ::meshtrain::detail::throw_at<E>(__FILE__, __LINE__, __VA_ARGS__)
