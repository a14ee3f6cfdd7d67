// tests/support/emulated_device.hpp: a device emulated on the host, so
// that the communicator's staged device path (comm/staged_call.hpp) runs,
// and is checked, on machines without a GPU.
//
// An EmulatedStream is an in-order queue run by a thread of its own, as a
// CUDA stream is run by the GPU: push() returns at once. "Device memory"
// is host memory. EmulatedQueue implements comm::DeviceQueue on one, and
// EmulatedDevice installs a backend that uses it for every communicator
// asking for a device while it lives (set_device_backend_for_tests), so a
// test passes `stream.handle()` where a program would pass a cudaStream_t.
// With `direct`, the backend also emulates the GPU-to-GPU path (see
// EmulatedJoin).
#pragma once

#include <kizuna/error.hpp>
#include <kizuna/store.hpp>
#include <kizuna/types.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/device_backend.hpp"
#include "comm/device_queue.hpp"
#include "core/completion_poller.hpp"
#include "core/reduce.hpp"
#include "fifo_memory.hpp"
#include "host_sync.hpp"
#include "kernels/fifo_layout.hpp"
#include "kernels/fifo_program.cuh"
#include "kernels/reduce.cuh"

namespace kizuna::test {

class EmulatedStream {
 public:
  EmulatedStream() : thread_([this] { run(); }) {}
  ~EmulatedStream() {
    push({});
    thread_.join();
  }
  EmulatedStream(const EmulatedStream&) = delete;
  EmulatedStream& operator=(const EmulatedStream&) = delete;

  DeviceStream handle() { return DeviceStream{this}; }
  static EmulatedStream& of(void* handle) { return *static_cast<EmulatedStream*>(handle); }

  // An empty op stops the thread once everything before it has run.
  void push(std::function<void()> op) {
    {
      std::lock_guard lock(mutex_);
      ops_.push_back(std::move(op));
    }
    cv_.notify_one();
  }
  std::function<bool()> mark() {
    auto reached = std::make_shared<std::atomic<bool>>(false);
    push([reached] { reached->store(true); });
    return [reached] { return reached->load(); };
  }
  // The stream waits until `reached` says so (at most 60 s: a test's bug
  // must not hang the suite).
  void wait_for(std::function<bool()> reached) {
    push([reached = std::move(reached)] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!reached() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  }
  // True once everything pushed so far has run, within `timeout`.
  bool synchronize(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    const auto reached = mark();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!reached())
      if (std::chrono::steady_clock::now() > deadline) return false;
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    return true;
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return !ops_.empty(); });
        op = std::move(ops_.front());
        ops_.pop_front();
      }
      if (!op) return;
      op();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  std::thread thread_;
};

class EmulatedQueue final : public comm::DeviceQueue {
 public:
  std::shared_ptr<unsigned char> host_buffer(std::size_t bytes) override {
    return std::shared_ptr<unsigned char>(new unsigned char[bytes ? bytes : 1], std::default_delete<unsigned char[]>());
  }
  void follow(void* stream) override { stream_.wait_for(EmulatedStream::of(stream).mark()); }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override {
    stream_.push([=] {
      wait_while_stalled();
      std::memcpy(host, device, bytes);
    });
  }
  void copy_to_device(void* device, const void* host, std::size_t bytes) override {
    stream_.push([=] { std::memcpy(device, host, bytes); });
  }
  std::function<bool()> mark() override { return stream_.mark(); }
  std::uint64_t gate(std::chrono::milliseconds patience) override {
    const std::uint64_t ticket = ++next_ticket_;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    stream_.push([this, ticket, deadline] {
      std::unique_lock lock(mutex_);
      cv_.wait_until(lock, deadline, [&] { return opened_ >= ticket; });
    });
    return ticket;
  }
  void open(std::uint64_t ticket) override {
    {
      std::lock_guard lock(mutex_);
      opened_ = std::max(opened_, ticket);
    }
    cv_.notify_all();
  }
  // As the CUDA queue does it: a mark polled by a thread of the queue's
  // own, with a deadline, so a stalled stream (stalled) ends in Timeout.
  void then(std::chrono::milliseconds patience, const std::string& what,
            std::function<void(std::exception_ptr)> fn) override {
    completions_.watch({stream_.mark(), std::chrono::steady_clock::now() + patience, what, std::move(fn), nullptr});
  }
  void lead(void* stream) override { EmulatedStream::of(stream).wait_for(stream_.mark()); }

  // A device that stops running its queues, as one whose context failed
  // (a kernel fault): while set, every queue's copies to the host wait (at
  // most 60 s: a test's bug must not hang the suite).
  static inline std::atomic<bool> stalled{false};

