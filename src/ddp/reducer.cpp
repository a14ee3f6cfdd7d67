// The Reducer (kizuna/reducer.hpp).
//
// State of one iteration, under `mutex`:
//   ready[p]       parameter p was marked (or zeroed by finalize)
//   pending[b]     parameters of bucket b not yet ready
//   next_launch    buckets 0..next_launch-1 have been launched
//   works[b]       the Work of bucket b's hook, once launched
//
// mark_ready(p): ready[p] = 1; --pending[bucket_of[p]]; then launch, in
// index order, every bucket from next_launch on whose pending count is 0.
// The launch order is therefore the bucket order on every rank, whatever
// order gradients arrive in:
//
//   ready order   b2 full   b0 full        b1 full
//   launched      -         b0             b1 b2
//
// finalize(): zero and mark the parameters never marked (reduced as zero),
// which launches whatever was left; wait for buckets in order, let the hook
// finish each and unpack staged ones; reset; on the first synchronised
// iteration, rebuild the buckets in rank 0's ready order.
#include <kizuna/reducer.hpp>

#include <kizuna/error.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>

#include "core/check.hpp"
#include "core/log.hpp"
#include "ddp/registration.hpp"

namespace kizuna {

namespace {

std::string_view name(Compression c) {
  switch (c) {
    case Compression::None: return "none";
    case Compression::Float16: return "float16";
    case Compression::BFloat16: return "bfloat16";
  }
  return "?";
}

// Bounds, uniqueness, alignment, shape, no overlap; InvalidArgument naming
// the view otherwise.
void validate(const std::vector<Parameter>& views, std::size_t buffer_bytes) {
  std::unordered_map<std::string, std::size_t> names;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const Parameter& p = views[i];
    const std::string who = "Reducer: parameter #" + std::to_string(i) + " " + ddp::describe(p);
    KIZUNA_CHECK_ARG(!p.name.empty(), who, " has an empty name");
    KIZUNA_CHECK_ARG(names.emplace(p.name, i).second, who, " has the same name as parameter #",
                     names[p.name]);
    KIZUNA_CHECK_ARG(is_valid(p.dtype), who, " has an invalid dtype");
    KIZUNA_CHECK_ARG(p.count > 0, who, " is empty");
    KIZUNA_CHECK_ARG(p.offset % size_of(p.dtype) == 0, who, " is not aligned to its ",
                     size_of(p.dtype), "-byte elements");
    KIZUNA_CHECK_ARG(p.count <= buffer_bytes / size_of(p.dtype) && p.offset <= buffer_bytes - p.bytes(),
                     who, " ends beyond the ", buffer_bytes, "-byte buffers");
    if (!p.shape.empty()) {
      std::size_t product = 1;
      for (std::int64_t d : p.shape) {
        KIZUNA_CHECK_ARG(d >= 0, who, " has a negative dimension");
        KIZUNA_CHECK_ARG(!__builtin_mul_overflow(product, static_cast<std::size_t>(d), &product), who,
                         ": its shape holds more elements than a size can count");
      }
      KIZUNA_CHECK_ARG(product == p.count, who, ": its shape holds ", product, " elements");
    }
  }
  std::vector<std::size_t> by_offset(views.size());
  for (std::size_t i = 0; i < views.size(); ++i) by_offset[i] = i;
  std::sort(by_offset.begin(), by_offset.end(),
            [&](std::size_t a, std::size_t b) { return views[a].offset < views[b].offset; });
  for (std::size_t k = 1; k < by_offset.size(); ++k) {
    const Parameter& a = views[by_offset[k - 1]];
    const Parameter& b = views[by_offset[k]];
    KIZUNA_CHECK_ARG(a.offset + a.bytes() <= b.offset, "Reducer: parameters ", ddp::describe(a),
                     " and ", ddp::describe(b), " overlap");
  }
}

std::string describe(const ReducerOptions& o, const CommHook& hook) {
  std::ostringstream out;
  out << "{bucket_cap_bytes " << o.bucket_cap_bytes << ", first_bucket_bytes "
      << o.first_bucket_bytes << ", compression " << name(o.compression) << ", average "
      << o.average << ", find_unused_parameters " << o.find_unused_parameters
      << ", rebuild_buckets " << o.rebuild_buckets << ", broadcast_parameters "
      << o.broadcast_parameters << ", broadcast_root " << o.broadcast_root << ", hook "
      << hook.name() << ", gradients on " << (o.stream.handle ? "device" : "host") << "}";
  return out.str();
}

}  // namespace

struct Reducer::Impl {
  std::shared_ptr<Communicator> comm;
  std::byte* params = nullptr;
  std::byte* grads = nullptr;
  std::size_t buffer_bytes = 0;
  std::vector<Parameter> views;
  std::unordered_map<std::string, std::size_t> by_name;
  ReducerOptions options;
  std::shared_ptr<CommHook> hook;

