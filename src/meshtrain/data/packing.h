// Sequence packing (docs/math.md, "Rule: packing keeps documents apart"):
// documents from the sampler fill rows of exactly seq positions. A document
// longer than the space left is split; its rest continues in the next row,
// where positions restart at 0 and it is a segment of its own. A document
// of L tokens gives L - 1 (input, target) pairs: t_i -> t_{i+1}; the last
// input of a piece is still supervised with the next token of the same
// document (which becomes the first input of the next piece), so no target
// ever comes from another document and no transition is lost to the split.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "meshtrain/data/dataset.h"
#include "meshtrain/data/sampler.h"
#include "meshtrain/data/window.h"

namespace meshtrain::data {

// The document being split across rows: pairs [offset, L - 1) remain.
struct PackCarry {
  int64_t doc = -1;  // -1: none
  int64_t offset = 0;
  bool operator==(const PackCarry&) const = default;
};
void to_json(nlohmann::json& j, const PackCarry& c);
void from_json(const nlohmann::json& j, PackCarry& c);

// Plans one row into `window`. Documents with fewer than 2 tokens are
// skipped. Returns false, adding no row, when the sampler is exhausted and
// nothing is carried; a row cut short by exhaustion is padded.
bool plan_packed_row(const TokenDataset& ds, DocumentSampler& sampler, PackCarry& carry, int64_t seq,
                     Window* window);

}  // namespace meshtrain::data
