#include "torch_comm.hpp"

#include <kizuna/comm_options.hpp>
#include <kizuna/error.hpp>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace kizuna_torch {
namespace {

using kizuna::DataType;

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

// A tensor kizuna can use: defined, on the CPU, dense.
void check_tensor(const at::Tensor& t, const char* call) {
  TORCH_CHECK(t.defined(), "kizuna: ", call, ": got an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "kizuna: ", call, ": the tensor is on ", t.device(),
              "; the kizuna backend handles CPU tensors only (kizuna's CUDA path is not wired into "
              "torch.distributed yet): move the tensor to the CPU or use backend=\"nccl\"");
  TORCH_CHECK(t.layout() == at::kStrided, "kizuna: ", call, ": ", t.layout(),
              " tensors are not supported; pass a dense (strided) tensor");
}

DataType data_type(const at::Tensor& t, const char* call) {
  check_tensor(t, call);
  switch (t.scalar_type()) {
    case at::kChar: return DataType::Int8;
    case at::kByte: return DataType::UInt8;
    case at::kBool: return DataType::UInt8;  // one byte, 0 or 1
    case at::kInt: return DataType::Int32;
    case at::kLong: return DataType::Int64;
    case at::kHalf: return DataType::Float16;
    case at::kBFloat16: return DataType::BFloat16;
    case at::kFloat: return DataType::Float32;
    case at::kDouble: return DataType::Float64;
    default:
      TORCH_CHECK(false, "kizuna: ", call, ": dtype ", t.scalar_type(),
                  " is not supported (supported: float16, bfloat16, float32, float64, int8, uint8, "
                  "int32, int64, bool)");
  }
}

kizuna::ReduceOp reduce_op(const c10d::ReduceOp& op, const at::Tensor& t, const char* call) {
  const c10d::ReduceOp::RedOpType type = op;
  const bool boolean = t.scalar_type() == at::kBool;
  switch (type) {
    // On bool, as in torch's NCCL backend: SUM is logical or, PRODUCT logical and.
    case c10d::ReduceOp::SUM: return boolean ? kizuna::ReduceOp::Max : kizuna::ReduceOp::Sum;
    case c10d::ReduceOp::PRODUCT: return boolean ? kizuna::ReduceOp::Min : kizuna::ReduceOp::Prod;
    case c10d::ReduceOp::MIN: return kizuna::ReduceOp::Min;
    case c10d::ReduceOp::MAX: return kizuna::ReduceOp::Max;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(at::isFloatingType(t.scalar_type()), "kizuna: ", call,
                  ": ReduceOp.AVG needs a floating-point tensor (float16, bfloat16, float32, "
                  "float64), got ",
                  t.scalar_type(), "; use ReduceOp.SUM and divide by the group size");
      return kizuna::ReduceOp::Avg;
    default:
      TORCH_CHECK(false, "kizuna: ", call, ": ReduceOp.", op_name(type),
                  " is not supported (supported: SUM, AVG, PRODUCT, MIN, MAX)");
  }
}

at::Tensor& single(std::vector<at::Tensor>& tensors, const char* call) {
  TORCH_CHECK(tensors.size() == 1, "kizuna: ", call, " takes one tensor per process, got ",
              tensors.size());
  return tensors[0];
}

void check_root(int64_t root, int size, const char* call) {
  TORCH_CHECK(root >= 0 && root < size, "kizuna: ", call, ": root rank ", root,
              " is out of range for a group of ", size);
}

// The tag of the messages gather, scatter and all-to-all are made of, kept
// from the callers' own so that a receive from any source never takes one.
constexpr int kInternalTag = std::numeric_limits<int>::max();

void check_tag(int tag, const char* call) {
  TORCH_CHECK(tag >= 0 && tag < kInternalTag, "kizuna: ", call, ": tag ", tag, " is out of range [0, ",
              kInternalTag, ")");
}

void check_like(const at::Tensor& t, const at::Tensor& like, const char* what, const char* call) {
  check_tensor(t, call);
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "kizuna: ", call, ": ", what, " has dtype ",
              t.scalar_type(), " but the input has ", like.scalar_type());
  TORCH_CHECK(t.numel() == like.numel(), "kizuna: ", call, ": ", what, " has ", t.numel(),
              " elements but the input has ", like.numel());
}

std::size_t count(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()); }

// A tensor as kizuna needs it: contiguous memory. `buffer` is the tensor
// itself when it is contiguous, else a contiguous copy.
struct Staged {
  at::Tensor original;
  at::Tensor buffer;
  bool copied() const { return !buffer.is_same(original); }
  void* data() const { return buffer.data_ptr(); }
};

// `flat`'s elements [offset, offset + t.numel()) shaped like t.
at::Tensor slot(const at::Tensor& flat, std::size_t index, const at::Tensor& t) {
  return flat.narrow(0, static_cast<int64_t>(index) * t.numel(), t.numel()).view(t.sizes());
}

// Runs after every part succeeded: copies staged results back (only for
// staged copies) and keeps buffers alive until then.
std::function<void()> copy_back(std::vector<Staged> outputs) {
  return [outputs = std::move(outputs)] {
    for (const Staged& s : outputs)
      if (s.copied()) s.original.copy_(s.buffer);
  };
}

// The tensors of a coalesced call of one dtype, packed end to end: tensor
// `index` at `offset`, `numel` elements in all. Packs come in the order
// their dtype first appears, the same on every rank that passes the same
// tensors.
struct Pack {
  at::ScalarType type;
  DataType dtype;
  int64_t numel = 0;
  std::vector<std::pair<std::size_t, int64_t>> members = {};  // (index, offset)
};

std::vector<Pack> plan_packs(const std::vector<at::Tensor>& tensors, const char* call) {
  std::vector<Pack> packs;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    const DataType dtype = data_type(t, call);
    auto it = std::find_if(packs.begin(), packs.end(), [&](const Pack& p) { return p.type == t.scalar_type(); });
    if (it == packs.end()) it = packs.insert(packs.end(), Pack{t.scalar_type(), dtype});
    it->members.emplace_back(i, it->numel);
    it->numel += t.numel();
  }
  return packs;
}

