// Hostfile jobs without a cluster (docs/multi-node.md): the hostfile's
// hosts, the probe that names a lost one, and the launcher's side of a
// job whose node stopped answering, run with stand-ins for the rsh agent
// and mpirun.
#include "meshtrain/train/hostfile.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/train/supervisor.h"
#include "support/test_dir.h"

namespace meshtrain::train {
namespace {

std::string write(const std::filesystem::path& path, const std::string& text, bool executable = false) {
  std::ofstream(path) << text;
  if (executable) ::chmod(path.c_str(), 0755);
  return path.string();
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string error_of(const std::string& path) {
  try {
    read_hostfile(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Hostfile, HostsSlotsAndComments) {
  const auto dir = testing::fresh_test_dir("hostfile");
  const auto hosts = read_hostfile(
      write(dir / "hosts", "# the cluster\nnode0 slots=2\n\n  node1 slots=4 max_slots=8  # big one\nnode2\n"));
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "node0");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].host, "node1");
  EXPECT_EQ(hosts[1].slots, 4);
  EXPECT_EQ(hosts[2].host, "node2");
  EXPECT_EQ(hosts[2].slots, 1);  // Open MPI's default
}

TEST(Hostfile, RefusalsNameTheFileAndLine) {
  const auto dir = testing::fresh_test_dir("hostfile");
  EXPECT_NE(error_of((dir / "absent").string()).find("cannot read the hostfile"), std::string::npos);
  const std::string bad = error_of(write(dir / "bad", "node0 slots=2\nnode1 slots=two\n"));
  EXPECT_NE(bad.find("line 2: 'slots=two' is not a positive slot count"), std::string::npos) << bad;
  EXPECT_NE(error_of(write(dir / "zero", "node0 slots=0\n")).find("not a positive slot count"), std::string::npos);
  EXPECT_NE(error_of(write(dir / "empty", "# nothing\n\n")).find("names no host"), std::string::npos);
}

TEST(Hostfile, TheProbeNamesHostsThatDoNotAnswer) {
  const auto dir = testing::fresh_test_dir("hostfile");
  const std::string agent = write(dir / "agent.sh", R"(#!/bin/sh
case "$1" in
  up*) exec "$2" ;;
  down) echo "ssh: connect to host down: No route to host" >&2; exit 255 ;;
  *) exec sleep 30 ;;
esac
)", true);
  const std::vector<HostfileEntry> hosts{{"up0", 2}, {"down", 2}, {"hang", 2}, {"up1", 2}};
  const auto start = std::chrono::steady_clock::now();
  const auto lost = unreachable_hosts(hosts, agent, std::chrono::milliseconds(1500));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));  // the hanging one is not waited for
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_EQ(lost[0], "down (exit 255: ssh: connect to host down: No route to host)");
  EXPECT_EQ(lost[1], "hang (no answer within 1.5 s)");
  const auto none = unreachable_hosts(hosts, (dir / "no-such-agent").string(), std::chrono::seconds(5));
  ASSERT_EQ(none.size(), 4u);
  EXPECT_NE(none[0].find("exit 127: cannot run"), std::string::npos) << none[0];
}

// mpirun stand-in: records its arguments, then acts as a rank that aborted
// the job while mpirun stays held by a silent node.
TEST(Hostfile, TheLauncherEndsAnMpirunHeldAfterAnAbortAndExportsTheEnvironment) {
  const auto dir = testing::fresh_test_dir("hostfile");
  const std::string mpirun = write(dir / "mpirun.sh", R"(#!/bin/sh
echo "$@" > "$(dirname "$0")/args"
echo "rank 0 aborts" >> "$MESHTRAIN_ABORT_FILE"
exec sleep 60
)", true);
  LaunchJob job;
  job.mpirun = {mpirun};
  job.command = {"job"};
  job.stop_file = (dir / "stop").string();
  job.abort_file = (dir / "abort").string();
  job.export_environment = true;
  int diagnosed = 0;
  job.diagnose = [&] {
    ++diagnosed;
    return std::string("lost node(s) of hosts: node1 (no answer)");
  };
  const auto start = std::chrono::steady_clock::now();
  const int code = relaunch_mpi(job);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(code, 128 + 9);  // SIGKILL, kAbortGraceSeconds after the record
  EXPECT_GE(seconds, kAbortGraceSeconds);
  EXPECT_LT(seconds, kAbortGraceSeconds + 10);
  EXPECT_EQ(diagnosed, 1);
  EXPECT_FALSE(std::filesystem::exists(job.abort_file));  // not left for the next launch
  const std::string args = read(dir / "args");
  EXPECT_NE(args.find("-x MESHTRAIN_STOP_FILE"), std::string::npos) << args;
  EXPECT_NE(args.find("-x MESHTRAIN_ABORT_FILE"), std::string::npos) << args;
  EXPECT_NE(args.find("job"), std::string::npos) << args;
  ::unsetenv("MESHTRAIN_STOP_FILE");
  ::unsetenv("MESHTRAIN_ABORT_FILE");
  ::unsetenv("MESHTRAIN_MAX_RESTARTS");
}

}  // namespace
}  // namespace meshtrain::train
