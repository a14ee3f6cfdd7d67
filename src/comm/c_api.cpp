// The C ABI (include/kizuna/kizuna.h): a thin layer over Communicator that
// turns exceptions into kzResult_t and keeps each thread's last message.
#include <kizuna/comm.hpp>
#include <kizuna/config.hpp>
#include <kizuna/kizuna.h>
#include <kizuna/tcp_store.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "core/launch_env.hpp"

// Each call takes its own reference, so a kzCommAbort or kzCommDestroy
// from another thread (to unstick one blocked in a call, as NCCL users do)
// lets go of the handle without freeing the communicator under that call.
//
// The handle is a shared_ptr under a mutex, not std::atomic<shared_ptr>:
// libstdc++ 12 guards that one with a lock bit inside the control block
// that ThreadSanitizer does not see, so `make test-tsan` reported a race
// between a call's load() and kzCommAbort's exchange() that is none.
struct kzComm {
  class Handle {
   public:
    Handle(std::shared_ptr<kizuna::Communicator> c) : comm_(std::move(c)) {}
    std::shared_ptr<kizuna::Communicator> load() const {
      std::lock_guard lock(mutex_);
      return comm_;
    }
    std::shared_ptr<kizuna::Communicator> exchange(std::shared_ptr<kizuna::Communicator> c) {
      std::lock_guard lock(mutex_);
      comm_.swap(c);
      return c;
    }

   private:
    mutable std::mutex mutex_;
    std::shared_ptr<kizuna::Communicator> comm_;
  };
  Handle comm;
};

namespace {

using kizuna::DataType;
using kizuna::ErrorCode;
using kizuna::ReduceOp;

thread_local std::string g_last_error;

// What kzMemAlloc handed out, until kzMemFree.
std::mutex g_memory_mutex;
std::map<void*, std::shared_ptr<void>> g_memory;

kzResult_t to_result(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return kzInvalidArgument;
    case ErrorCode::Timeout: return kzTimeout;
    case ErrorCode::PeerLost: return kzPeerLost;
    case ErrorCode::Mismatch: return kzMismatch;
    case ErrorCode::SystemError: return kzSystemError;
    case ErrorCode::CudaError: return kzCudaError;
    case ErrorCode::Aborted: return kzAborted;
    case ErrorCode::Internal: return kzInternalError;
  }
  return kzInternalError;
}

// Runs fn, mapping every exception to a result and remembering its message.
template <typename Fn>
kzResult_t guarded(Fn&& fn) {
  try {
    fn();
    return kzSuccess;
  } catch (const kizuna::Error& e) {
    g_last_error = e.what();
    return to_result(e.code());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return kzInternalError;
  } catch (...) {
    g_last_error = "unknown exception";
    return kzInternalError;
  }
}

std::shared_ptr<kizuna::Communicator> comm_of(kzComm_t comm) {
  KIZUNA_CHECK_ARG(comm != nullptr, "communicator is NULL");
  std::shared_ptr<kizuna::Communicator> c = comm->comm.load();
  KIZUNA_CHECK_ARG(c != nullptr, "communicator was destroyed or aborted");
  return c;
}

// The C enums share kizuna's values; the Communicator checks every call's
// arguments (comm/call.hpp), and refuses a code out of range, which
// arrives as 255 ("invalid data type code 255").
DataType dtype_of(kzDataType_t t) { return static_cast<DataType>(t >= 0 && t < kzNumTypes ? t : 0xff); }
ReduceOp op_of(kzRedOp_t op) { return static_cast<ReduceOp>(op >= 0 && op < kzNumOps ? op : 0xff); }

// NULL stream: host memory, and the call returns when the collective is
// over on this rank. A stream: device memory, and the call returns once the
// collective is queued on it (errors then surface on the stream's Work and
// through kzCommGetAsyncError), as in NCCL.
// This thread's open groups (kzGroupStart) and the host calls posted in them.
thread_local int g_group_depth = 0;
thread_local std::vector<kizuna::Work> g_group_works;

template <typename Host, typename Device>
void dispatch(kzStream_t stream, Host&& host, Device&& device) {
  if (stream != nullptr) device(kizuna::DeviceStream{stream});
  else if (g_group_depth > 0) g_group_works.push_back(host());
  else host().wait();
}

}  // namespace

extern "C" {

kzResult_t kzGetVersion(int* version) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(version != nullptr, "version is NULL");
    *version = KIZUNA_VERSION_CODE;
  });
}

kzResult_t kzCommInitFromEnv(kzComm_t* comm) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(comm != nullptr, "comm is NULL");
    *comm = new kzComm{kizuna::Communicator::from_env()};
  });
}