  mutable std::mutex mutex;
  std::vector<Bucket> buckets;
  std::vector<std::size_t> bucket_of;  // parameter -> bucket
  std::vector<char> ready;
  // Marked ready under no_sync() since the last synchronised step: their
  // gradients hold what those steps accumulated, even if the step that
  // synchronises does not mark them.
  std::vector<char> used_since_sync;
  std::vector<std::size_t> pending;
  std::size_t next_launch = 0;
  std::vector<Work> works;
  std::vector<std::size_t> ready_order;  // recorded during the first synchronised iteration
  bool in_iteration = false;
  int no_sync_depth = 0;
  std::uint64_t iteration = 0;
  bool rebuilt = false;

  // Buckets in flight read and write the buffers released here.
  ~Impl() {
    for (std::size_t b = 0; b < next_launch; ++b) {
      try {
        works[b].wait();
      } catch (...) {
        // The iteration's error; nobody is left to finalize() it.
      }
    }
  }

  void build_buckets(const std::vector<std::size_t>& order) {
    auto specs = assign_buckets(views, order, options.first_bucket_bytes, options.bucket_cap_bytes);
    std::vector<Bucket> next;
    next.reserve(specs.size());
    for (std::size_t b = 0; b < specs.size(); ++b) {
      for (std::size_t p : specs[b].parameters) bucket_of[p] = b;
      next.emplace_back(b, std::move(specs[b]), grads, options.average, comm->size(), options.stream);
    }
    buckets = std::move(next);
    reset_iteration();
  }

  void reset_iteration() {
    std::fill(ready.begin(), ready.end(), 0);
    pending.assign(buckets.size(), 0);
    for (const auto& b : buckets) pending[b.index()] = b.parameters().size();
    works.assign(buckets.size(), Work());
    next_launch = 0;
    in_iteration = false;
  }

  // Under `mutex`.
  void mark(std::size_t p) {
    ready[p] = 1;
    in_iteration = true;
    if (iteration == 0 && rebuilds()) ready_order.push_back(p);
    --pending[bucket_of[p]];
    while (next_launch < buckets.size() && pending[next_launch] == 0) {
      Bucket& bucket = buckets[next_launch];
      bucket.pack();
      works[next_launch] = hook->launch(*comm, bucket);
      ++next_launch;
    }
  }