 private:
  static void wait_while_stalled() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (stalled.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t opened_ = 0;
  std::uint64_t next_ticket_ = 0;
  core::CompletionPoller completions_;  // after the stream's thread: a last look finds everything run
  EmulatedStream stream_;  // last: its thread stops before the rest goes
};

// The direct path emulated: the ranks' "GPUs" are threads of one process,
// joined through the store as CUDA IPC joins them (each rank's inbound
// FIFO channels in its own memory, their address exchanged), and a call
// runs kernels/fifo_program.cuh's walk, the kernel's code, one thread per
// part, on the caller's stream. Every type and op.
class EmulatedJoin {
 public:
  static constexpr std::uint32_t kBlocks = 4, kSlots = 2, kSlotBytes = 4096;

  // The memory each rank exports, laid out as CUDA IPC lays it out. Peers
  // hold it as long as they may touch it, as CUDA keeps an IPC allocation
  // alive while another process has it open.
  static constexpr kernels::FifoShape kShape{kBlocks, kSlots, kSlotBytes};

  EmulatedJoin(Store& store, const std::string& prefix, int rank, int world, std::chrono::milliseconds timeout)
      : rank_(rank), world_(world), key_(prefix + "/" + std::to_string(rank)), counters_(kBlocks),
        in_(kBlocks, std::vector<kernels::FifoChannel>(world)), out_(kBlocks, std::vector<kernels::FifoChannel>(world)) {
    for (auto& c : counters_) std::memset(&c, 0, sizeof c);
    // The "handle" is this process's registry key, published once the
    // memory is registered; reading every rank's key is the join.
    {
      std::lock_guard lock(registry_mutex());
      registry()[key_] = std::make_shared<FifoMemory>(kShape, world);
    }
    store.set(key_, std::vector<std::uint8_t>{1});
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(prefix + "/" + std::to_string(r));
    store.multi_get(keys, timeout);
    {
      std::lock_guard lock(registry_mutex());
      for (const std::string& k : keys) memory_.push_back(registry().at(k));
    }
    std::vector<unsigned char*> bases;
    for (const auto& m : memory_) bases.push_back(m->data());
    for (std::uint32_t b = 0; b < kBlocks; ++b)
      for (int p = 0; p < world; ++p) {
        in_[b][p] = kernels::fifo_channel(bases.data(), world, kShape, b, p, rank);
        out_[b][p] = kernels::fifo_channel(bases.data(), world, kShape, b, rank, p);
      }
  }
  ~EmulatedJoin() {
    std::lock_guard lock(registry_mutex());
    registry().erase(key_);
  }
  EmulatedJoin(const EmulatedJoin&) = delete;
  EmulatedJoin& operator=(const EmulatedJoin&) = delete;

  // Runs `c` on this thread, its parts at once; nullptr or the error.
  std::exception_ptr run(const comm::DirectCall& c, const std::vector<std::vector<kernels::DeviceStep>>& tables,
                         const std::atomic<bool>& abort) {
    std::vector<kernels::FifoStatus> status(c.parts.size(), kernels::FifoStatus::Running);
    std::vector<std::thread> blocks;
    for (std::size_t i = 0; i < c.parts.size(); ++i)
      blocks.emplace_back([&, i] {
        with_codec(c.dtype, c.op, [&]<typename Codec, typename Op>() {
          using S = typename Codec::Storage;
          const comm::DirectPart& part = c.parts[i];
          std::vector<kernels::FifoSend> pending(tables[i].size() + 1);
          std::vector<unsigned char> scratch(part.scratch_bytes + 16);
          kernels::FifoProgram prog;
          prog.steps = tables[i].data();
          prog.step_count = static_cast<std::uint32_t>(tables[i].size());
          prog.rank = rank_;
          prog.world = world_;
          prog.slots = kSlots;
          prog.slot_bytes = kSlotBytes;
          prog.in = in_[i].data();
          prog.out = out_[i].data();
          prog.counters = &counters_[i];
          prog.pending = pending.data();
          const auto* input = static_cast<const unsigned char*>(c.input) + part.offset_bytes;
          auto* output = static_cast<unsigned char*>(c.output) + part.offset_bytes;
          kernels::StepBuffers<S> b{{reinterpret_cast<S*>(const_cast<unsigned char*>(input)),
                                     reinterpret_cast<S*>(output), reinterpret_cast<S*>(scratch.data())}};
          auto state = std::make_unique<kernels::FifoState<S>>();
          HostSync sync{c.timeout, &abort};
          status[i] = kernels::run_fifo_program<Codec, Op>(prog, b, *state, sync);
        });
      });
    for (auto& t : blocks) t.join();
    for (kernels::FifoStatus s : status)
      if (s != kernels::FifoStatus::Done)
        return std::make_exception_ptr(Error(ErrorCode::Timeout, c.what + ": the emulated device gave up"));
    if (c.avg_count) core::scale(c.output, c.avg_count, c.dtype, c.avg_divisor);
    return nullptr;
  }