// A new buffer holding `pack`'s tensors end to end.
at::Tensor packed(const Pack& pack, const std::vector<at::Tensor>& tensors) {
  at::Tensor flat = at::empty({pack.numel}, tensors[pack.members[0].first].options());
  for (const auto& [i, offset] : pack.members)
    flat.narrow(0, offset, tensors[i].numel()).view(tensors[i].sizes()).copy_(tensors[i]);
  return flat;
}

kizuna::Bytes bytes_of(const std::string& s) { return kizuna::Bytes(s.begin(), s.end()); }

// torch's default process-group timeout, for a group created without one.
constexpr std::chrono::minutes kTorchDefaultTimeout{30};

}  // namespace

struct TorchComm::CallScope {
  explicit CallScope(TorchComm& comm) : lock(comm.call_mutex_) {
    TORCH_CHECK(comm.comm_, "kizuna: this process group has been shut down or destroyed; create a new one");
    // See "Order" in torch_comm.hpp. Its error belongs to its own Work.
    if (const auto work = comm.apart_.lock()) {
      try {
        work->wait();
      } catch (...) {
      }
    }
    comm.apart_ = c10::weak_intrusive_ptr<KizunaWork>(c10::intrusive_ptr<KizunaWork>());
  }
  std::lock_guard<std::mutex> lock;
  at::NoGradGuard no_grad;
};

TorchComm::TorchComm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout)
    : rank_(rank),
      size_(size),
      timeout_(timeout.count() > 0 ? timeout : std::chrono::milliseconds(0)),
      call_timeouts_([this](const c10::intrusive_ptr<KizunaWork>& work, std::chrono::milliseconds t) {
        expire(work, t);
      }) {
  TORCH_CHECK(store, "kizuna: the c10d store is null");
  store_ = std::make_shared<C10dStoreAdapter>(store);
  // Ranks agree on N when each creates its groups under this prefix in the
  // same order; a per-rank counter needs no coordination to agree.
  const std::int64_t incarnation = store_->add("kizuna/incarnation/rank" + std::to_string(rank), 1);
  name_ = "kizuna/pg" + std::to_string(incarnation);
  kizuna::CommOptions options;
  options.store = store_;
  options.rank = rank;
  options.world_size = size;
  options.name = name_;
  if (timeout_.count() > 0) {
    options.timeout = timeout_;
    options.setup_timeout = timeout_;
    store_->set_timeout(timeout_);
  }
  comm_ = kizuna::Communicator::create(options);
}

TorchComm::TorchComm(std::shared_ptr<C10dStoreAdapter> store, std::shared_ptr<kizuna::Communicator> comm,
                     std::chrono::milliseconds timeout)
    : rank_(comm->rank()),
      size_(comm->size()),
      timeout_(timeout),
      store_(std::move(store)),
      name_(comm->name()),
      comm_(std::move(comm)),
      call_timeouts_([this](const c10::intrusive_ptr<KizunaWork>& work, std::chrono::milliseconds t) {
        expire(work, t);
      }) {}

TorchComm::Survivors TorchComm::shrink() {
  std::shared_ptr<kizuna::Communicator> comm;
  {
    const std::lock_guard swap(comm_mutex_);
    comm = comm_;
  }
  TORCH_CHECK(comm, "kizuna: shrink: this process group has been shut down or destroyed");
  // Calls still queued here fail with the communicator (shrink() aborts it
  // first); their watchdogs have nothing left to do.
  call_timeouts_.stop();
  Survivors survivors;
  try {
    survivors.comm = comm->shrink();
    // Each member's rank here, so Python can map the new group's ranks to
    // global ones: one small all-gather, in old order like the new ranks.
    const std::int32_t mine = rank_;
    std::vector<std::int32_t> old(static_cast<std::size_t>(survivors.comm->size()));
    survivors.comm->all_gather(&mine, old.data(), 1, DataType::Int32).wait();
    survivors.old_ranks.assign(old.begin(), old.end());
  } catch (const kizuna::Error& e) {
    std::rethrow_exception(compat::backend_error(c10::str("kizuna: shrink on rank ", rank_, ": ", e.what())));
  }
  return survivors;
}

void TorchComm::close() {
  call_timeouts_.stop();
  std::shared_ptr<kizuna::Communicator> comm;
  {
    const std::lock_guard lock(call_mutex_);
    const std::lock_guard swap(comm_mutex_);
    last_ = kizuna::Work();
    last_work_ = c10::weak_intrusive_ptr<KizunaWork>(c10::intrusive_ptr<KizunaWork>());
    comm = std::move(comm_);
  }
  comm.reset();  // outside the locks: it waits for the queued calls
}

void TorchComm::abort(const std::string& reason) {
  // Not under call_mutex_: a call holding it may be waiting for the very
  // calls this aborts.
  std::shared_ptr<kizuna::Communicator> comm;
  {
    const std::lock_guard swap(comm_mutex_);
    comm = comm_;
  }
  if (comm) comm->abort(reason);
}

void TorchComm::expire(const c10::intrusive_ptr<KizunaWork>& work, std::chrono::milliseconds timeout) {
  const std::string what = c10::str("timeout in ", work->call(), " on rank ", rank_,
                                    ": not done within the call's timeout of ", timeout.count(), " ms");
  if (!work->expire(compat::backend_error(
          c10::str("kizuna: ", what, "; the communicator is aborted (create a new process group)"))))
    return;
  abort(what);
}

void TorchComm::queued(const std::vector<kizuna::Work>& parts) {
  if (!parts.empty()) last_ = parts.back();
}

