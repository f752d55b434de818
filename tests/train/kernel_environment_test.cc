// Covers src/meshtrain/train/kernel_environment.cc: resume claims compare
// the kernels a checkpoint was written with (docs/math.md, "Rule: restore claims").
#include "meshtrain/train/kernel_environment.h"

#include <gtest/gtest.h>

#include "meshtrain/core/threading.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/isa.h"

namespace meshtrain::train {
namespace {

TEST(KernelEnvironment, SameProcessMatchesAndEachFieldIsNamedWhenItChanges) {
  const nlohmann::json here = kernel_environment();
  EXPECT_EQ(here.at("isa"), kernels::isa_name(kernels::active_isa()));
  EXPECT_EQ(here.at("gemm"), kernels::gemm_description()) << "names the f32 GEMM, not only the library";
  EXPECT_EQ(kernel_environment_change(here), "");
  EXPECT_EQ(kernel_environment_change(nlohmann::json()), "") << "checkpoints from before the record";

  nlohmann::json other = here;
  other["cpu"] = "Some Other CPU";
  EXPECT_EQ(kernel_environment_change(other), "CPU Some Other CPU -> " + here.at("cpu").get<std::string>());
  other = here;
  other["gemm"] = "oneDNN 1.0.0";
  EXPECT_NE(kernel_environment_change(other).find("GEMM library oneDNN 1.0.0 -> "), std::string::npos);
  other["gemm"] = "packed 4x4 kc 8 + " + std::string(kernels::gemm_library_version());  // other blocking: other bits
  if (other["gemm"] != here["gemm"]) {
    EXPECT_NE(kernel_environment_change(other).find("GEMM library packed 4x4"), std::string::npos);
  }
  other = here;
  other["isa"] = here.at("isa") == "scalar" ? "avx2" : "scalar";
  EXPECT_NE(kernel_environment_change(other).find("kernel ISA "), std::string::npos);
}

// Thread counts matter only with oneDNN's f32 GEMM below AVX-512 (its AVX2
// GEMM splits K by team size); the packed GEMM never splits a sum.
TEST(KernelEnvironment, ThreadCountMattersOnlyForOnednnBelowAvx512) {
  for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (int(isa) > int(kernels::detected_isa())) continue;
    kernels::ScopedIsa scoped(isa);
    nlohmann::json other = kernel_environment();
    other["threads"] = compute_threads() + 1;
    const std::string change = kernel_environment_change(other);
    if (isa == kernels::Isa::kAvx512 || kernels::active_gemm_impl() == kernels::GemmImpl::kPacked)
      EXPECT_EQ(change, "") << kernels::isa_name(isa);
    else
      EXPECT_NE(change.find("compute threads"), std::string::npos) << kernels::isa_name(isa);
  }
}

}  // namespace
}  // namespace meshtrain::train
