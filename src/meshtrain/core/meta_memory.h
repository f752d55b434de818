// The meta device's memory: blocks of address space reserved without access
// (PROT_NONE, no swap reservation), so a rank's whole state can be built at
// its real sizes, rounded and accounted by the caching allocator, without a
// byte of memory touched; a host read or write of one faults at once. Zero
// and copy are no-ops. The planner builds real trainers on it
// (docs/planning.md, "The meta device").
#pragma once

#include <cstddef>

#include "meshtrain/core/allocator.h"

namespace meshtrain {

DeviceMemory meta_memory();
// Address space the meta device holds now (reserved, never resident).
size_t meta_reserved_bytes();
// Whether p lies in a live meta block (host code that serves both kinds of
// buffer, such as the recording backend, leaves meta memory alone).
bool is_meta_pointer(const void* p);

}  // namespace meshtrain