void TorchComm::settle() {
  // Calls run in order, so the last one done means all are; and done as
  // c10d sees it, its staged results copied back into the caller's
  // tensors (a kizuna Work is done before the callback that copies them
  // has run). Its error, if any, belongs to its own Work and is reported
  // there.
  try {
    if (const auto work = last_work_.lock()) work->wait();
    else last_.wait();
  } catch (...) {
  }
}

WorkPtr TorchComm::launch(c10::intrusive_ptr<KizunaWork> work, std::vector<kizuna::Work> parts,
                          std::function<void()> epilogue, std::vector<at::Tensor> keep,
                          std::chrono::milliseconds timeout) {
  queued(parts);
  last_work_ = c10::weak_intrusive_ptr<KizunaWork>(work);
  return start(std::move(work), std::move(parts), std::move(epilogue), std::move(keep), timeout);
}

WorkPtr TorchComm::start(c10::intrusive_ptr<KizunaWork> work, std::vector<kizuna::Work> parts,
                         std::function<void()> epilogue, std::vector<at::Tensor> keep,
                         std::chrono::milliseconds timeout) {
  ++calls_;
  KizunaWork::start(work, std::move(parts), [keep = std::move(keep), epilogue = std::move(epilogue)] {
    if (epilogue) epilogue();
  });
  // A timeout of the call's own, if shorter than the group's (which kizuna
  // enforces itself).
  if (timeout != c10d::kUnsetTimeout && (timeout_.count() == 0 || timeout < timeout_) && !work->isCompleted())
    call_timeouts_.watch(work, timeout);
  return work;
}

WorkPtr TorchComm::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "allreduce";
  at::Tensor& t = single(tensors, kCall);
  if (t.defined() && t.layout() == at::kSparse) return allreduce_sparse(t, tensors, opts);
  const DataType dtype = data_type(t, kCall);
  const kizuna::ReduceOp op = reduce_op(opts.reduceOp, t, kCall);
  if (!t.is_contiguous()) settle();
  Staged s{t, t.contiguous()};
  std::vector<kizuna::Work> parts{comm_->all_reduce(s.data(), count(t), dtype, op)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::ALLREDUCE, "kizuna:all_reduce", tensors, tensors);
  return launch(work, parts, copy_back({s}), {}, opts.timeout);
}

WorkPtr TorchComm::allreduce_sparse(at::Tensor& t, std::vector<at::Tensor>& tensors,
                                    const c10d::AllreduceOptions& opts) {
  // As Gloo does it: every rank's (indices, values) gathered, then summed
  // here. Step 1 gathers each rank's shape and number of entries (nnz) and
  // waits for them; step 2 gathers the indices and values, padded to the
  // largest nnz; the epilogue adds the ranks' tensors up into `t`.
  //
  //   meta (int64)     [nnz, sparse_dim, dense_dim, size 0 .. size 7]
  //   indices (int64)  [sparse_dim, max_nnz]          per rank
  //   values           [max_nnz, dense sizes...]      per rank
  constexpr const char* kCall = "allreduce (sparse)";
  constexpr int kMaxDims = 8;
  constexpr int64_t kMeta = 3 + kMaxDims;
  TORCH_CHECK(t.device().is_cpu(), "kizuna: ", kCall, ": the tensor is on ", t.device(),
              "; the kizuna backend handles CPU tensors only");
  TORCH_CHECK(static_cast<c10d::ReduceOp::RedOpType>(opts.reduceOp) == c10d::ReduceOp::SUM, "kizuna: ", kCall,
              ": sparse tensors support ReduceOp.SUM only");
  TORCH_CHECK(t.dim() <= kMaxDims, "kizuna: ", kCall, ": ", t.dim(), " dimensions; at most ", kMaxDims);
  const at::Tensor input = t.coalesce();
  const at::Tensor values = input.values().contiguous();
  const DataType dtype = data_type(values, kCall);
  at::Tensor meta = at::zeros({kMeta}, at::kLong);
  auto m = meta.accessor<int64_t, 1>();
  m[0] = input._nnz();
  m[1] = input.sparse_dim();
  m[2] = input.dense_dim();
  for (int64_t d = 0; d < t.dim(); ++d) m[3 + d] = t.size(d);
  settle();
  at::Tensor metas = at::empty({size_ * kMeta}, at::kLong);
  try {
    comm_->all_gather(meta.data_ptr(), metas.data_ptr(), kMeta, DataType::Int64).wait();
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "kizuna: ", kCall, ": ", e.what());
  }
  const auto all = metas.view({size_, kMeta});
  int64_t max_nnz = 0;
  std::vector<int64_t> nnz(size_);
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK(at::equal(all[r].narrow(0, 1, kMeta - 1), meta.narrow(0, 1, kMeta - 1)), "kizuna: ", kCall,
                ": rank ", r, "'s sparse tensor differs in shape or sparse/dense dimensions from this rank's, ",
                t.sizes());
    nnz[r] = all[r][0].item<int64_t>();
    max_nnz = std::max(max_nnz, nnz[r]);
  }
  const int64_t sparse_dim = input.sparse_dim();
  std::vector<int64_t> value_shape{max_nnz};
  for (int64_t d = sparse_dim; d < t.dim(); ++d) value_shape.push_back(t.size(d));
  at::Tensor my_indices = at::zeros({sparse_dim, max_nnz}, at::kLong);
  my_indices.narrow(1, 0, input._nnz()).copy_(input.indices());
  at::Tensor my_values = at::zeros(value_shape, values.options());
  my_values.narrow(0, 0, input._nnz()).copy_(values);
  at::Tensor indices = at::empty({size_, sparse_dim, max_nnz}, at::kLong);
  value_shape.insert(value_shape.begin(), size_);
  at::Tensor gathered = at::empty(value_shape, values.options());
  std::vector<kizuna::Work> parts{
      comm_->all_gather(my_indices.data_ptr(), indices.data_ptr(), count(my_indices), DataType::Int64),
      comm_->all_gather(my_values.data_ptr(), gathered.data_ptr(), count(my_values), dtype)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::ALLREDUCE, "kizuna:sparse_all_reduce", tensors,
                                              tensors);
  return launch(
      work, parts,
      [t, indices, gathered, nnz] {
        at::Tensor sum;
        for (std::size_t r = 0; r < nnz.size(); ++r) {
          const int64_t n = nnz[r];
          at::Tensor part = at::sparse_coo_tensor(indices[r].narrow(1, 0, n), gathered[r].narrow(0, 0, n), t.sizes());
          sum = sum.defined() ? sum + part : part;
        }
        t.copy_(sum.coalesce());
      },
      {my_indices, my_values}, opts.timeout);
}

