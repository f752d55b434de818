// "Did you mean ...?" for a mistyped name (a config key, a section, a
// command): the known name closest in edit distance, when it is close
// enough to be a typo rather than another word.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

// Optimal string alignment distance: insertions, deletions, substitutions
// and transpositions of adjacent characters each cost 1.
int edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` within max(1, |word| / 3) edits (the
// first of equally close ones); "" when none is.
std::string closest_name(std::string_view word, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" for closest_name, or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace meshtrain
