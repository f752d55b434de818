// CPU feature detection and the MESHTRAIN_ISA override (isa.h).
#include "meshtrain/kernels/cpu/isa.h"

#include <cpuid.h>

#include <atomic>
#include <cstring>
#include <cstdio>
#include <cstdlib>

#include "meshtrain/core/error.h"

namespace meshtrain::kernels {
namespace {

Isa detect() {
  // GCC's cpuid helpers also check that the OS saves the AVX / AVX-512
  // register state (xgetbv), so a feature reported here is usable.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kScalar;
}

struct EnvChoice {
  Isa isa;
  bool forced;
};

EnvChoice from_environment() {
  const char* env = std::getenv("MESHTRAIN_ISA");
  std::string note;
  const Isa isa = resolve_isa_request(env, detected_isa(), &note);
  if (!note.empty()) std::fprintf(stderr, "meshtrain: %s\n", note.c_str());
  return {isa, env != nullptr && *env != '\0'};
}

const EnvChoice& env_choice() {
  static const EnvChoice choice = from_environment();
  return choice;
}

std::atomic<int> g_override{-1};  // ScopedIsa; -1: none

}  // namespace

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return Isa(o);
  return env_choice().isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kScalar: return "scalar";
  }
  return "unknown";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (name == isa_name(isa)) return isa;
  return std::nullopt;
}

Isa resolve_isa_request(const char* request, Isa cpu, std::string* note) {
  if (request == nullptr || *request == '\0') return cpu;
  const std::optional<Isa> want = parse_isa(request);
  MT_REQUIRE(ConfigError, want.has_value(), "MESHTRAIN_ISA=", request,
             " is not a kernel ISA level: use avx512, avx2 or scalar");
  if (int(*want) <= int(cpu)) return *want;
  if (note)
    *note = std::string("MESHTRAIN_ISA=") + request + " asks for more than this CPU supports; using " + isa_name(cpu);
  return cpu;
}

std::string cpu_model_name() {
  unsigned regs[12] = {};
  unsigned max_leaf = __get_cpuid_max(0x80000000u, nullptr);
  if (max_leaf < 0x80000004u) return "unknown";
  for (unsigned i = 0; i < 3; ++i)
    __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
  char brand[49] = {};
  std::memcpy(brand, regs, 48);
  std::string s(brand);
  const size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "unknown" : s.substr(b, e - b + 1);
}

std::string isa_description() {
  std::string s = isa_name(active_isa());
  s += " (cpu: ";
  s += isa_name(detected_isa());
  if (g_override.load() >= 0) s += ", set by the caller";
  else if (env_choice().forced) s += ", forced by MESHTRAIN_ISA";
  return s + ")";
}

ScopedIsa::ScopedIsa(Isa isa) : previous_(g_override.load()) {
  active_ = int(isa) > int(detected_isa()) ? detected_isa() : isa;
  g_override.store(int(active_));
}

ScopedIsa::~ScopedIsa() { g_override.store(previous_); }

}  // namespace meshtrain::kernels