WorkPtr TorchComm::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                       const c10d::AllreduceCoalescedOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "kizuna: ", kCall, ": no tensors given");
  const std::vector<Pack> packs = plan_packs(tensors, kCall);
  std::vector<kizuna::ReduceOp> ops;
  for (const Pack& p : packs) ops.push_back(reduce_op(opts.reduceOp, tensors[p.members[0].first], kCall));
  // One all-reduce per pack (as Gloo does, which allows one dtype only).
  settle();
  std::vector<at::Tensor> flats;
  std::vector<kizuna::Work> parts;
  for (std::size_t k = 0; k < packs.size(); ++k) {
    flats.push_back(packed(packs[k], tensors));
    parts.push_back(comm_->all_reduce(flats[k].data_ptr(), packs[k].numel, packs[k].dtype, ops[k]));
  }
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::ALLREDUCE_COALESCED,
                                              "kizuna:all_reduce_coalesced", tensors, tensors);
  return launch(
      work, parts,
      [packs, flats, tensors] {
        for (std::size_t k = 0; k < packs.size(); ++k)
          for (const auto& [i, offset] : packs[k].members)
            tensors[i].copy_(flats[k].narrow(0, offset, tensors[i].numel()).view(tensors[i].sizes()));
      },
      {}, opts.timeout);
}

WorkPtr TorchComm::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "broadcast";
  at::Tensor& t = single(tensors, kCall);
  const DataType dtype = data_type(t, kCall);
  check_root(opts.rootRank, size_, kCall);
  TORCH_CHECK(opts.rootTensor == 0, "kizuna: ", kCall, ": rootTensor must be 0 (one tensor per process)");
  const int root = static_cast<int>(opts.rootRank);
  if (!t.is_contiguous() && rank_ == root) settle();
  Staged s{t, t.contiguous()};
  std::vector<kizuna::Work> parts{comm_->broadcast(s.data(), count(t), dtype, root)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::BROADCAST, "kizuna:broadcast", tensors, tensors);
  return launch(work, parts, copy_back({s}), {}, opts.timeout);
}

WorkPtr TorchComm::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "reduce";
  at::Tensor& t = single(tensors, kCall);
  const DataType dtype = data_type(t, kCall);
  const kizuna::ReduceOp op = reduce_op(opts.reduceOp, t, kCall);
  check_root(opts.rootRank, size_, kCall);
  TORCH_CHECK(opts.rootTensor == 0, "kizuna: ", kCall, ": rootTensor must be 0 (one tensor per process)");
  const int root = static_cast<int>(opts.rootRank);
  if (!t.is_contiguous()) settle();
  Staged s{t, t.contiguous()};
  // In place on the root; other ranks' tensors are left as they were.
  std::vector<kizuna::Work> parts{
      comm_->reduce(s.data(), rank_ == root ? s.data() : nullptr, count(t), dtype, op, root)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::REDUCE, "kizuna:reduce", tensors, tensors);
  std::vector<Staged> results;
  if (rank_ == root) results.push_back(s);
  return launch(work, parts, copy_back(std::move(results)), {s.buffer}, opts.timeout);
}

WorkPtr TorchComm::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                             const c10d::AllgatherOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "allgather";
  at::Tensor& in = single(inputs, kCall);
  const DataType dtype = data_type(in, kCall);
  TORCH_CHECK(outputs.size() == 1, "kizuna: ", kCall, " takes one output list per process, got ",
              outputs.size());
  std::vector<at::Tensor>& outs = outputs[0];
  TORCH_CHECK(static_cast<int>(outs.size()) == size_, "kizuna: ", kCall, ": the output list has ",
              outs.size(), " tensors; it needs one per rank (", size_, ")");
  for (const at::Tensor& o : outs) check_like(o, in, "an output tensor", kCall);
  if (!in.is_contiguous()) settle();
  const at::Tensor send = in.contiguous();
  // Gathered into one buffer (rank r's block at r * numel), then copied out.
  at::Tensor flat = at::empty({static_cast<int64_t>(size_) * in.numel()}, in.options());
  std::vector<kizuna::Work> parts{comm_->all_gather(send.data_ptr(), flat.data_ptr(), count(in), dtype)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::ALLGATHER, "kizuna:all_gather", inputs, outs);
  return launch(
      work, parts,
      [flat, outs] {
        for (std::size_t r = 0; r < outs.size(); ++r) outs[r].copy_(slot(flat, r, outs[r]));
      },
      {send}, opts.timeout);
}

WorkPtr TorchComm::allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "_allgather_base";
  const DataType dtype = data_type(input, kCall);
  check_tensor(output, kCall);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "kizuna: ", kCall, ": output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(output.numel() == size_ * input.numel(), "kizuna: ", kCall, ": the output has ",
              output.numel(), " elements; it needs group size x input = ", size_, " x ", input.numel());
  if (!input.is_contiguous()) settle();
  const at::Tensor send = input.contiguous();
  Staged out{output, output.contiguous()};
  std::vector<kizuna::Work> parts{comm_->all_gather(send.data_ptr(), out.data(), count(input), dtype)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::_ALLGATHER_BASE, "kizuna:all_gather_into_tensor",
                                              std::vector<at::Tensor>{input}, std::vector<at::Tensor>{output});
  return launch(work, parts, copy_back({out}), {send}, opts.timeout);
}

