// Which f32 GEMM runs (gemm.h: GemmImpl, MESHTRAIN_GEMM) and the string that
// names it in --version, benchmarks and checkpoints' kernel environment.
#include <cstdlib>
#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/isa.h"
#include "meshtrain/kernels/cpu/packed_gemm.h"

namespace meshtrain::kernels {
namespace {

// MESHTRAIN_GEMM, read once: -1 when unset (the level's default, decided per
// call, as the level can change: ScopedIsa).
int forced_impl() {
  static const int forced = [] {
    const char* request = std::getenv("MESHTRAIN_GEMM");
    return request == nullptr || *request == '\0' ? -1 : int(resolve_gemm_request(request, 0));
  }();
  return forced;
}

}  // namespace

const char* gemm_impl_name(GemmImpl impl) { return impl == GemmImpl::kPacked ? "packed" : "onednn"; }

GemmImpl resolve_gemm_request(const char* request, int isa_level) {
  if (request == nullptr || *request == '\0')
    // The packed tiles are written for vector units; at the scalar level
    // oneDNN's SSE4.1 GEMM is the faster one.
    return isa_level == int(Isa::kScalar) ? GemmImpl::kOnednn : GemmImpl::kPacked;
  for (GemmImpl impl : {GemmImpl::kOnednn, GemmImpl::kPacked})
    if (std::string(request) == gemm_impl_name(impl)) return impl;
  MT_THROW(ConfigError, "MESHTRAIN_GEMM=", request, " is not an f32 GEMM: use packed or onednn");
}

GemmImpl active_gemm_impl() {
  const int forced = forced_impl();
  return forced >= 0 ? GemmImpl(forced) : resolve_gemm_request(nullptr, int(active_isa()));
}

std::string gemm_description() {
  std::string s;
  if (active_gemm_impl() == GemmImpl::kPacked) {
    const PackedGemmBlocking b = packed_gemm_blocking();
    s = "packed " + std::to_string(b.mr) + "x" + std::to_string(b.nr) + " kc " + std::to_string(b.kc) + " + ";
  }
  // The default mode's bf16 GEMM, whatever mode the calling thread is in, so
  // a record says the same wherever it is written (reproducible mode also
  // runs the packed one on AMX).
  if (bf16_gemm_is_packed(/*reproducible=*/false)) s += "bf16 packed kc " + std::to_string(packed_gemm_bf16_blocking().kc) + " + ";
  return s + gemm_library_version();
}

}  // namespace meshtrain::kernels
