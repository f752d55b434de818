// libFuzzer target: checkpoint manifests are untrusted input. Any input must
// either parse into a manifest that passes validation (and survives a
// serialize/parse round trip) or raise CheckpointError; anything else (a
// crash, a sanitizer report, another exception type) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "meshtrain/checkpoint/manifest.h"
#include "meshtrain/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ck = meshtrain::checkpoint;
  try {
    const ck::Manifest m = ck::parse_manifest(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    const ck::Manifest again = ck::parse_manifest(m.to_json().dump(), "fuzz-roundtrip");
    if (again.tensors.size() != m.tensors.size() || again.files.size() != m.files.size()) __builtin_trap();
    // Read planning on every accepted tensor: a flat range as boxes.
    for (const auto& t : m.tensors) {
      const int64_t n = t.shape.numel();
      int64_t covered = 0;
      for (const auto& b : ck::flat_range_to_boxes(t.shape, n / 3, n)) covered += b.numel();
      if (covered != n - n / 3) __builtin_trap();
    }
  } catch (const meshtrain::CheckpointError&) {
  }
  return 0;
}
