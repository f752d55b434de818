// libFuzzer target: safetensors files are untrusted input. Any input must be
// accepted with every rule holding, or rejected with CheckpointError.
#include <cstddef>
#include <cstdint>

#include "meshtrain/checkpoint/safetensors.h"
#include "meshtrain/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ck = meshtrain::checkpoint;
  try {
    const ck::SafetensorsHeader h = ck::parse_safetensors_buffer(data, size, "fuzz");
    // Accepted: entries are contiguous, in bounds and sized by their shape.
    uint64_t pos = 0;
    for (const auto& e : h.entries) {
      if (e.begin != pos || e.end < e.begin) __builtin_trap();
      if (uint64_t(e.shape.numel()) * meshtrain::dtype_size(e.dtype) != e.end - e.begin) __builtin_trap();
      pos = e.end;
    }
    if (h.data_start + pos != size) __builtin_trap();
  } catch (const meshtrain::CheckpointError&) {
  }
  return 0;
}
