// Where `data prepare` writes, and what it may replace: a temporary
// directory beside --out named with the writer's pid (so a later prepare
// can remove one a killed process left), published by an atomic swap; and
// the rules of --overwrite: only an existing meshtrain dataset is replaced,
// never a directory or file that is, or contains, one of the inputs.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/data/corpus_reader.h"

namespace meshtrain::data {

// DataError naming the path when `out` may not be written (exists without
// `overwrite`, is not a prepared dataset, is or contains an input) or a
// name is not valid UTF-8 (it goes into meta.json).
void check_prepare_output(const std::string& out, bool overwrite, const std::vector<SourceFile>& sources);

// Removes `<out>.tmp.<pid>.*` directories of processes that no longer run.
// Returns how many were removed.
int remove_stale_prepare_temps(const std::string& out);

// A fresh `<out>.tmp.<pid>.XXXXXX` directory (mode 0755).
std::string make_prepare_temp(const std::string& out);

// Moves the finished `tmp` to `out`, replacing an existing dataset there
// atomically (the old one is removed afterwards).
void publish_prepared(const std::string& tmp, const std::string& out);

}  // namespace meshtrain::data