  // Waits for whatever was launched, keeping the first error.
  std::exception_ptr drain() {
    std::exception_ptr first;
    for (std::size_t b = 0; b < next_launch; ++b) {
      try {
        works[b].wait();
        if (!first) {
          hook->finish(buckets[b]);
          buckets[b].unpack();
        }
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    return first;
  }

  // Device buckets are views in registration order: they are never rebuilt.
  bool rebuilds() const { return options.rebuild_buckets && !options.stream.handle; }

  // Collective: every rank takes rank 0's ready order.
  void rebuild() {
    // Rank 0's order, or (should it not hold every parameter once) the
    // reverse registration order the buckets were built in.
    std::vector<std::uint64_t> order(views.size());
    if (comm->rank() == 0) {
      if (ready_order.size() == views.size()) std::copy(ready_order.begin(), ready_order.end(), order.begin());
      else for (std::size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
    }
    comm->broadcast(order.data(), order.size(), DataType::UInt64, 0).wait();
    const std::vector<std::size_t> agreed(order.begin(), order.end());
    rebuilt = true;
    ready_order.clear();
    ready_order.shrink_to_fit();
    // The same buckets again (backward followed registration order): keep
    // them, with the staging and scratch memory they have already faulted in.
    const auto specs =
        assign_buckets(views, agreed, options.first_bucket_bytes, options.bucket_cap_bytes);
    bool same = specs.size() == buckets.size();
    for (std::size_t b = 0; same && b < specs.size(); ++b)
      same = specs[b].parameters == buckets[b].parameters();
    if (same) return;
    const std::size_t before = buckets.size();
    build_buckets(agreed);
    KIZUNA_LOG(Info) << "Reducer: rebuilt " << before << " buckets as " << buckets.size()
                     << " in rank 0's ready order";
  }
};

namespace {

// What a rank can tell of its own arguments.
void check_arguments(const Communicator& comm, const void* gradients, const void* parameters,
                     std::size_t buffer_bytes, const std::vector<Parameter>& views, const ReducerOptions& options) {
  KIZUNA_CHECK_ARG(gradients != nullptr || views.empty(), "Reducer: the gradient buffer is null");
  KIZUNA_CHECK_ARG(parameters != nullptr || !options.broadcast_parameters || views.empty(),
                   "Reducer: the parameter buffer is null but options.broadcast_parameters is set");
  KIZUNA_CHECK_ARG(options.bucket_cap_bytes > 0 && options.first_bucket_bytes > 0,
                   "Reducer: bucket caps must be positive");
  KIZUNA_CHECK_ARG(!options.comm_hook || options.compression == Compression::None,
                   "Reducer: set either options.comm_hook or options.compression, not both");
  KIZUNA_CHECK_ARG(options.broadcast_root >= 0 && options.broadcast_root < comm.size(),
                   "Reducer: broadcast_root ", options.broadcast_root, " is not a rank of ",
                   comm.size());
  if (options.stream.handle) {
    KIZUNA_CHECK_ARG(options.compression == Compression::None, "Reducer: compression of device gradients "
                     "(options.stream) is not supported: its casts run on the host");
    KIZUNA_CHECK_ARG(!options.find_unused_parameters, "Reducer: find_unused_parameters with device gradients "
                     "(options.stream) is not supported: it zeroes unused gradients from the host");
    KIZUNA_CHECK_ARG(comm.device() != "cpu", "Reducer: options.stream is set but communicator ", comm.name(),
                     " is a CPU communicator (set CommOptions.device or KIZUNA_DEVICE to cuda)");
  }
  validate(views, buffer_bytes);
  if (options.average)
    for (const auto& p : views)
      KIZUNA_CHECK_ARG(is_floating(p.dtype), "Reducer: parameter ", ddp::describe(p),
                       " is not floating-point; averaging needs floating gradients "
                       "(set options.average = false to sum)");
}

}  // namespace

Reducer::Reducer(std::shared_ptr<Communicator> comm, void* parameters, void* gradients,
                 std::size_t buffer_bytes, std::vector<Parameter> views,
                 const ReducerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  KIZUNA_CHECK_ARG(comm != nullptr, "Reducer: the communicator is null");
  // Each rank checks its own arguments, then the ranks agree: one whose
  // arguments are refused must not leave the others waiting in the
  // registration check below until their deadline.
  std::exception_ptr refused;
  try {
    check_arguments(*comm, gradients, parameters, buffer_bytes, views, options);
  } catch (const Error&) {
    refused = std::current_exception();
  }
  std::int64_t failed = refused ? comm->rank() + 1 : 0;  // the highest rank refused, plus one
  comm->all_reduce(&failed, 1, DataType::Int64, ReduceOp::Max).wait();
  if (refused) std::rethrow_exception(refused);
  KIZUNA_CHECK_ARG(failed == 0, "Reducer: rank ", failed - 1, " refused its arguments (its error says why), so no ",
                   "rank builds its Reducer");

  Impl& s = *impl_;
  s.comm = std::move(comm);
  s.params = static_cast<std::byte*>(parameters);
  s.grads = static_cast<std::byte*>(gradients);
  s.buffer_bytes = buffer_bytes;
  s.views = std::move(views);
  for (std::size_t i = 0; i < s.views.size(); ++i) s.by_name.emplace(s.views[i].name, i);
  s.options = options;
  s.hook = options.comm_hook                                 ? options.comm_hook
           : options.compression == Compression::Float16  ? CommHook::fp16_compress()
           : options.compression == Compression::BFloat16 ? CommHook::bf16_compress()
                                                             : CommHook::allreduce();
  s.options.comm_hook = s.hook;

  ddp::verify_registration(*s.comm, s.views, describe(s.options, *s.hook));

  s.bucket_of.assign(s.views.size(), 0);
  s.ready.assign(s.views.size(), 0);
  s.used_since_sync.assign(s.views.size(), 0);
  s.build_buckets(reverse_order(s.views.size()));
  if (options.broadcast_parameters) broadcast_parameters(options.broadcast_root);
}


Reducer::~Reducer() = default;

Reducer::Reducer(Reducer&&) noexcept = default;
Reducer& Reducer::operator=(Reducer&&) noexcept = default;

std::size_t Reducer::num_parameters() const { return impl_->views.size(); }

const Parameter& Reducer::parameter(std::size_t index) const {
  KIZUNA_CHECK_ARG(index < impl_->views.size(), "Reducer: no parameter #", index, " (",
                   impl_->views.size(), " registered)");
  return impl_->views[index];
}

std::size_t Reducer::index_of(std::string_view name) const {
  const auto it = impl_->by_name.find(std::string(name));
  KIZUNA_CHECK_ARG(it != impl_->by_name.end(), "Reducer: no parameter named '", name, "'");
  return it->second;
}

void Reducer::mark_ready(std::size_t index) {
  Impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  KIZUNA_CHECK_ARG(index < s.views.size(), "Reducer::mark_ready: no parameter #", index, " (",
                   s.views.size(), " registered)");
  if (s.no_sync_depth > 0) {
    s.used_since_sync[index] = 1;
    return;
  }
  KIZUNA_CHECK_ARG(!s.ready[index], "Reducer::mark_ready: parameter ", ddp::describe(s.views[index]),
                   " marked ready twice in iteration ", s.iteration);
  s.mark(index);
}

void Reducer::mark_ready(std::string_view name) { mark_ready(index_of(name)); }

void Reducer::finalize() {
  Impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  if (s.no_sync_depth > 0) return;

  // Parameters never marked are reduced as zero, unless steps under
  // no_sync() accumulated a gradient for them, which is reduced as it is
  // (as PyTorch's DDP does); in reverse registration order, as backward
  // would have produced them.
  std::vector<std::size_t> unused, accumulated;
  for (std::size_t p = s.views.size(); p-- > 0;)
    if (!s.ready[p]) (s.used_since_sync[p] ? accumulated : unused).push_back(p);
  std::exception_ptr error;
  try {
    for (std::size_t p = s.views.size(); p-- > 0;) {
      if (s.ready[p]) continue;
      // Device gradients cannot be zeroed from here: they are reduced as
      // they are, and the error below says so.
      if (!s.used_since_sync[p] && !s.options.stream.handle)
        std::memset(s.grads + s.views[p].offset, 0, s.views[p].bytes());
      s.mark(p);
    }
  } catch (...) {
    error = std::current_exception();
  }
  std::exception_ptr comm_error = s.drain();
  if (!error) error = comm_error;
  s.reset_iteration();
  std::fill(s.used_since_sync.begin(), s.used_since_sync.end(), 0);
  if (error) {
    // The first iteration's ready order starts again with the next one
    // (a failed iteration's marks would make it longer than the parameters).
    s.ready_order.clear();
    std::rethrow_exception(error);
  }

  ++s.iteration;
  if (s.iteration == 1 && s.rebuilds() && !s.rebuilt) s.rebuild();

  if (!unused.empty() && !s.options.find_unused_parameters) {
    std::string names;
    for (std::size_t k = 0; k < unused.size() && k < 8; ++k)
      names += (k ? ", " : "") + ddp::describe(s.views[unused[k]]);
    if (unused.size() > 8) names += " and " + std::to_string(unused.size() - 8) + " more";
    KIZUNA_THROW(ErrorCode::InvalidArgument, "Reducer::finalize on rank ", s.comm->rank(),
                 ": iteration ", s.iteration - 1, " never marked ready ", names,
                 s.options.stream.handle ? "; their device gradients were reduced as they were. Mark every "
                                           "parameter whose gradient is computed"
                                         : "; they were reduced as zero. Mark every parameter whose gradient is "
                                           "computed, or set ReducerOptions.find_unused_parameters");
  }
}

Reducer::NoSync Reducer::no_sync() {
  Impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  KIZUNA_CHECK_ARG(!s.in_iteration, "Reducer::no_sync inside a synchronised iteration (",
                   "parameters were marked ready; call finalize() first)");
  ++s.no_sync_depth;
  return NoSync(impl_.get());
}

Reducer::NoSync::NoSync(NoSync&& other) noexcept : impl_(other.impl_) { other.impl_ = nullptr; }

Reducer::NoSync::~NoSync() {
  if (!impl_) return;
  std::lock_guard lock(impl_->mutex);
  --impl_->no_sync_depth;
}

void Reducer::broadcast_parameters(int root) {
  Impl& s = *impl_;
  KIZUNA_CHECK_ARG(root >= 0 && root < s.comm->size(), "Reducer::broadcast_parameters: root ",
                   root, " is not a rank of ", s.comm->size());
  if (s.views.empty()) return;
  KIZUNA_CHECK_ARG(s.params != nullptr, "Reducer::broadcast_parameters: no parameter buffer");
  // The registered ranges, merged: bytes are bytes, whatever their dtype.
  std::vector<BucketSpec::Segment> ranges;
  for (const auto& p : s.views) ranges.push_back({p.offset, p.bytes()});
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::vector<BucketSpec::Segment> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && merged.back().offset + merged.back().bytes == r.offset)
      merged.back().bytes += r.bytes;
    else
      merged.push_back(r);
  }
  std::vector<Work> works;
  for (const auto& r : merged)
    works.push_back(s.options.stream.handle
                        ? s.comm->broadcast(s.params + r.offset, s.params + r.offset, r.bytes, DataType::UInt8,
                                            root, s.options.stream)
                        : s.comm->broadcast(s.params + r.offset, r.bytes, DataType::UInt8, root));
  std::exception_ptr error;
  for (auto& w : works) {
    try {
      w.wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

std::vector<BucketSpec> Reducer::buckets() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<BucketSpec> out;
  for (const auto& b : impl_->buckets) out.push_back(b.spec());
  return out;
}

std::uint64_t Reducer::iteration() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->iteration;
}

bool Reducer::buckets_rebuilt() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->rebuilt;
}

Communicator& Reducer::communicator() const { return *impl_->comm; }

}  // namespace kizuna
