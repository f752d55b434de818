// meshtrain ckpt inspect|verify|export|import|diff (docs/checkpoints.md)
#include <cstdio>

#include "meshtrain/app/ckpt.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

constexpr const char* kDirHelp = "a checkpoint step directory, or a checkpoint root with a 'latest' pointer";

// A subcommand taking one checkpoint DIR and printing what `fn` returns.
template <typename Fn>
void dir_command(CLI::App& ckpt, Action& action, const char* name, const char* description, const char* example,
                 Fn fn) {
  auto* cmd = add_command(ckpt, name, description, example);
  auto dir = std::make_shared<std::string>();
  cmd->add_option("DIR", *dir, kDirHelp)->required();
  cmd->callback([dir, fn, &action] {
    action = [dir, fn] {
      std::puts(fn(*dir).c_str());
      return 0;
    };
  });
}

void setup(CLI::App& root, Action& action) {
  auto* ckpt = add_command(root, "ckpt", "inspect, verify, export, import and compare checkpoints",
                           "meshtrain ckpt inspect runs/demo/checkpoints");
  ckpt->require_subcommand(1);
  dir_command(*ckpt, action, "inspect", "step, layout, data position, model, tokenizer and every tensor",
              "meshtrain ckpt inspect runs/demo/checkpoints", [](const std::string& d) { return app::ckpt_inspect(d); });
  dir_command(*ckpt, action, "verify", "check every shard's size and SHA-256 digest",
              "meshtrain ckpt verify runs/demo/checkpoints", [](const std::string& d) { return app::ckpt_verify(d); });

  auto* exp = add_command(*ckpt, "export",
                          "a Hugging Face directory (safetensors, config, tokenizer files) or a GGUF file for llama.cpp",
                          "meshtrain ckpt export runs/demo/checkpoints --out runs/demo/export/");
  struct Export {
    std::string dir, out, format = "safetensors", dtype = "f32";
    bool progress = true, force = false;
  };
  auto ex = std::make_shared<Export>();
  exp->add_option("DIR", ex->dir, kDirHelp)->required();
  exp->add_option("--out", ex->out,
                  "directory to write (model.safetensors and the Hugging Face files, or model.gguf), or the "
                  ".safetensors / .gguf file itself")
      ->required();
  exp->add_option("--format", ex->format, "safetensors (Hugging Face layout) or gguf (llama.cpp)")
      ->check(CLI::IsMember({"safetensors", "gguf"}));
  exp->add_option("--dtype", ex->dtype,
                  "weights in the file, rounded once from the f32 checkpoint: f32 or bf16; gguf also f16 and q8_0")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0"}));
  exp->add_flag("!--no-progress", ex->progress, "no progress line on stderr");
  exp->add_flag("--force", ex->force, "replace existing files");
  exp->callback([ex, &action] {
    action = [ex] {
      std::puts(app::ckpt_export(ex->dir, ex->out, ex->format, ex->dtype, ex->progress, ex->force).text.c_str());
      return 0;
    };
  });

  auto* imp = add_command(*ckpt, "import", "a safetensors file (config.json beside it) -> a parameters-only checkpoint",
                          "meshtrain ckpt import runs/demo/export/model.safetensors --out runs/imported/checkpoints");
  struct Import {
    std::string file, out;
    bool force = false, allow_nonfinite = false;
  };
  auto im = std::make_shared<Import>();
  imp->add_option("FILE", im->file, "model.safetensors")->required()->check(CLI::ExistingFile);
  imp->add_option("--out", im->out, "checkpoint root to write")->required();
  imp->add_flag("--force", im->force, "write into a root that already holds checkpoints (its 'latest' moves to step 0)");
  imp->add_flag("--allow-nonfinite", im->allow_nonfinite, "import NaN or infinite weights (refused by default)");
  imp->callback([im, &action] {
    action = [im] {
      std::puts(app::ckpt_import(im->file, im->out, im->force, im->allow_nonfinite).c_str());
      return 0;
    };
  });

  auto* diff = add_command(*ckpt, "diff", "compare two checkpoints bit for bit (exit 1 when they differ)",
                           "meshtrain ckpt diff runs/a/checkpoints runs/b/checkpoints");
  auto ab = std::make_shared<std::pair<std::string, std::string>>();
  diff->add_option("DIR_A", ab->first, kDirHelp)->required();
  diff->add_option("DIR_B", ab->second, kDirHelp)->required();
  diff->callback([ab, &action] {
    action = [ab] {
      const app::DiffResult d = app::ckpt_diff(ab->first, ab->second);
      std::fputs(d.text.c_str(), stdout);
      return d.identical ? 0 : 1;
    };
  });
}

const bool registered = register_command(40, setup);

}  // namespace
}  // namespace meshtrain::cli
