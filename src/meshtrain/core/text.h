// Text checks for names that reach JSON, logs and terminals: paths from
// configs and command lines are bytes, JSON strings must be UTF-8, and a
// message must never carry raw control bytes to the terminal.
#pragma once

#include <string>
#include <string_view>

namespace meshtrain {

// Well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool is_valid_utf8(std::string_view s);
// `s` with every byte that is not printable ASCII or part of valid UTF-8
// shown as \xNN (and control characters escaped), for error messages.
std::string printable(std::string_view s);

}  // namespace meshtrain
