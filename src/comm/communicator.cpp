// Communicator: the public API. Every entry point describes its call
// (comm/call.hpp), checks it, and hands it to the Impl (comm/comm_impl.hpp),
// which routes, queues and runs it.
#include <kizuna/comm.hpp>
#include <kizuna/store.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm/comm_impl.hpp"
#include "core/env.hpp"
#include "core/launch_env.hpp"

namespace kizuna {

using algo::Collective;
using comm::Call;
using comm::CallKind;

namespace {

Call collective(Collective c, const void* send, void* recv, std::size_t count, DataType dtype,
                ReduceOp op = ReduceOp::Sum, int root = 0) {
  return Call{CallKind::Collective, c, send, recv, count, dtype, op, root};
}

Work submit(Communicator::Impl& impl, const Call& call) {
  comm::validate(call, impl.rank, impl.world);
  return impl.submit(call);
}

Work submit(Communicator::Impl& impl, const Call& call, DeviceStream stream) {
  comm::validate(call, impl.rank, impl.world);
  return impl.submit_device(call, stream);
}

}  // namespace

Communicator::Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  if (impl_) impl_->shutdown();
}

std::shared_ptr<Communicator> Communicator::create(const CommOptions& options) {
  return std::make_shared<Communicator>(Impl::create(options));
}

std::shared_ptr<Communicator> Communicator::from_env() {
  const core::LaunchEnv launch = core::LaunchEnv::from_process();
  launch.require_rank();
  CommOptions options;
  options.store = Store::from_env();
  // A replacement that kizuna-run --elastic started joins the running
  // group; its rank comes from the group.
  if (core::Env::get().join) return join(options);
  options.rank = launch.rank;
  options.world_size = launch.world_size;
  return create(options);
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->world; }
const std::string& Communicator::name() const { return impl_->name; }
std::string Communicator::tuning() const { return impl_->tuning.describe(); }


Work Communicator::all_reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  return submit(*impl_, collective(Collective::AllReduce, send, recv, count, dtype, op));
}

Work Communicator::broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root) {
  return submit(*impl_, collective(Collective::Broadcast, send, recv, count, dtype, ReduceOp::Sum, root));
}

Work Communicator::reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root) {
  return submit(*impl_, collective(Collective::Reduce, send, recv, count, dtype, op, root));
}

Work Communicator::all_gather(const void* send, void* recv, std::size_t send_count, DataType dtype) {
  return submit(*impl_, collective(Collective::AllGather, send, recv, send_count, dtype));
}

Work Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op) {
  return submit(*impl_, collective(Collective::ReduceScatter, send, recv, recv_count, dtype, op));
}

Work Communicator::barrier() { return submit(*impl_, collective(Collective::Barrier, nullptr, nullptr, 0, DataType::UInt8)); }

Work Communicator::send(const void* buffer, std::size_t count, DataType dtype, int peer, int tag) {
  const Call call{CallKind::Send, Collective::AllReduce, buffer, nullptr, count, dtype, ReduceOp::Sum, peer};
  comm::validate(call, impl_->rank, impl_->world);
  return impl_->submit_p2p(call, tag);
}

Work Communicator::recv(void* buffer, std::size_t count, DataType dtype, int peer, int tag) {
  const Call call{CallKind::Recv, Collective::AllReduce, nullptr, buffer, count, dtype, ReduceOp::Sum, peer};
  comm::validate(call, impl_->rank, impl_->world);
  return impl_->submit_p2p(call, tag);
}

Work Communicator::all_reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                              DeviceStream stream) {
  return submit(*impl_, collective(Collective::AllReduce, send, recv, count, dtype, op), stream);
}

Work Communicator::broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                             DeviceStream stream) {
  return submit(*impl_, collective(Collective::Broadcast, send, recv, count, dtype, ReduceOp::Sum, root), stream);
}