WorkPtr TorchComm::allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists,
                                       std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "allgather_coalesced";
  TORCH_CHECK(!inputs.empty(), "kizuna: ", kCall, ": no input tensors given");
  TORCH_CHECK(static_cast<int>(output_lists.size()) == size_, "kizuna: ", kCall, ": needs one output list per rank (",
              size_, "), got ", output_lists.size());
  for (std::size_t r = 0; r < output_lists.size(); ++r) {
    TORCH_CHECK(output_lists[r].size() == inputs.size(), "kizuna: ", kCall, ": output list ", r, " has ",
                output_lists[r].size(), " tensors; it needs one per input tensor (", inputs.size(), ")");
    for (std::size_t i = 0; i < inputs.size(); ++i) check_like(output_lists[r][i], inputs[i], "an output tensor", kCall);
  }
  const std::vector<Pack> packs = plan_packs(inputs, kCall);
  // Per pack: the inputs packed end to end, gathered into one buffer of
  // size() packed blocks (rank r's at r * numel), then copied out.
  settle();
  std::vector<at::Tensor> sends, gathered;
  std::vector<kizuna::Work> parts;
  for (const Pack& p : packs) {
    sends.push_back(packed(p, inputs));
    gathered.push_back(at::empty({size_ * p.numel}, sends.back().options()));
    parts.push_back(comm_->all_gather(sends.back().data_ptr(), gathered.back().data_ptr(),
                                      static_cast<std::size_t>(p.numel), p.dtype));
  }
  std::vector<at::Tensor> outputs;
  for (const auto& list : output_lists) outputs.insert(outputs.end(), list.begin(), list.end());
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::ALLGATHER_COALESCED,
                                              "kizuna:all_gather_coalesced", inputs, outputs);
  return launch(
      work, parts,
      [packs, gathered, output_lists] {
        for (std::size_t k = 0; k < packs.size(); ++k)
          for (std::size_t r = 0; r < output_lists.size(); ++r)
            for (const auto& [i, offset] : packs[k].members) {
              const at::Tensor& out = output_lists[r][i];
              out.copy_(gathered[k].narrow(0, static_cast<int64_t>(r) * packs[k].numel + offset, out.numel()).view(out.sizes()));
            }
      },
      sends, opts.timeout);
}

WorkPtr TorchComm::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                   const c10d::AllgatherOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "allgather_into_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size(), "kizuna: ", kCall, ": ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  std::vector<DataType> dtypes;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    dtypes.push_back(data_type(inputs[i], kCall));
    check_tensor(outputs[i], kCall);
    TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type(), "kizuna: ", kCall, ": output ", i, " has dtype ",
                outputs[i].scalar_type(), " but its input has ", inputs[i].scalar_type());
    TORCH_CHECK(outputs[i].numel() == size_ * inputs[i].numel(), "kizuna: ", kCall, ": output ", i, " has ",
                outputs[i].numel(), " elements; it needs group size x input = ", size_, " x ", inputs[i].numel());
    if (!inputs[i].is_contiguous()) settle();
  }
  // One all-gather per pair, straight into the output (or its staging copy).
  std::vector<at::Tensor> sends;
  std::vector<Staged> outs;
  std::vector<kizuna::Work> parts;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    sends.push_back(inputs[i].contiguous());
    outs.push_back(Staged{outputs[i], outputs[i].contiguous()});
    parts.push_back(comm_->all_gather(sends[i].data_ptr(), outs[i].data(), count(inputs[i]), dtypes[i]));
  }
  auto work = c10::make_intrusive<KizunaWork>(rank_, compat::kAllgatherIntoTensorCoalesced,
                                              "kizuna:all_gather_into_tensor_coalesced", inputs, outputs);
  return launch(work, parts, copy_back(std::move(outs)), sends, opts.timeout);
}

WorkPtr TorchComm::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                          const c10d::GatherOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "gather";
  at::Tensor& in = single(inputs, kCall);
  const DataType dtype = data_type(in, kCall);
  check_root(opts.rootRank, size_, kCall);
  const int root = static_cast<int>(opts.rootRank);
  if (!in.is_contiguous()) settle();
  const at::Tensor send = in.contiguous();
  std::vector<kizuna::Work> parts;
  if (rank_ != root) {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "kizuna: ", kCall,
                ": only the root rank passes output tensors");
    parts.push_back(comm_->send(send.data_ptr(), count(in), dtype, root, kInternalTag));
    auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::GATHER, "kizuna:gather", inputs,
                                                std::vector<at::Tensor>{});
    apart_ = c10::weak_intrusive_ptr<KizunaWork>(work);
    return launch(work, parts, nullptr, {send}, opts.timeout);
  }
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "kizuna: ", kCall,
              ": the root needs one output list with one tensor per rank (", size_, ")");
  std::vector<at::Tensor>& outs = outputs[0];
  for (const at::Tensor& o : outs) check_like(o, in, "an output tensor", kCall);
  at::Tensor flat = at::empty({static_cast<int64_t>(size_) * in.numel()}, in.options());
  for (int r = 0; r < size_; ++r)
    if (r != root) parts.push_back(comm_->recv(slot(flat, r, in).data_ptr(), count(in), dtype, r, kInternalTag));
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::GATHER, "kizuna:gather", inputs, outs);
  apart_ = c10::weak_intrusive_ptr<KizunaWork>(work);
  // The root's own block needs no message: copied once the others arrived.
  return launch(work, parts, [send, flat, outs, root] {
    for (std::size_t r = 0; r < outs.size(); ++r)
      outs[r].copy_(static_cast<int>(r) == root ? send.view(outs[r].sizes()) : slot(flat, r, outs[r]));
  }, {}, opts.timeout);
}

