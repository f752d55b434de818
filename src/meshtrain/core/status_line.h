// One live status line at the bottom of a terminal (training progress, long
// data preparation or export), with ordinary log lines printed above it.
// On a terminal the line is redrawn in place ('\r' + erase to end of line);
// when the stream is not a terminal (CI, a file, a pipe) there is no live
// line: log lines are printed as they come and, when plain_every_s > 0, the
// status text is printed as a plain line at most that often.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace meshtrain {

// Progress of a long library operation: `done` of `total` units (bytes,
// tensors) in a named phase ("reading", "tokenizing", "writing").
using ProgressFn = std::function<void(const char* phase, int64_t done, int64_t total)>;

class StatusLine {
 public:
  // show_after_s: nothing is drawn before this much time has passed since
  // construction, so short operations stay quiet.
  explicit StatusLine(std::FILE* out, double plain_every_s = 0, double show_after_s = 0);
  ~StatusLine();
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  bool live() const { return live_; }
  // Sets the status text; redraws at most 10 times a second on a terminal.
  void update(const std::string& text);
  // A permanent line above the status line (newline added).
  void print(const std::string& line);
  // Clears the live line; later print() calls are plain.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  void draw();
  void clear();
  std::FILE* out_;
  bool live_;
  bool shown_ = false;
  double plain_every_s_, show_after_s_;
  Clock::time_point start_, last_draw_{}, last_plain_{};
  std::string text_;
};

// How progress is shown (`meshtrain --progress`): auto, a live line when
// the output reaches a terminal and plain lines otherwise; plain, never a
// live line; live, always one.
enum class ProgressMode { Auto, Plain, Live };
void set_progress_mode(ProgressMode mode);
ProgressMode progress_mode();
const char* progress_mode_name(ProgressMode mode);  // "auto" | "plain" | "live"
ProgressMode parse_progress_mode(const std::string& name);  // ConfigError for another name

// True when `f` gets a live line: in auto mode, a terminal that can redraw
// a line (not TERM=dumb) whose text reaches a terminal. Under mpirun a
// rank's stdout is Open MPI's pseudo-terminal even when mpirun's own output
// goes to a file, so there what the launcher (the parent process) writes
// to decides.
bool is_interactive_terminal(std::FILE* f);

// "1h02m", "3m05s", "42s" (for ETAs).
std::string format_duration(double seconds);

}  // namespace meshtrain