kzResult_t kzCommInitRank(kzComm_t* comm, int nranks, const char* store, int rank) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(comm != nullptr, "comm is NULL");
    KIZUNA_CHECK_ARG(store != nullptr, "store address is NULL");
    KIZUNA_CHECK_ARG(nranks >= 1, "nranks is ", nranks);
    KIZUNA_CHECK_ARG(rank >= 0 && rank < nranks, "rank ", rank, " is out of range for ", nranks, " ranks");
    kizuna::TcpStoreOptions options;
    kizuna::core::split_host_port("store", store, options.host, options.port);
    KIZUNA_CHECK_ARG(options.port > 0, "store '", store, "': port 0 cannot be shared; pick a port");
    options.is_server = rank == 0;
    kizuna::CommOptions co;
    co.store = std::make_shared<kizuna::TcpStore>(options);
    co.rank = rank;
    co.world_size = nranks;
    *comm = new kzComm{kizuna::Communicator::create(co)};
  });
}

kzResult_t kzCommDestroy(kzComm_t comm) {
  return guarded([&] {
    if (comm == nullptr) return;
    const std::shared_ptr<kizuna::Communicator> last = comm->comm.exchange(nullptr);
    delete comm;  // the communicator goes with the last call still in it
  });
}

kzResult_t kzCommAbort(kzComm_t comm) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(comm != nullptr, "communicator is NULL");
    if (const std::shared_ptr<kizuna::Communicator> c = comm->comm.exchange(nullptr)) c->abort("kzCommAbort");
    delete comm;  // calls still in it fail with Aborted and hold the communicator until they return
  });
}

kzResult_t kzCommSplit(kzComm_t comm, int color, int key, kzComm_t* newcomm) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(newcomm != nullptr, "newcomm is NULL");
    auto sub = comm_of(comm)->split(color, key);
    *newcomm = sub ? new kzComm{std::move(sub)} : nullptr;
  });
}

kzResult_t kzCommShrink(kzComm_t comm, kzComm_t* newcomm) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(newcomm != nullptr, "newcomm is NULL");
    *newcomm = new kzComm{comm_of(comm)->shrink()};
  });
}

kzResult_t kzCommCount(const kzComm_t comm, int* count) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(count != nullptr, "count is NULL");
    *count = comm_of(comm)->size();
  });
}

kzResult_t kzCommUserRank(const kzComm_t comm, int* rank) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(rank != nullptr, "rank is NULL");
    *rank = comm_of(comm)->rank();
  });
}

kzResult_t kzCommGetAsyncError(kzComm_t comm, kzResult_t* async_error) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(async_error != nullptr, "async_error is NULL");
    *async_error = kzSuccess;
    if (auto e = comm_of(comm)->async_error()) {
      try {
        std::rethrow_exception(e);
      } catch (const kizuna::Error& err) {
        *async_error = to_result(err.code());
        g_last_error = err.what();
      } catch (const std::exception& err) {
        *async_error = kzInternalError;
        g_last_error = err.what();
      } catch (...) {
        *async_error = kzInternalError;
        g_last_error = "unknown error";
      }
    }
  });
}

const char* kzGetErrorString(kzResult_t result) {
  switch (result) {
    case kzSuccess: return "success";
    case kzInvalidArgument: return "invalid argument";
    case kzTimeout: return "timed out";
    case kzPeerLost: return "a peer was lost";
    case kzMismatch: return "ranks made mismatched calls";
    case kzSystemError: return "system error";
    case kzCudaError: return "CUDA error";
    case kzAborted: return "aborted";
    case kzInternalError: return "internal error";
    default: return "unknown result code";
  }
}

const char* kzGetLastError(kzComm_t) { return g_last_error.c_str(); }

kzResult_t kzAllReduce(const void* sendbuff, void* recvbuff, size_t count, kzDataType_t datatype,
                       kzRedOp_t op, kzComm_t comm, kzStream_t stream) {
  return guarded([&] {
    dispatch(
        stream, [&] { return comm_of(comm)->all_reduce(sendbuff, recvbuff, count, dtype_of(datatype), op_of(op)); },
        [&](kizuna::DeviceStream s) { comm_of(comm)->all_reduce(sendbuff, recvbuff, count, dtype_of(datatype), op_of(op), s); });
  });
}