WorkPtr TorchComm::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                           const c10d::ScatterOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "scatter";
  at::Tensor& out = single(outputs, kCall);
  const DataType dtype = data_type(out, kCall);
  check_root(opts.rootRank, size_, kCall);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<kizuna::Work> parts;
  if (rank_ != root) {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "kizuna: ", kCall,
                ": only the root rank passes input tensors");
    Staged s{out, out.contiguous()};
    parts.push_back(comm_->recv(s.data(), count(out), dtype, root, kInternalTag));
    auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::SCATTER, "kizuna:scatter", outputs, outputs);
    apart_ = c10::weak_intrusive_ptr<KizunaWork>(work);
    return launch(work, parts, copy_back({s}), {}, opts.timeout);
  }
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "kizuna: ", kCall,
              ": the root needs one input list with one tensor per rank (", size_, ")");
  std::vector<at::Tensor> sends;
  for (const at::Tensor& i : inputs[0]) {
    check_like(i, out, "an input tensor", kCall);
    if (!i.is_contiguous()) settle();
    sends.push_back(i.contiguous());
  }
  for (int r = 0; r < size_; ++r)
    if (r != root) parts.push_back(comm_->send(sends[r].data_ptr(), count(out), dtype, r, kInternalTag));
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::SCATTER, "kizuna:scatter", inputs[0], outputs);
  apart_ = c10::weak_intrusive_ptr<KizunaWork>(work);
  return launch(work, parts, [sends, out, root] { out.copy_(sends[root].view(out.sizes())); }, {}, opts.timeout);
}

WorkPtr TorchComm::reduce_scatter(std::vector<at::Tensor>& outputs,
                                  std::vector<std::vector<at::Tensor>>& inputs,
                                  const c10d::ReduceScatterOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "reduce_scatter";
  at::Tensor& out = single(outputs, kCall);
  const DataType dtype = data_type(out, kCall);
  const kizuna::ReduceOp op = reduce_op(opts.reduceOp, out, kCall);
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "kizuna: ", kCall,
              ": needs one input list with one tensor per rank (", size_, ")");
  for (const at::Tensor& i : inputs[0]) check_like(i, out, "an input tensor", kCall);
  // The blocks packed end to end, block r for rank r.
  settle();
  at::Tensor flat = at::empty({static_cast<int64_t>(size_) * out.numel()}, out.options());
  for (int r = 0; r < size_; ++r) slot(flat, r, out).copy_(inputs[0][r].reshape(out.sizes()));
  Staged s{out, out.contiguous()};
  std::vector<kizuna::Work> parts{comm_->reduce_scatter(flat.data_ptr(), s.data(), count(out), dtype, op)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::REDUCE_SCATTER, "kizuna:reduce_scatter",
                                              inputs[0], outputs);
  return launch(work, parts, copy_back({s}), {flat}, opts.timeout);
}

WorkPtr TorchComm::reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                       const c10d::ReduceScatterOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "_reduce_scatter_base";
  const DataType dtype = data_type(input, kCall);
  check_tensor(output, kCall);
  const kizuna::ReduceOp op = reduce_op(opts.reduceOp, input, kCall);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "kizuna: ", kCall, ": output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(input.numel() == size_ * output.numel(), "kizuna: ", kCall, ": the input has ",
              input.numel(), " elements; it needs group size x output = ", size_, " x ", output.numel());
  if (!input.is_contiguous()) settle();
  const at::Tensor send = input.contiguous();
  Staged out{output, output.contiguous()};
  std::vector<kizuna::Work> parts{comm_->reduce_scatter(send.data_ptr(), out.data(), count(output), dtype, op)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::_REDUCE_SCATTER_BASE, "kizuna:reduce_scatter_tensor",
                                              std::vector<at::Tensor>{input}, std::vector<at::Tensor>{output});
  return launch(work, parts, copy_back({out}), {send}, opts.timeout);
}

WorkPtr TorchComm::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                   const c10d::ReduceScatterOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size(), "kizuna: ", kCall, ": ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  std::vector<DataType> dtypes;
  std::vector<kizuna::ReduceOp> ops;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    dtypes.push_back(data_type(inputs[i], kCall));
    ops.push_back(reduce_op(opts.reduceOp, inputs[i], kCall));
    check_tensor(outputs[i], kCall);
    TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type(), "kizuna: ", kCall, ": output ", i, " has dtype ",
                outputs[i].scalar_type(), " but its input has ", inputs[i].scalar_type());
    TORCH_CHECK(inputs[i].numel() == size_ * outputs[i].numel(), "kizuna: ", kCall, ": input ", i, " has ",
                inputs[i].numel(), " elements; it needs group size x output = ", size_, " x ", outputs[i].numel());
    if (!inputs[i].is_contiguous()) settle();
  }
  // One reduce-scatter per pair, straight into the output (or its staging copy).
  std::vector<at::Tensor> sends;
  std::vector<Staged> outs;
  std::vector<kizuna::Work> parts;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    sends.push_back(inputs[i].contiguous());
    outs.push_back(Staged{outputs[i], outputs[i].contiguous()});
    parts.push_back(comm_->reduce_scatter(sends[i].data_ptr(), outs[i].data(), count(outputs[i]), dtypes[i], ops[i]));
  }
  auto work = c10::make_intrusive<KizunaWork>(rank_, compat::kReduceScatterTensorCoalesced,
                                              "kizuna:reduce_scatter_tensor_coalesced", inputs, outputs);
  return launch(work, parts, copy_back(std::move(outs)), sends, opts.timeout);
}

