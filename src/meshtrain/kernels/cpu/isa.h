// Run-time ISA selection for the CPU kernels. The build targets the x86-64
// baseline; every kernel in per_isa/ is compiled once per level below and the
// public entry points (dispatch.cc) call the level chosen here:
//   avx512  AVX-512 F/BW/DQ/VL + FMA (16 fp32 lanes)
//   avx2    AVX2 + FMA (8 lanes)
//   scalar  the plain C++ loops for the x86-64 baseline (SSE2)
// The level is the best the CPU (and OS) supports, or MESHTRAIN_ISA
// (avx512 | avx2 | scalar), clamped to what the CPU has, with a message.
// MESHTRAIN_ISA also caps oneDNN's ISA (GEMM) unless ONEDNN_MAX_CPU_ISA is set.
//
// Results never depend on the thread count. They may differ in rounding
// between levels (vector width changes reduction order; FMA vs mul + add);
// the project's bitwise claims (resume, ZeRO stages, recomputation) hold for
// a fixed level.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace meshtrain::kernels {

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// Best level this CPU and OS support (cpuid + xgetbv), computed once.
Isa detected_isa();
// The level the kernels run now: MESHTRAIN_ISA (clamped) or detected_isa().
// Throws ConfigError for an unknown MESHTRAIN_ISA value.
Isa active_isa();
const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);  // "avx512" | "avx2" | "scalar"
// What MESHTRAIN_ISA=`request` means on a CPU whose best level is `cpu`:
// nullptr or "" -> cpu; a level above cpu -> cpu, with `note` saying so;
// an unknown name -> ConfigError naming the variable and the choices.
Isa resolve_isa_request(const char* request, Isa cpu, std::string* note);
// The CPU's brand string (cpuid), e.g. "Intel(R) Xeon(R) Processor"; bits of
// floating-point results depend on it through oneDNN's choice of kernels.
std::string cpu_model_name();
// One line for --version and logs, e.g. "avx2 (cpu: avx512, forced by MESHTRAIN_ISA)".
std::string isa_description();

// Tests and benchmarks: run the kernels at `isa` (clamped to detected_isa())
// while this object lives. Not for use while kernels run on other threads.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;
  Isa isa() const { return active_; }

 private:
  int previous_;
  Isa active_;
};

}  // namespace meshtrain::kernels
