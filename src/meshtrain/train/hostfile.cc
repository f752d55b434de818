#include "meshtrain/train/hostfile.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "meshtrain/core/error.h"

namespace meshtrain::train {

std::vector<HostfileEntry> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  MT_REQUIRE(ConfigError, in.good(), "cannot read the hostfile '", path,
             "' (one host per line: `node0 slots=2`; scripts/emulated-cluster.sh up writes runs/cluster/hostfile)");
  std::vector<HostfileEntry> hosts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    HostfileEntry e;
    if (!(words >> e.host)) continue;
    for (std::string w; words >> w;) {
      if (w.rfind("slots=", 0) != 0) continue;  // max_slots= and others are mpirun's business
      const std::string v = w.substr(6);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      MT_REQUIRE(ConfigError, !v.empty() && *end == '\0' && n >= 1 && n <= (1 << 20), "hostfile '", path, "' line ",
                 number, ": '", w, "' is not a positive slot count");
      e.slots = int(n);
    }
    hosts.push_back(e);
  }
  MT_REQUIRE(ConfigError, !hosts.empty(), "the hostfile '", path, "' names no host (one per line: `node0 slots=2`)");
  return hosts;
}

namespace {

struct Probe {
  std::string host;
  pid_t pid = -1;
  int err = -1;  // read end of the agent's stderr
  std::string said;
  int status = -1;
  bool done = false;
};

void start(Probe& p, const std::vector<std::string>& agent) {
  int fds[2];
  MT_REQUIRE(CommError, ::pipe2(fds, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
  std::vector<std::string> argv = agent;
  argv.push_back(p.host);
  argv.push_back("true");
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  p.pid = ::fork();
  MT_REQUIRE(CommError, p.pid >= 0, "fork: ", std::strerror(errno));
  if (p.pid == 0) {
    ::setpgid(0, 0);
    const int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(fds[1], 2);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  p.err = fds[0];
  ::fcntl(p.err, F_SETFL, O_NONBLOCK);
}

void drain(Probe& p) {
  char buf[512];
  ssize_t n;
  while ((n = ::read(p.err, buf, sizeof buf)) > 0)
    if (p.said.size() < 400) p.said.append(buf, size_t(n));
}

}  // namespace

std::vector<std::string> unreachable_hosts(const std::vector<HostfileEntry>& hosts, const std::string& agent,
                                           std::chrono::milliseconds deadline) {
  std::vector<std::string> words;
  std::istringstream split(agent.empty() ? std::string("ssh") : agent);
  for (std::string w; split >> w;) words.push_back(w);
  std::vector<Probe> probes(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    probes[i].host = hosts[i].host;
    start(probes[i], words);
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (bool waiting = true; waiting && std::chrono::steady_clock::now() < until;) {
    waiting = false;
    for (auto& p : probes) {
      if (p.done) continue;
      drain(p);
      if (::waitpid(p.pid, &p.status, WNOHANG) == p.pid) {
        p.done = true;
        drain(p);
      } else {
        waiting = true;
      }
    }
    if (waiting) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> lost;
  for (auto& p : probes) {
    std::string why;
    if (!p.done) {
      ::kill(-p.pid, SIGKILL);
      ::waitpid(p.pid, &p.status, 0);
      why = detail::concat("no answer within ", deadline.count() / 1000.0, " s");
    } else if (!WIFEXITED(p.status) || WEXITSTATUS(p.status) != 0) {
      while (!p.said.empty() && (p.said.back() == '\n' || p.said.back() == '\r')) p.said.pop_back();
      why = WIFEXITED(p.status) ? detail::concat("exit ", WEXITSTATUS(p.status))
                                : detail::concat("signal ", WTERMSIG(p.status));
      if (WIFEXITED(p.status) && WEXITSTATUS(p.status) == 127 && p.said.empty())
        why += ": cannot run '" + words.front() + "'";
      if (!p.said.empty()) why += ": " + p.said;
    }
    ::close(p.err);
    if (!why.empty()) lost.push_back(p.host + " (" + why + ")");
  }
  return lost;
}

}  // namespace meshtrain::train
