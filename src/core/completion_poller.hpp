// core/completion_poller.hpp: completions of work a device runs, found by
// polling, each with a deadline.
//
// CUDA's host functions (cudaLaunchHostFunc) are never called once the
// context has an error, so a completion that waits for one waits forever
// after a kernel fault; and CUDA forbids CUDA calls on the thread that runs
// them, where a Work's callbacks may call into the communicator. So a
// device backend records a point on its stream (an event) and hands a
// function that polls it to a CompletionPoller, whose own thread asks each
// pending item in turn:
//   - poll() returns true: done; on_done(nullptr);
//   - poll() throws: on_done(that error) (a CUDA error, or what the
//     kernel reported);
//   - the deadline passes first: on_expire() (e.g. raise the abort flag
//     the kernels watch), then on_done(Timeout naming `what`). The item
//     is still polled afterwards and dropped only once it is reached (or
//     fails): what on_done captured (buffers the device may still copy
//     into) lives until the device is past it.
// on_done runs on the poller's thread, exactly once per item. The thread
// polls in a tight loop for a moment after work arrives, then naps with a
// growing pause (up to 1 ms) while items are pending, and sleeps when none
// are. The destructor joins the thread, polls what is still pending once
// more, and fails what has not finished with Aborted.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

namespace kizuna::core {

class CompletionPoller {
 public:
  using Clock = std::chrono::steady_clock;
  struct Item {
    std::function<bool()> poll;
    Clock::time_point deadline;
    std::string what;  // names the call in a timeout's message
    std::function<void(std::exception_ptr)> on_done;
    std::function<void()> on_expire;  // may be empty
  };

  CompletionPoller() = default;
  CompletionPoller(const CompletionPoller&) = delete;
  CompletionPoller& operator=(const CompletionPoller&) = delete;
  ~CompletionPoller();

  // Any thread; starts the thread on first use.
  void watch(Item item);
  // Items whose on_done has not run yet.
  std::size_t pending() const;

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  struct Entry {
    Item item;
    bool expired = false;  // on_done has run; kept until reached
  };
  std::list<Entry> items_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kizuna::core
