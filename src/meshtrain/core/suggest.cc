#include "meshtrain/core/suggest.h"

#include <algorithm>

namespace meshtrain {

int edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: distance between a[:i] and b[:j]; three rows suffice.
  std::vector<int> before(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = int(j);
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = int(i);
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::string closest_name(std::string_view word, const std::vector<std::string>& candidates) {
  const int limit = std::max(1, int(word.size()) / 3);
  std::string best;
  int best_d = limit + 1;
  for (const auto& c : candidates) {
    const int d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string c = closest_name(word, candidates);
  return c.empty() ? "" : " (did you mean '" + c + "'?)";
}

}  // namespace meshtrain
