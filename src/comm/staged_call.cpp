#include "comm/staged_call.hpp"

#include <algorithm>
#include <thread>

#include "core/check.hpp"

namespace kizuna::comm {

StagedCall::StagedCall(DeviceQueue& queue, std::shared_ptr<unsigned char> host)
    : queue_(queue), host_(std::move(host)) {}

std::shared_ptr<StagedCall> StagedCall::start(DeviceQueue& queue, const StageRequest& r, Done on_done) {
  KIZUNA_CHECK_ARG(r.in_offset + r.send_bytes <= r.host_bytes && r.out_offset + r.recv_bytes <= r.host_bytes,
                   "staged call: buffer sizes do not fit its host buffer");
  std::vector<std::size_t> cuts = r.cuts;
  if (cuts.empty()) cuts = {0, std::max(r.send_bytes, r.recv_bytes)};
  KIZUNA_CHECK(cuts.size() >= 2 && cuts.front() == 0 && std::is_sorted(cuts.begin(), cuts.end()),
               "staged call: bad part boundaries");
  std::shared_ptr<StagedCall> call(new StagedCall(queue, queue.host_buffer(r.host_bytes)));
  const std::size_t parts = cuts.size() - 1;
  call->released_.assign(parts, false);
  auto* send = static_cast<const unsigned char*>(r.send);
  auto* recv = static_cast<unsigned char*>(r.recv);
  unsigned char* host = call->host();
  // Parts clipped to a buffer: a rank that sends or receives nothing
  // (broadcast's non-roots, reduce's) has empty ranges.
  const auto clip = [](std::size_t at, std::size_t size) { return std::min(at, size); };
  queue.follow(r.stream);
  for (std::size_t k = 0; k < parts; ++k) {
    const std::size_t begin = clip(cuts[k], r.send_bytes), end = clip(cuts[k + 1], r.send_bytes);
    if (end > begin) queue.copy_to_host(host + r.in_offset + begin, send + begin, end - begin);
    call->inputs_.push_back(queue.mark());
  }
  // The gates wait for the worker, which waits at most the timeout for
  // each part's input and then as long again for its collective.
  const auto patience = 2 * r.timeout * static_cast<int>(parts) + std::chrono::seconds(10);
  for (std::size_t k = 0; k < parts; ++k) {
    call->tickets_.push_back(queue.gate(patience));
    const std::size_t begin = clip(cuts[k], r.recv_bytes), end = clip(cuts[k + 1], r.recv_bytes);
    if (end > begin) queue.copy_to_device(recv + begin, host + r.out_offset + begin, end - begin);
  }
  // The host buffer and the error live until on_done has run. A device
  // that fails or stalls ends the call with that error.
  queue.then(patience, r.what, [call, done = std::move(on_done)](std::exception_ptr e) {
    done(e ? std::move(e) : call->finished());
  });
  queue.lead(r.stream);
  return call;
}

StagedCall::~StagedCall() {
  // Unreachable while the queue still holds `call` in then(); kept for a
  // call that failed to enqueue part-way.
  for (std::uint64_t t : tickets_) queue_.open(t);
}

bool StagedCall::wait_input(std::size_t part, std::chrono::steady_clock::time_point deadline) const {
  const std::function<bool()>& arrived = inputs_.at(part);
  // Copies over the host bus take tens of microseconds to milliseconds:
  // yield a little, then nap briefly, never past the deadline.
  for (int round = 0;; ++round) {
    if (arrived()) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    if (round < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
             std::chrono::microseconds(round < 1000 ? 20 : 200), deadline - now));
  }
}

void StagedCall::release(std::size_t part, std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (released_.at(part)) return;
    released_[part] = true;
    if (error && !error_) error_ = std::move(error);
  }
  queue_.open(tickets_.at(part));
}

std::exception_ptr StagedCall::finished() {
  std::lock_guard lock(mutex_);
  if (error_) return error_;
  // A gate whose patience ran out let a result go back unreduced.
  const auto missing = std::find(released_.begin(), released_.end(), false);
  if (missing != released_.end())
    return std::make_exception_ptr(Error(ErrorCode::Timeout, core::concat("part ", missing - released_.begin() + 1, " of ",
                                         released_.size(), " of a staged device collective was not reduced before ",
                                         "the device queue stopped waiting for it")));
  return nullptr;
}

}  // namespace kizuna::comm