Work Communicator::reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root,
                          DeviceStream stream) {
  return submit(*impl_, collective(Collective::Reduce, send, recv, count, dtype, op, root), stream);
}

Work Communicator::all_gather(const void* send, void* recv, std::size_t send_count, DataType dtype,
                              DeviceStream stream) {
  return submit(*impl_, collective(Collective::AllGather, send, recv, send_count, dtype), stream);
}

Work Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                                  ReduceOp op, DeviceStream stream) {
  return submit(*impl_, collective(Collective::ReduceScatter, send, recv, recv_count, dtype, op), stream);
}

Work Communicator::send(const void* buffer, std::size_t count, DataType dtype, int peer, DeviceStream stream) {
  return submit(*impl_, Call{CallKind::Send, Collective::AllReduce, buffer, nullptr, count, dtype, ReduceOp::Sum, peer},
                stream);
}

Work Communicator::recv(void* buffer, std::size_t count, DataType dtype, int peer, DeviceStream stream) {
  KIZUNA_CHECK_ARG(peer != kAnySource, "recv: a device receive needs its source rank, not kAnySource");
  return submit(*impl_, Call{CallKind::Recv, Collective::AllReduce, nullptr, buffer, count, dtype, ReduceOp::Sum, peer},
                stream);
}

std::shared_ptr<void> Communicator::allocate_symmetric(std::size_t bytes) {
  if (impl_->symmetric) {
    const auto deadline = std::chrono::steady_clock::now() + std::max(impl_->tuning.timeout, std::chrono::milliseconds(60'000));
    if (std::shared_ptr<void> p = impl_->symmetric->allocate(bytes, deadline)) return p;
  }
  // Ordinary memory: page-aligned and zeroed, like the symmetric kind.
  const std::size_t page = 4096;
  KIZUNA_CHECK_ARG(bytes <= SIZE_MAX - page, "allocate_symmetric: ", bytes, " bytes is too many");
  void* p = std::aligned_alloc(page, (bytes + page - 1) / page * page + (bytes == 0 ? page : 0));
  if (p == nullptr) KIZUNA_THROW(ErrorCode::SystemError, "allocate_symmetric: cannot allocate ", bytes, " bytes");
  std::memset(p, 0, bytes);
  return std::shared_ptr<void>(p, std::free);
}

std::string Communicator::device() const { return impl_->device ? impl_->device->describe() : "cpu"; }

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  // Everyone's (color, key), gathered through this communicator.
  const int mine[2] = {color, key};
  std::vector<int> all(2 * size());
  all_gather(mine, all.data(), 2, DataType::Int32).wait();
  const int split_id = impl_->split_count++;
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> members;  // (key, rank)
  for (int r = 0; r < size(); ++r)
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  std::sort(members.begin(), members.end());
  CommOptions options = impl_->options;
  options.world_size = static_cast<int>(members.size());
  options.rank =
      static_cast<int>(std::find(members.begin(), members.end(), std::pair{key, rank()}) - members.begin());
  options.name = name() + "/split" + std::to_string(split_id) + "/color" + std::to_string(color);
  options.timeout = impl_->tuning.timeout;
  return create(options);
}

void Communicator::abort(const std::string& reason) {
  const Error error(ErrorCode::Aborted,
                    "communicator " + name() + " on rank " + std::to_string(rank()) + " aborted: " + reason);
  {
    std::lock_guard lock(impl_->error_mutex);  // see Impl::fail
    if (!impl_->broken.exchange(true)) impl_->fatal = std::make_exception_ptr(error);
  }
  for (auto& link : impl_->links)
    if (link) link->interrupt();
  if (impl_->device) impl_->device->abort();
  if (impl_->p2p) impl_->p2p->fail_all(std::make_exception_ptr(error));
  impl_->fail_queued(std::make_exception_ptr(error));
}

std::exception_ptr Communicator::async_error() const {
  std::lock_guard lock(impl_->error_mutex);
  return impl_->fatal;
}

}  // namespace kizuna
