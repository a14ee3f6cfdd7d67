#include "comm/signal_dump.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <thread>

#include "core/env.hpp"

namespace kizuna::comm {
namespace {

int g_pipe[2] = {-1, -1};

void on_signal(int) {
  const int saved = errno;
  const char c = 1;
  (void)!::write(g_pipe[1], &c, 1);
  errno = saved;
}

struct Registry {
  std::mutex mutex;
  std::map<std::uint64_t, DumpReporter> reporters;
  std::uint64_t next = 1;
};

Registry& registry() {
  static Registry* r = new Registry();  // outlives static destruction: the thread may still read it
  return *r;
}

void dump_loop() {
  char c;
  while (::read(g_pipe[0], &c, 1) > 0) {
    std::lock_guard lock(registry().mutex);
    for (const auto& [handle, report] : registry().reporters) {
      const std::string text = report() + "\n";
      (void)!::write(2, text.data(), text.size());
    }
  }
}

bool install() {
  static const bool installed = [] {
    if (!core::Env::get().dump_on_signal) return false;
    if (::pipe2(g_pipe, O_CLOEXEC) != 0) return false;
    std::thread(dump_loop).detach();
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(SIGUSR1, &sa, nullptr);
    return true;
  }();
  return installed;
}

}  // namespace

std::uint64_t register_dump(DumpReporter reporter) {
  if (!install()) return 0;
  std::lock_guard lock(registry().mutex);
  const std::uint64_t handle = registry().next++;
  registry().reporters.emplace(handle, std::move(reporter));
  return handle;
}

void unregister_dump(std::uint64_t handle) {
  if (handle == 0) return;
  std::lock_guard lock(registry().mutex);
  registry().reporters.erase(handle);
}

}  // namespace kizuna::comm
