// Durable file-system steps of the commit protocol: whole writes, fsync of
// files and directories, atomic replace, and the directory names used.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::checkpoint {

namespace fs = std::filesystem;

// "step-00000100", ".tmp-step-00000100"
std::string step_dir_name(int64_t step);
std::string tmp_dir_name(int64_t step);
// Step of a "step-NNNNNNNN" name, or nullopt.
std::optional<int64_t> parse_step_dir_name(const std::string& name);

// Writes all of `n` bytes at the fd's position (retries short writes).
void write_all(int fd, const void* data, size_t n, const std::string& path);
// Reads all of `n` bytes at `offset` (pread); a short file is an error.
void pread_all(int fd, void* data, size_t n, uint64_t offset, const std::string& path);
void fsync_fd(int fd, const std::string& path);
void fsync_dir(const fs::path& dir);
// Writes `text` to dir/.name.tmp, fsyncs it, renames it over dir/name and
// fsyncs dir: readers see the old or the new file, never a torn one.
void atomic_write_file(const fs::path& dir, const std::string& name, const std::string& text);
// The same for a file written piece by piece: `write` gets the open
// temporary file (fd and path); on any failure nothing is left behind.
void atomic_write_file(const fs::path& dir, const std::string& name,
                       const std::function<void(int fd, const std::string& tmp_path)>& write);
std::string read_text_file(const fs::path& path, size_t max_bytes);

// Atomically swaps two existing directory entries (renameat2 with
// RENAME_EXCHANGE). False when the file system does not support it; throws
// CheckpointError on any other failure.
bool exchange_paths(const fs::path& a, const fs::path& b);

// Complete checkpoints under root (step-* directories, not links, holding manifest.json),
// sorted by step.
std::vector<std::pair<int64_t, fs::path>> list_complete_checkpoints(const fs::path& root);

}  // namespace meshtrain::checkpoint