 private:
  static std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<std::string, std::shared_ptr<FifoMemory>>& registry() {
    static std::map<std::string, std::shared_ptr<FifoMemory>> r;
    return r;
  }

  template <typename Fn>
  static void with_codec(DataType t, ReduceOp op, Fn&& fn) {
    using namespace kernels;
    // As kernels/fifo_kernel.cu picks them: integers add as unsigned.
    switch (t) {
      case DataType::Int8: return with_op<Plain<std::uint8_t>, Plain<std::int8_t>>(op, fn);
      case DataType::UInt8: return with_op<Plain<std::uint8_t>, Plain<std::uint8_t>>(op, fn);
      case DataType::Int32: return with_op<Plain<std::uint32_t>, Plain<std::int32_t>>(op, fn);
      case DataType::UInt32: return with_op<Plain<std::uint32_t>, Plain<std::uint32_t>>(op, fn);
      case DataType::Int64: return with_op<Plain<std::uint64_t>, Plain<std::int64_t>>(op, fn);
      case DataType::UInt64: return with_op<Plain<std::uint64_t>, Plain<std::uint64_t>>(op, fn);
      case DataType::Float16: return with_op<Half, Half>(op, fn);
      case DataType::BFloat16: return with_op<BFloat, BFloat>(op, fn);
      case DataType::Float32: return with_op<Plain<float>, Plain<float>>(op, fn);
      case DataType::Float64: return with_op<Plain<double>, Plain<double>>(op, fn);
    }
  }
  template <typename Arith, typename Order, typename Fn>
  static void with_op(ReduceOp op, Fn& fn) {
    using namespace kernels;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return fn.template operator()<Arith, SumOp>();
      case ReduceOp::Prod: return fn.template operator()<Arith, ProdOp>();
      case ReduceOp::Min: return fn.template operator()<Order, MinOp>();
      case ReduceOp::Max: return fn.template operator()<Order, MaxOp>();
    }
  }

  int rank_, world_;
  std::string key_;
  std::vector<std::shared_ptr<FifoMemory>> memory_;  // every rank's, this one's included
  std::vector<kernels::FifoCounters> counters_;
  std::vector<std::vector<kernels::FifoChannel>> in_, out_;  // [block][peer]
};

class EmulatedBackend final : public comm::DeviceBackend {
 public:
  explicit EmulatedBackend(bool direct) : direct_(direct) {}
  std::string describe() const override {
    return join_ ? "emulated device (host memory), direct" : "emulated device (host memory)";
  }
  comm::DeviceQueue& queue() override { return queue_; }

  bool connect(const std::shared_ptr<Store>& store, const std::string& prefix, int rank, int world,
               std::chrono::milliseconds timeout, std::string* why) override {
    if (!direct_) return comm::DeviceBackend::connect(store, prefix, rank, world, timeout, why);
    join_ = std::make_unique<EmulatedJoin>(*store, prefix, rank, world, timeout);
    return true;
  }
  // Each call on its stream; the tables are copied now, as launch() copies
  // them to the device.
  void launch(const comm::DirectCall& c, std::function<void(std::exception_ptr)> on_done) override {
    std::vector<std::vector<kernels::DeviceStep>> tables;
    for (const comm::DirectPart& p : c.parts) tables.push_back(*p.table);
    EmulatedStream::of(c.stream).push([this, c, tables = std::move(tables), on_done = std::move(on_done)] {
      on_done(join_->run(c, tables, abort_));
    });
  }
  int direct_parts() const override { return join_ ? static_cast<int>(EmulatedJoin::kBlocks) : 1; }
  void abort() override { abort_ = true; }

 private:
  bool direct_;
  std::atomic<bool> abort_{false};
  std::unique_ptr<EmulatedJoin> join_;
  EmulatedQueue queue_;
};

// While one lives, communicators created with a device get an emulated
// one: staged, or with `direct`, GPU to GPU as emulated above.
class EmulatedDevice {
 public:
  explicit EmulatedDevice(bool direct = false) {
    comm::set_device_backend_for_tests([direct](int, int) { return std::make_unique<EmulatedBackend>(direct); });
  }
  ~EmulatedDevice() { comm::set_device_backend_for_tests({}); }
  EmulatedDevice(const EmulatedDevice&) = delete;
  EmulatedDevice& operator=(const EmulatedDevice&) = delete;
};

}  // namespace kizuna::test
