// `meshtrain ckpt inspect|verify|export|import|diff` (docs/checkpoints.md).
// DIR is a step directory or a checkpoint root with a `latest` pointer.
#pragma once

#include <string>

namespace meshtrain::app {

std::string ckpt_inspect(const std::string& dir);  // metadata and tensor table
std::string ckpt_verify(const std::string& dir);   // "OK ..." (throws on a bad digest)

struct ExportSummary {
  std::string text;  // what was written
};
// model.safetensors + config.json (+ tokenizer.model) from a checkpoint;
// dtype "f32" or "bf16" (weights rounded once from the f32 checkpoint).
// Existing files are replaced only with `force`.
ExportSummary ckpt_export(const std::string& dir, const std::string& out, const std::string& dtype = "f32",
                          bool progress = true, bool force = false);
// A parameters-only checkpoint from a safetensors file (config.json beside
// it); a root that already holds checkpoints only with `force`, NaN or
// infinite weights only with `allow_nonfinite`.
std::string ckpt_import(const std::string& file, const std::string& out_root, bool force = false,
                        bool allow_nonfinite = false);

struct DiffResult {
  bool identical = false;
  std::string text;
};
DiffResult ckpt_diff(const std::string& a, const std::string& b);

}  // namespace meshtrain::app
