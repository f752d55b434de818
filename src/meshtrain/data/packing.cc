#include "meshtrain/data/packing.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

void to_json(nlohmann::json& j, const PackCarry& c) { j = {{"doc", c.doc}, {"offset", c.offset}}; }

void from_json(const nlohmann::json& j, PackCarry& c) {
  try {
    c.doc = j.at("doc").get<int64_t>();
    c.offset = j.at("offset").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(DataError, "malformed packing carry ", j.dump(), ": ", e.what());
  }
}

bool plan_packed_row(const TokenDataset& ds, DocumentSampler& sampler, PackCarry& carry, int64_t seq,
                     Window* window) {
  int64_t used = 0;
  bool opened = false;
  while (used < seq) {
    if (carry.doc < 0) {
      const int64_t d = sampler.next();
      if (d < 0) break;  // finite stream exhausted
      if (ds.document_length(d) < 2) continue;
      carry = {d, 0};
    }
    const int64_t pairs_left = ds.document_length(carry.doc) - 1 - carry.offset;
    const int64_t take = std::min(pairs_left, seq - used);
    if (!opened) {
      window->begin_row();
      opened = true;
    }
    window->add_piece({carry.doc, carry.offset, take});
    used += take;
    carry.offset += take;
    if (carry.offset == ds.document_length(carry.doc) - 1) carry = {};
  }
  return opened;
}

}  // namespace meshtrain::data