std::vector<kizuna::Work> TorchComm::exchange(const std::vector<Block>& sends, const std::vector<Block>& recvs,
                                              DataType dtype) {
  // Round-robin tournament ("circle method") over N = size rounded up to
  // even; rank N-1 sits still, the others rotate. In round k, rank i meets
  //   N-1        if i == k
  //   k          if i == N-1
  //   2k - i     (mod N-1) otherwise,
  // so every round pairs each rank with exactly one other (or with the
  // phantom rank `size` when size is odd: a bye), and the N-1 rounds meet
  // every pair once. Within a pair the lower rank sends first and the higher
  // receives first: no cycle of waiting sends can form.
  //
  //   size 4, N 4:  round 0: 0-3 1-2   round 1: 1-3 0-2   round 2: 2-3 0-1
  std::vector<kizuna::Work> parts;
  const int n = size_ % 2 == 0 ? size_ : size_ + 1;
  for (int k = 0; k < n - 1; ++k) {
    int peer;
    if (rank_ == n - 1)
      peer = k;
    else if (rank_ == k)
      peer = n - 1;
    else
      peer = ((2 * k - rank_) % (n - 1) + (n - 1)) % (n - 1);
    if (peer >= size_) continue;  // a bye
    const Block& out = sends[peer];
    const Block& in = recvs[peer];
    auto send = [&] {
      if (out.count) parts.push_back(comm_->send(out.data, out.count, dtype, peer, kInternalTag));
    };
    auto recv = [&] {
      if (in.count) parts.push_back(comm_->recv(in.data, in.count, dtype, peer, kInternalTag));
    };
    if (rank_ < peer) {
      send();
      recv();
    } else {
      recv();
      send();
    }
  }
  return parts;
}

WorkPtr TorchComm::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                 std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "alltoall_base";
  const DataType dtype = data_type(input, kCall);
  check_tensor(output, kCall);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "kizuna: ", kCall, ": output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(input.dim() > 0 && output.dim() > 0, "kizuna: ", kCall, ": tensors need at least one dimension");
  // Splits count rows (dim 0); none given: equal splits.
  auto blocks = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    TORCH_CHECK(splits.empty() || static_cast<int>(splits.size()) == size_, "kizuna: ", kCall, ": ", which,
                " has ", splits.size(), " sizes for a group of ", size_);
    TORCH_CHECK(!splits.empty() || t.size(0) % size_ == 0, "kizuna: ", kCall, ": dim 0 of the ", which,
                " tensor (", t.size(0), ") does not divide equally among ", size_, " ranks");
    const int64_t row = t.size(0) ? t.numel() / t.size(0) : 0;
    std::vector<std::pair<int64_t, int64_t>> out;  // (offset, count) in elements
    int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      const int64_t rows = splits.empty() ? t.size(0) / size_ : splits[r];
      TORCH_CHECK(rows >= 0, "kizuna: ", kCall, ": negative split size ", rows);
      out.emplace_back(offset, rows * row);
      offset += rows * row;
    }
    TORCH_CHECK(offset == t.numel(), "kizuna: ", kCall, ": the ", which, " sizes add up to ",
                offset / std::max<int64_t>(row, 1), " rows but the tensor has ", t.size(0));
    return out;
  };
  const auto in_blocks = blocks(input, input_splits, "input_split_sizes");
  const auto out_blocks = blocks(output, output_splits, "output_split_sizes");
  if (!input.is_contiguous()) settle();
  const at::Tensor send = input.contiguous();
  Staged out{output, output.contiguous()};
  const std::size_t elem = send.element_size();
  std::vector<Block> sends(size_), recvs(size_);
  for (int r = 0; r < size_; ++r) {
    sends[r] = {static_cast<char*>(send.data_ptr()) + in_blocks[r].first * elem,
                static_cast<std::size_t>(in_blocks[r].second)};
    recvs[r] = {static_cast<char*>(out.data()) + out_blocks[r].first * elem,
                static_cast<std::size_t>(out_blocks[r].second)};
  }
  const std::pair<int64_t, int64_t> mine_in = in_blocks[rank_], mine_out = out_blocks[rank_];
  TORCH_CHECK(mine_in.second == mine_out.second, "kizuna: ", kCall, ": this rank sends itself ",
              mine_in.second, " elements but expects ", mine_out.second);
  std::vector<kizuna::Work> parts = exchange(sends, recvs, dtype);
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::ALLTOALL_BASE, "kizuna:all_to_all",
                                              std::vector<at::Tensor>{input}, std::vector<at::Tensor>{output});
  apart_ = c10::weak_intrusive_ptr<KizunaWork>(work);
  // The block to itself is copied last, after the calls queued before this
  // one have finished with the input (see "Ordering of staging copies").
  return launch(work, parts, [send, out, mine_in, mine_out] {
    const at::Tensor src = send.view({-1}).narrow(0, mine_in.first, mine_in.second);
    out.buffer.view({-1}).narrow(0, mine_out.first, mine_out.second).copy_(src);
    if (out.copied()) out.original.copy_(out.buffer);
  }, {}, opts.timeout);
}

WorkPtr TorchComm::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                            const c10d::AllToAllOptions& opts) {
  const CallScope scope(*this);
  constexpr const char* kCall = "alltoall";
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "kizuna: ", kCall, ": needs one input and one output tensor per rank (", size_, "), got ",
              inputs.size(), " and ", outputs.size());
  const DataType dtype = data_type(inputs[0], kCall);
  std::vector<at::Tensor> sends;
  std::vector<Staged> recvs;
  std::vector<Block> send_blocks(size_), recv_blocks(size_);
  for (int r = 0; r < size_; ++r) {
    check_tensor(inputs[r], kCall);
    check_tensor(outputs[r], kCall);
    TORCH_CHECK(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                    outputs[r].scalar_type() == inputs[0].scalar_type(),
                "kizuna: ", kCall, ": all tensors must have one dtype");
    if (!inputs[r].is_contiguous()) settle();
    sends.push_back(inputs[r].contiguous());
    recvs.push_back(Staged{outputs[r], outputs[r].contiguous()});
    send_blocks[r] = {sends[r].data_ptr(), count(sends[r])};
    recv_blocks[r] = {recvs[r].data(), count(recvs[r].buffer)};
  }
  TORCH_CHECK(inputs[rank_].numel() == outputs[rank_].numel(), "kizuna: ", kCall,
              ": this rank's own input and output blocks differ in size");
  std::vector<kizuna::Work> parts = exchange(send_blocks, recv_blocks, dtype);
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::ALLTOALL, "kizuna:all_to_all", inputs, outputs);
  apart_ = c10::weak_intrusive_ptr<KizunaWork>(work);
  const int self = rank_;
  return launch(work, parts, [sends, recvs, self] {
    recvs[self].buffer.view({-1}).copy_(sends[self].view({-1}));
    copy_back(recvs)();
  }, {}, opts.timeout);
}

