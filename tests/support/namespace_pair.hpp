// tests/support/namespace_pair.hpp: two "hosts" on one machine, as two
// network namespaces joined by a veth pair, for the multi-node tests
// (tests/launcher) and the network-fault tests (tests/faults).
//
// NamespacePair creates the namespaces "<prefix><pid>-a" and
// "<prefix><pid>-b", the veth pair "<veth><pid>a" / "<veth><pid>b" (made
// inside the namespaces, so the host never sees it), 10.233.0.1/24 on the
// first and 10.233.0.2/24 on the second, and loopback up in both. The
// destructor deletes the namespaces (each takes its end of the pair along);
// namespaces with this prefix whose creating process is gone (a run killed
// at a CTest timeout) are deleted first.
//
// Needs root and a kernel that allows network namespaces: when the machine
// refuses, the constructor calls `skip` with the reason (the tests print it
// and exit 77, CTest's SKIP_RETURN_CODE), so a refusal is reported as
// skipped, never as passed. A later set-up step that fails on a machine that
// did allow the namespaces throws std::runtime_error: that is a failure.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "job.hpp"

namespace kizuna::test {

class NamespacePair {
 public:
  using Skip = void (*)(const std::string& why);

  // `prefix` names the namespaces, `veth` (at most 7 characters) the veth
  // ends; `skip` must not return.
  NamespacePair(Skip skip, std::string prefix = "kzrun-", const std::string& veth = "kzr")
      : ip_(find_tool("ip")), prefix_(std::move(prefix)) {
    if (ip_.empty()) refuse(skip, "the ip command (Debian iproute2) is not installed");
    remove_stale();
    const std::string id = std::to_string(::getpid());
    for (int i = 0; i < 2; ++i) {
      ns_[i] = prefix_ + id + (i == 0 ? "-a" : "-b");
      veth_[i] = veth + id + (i == 0 ? "a" : "b");  // at most 15 characters
    }
    std::string why;
    if (!ip({"netns", "add", ns_[0]}, why)) refuse(skip, "cannot create a network namespace: " + why);
    created_[0] = true;
    if (!ip({"netns", "add", ns_[1]}, why)) refuse(skip, "cannot create a second network namespace: " + why);
    created_[1] = true;
    if (!ip({"link", "add", veth_[0], "netns", ns_[0], "type", "veth", "peer", "name", veth_[1], "netns", ns_[1]}, why))
      refuse(skip, "cannot create a veth pair between namespaces: " + why);
    for (int i = 0; i < 2; ++i) {
      must({"-n", ns_[i], "addr", "add", address(i) + "/24", "dev", veth_[i]});
      must({"-n", ns_[i], "link", "set", veth_[i], "up"});
      must({"-n", ns_[i], "link", "set", "lo", "up"});
    }
  }

  ~NamespacePair() { remove(); }

  // Deletes the namespaces now (a test about to skip); the destructor then does nothing.
  void remove() {
    std::string ignored;
    for (int i = 0; i < 2; ++i)
      if (created_[i]) ip({"netns", "delete", ns_[i]}, ignored), created_[i] = false;
  }

  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;

  static std::string address(int i) { return i == 0 ? "10.233.0.1" : "10.233.0.2"; }
  const std::string& name(int i) const { return ns_[i]; }
  const std::string& veth(int i) const { return veth_[i]; }

  // argv run inside namespace i.
  std::vector<std::string> in(int i, const std::vector<std::string>& argv) const {
    std::vector<std::string> out{ip_, "netns", "exec", ns_[i]};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  // `ip args...` on the host (use "-n", name(i) to act inside namespace i).
  bool ip(const std::vector<std::string>& args, std::string& why) const {
    std::vector<std::string> argv{ip_};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, why);
  }

  // Like ip(), but a failure throws.
  void must(const std::vector<std::string>& args) const {
    std::string why;
    if (!ip(args, why)) {
      std::string command = "ip";
      for (const auto& a : args) command += " " + a;
      throw std::runtime_error(command + ": " + why);
    }
  }

 private:
  [[noreturn]] static void refuse(Skip skip, const std::string& why) {
    skip(why);
    throw std::runtime_error("skipped: " + why);  // for a skip that returned
  }

  // Namespaces of earlier runs whose process is gone (killed at a CTest timeout).
  void remove_stale() const {
    Job list({ip_, "netns", "list"});
    std::istringstream lines(list.wait(std::chrono::seconds(30)).output);
    std::string line;
    while (std::getline(lines, line)) {
      const std::string name = line.substr(0, line.find(' '));
      if (name.rfind(prefix_, 0) != 0) continue;
      const pid_t owner = std::atoi(name.c_str() + prefix_.size());
      std::string ignored;
      if (owner > 0 && !alive(owner)) ip({"netns", "delete", name}, ignored);
    }
  }

  std::string ip_;
  std::string prefix_;
  std::string ns_[2];
  std::string veth_[2];
  bool created_[2] = {false, false};
};

}  // namespace kizuna::test