kzResult_t kzBroadcast(const void* sendbuff, void* recvbuff, size_t count, kzDataType_t datatype,
                       int root, kzComm_t comm, kzStream_t stream) {
  return guarded([&] {
    dispatch(
        stream, [&] { return comm_of(comm)->broadcast(sendbuff, recvbuff, count, dtype_of(datatype), root); },
        [&](kizuna::DeviceStream s) { comm_of(comm)->broadcast(sendbuff, recvbuff, count, dtype_of(datatype), root, s); });
  });
}

kzResult_t kzReduce(const void* sendbuff, void* recvbuff, size_t count, kzDataType_t datatype,
                    kzRedOp_t op, int root, kzComm_t comm, kzStream_t stream) {
  return guarded([&] {
    dispatch(
        stream, [&] { return comm_of(comm)->reduce(sendbuff, recvbuff, count, dtype_of(datatype), op_of(op), root); },
        [&](kizuna::DeviceStream s) { comm_of(comm)->reduce(sendbuff, recvbuff, count, dtype_of(datatype), op_of(op), root, s); });
  });
}

kzResult_t kzAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                       kzDataType_t datatype, kzComm_t comm, kzStream_t stream) {
  return guarded([&] {
    dispatch(
        stream, [&] { return comm_of(comm)->all_gather(sendbuff, recvbuff, sendcount, dtype_of(datatype)); },
        [&](kizuna::DeviceStream s) { comm_of(comm)->all_gather(sendbuff, recvbuff, sendcount, dtype_of(datatype), s); });
  });
}

kzResult_t kzReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                           kzDataType_t datatype, kzRedOp_t op, kzComm_t comm, kzStream_t stream) {
  return guarded([&] {
    dispatch(
        stream, [&] { return comm_of(comm)->reduce_scatter(sendbuff, recvbuff, recvcount, dtype_of(datatype), op_of(op)); },
        [&](kizuna::DeviceStream s) { comm_of(comm)->reduce_scatter(sendbuff, recvbuff, recvcount, dtype_of(datatype), op_of(op), s); });
  });
}

kzResult_t kzSend(const void* sendbuff, size_t count, kzDataType_t datatype, int peer, kzComm_t comm,
                  kzStream_t stream) {
  return guarded([&] {
    dispatch(
        stream, [&] { return comm_of(comm)->send(sendbuff, count, dtype_of(datatype), peer); },
        [&](kizuna::DeviceStream s) { comm_of(comm)->send(sendbuff, count, dtype_of(datatype), peer, s); });
  });
}

kzResult_t kzRecv(void* recvbuff, size_t count, kzDataType_t datatype, int peer, kzComm_t comm,
                  kzStream_t stream) {
  return guarded([&] {
    dispatch(
        stream, [&] { return comm_of(comm)->recv(recvbuff, count, dtype_of(datatype), peer); },
        [&](kizuna::DeviceStream s) { comm_of(comm)->recv(recvbuff, count, dtype_of(datatype), peer, s); });
  });
}

kzResult_t kzGroupStart(void) {
  ++g_group_depth;
  return kzSuccess;
}

kzResult_t kzGroupEnd(void) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(g_group_depth > 0, "kzGroupEnd without kzGroupStart");
    if (--g_group_depth > 0) return;
    std::vector<kizuna::Work> works;
    works.swap(g_group_works);
    // Every call is waited for, so none is left running on the caller's
    // buffers; the first failure is the one returned.
    std::exception_ptr first;
    for (const kizuna::Work& w : works) {
      try {
        w.wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  });
}

kzResult_t kzBarrier(kzComm_t comm, kzStream_t stream) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(stream == nullptr, "kzBarrier takes no stream; pass NULL");
    if (g_group_depth > 0) g_group_works.push_back(comm_of(comm)->barrier());
    else comm_of(comm)->barrier().wait();
  });
}

}  // extern "C"

kzResult_t kzMemAlloc(kzComm_t comm, void** ptr, size_t size) {
  return guarded([&] {
    KIZUNA_CHECK_ARG(ptr != nullptr, "kzMemAlloc: ptr is NULL");
    std::shared_ptr<void> memory = comm_of(comm)->allocate_symmetric(size);
    std::lock_guard lock(g_memory_mutex);
    *ptr = memory.get();
    g_memory.emplace(memory.get(), std::move(memory));
  });
}

kzResult_t kzMemFree(void* ptr) {
  return guarded([&] {
    if (ptr == nullptr) return;
    std::shared_ptr<void> memory;  // released outside the lock
    std::lock_guard lock(g_memory_mutex);
    auto it = g_memory.find(ptr);
    KIZUNA_CHECK_ARG(it != g_memory.end(), "kzMemFree: ", ptr, " is not memory from kzMemAlloc (or was freed)");
    memory = std::move(it->second);
    g_memory.erase(it);
  });
}
