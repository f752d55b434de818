// StatusLine: plain lines through a pipe (CI, files), a line redrawn in
// place with carriage returns on a pseudo-terminal.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <pty.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/core/status_line.h"
#include "support/scoped_env.h"

namespace meshtrain {
namespace {

using testing::ScopedEnv;

// Everything readable from fd now (non-blocking).
std::string drain(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  return out;
}

void write_progress(std::FILE* f) {
  StatusLine line(f);
  line.update("step 1/3 | loss 2.0");
  line.print("step     1/3 | a log line");
  line.update("step 2/3 | loss 1.5");
  line.finish();
  line.print("done");
}

TEST(StatusLine, PlainThroughAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::FILE* w = ::fdopen(fds[1], "w");
  StatusLine probe(w);
  EXPECT_FALSE(probe.live());
  write_progress(w);
  std::fclose(w);
  const std::string out = drain(fds[0]);
  ::close(fds[0]);
  EXPECT_EQ(out, "step     1/3 | a log line\ndone\n") << "no status text, no carriage return";
}

TEST(StatusLine, RedrawnInPlaceOnATerminal) {
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  std::FILE* w = ::fdopen(slave, "w");
  const char* term = std::getenv("TERM");
  const std::string saved = term ? term : "";
  ::setenv("TERM", "xterm", 1);
  EXPECT_TRUE(StatusLine(w).live());
  write_progress(w);
  if (term) ::setenv("TERM", saved.c_str(), 1);
  else ::unsetenv("TERM");
  std::fflush(w);
  const std::string out = drain(master);
  std::fclose(w);
  ::close(master);
  EXPECT_NE(out.find("\rstep 1/3 | loss 2.0\x1b[K"), std::string::npos) << out;
  // The log line goes above: the status is cleared, the line printed, the status redrawn.
  EXPECT_NE(out.find("\r\x1b[Kstep     1/3 | a log line"), std::string::npos) << out;
  EXPECT_NE(out.find("done"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 2/3"), std::string::npos) << "redraws are throttled to 10 per second";
}

TEST(StatusLine, TheProgressModeDecidesAndMpirunsTerminalIsNotEnough) {
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  std::FILE* tty = ::fdopen(slave, "w");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::FILE* pipe = ::fdopen(fds[1], "w");
  const ScopedEnv term("TERM", "xterm");
  {
    const ScopedEnv rank("OMPI_COMM_WORLD_RANK", nullptr), pmix("PMIX_RANK", nullptr);
    EXPECT_TRUE(is_interactive_terminal(tty));
    set_progress_mode(ProgressMode::Plain);
    EXPECT_FALSE(is_interactive_terminal(tty)) << "--progress plain: never a live line";
    set_progress_mode(ProgressMode::Live);
    EXPECT_TRUE(is_interactive_terminal(pipe)) << "--progress live: always one";
    set_progress_mode(ProgressMode::Auto);
    EXPECT_FALSE(is_interactive_terminal(pipe));
  }
  {
    // A rank under Open MPI: its stdout is mpirun's pseudo-terminal whatever
    // mpirun writes to; this test's parent does not write this descriptor
    // to a terminal, so the line stays plain.
    const ScopedEnv rank("OMPI_COMM_WORLD_RANK", "0");
    EXPECT_FALSE(is_interactive_terminal(tty));
    EXPECT_FALSE(StatusLine(tty).live());
    set_progress_mode(ProgressMode::Live);
    EXPECT_TRUE(is_interactive_terminal(tty));
    set_progress_mode(ProgressMode::Auto);
  }
  EXPECT_EQ(parse_progress_mode("plain"), ProgressMode::Plain);
  EXPECT_STREQ(progress_mode_name(ProgressMode::Live), "live");
  EXPECT_THROW(parse_progress_mode("fancy"), ConfigError);
  std::fclose(tty);
  std::fclose(pipe);
  ::close(master);
  ::close(fds[0]);
}

TEST(StatusLine, FormatsDurations) {
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(-1), "?");
}

}  // namespace
}  // namespace meshtrain