WorkPtr TorchComm::barrier(const c10d::BarrierOptions& opts) {
  const CallScope scope(*this);
  std::vector<kizuna::Work> parts{comm_->barrier()};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::BARRIER, "kizuna:barrier",
                                              std::vector<at::Tensor>{}, std::vector<at::Tensor>{});
  return launch(work, parts, nullptr, {}, opts.timeout);
}

void TorchComm::monitored_barrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  std::string prefix;  // this barrier's keys in the group's store
  {
    const CallScope scope(*this);
    prefix = c10::str(name_, "/monitored_barrier/", monitored_barriers_++, "/");
  }
  using std::chrono::milliseconds;
  const milliseconds group_timeout = timeout_.count() > 0 ? timeout_ : milliseconds(kTorchDefaultTimeout);
  const milliseconds timeout = opts.timeout == c10d::kUnsetTimeout ? group_timeout : opts.timeout;
  const std::string verdict_key = prefix + "verdict";

  if (rank_ != 0) {
    // Check in, then wait for rank 0's verdict: it may arrive up to the
    // group's timeout late, then waits `timeout` for one rank (or for each).
    store_->set(prefix + std::to_string(rank_), bytes_of("1"));
    const milliseconds patience = group_timeout + timeout * (wait_all_ranks ? size_ - 1 : 1);
    std::string verdict;
    try {
      const kizuna::Bytes v = store_->get(verdict_key, patience);
      verdict.assign(v.begin(), v.end());
    } catch (const std::exception& e) {
      verdict = e.what();
    }
    TORCH_CHECK(verdict == "ok", "Rank ", rank_,
                " successfully reached monitoredBarrier, but received errors while waiting for send/recv from "
                "rank 0. Please check rank 0 logs for faulty rank.\n Original exception: \n",
                verdict);
    return;
  }

  // Rank 0: every other rank in order, within `timeout` in all (or each
  // within `timeout`, when waiting for all of them to name every one
  // missing); the verdict goes to the store before any exception.
  auto fail = [&](const std::string& message) {
    try {
      store_->set(verdict_key, bytes_of(message));
    } catch (...) {
    }
    TORCH_CHECK(false, message);
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> passed, failed;
  for (int r = 1; r < size_; ++r) {
    milliseconds wait = timeout;
    if (!wait_all_ranks) {
      wait = timeout - std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
      if (wait.count() <= 0)
        fail(c10::str("Rank 0 timed out in monitoredBarrier after ", timeout.count(), " ms.\n",
                      passed.empty() ? std::string("No ranks successfully processed in monitoredBarrier.")
                                     : c10::str("Successfully processed ranks: ", c10::Join(", ", passed))));
    }
    try {
      store_->wait({prefix + std::to_string(r)}, std::max(wait, milliseconds(1)));
      passed.push_back(r);
    } catch (const std::exception& e) {
      if (!wait_all_ranks)
        fail(c10::str("[Rank 0]: Rank ", r, " failed to pass monitoredBarrier in ", timeout.count(),
                      " ms\n Original exception: \n", e.what()));
      failed.push_back(r);
    }
  }
  if (!failed.empty())
    fail(c10::str("[Rank 0]: Ranks ", c10::Join(", ", failed), " failed to pass monitoredBarrier in ",
                  timeout.count(), " ms"));
  store_->set(verdict_key, bytes_of("ok"));
  for (int r : passed) store_->delete_key(prefix + std::to_string(r));
}

WorkPtr TorchComm::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const CallScope scope(*this);
  constexpr const char* kCall = "send";
  at::Tensor& t = single(tensors, kCall);
  const DataType dtype = data_type(t, kCall);
  check_tag(tag, kCall);
  if (!t.is_contiguous()) settle();
  const at::Tensor buffer = t.contiguous();
  std::vector<kizuna::Work> parts{comm_->send(buffer.data_ptr(), count(t), dtype, dst, tag)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::SEND, "kizuna:send", tensors, tensors);
  return start(work, parts, nullptr, {buffer}, c10d::kUnsetTimeout);
}

WorkPtr TorchComm::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  const CallScope scope(*this);
  constexpr const char* kCall = "recv";
  at::Tensor& t = single(tensors, kCall);
  const DataType dtype = data_type(t, kCall);
  check_tag(tag, kCall);
  Staged s{t, t.contiguous()};
  std::vector<kizuna::Work> parts{comm_->recv(s.data(), count(t), dtype, src, tag)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::RECV, "kizuna:recv", tensors, tensors, src);
  return start(work, parts, copy_back({s}), {}, c10d::kUnsetTimeout);
}

WorkPtr TorchComm::recv_anysource(std::vector<at::Tensor>& tensors, int tag) {
  const CallScope scope(*this);
  constexpr const char* kCall = "recvAnysource";
  at::Tensor& t = single(tensors, kCall);
  const DataType dtype = data_type(t, kCall);
  check_tag(tag, kCall);
  Staged s{t, t.contiguous()};
  std::vector<kizuna::Work> parts{comm_->recv(s.data(), count(t), dtype, kizuna::kAnySource, tag)};
  auto work = c10::make_intrusive<KizunaWork>(rank_, c10d::OpType::RECVANYSOURCE, "kizuna:recvAnySource", tensors,
                                              tensors, kizuna::kAnySource);
  return start(work, parts, copy_back({s}), {}, c10d::kUnsetTimeout);
}

}  // namespace kizuna_torch
