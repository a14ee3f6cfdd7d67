// The Reducer with ranks as threads over loopback TCP: every rank ends with
// the mean for 1..8 ranks, with and without compression, whatever order
// gradients complete in; launch order; no_sync; unused parameters;
// registration mismatches; rebuilds; staging; user hooks; misuse.
#include <catch2/catch.hpp>

#include <optional>

#include <kizuna/ddp.hpp>
#include <kizuna/error.hpp>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "ddp_scenario.hpp"
#include "error_of.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

using Comms = std::vector<std::shared_ptr<Communicator>>;

ReducerOptions small_buckets(Compression c = Compression::None) {
  ReducerOptions o;
  o.first_bucket_bytes = 2000;
  o.bucket_cap_bytes = 9000;
  o.compression = c;
  return o;
}

// Runs fn(rank) on every rank and collects "" or a message per rank; a
// kizuna::Error becomes its message.
template <typename Fn>
std::vector<std::string> on_ranks(int n, Fn&& fn) {
  std::vector<std::string> out(n);
  run_ranks(n, [&](int r) {
    try {
      out[r] = fn(r);
    } catch (const Error& e) {
      out[r] = std::string("error ") + std::string(name(e.code())) + ": " + e.what();
    }
  });
  return out;
}

// A hook that records the order buckets are launched in, then reduces with
// the built-in.
class RecordingHook : public CommHook {
 public:
  std::string name() const override { return "recording"; }
  Work launch(Communicator& comm, Bucket& bucket) override {
    {
      std::lock_guard lock(mutex_);
      launched_.push_back(bucket.index());
    }
    return inner_->launch(comm, bucket);
  }
  void finish(Bucket& bucket) override { inner_->finish(bucket); }
  std::vector<std::size_t> launched() const {
    std::lock_guard lock(mutex_);
    return launched_;
  }

 private:
  std::shared_ptr<CommHook> inner_ = CommHook::allreduce();
  mutable std::mutex mutex_;
  std::vector<std::size_t> launched_;
};

// A user hook built on the public API only: Sum on the wire, the division
// in finish().
class SumThenScaleHook : public CommHook {
 public:
  std::string name() const override { return "sum_then_scale"; }
  Work launch(Communicator& comm, Bucket& bucket) override {
    return comm.all_reduce(bucket.data(), bucket.count(), bucket.dtype(), ReduceOp::Sum);
  }
  void finish(Bucket& bucket) override {
    if (!bucket.average()) return;
    auto* g = static_cast<float*>(bucket.data());
    for (std::size_t i = 0; i < bucket.count(); ++i) g[i] /= static_cast<float>(bucket.world_size());
  }
};

// The built-in all-reduce, whose finish() fails once: the first
// iteration fails on every rank after every collective has run.
class FailFirstFinishHook : public CommHook {
 public:
  std::string name() const override { return "fail_first_finish"; }
  Work launch(Communicator& comm, Bucket& bucket) override { return inner_->launch(comm, bucket); }
  void finish(Bucket& bucket) override {
    if (!failed_) {
      failed_ = true;
      throw Error(ErrorCode::InvalidArgument, "the test's hook fails its first finish");
    }
    inner_->finish(bucket);
  }

 private:
  std::shared_ptr<CommHook> inner_ = CommHook::allreduce();
  bool failed_ = false;
};

}  // namespace

TEST_CASE("every rank ends with the mean of the ranks' gradients", "[ddp][reducer]") {
  const int n = GENERATE(1, 2, 3, 4, 5, 7, 8);
  CAPTURE(n);
  const Comms comms = ddp_comms(n);
  const Model model = make_model(7, 24);
  for (Compression c : {Compression::None, Compression::Float16, Compression::BFloat16})
    for (MarkOrder order : {MarkOrder::Reverse, MarkOrder::Shuffled}) {
      CAPTURE(static_cast<int>(c), name(order));
      const auto results = on_ranks(n, [&](int r) {
        return run_mean_check(comms[r], model, small_buckets(c), order, 3);
      });
      for (const auto& e : results) CHECK(e == "");
    }
}

TEST_CASE("default bucket sizes, a bigger model, summing instead of averaging", "[ddp][reducer]") {
  const int n = 3;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(6, 300);  // ~0.9 MB: the 1 MiB first bucket and one more
  ReducerOptions o;
  o.average = false;
  const auto results = on_ranks(n, [&](int r) {
    return run_mean_check(comms[r], model, o, MarkOrder::Reverse, 2);
  });
  for (const auto& e : results) CHECK(e == "");
}

TEST_CASE("buckets are launched in index order on every rank whatever order gradients complete in",
          "[ddp][reducer]") {
  const int n = GENERATE(2, 4);
  const Comms comms = ddp_comms(n);
  const Model model = make_model(8, 20);
  std::vector<std::vector<std::size_t>> launched(n);
  const auto results = on_ranks(n, [&](int r) -> std::string {
    auto hook = std::make_shared<RecordingHook>();
    ReducerOptions o = small_buckets();
    o.comm_hook = hook;
    o.rebuild_buckets = false;  // keep the layout, so every iteration counts the same buckets
    std::vector<std::byte> params(model.bytes), grads(model.bytes);
    Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, o);
    const std::size_t buckets = reducer.buckets().size();
    for (int it = 0; it < 3; ++it) {
      fill_grads(model, grads, r, it);
      for (std::size_t p : mark_order(MarkOrder::Shuffled, model.views.size(), r, it))
        reducer.mark_ready(p);
      reducer.finalize();
      const std::string e = check_mean(model, grads, r, n, it, Compression::None);
      if (!e.empty()) return e;
    }
    launched[r] = hook->launched();
    if (launched[r].size() != 3 * buckets) return "wrong number of launches";
    for (std::size_t k = 0; k < launched[r].size(); ++k)
      if (launched[r][k] != k % buckets)
        return "rank " + std::to_string(r) + " launched bucket " + std::to_string(launched[r][k]) +
               " at position " + std::to_string(k);
    return "";
  });
  for (const auto& e : results) CHECK(e == "");
}

TEST_CASE("mixed dtypes: buckets never mix types and each is reduced in its own type",
          "[ddp][reducer]") {
  const int n = GENERATE(1, 3, 4);
  const Comms comms = ddp_comms(n);
  const Model model = make_mixed_model();
  for (Compression c : {Compression::None, Compression::Float16, Compression::BFloat16}) {
    CAPTURE(n, static_cast<int>(c));
    const auto results = on_ranks(n, [&](int r) -> std::string {
      ReducerOptions o;
      o.compression = c;
      o.first_bucket_bytes = 600;
      o.bucket_cap_bytes = 2000;
      std::vector<std::byte> params(model.bytes), grads(model.bytes);
      Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, o);
      for (const auto& b : reducer.buckets())
        for (std::size_t p : b.parameters)
          if (model.views[p].dtype != b.dtype) return "a bucket mixes dtypes";
      for (int it = 0; it < 2; ++it) {
        fill_grads(model, grads, r, it);
        for (std::size_t p : mark_order(MarkOrder::Shuffled, model.views.size(), r, it))
          reducer.mark_ready(model.views[p].name);
        reducer.finalize();
        const std::string e = check_mean(model, grads, r, n, it, c);
        if (!e.empty()) return e;
      }
      return "";
    });
    for (const auto& e : results) CHECK(e == "");
  }
}

TEST_CASE("views with gaps are staged and still reduced correctly", "[ddp][reducer]") {
  const int n = 3;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(5, 16, DataType::Float32, 12);  // 12-byte holes between views
  for (Compression c : {Compression::None, Compression::BFloat16}) {
    const auto results = on_ranks(n, [&](int r) -> std::string {
      std::vector<std::byte> params(model.bytes), grads(model.bytes, std::byte{0x5a});
      Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, small_buckets(c));
      bool staged = false;
      for (const auto& b : reducer.buckets()) staged |= !b.is_contiguous();
      if (!staged) return "expected staged buckets";
      for (int it = 0; it < 2; ++it) {
        fill_grads(model, grads, r, it);
        for (std::size_t p : mark_order(MarkOrder::Reverse, model.views.size(), r, it))
          reducer.mark_ready(p);
        reducer.finalize();
        const std::string e = check_mean(model, grads, r, n, it, c);
        if (!e.empty()) return e;
      }
      // The holes are nobody's gradient: untouched.
      for (std::size_t k = 0; k + 1 < model.views.size(); ++k) {
        const auto& v = model.views[k];
        for (std::size_t b = v.offset + v.bytes(); b < model.views[k + 1].offset; ++b)
          if (grads[b] != std::byte{0x5a}) return "a hole between views was written";
      }
      return "";
    });
    for (const auto& e : results) CHECK(e == "");
  }
}

TEST_CASE("no_sync: accumulating micro-batches equals one step on the summed gradients",
          "[ddp][reducer]") {
  const int n = GENERATE(1, 2, 3, 4);
  const int micro = 3;
  CAPTURE(n);
  const Comms comms = ddp_comms(n);
  const Model model = make_model(5, 20);
  const auto results = on_ranks(n, [&](int r) -> std::string {
    std::vector<std::byte> params(model.bytes), grads(model.bytes), summed(model.bytes);
    std::vector<float> acc(model.bytes / 4, 0.0f);
    // Micro-batch k's gradient is iteration k's; the trainer accumulates with +=.
    auto accumulate = [&](int k, std::vector<std::byte>& into) {
      std::vector<std::byte> g(model.bytes);
      fill_grads(model, g, r, k);
      auto* dst = reinterpret_cast<float*>(into.data());
      const auto* src = reinterpret_cast<const float*>(g.data());
      for (std::size_t i = 0; i < model.bytes / 4; ++i) dst[i] += src[i];
    };
    Reducer accumulating(comms[r], params.data(), grads.data(), model.bytes, model.views,
                         small_buckets());
    std::fill(grads.begin(), grads.end(), std::byte{0});
    for (int k = 0; k < micro - 1; ++k) {
      auto guard = accumulating.no_sync();
      accumulate(k, grads);
      for (std::size_t p = model.views.size(); p-- > 0;) accumulating.mark_ready(p);
      accumulating.finalize();  // communicates nothing
    }
    if (accumulating.iteration() != 0) return "no_sync iterations were counted";
    // No communication happened: the buffer holds this rank's own sum.
    std::vector<std::byte> local(model.bytes, std::byte{0});
    for (int k = 0; k < micro - 1; ++k) accumulate(k, local);
    if (local != grads) return "no_sync changed the gradients";
    accumulate(micro - 1, grads);
    for (std::size_t p = model.views.size(); p-- > 0;) accumulating.mark_ready(p);
    accumulating.finalize();

    // The same sums, reduced in one synchronised step by a fresh Reducer.
    Reducer once(comms[r], params.data(), summed.data(), model.bytes, model.views, small_buckets());
    std::fill(summed.begin(), summed.end(), std::byte{0});
    for (int k = 0; k < micro; ++k) accumulate(k, summed);
    for (std::size_t p = model.views.size(); p-- > 0;) once.mark_ready(p);
    once.finalize();
    if (summed != grads) return "rank " + std::to_string(r) + ": accumulated result differs";
    return "";
  });
  for (const auto& e : results) CHECK(e == "");
}

TEST_CASE("a parameter never marked ready: an error naming it, or zero with find_unused_parameters",
          "[ddp][reducer]") {
  const int n = 3;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(4, 10);
  const std::size_t skipped = 3;  // layer1.bias, skipped by rank 1 only

  SECTION("without find_unused_parameters the rank that missed it throws; nobody hangs") {
    // Each iteration's error is caught and the loop goes on: the collectives
    // ran on every rank, so the Reducer stays usable and in step.
    std::vector<std::vector<std::string>> errors(n);
    const auto results = on_ranks(n, [&](int r) -> std::string {
      std::vector<std::byte> params(model.bytes), grads(model.bytes);
      Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, small_buckets());
      for (int it = 0; it < 3; ++it) {
        fill_grads(model, grads, r, it);
        const bool skip = r == 1 && it < 2;
        for (std::size_t p = model.views.size(); p-- > 0;)
          if (!(skip && p == skipped)) reducer.mark_ready(p);
        try {
          reducer.finalize();
        } catch (const Error& e) {
          errors[r].push_back(std::string(name(e.code())) + ": " + e.what());
        }
      }
      // Iteration 2 was complete everywhere: the mean, as usual.
      return check_mean(model, grads, r, n, 2, Compression::None);
    });
    for (const auto& e : results) CHECK(e == "");
    CHECK(errors[0].empty());
    CHECK(errors[2].empty());
    REQUIRE(errors[1].size() == 2);
    for (const auto& e : errors[1]) {
      CHECK_THAT(e, Catch::StartsWith("InvalidArgument"));
      CHECK_THAT(e, Catch::Contains("'layer1.bias'"));
      CHECK_THAT(e, Catch::Contains("find_unused_parameters"));
    }
  }

  SECTION("with find_unused_parameters it counts as zero on that rank") {
    const auto results = on_ranks(n, [&](int r) -> std::string {
      std::vector<std::byte> params(model.bytes), grads(model.bytes);
      ReducerOptions o = small_buckets(Compression::None);
      o.find_unused_parameters = true;
      Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, o);
      for (int it = 0; it < 3; ++it) {
        fill_grads(model, grads, r, it);
        for (std::size_t p = model.views.size(); p-- > 0;)
          if (!(r == 1 && p == skipped)) reducer.mark_ready(p);
        reducer.finalize();
        const std::string e = check_mean(model, grads, r, n, it, Compression::None, true, {{skipped, 1}});
        if (!e.empty()) return e;
      }
      return "";
    });
    for (const auto& e : results) CHECK(e == "");
  }
}

TEST_CASE("a gradient accumulated under no_sync for a parameter the synchronising step skips is reduced as accumulated",
          "[ddp][reducer]") {
  // Rank 1 computes layer1.bias in the first two micro-batches only (a
  // branch the last one does not take): what it accumulated is its share,
  // neither zeroed (with find_unused_parameters) nor an error (without).
  const int n = 3, micro = 3;
  const bool find_unused = GENERATE(true, false);
  CAPTURE(find_unused);
  const Comms comms = ddp_comms(n);
  const Model model = make_model(4, 10);
  const std::size_t skipped = 3;
  const auto results = on_ranks(n, [&](int r) -> std::string {
    std::vector<std::byte> params(model.bytes), grads(model.bytes), summed(model.bytes);
    // Micro-batch k's gradients, less layer1.bias on rank 1 in the last one.
    auto accumulate = [&](int k, std::vector<std::byte>& into) {
      std::vector<std::byte> g(model.bytes);
      fill_grads(model, g, r, k);
      const Parameter& bias = model.views[skipped];
      if (r == 1 && k == micro - 1) std::fill_n(g.begin() + bias.offset, bias.bytes(), std::byte{0});
      auto* dst = reinterpret_cast<float*>(into.data());
      const auto* src = reinterpret_cast<const float*>(g.data());
      for (std::size_t i = 0; i < model.bytes / 4; ++i) dst[i] += src[i];
    };
    ReducerOptions o = small_buckets();
    o.find_unused_parameters = find_unused;
    Reducer accumulating(comms[r], params.data(), grads.data(), model.bytes, model.views, o);
    for (int k = 0; k < micro; ++k) {
      std::optional<Reducer::NoSync> guard;
      if (k < micro - 1) guard.emplace(accumulating.no_sync());
      accumulate(k, grads);
      for (std::size_t p = model.views.size(); p-- > 0;)
        if (!(r == 1 && k == micro - 1 && p == skipped)) accumulating.mark_ready(p);
      accumulating.finalize();
    }
    // The same sums, every parameter marked, in one synchronised step.
    Reducer once(comms[r], params.data(), summed.data(), model.bytes, model.views, small_buckets());
    for (int k = 0; k < micro; ++k) accumulate(k, summed);
    for (std::size_t p = model.views.size(); p-- > 0;) once.mark_ready(p);
    once.finalize();
    if (summed != grads) return "rank " + std::to_string(r) + ": the accumulated result differs";
    return "";
  });
  for (const auto& e : results) CHECK(e == "");
}

TEST_CASE("arguments refused on one rank fail every rank's Reducer at once, not at the deadline", "[ddp][reducer]") {
  const int n = 2;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(2, 8);
  const auto results = on_ranks(n, [&](int r) -> std::string {
    std::vector<std::byte> params(model.bytes), grads(model.bytes);
    auto views = model.views;
    if (r == 1) views[1].offset = 4;  // overlaps views[0]
    Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, views);
    return "built";
  });
  CHECK_THAT(results[1], Catch::StartsWith("error InvalidArgument") && Catch::Contains("overlap"));
  CHECK_THAT(results[0], Catch::StartsWith("error InvalidArgument") && Catch::Contains("rank 1 refused its arguments"));
  // The communicator is still in step: a Reducer with the same views works.
  const auto again = on_ranks(n, [&](int r) -> std::string {
    std::vector<std::byte> params(model.bytes), grads(model.bytes);
    Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, small_buckets());
    fill_grads(model, grads, r, 0);
    for (std::size_t p = model.views.size(); p-- > 0;) reducer.mark_ready(p);
    reducer.finalize();
    return check_mean(model, grads, r, n, 0, Compression::None);
  });
  for (const auto& e : again) CHECK(e == "");
}

TEST_CASE("mismatched registrations are a Mismatch on every rank naming the parameter and ranks",
          "[ddp][reducer]") {
  const int n = 3;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(3, 8);
  struct Case {
    const char* what;
    std::function<void(std::vector<Parameter>&, ReducerOptions&)> change;  // applied on rank 1
    std::vector<const char*> expected;
  };
  const std::vector<Case> cases{
      {"a different shape",
       [](auto& v, auto&) { v[2].shape = {v[2].shape[1], v[2].shape[0]}; },
       {"parameter #2 is 'layer1.weight'", "on ranks 0, 2", "on rank 1"}},
      {"a different dtype",
       [](auto& v, auto&) { v[5].dtype = DataType::BFloat16; },
       {"parameter #5 is 'layer2.bias' (float32", "'layer2.bias' (bfloat16", "on rank 1"}},
      {"a different name",
       [](auto& v, auto&) { v[0].name = "renamed"; },
       {"parameter #0 is 'layer0.weight'", "'renamed'"}},
      {"a missing parameter",
       [](auto& v, auto&) { v.pop_back(); },
       {"parameter #5 is 'layer2.bias'", "no parameter (5 registered) on rank 1"}},
      {"different options",
       [](auto&, auto& o) { o.bucket_cap_bytes = 12345; },
       {"different ReducerOptions", "bucket_cap_bytes 12345", "on rank 1"}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    const auto results = on_ranks(n, [&](int r) -> std::string {
      std::vector<Parameter> views = model.views;
      ReducerOptions o = small_buckets();
      if (r == 1) c.change(views, o);
      std::vector<std::byte> params(model.bytes), grads(model.bytes);
      const Error e = error_of_call([&] {
        Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, views, o);
      });
      if (e.code() != ErrorCode::Mismatch) return std::string("not a Mismatch: ") + e.what();
      return e.what();
    });
    for (const auto& msg : results) {
      CHECK_THAT(msg, Catch::Contains("Reducer: ranks"));
      for (const char* part : c.expected) CHECK_THAT(msg, Catch::Contains(part));
    }
  }
  // The communicators are still usable afterwards.
  const auto after = on_ranks(n, [&](int r) {
    return run_mean_check(comms[r], model, small_buckets(), MarkOrder::Reverse, 1);
  });
  for (const auto& e : after) CHECK(e == "");
}

TEST_CASE("broadcast_parameters copies the root's parameters to every rank", "[ddp][reducer]") {
  const int n = 4;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(3, 12, DataType::Float32, 8);
  const int root = GENERATE(0, 3);
  const auto results = on_ranks(n, [&](int r) -> std::string {
    ReducerOptions o = small_buckets();
    o.broadcast_root = root;
    // run_mean_check verifies the broadcast right after construction.
    return run_mean_check(comms[r], model, o, MarkOrder::Reverse, 1);
  });
  for (const auto& e : results) CHECK(e == "");
}

TEST_CASE("rebuild: after the first iteration buckets follow rank 0's ready order on every rank",
          "[ddp][reducer]") {
  const int n = 3;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(6, 16);
  const bool rebuild = GENERATE(true, false);
  CAPTURE(rebuild);
  std::vector<std::vector<BucketSpec>> before(n), after(n);
  const auto results = on_ranks(n, [&](int r) -> std::string {
    ReducerOptions o = small_buckets();
    o.rebuild_buckets = rebuild;
    std::vector<std::byte> params(model.bytes), grads(model.bytes);
    Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, o);
    before[r] = reducer.buckets();
    for (int it = 0; it < 3; ++it) {
      fill_grads(model, grads, r, it);
      // Every rank marks in its own order; rank 0's first-iteration order wins.
      for (std::size_t p : mark_order(MarkOrder::Shuffled, model.views.size(), r, it))
        reducer.mark_ready(p);
      reducer.finalize();
      if (it == 0) after[r] = reducer.buckets();
      const std::string e = check_mean(model, grads, r, n, it, Compression::None);
      if (!e.empty()) return e;
    }
    if (reducer.buckets_rebuilt() != rebuild) return "buckets_rebuilt() is wrong";
    return "";
  });
  for (const auto& e : results) CHECK(e == "");
  const auto order0 = mark_order(MarkOrder::Shuffled, model.views.size(), 0, 0);
  const auto expected = rebuild ? assign_buckets(model.views, order0, 2000, 9000)
                                : assign_buckets(model.views, reverse_order(model.views.size()), 2000, 9000);
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    REQUIRE(after[r].size() == expected.size());
    for (std::size_t b = 0; b < expected.size(); ++b) {
      CHECK(after[r][b].parameters == expected[b].parameters);
      CHECK(after[r][b].segments.size() == expected[b].segments.size());
    }
  }
}

TEST_CASE("a failed first iteration is forgotten: buckets are rebuilt in rank 0's order of the one that succeeded",
          "[ddp][reducer]") {
  const int n = 2;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(6, 16);
  const auto failed_order = mark_order(MarkOrder::Shuffled, model.views.size(), 0, 0);
  const auto good_order = mark_order(MarkOrder::Shuffled, model.views.size(), 0, 1);
  REQUIRE(failed_order != good_order);
  std::vector<std::vector<BucketSpec>> after(n);
  const auto results = on_ranks(n, [&](int r) -> std::string {
    ReducerOptions o = small_buckets();
    o.rebuild_buckets = true;
    o.comm_hook = std::make_shared<FailFirstFinishHook>();
    std::vector<std::byte> params(model.bytes), grads(model.bytes);
    Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, o);
    for (int attempt = 0; attempt < 2; ++attempt) {
      fill_grads(model, grads, r, attempt);
      for (std::size_t p : mark_order(MarkOrder::Shuffled, model.views.size(), r, attempt)) reducer.mark_ready(p);
      if (attempt == 1) {
        reducer.finalize();
        break;
      }
      try {
        reducer.finalize();
        return "the first finalize did not fail";
      } catch (const Error& e) {
        if (e.code() != ErrorCode::InvalidArgument) return std::string("the first finalize failed with ") + e.what();
      }
    }
    after[r] = reducer.buckets();
    if (!reducer.buckets_rebuilt()) return "the buckets were not rebuilt";
    return check_mean(model, grads, r, n, 1, Compression::None);
  });
  for (const auto& e : results) CHECK(e == "");
  const auto expected = assign_buckets(model.views, good_order, 2000, 9000);
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    REQUIRE(after[r].size() == expected.size());
    for (std::size_t b = 0; b < expected.size(); ++b) CHECK(after[r][b].parameters == expected[b].parameters);
  }
}

TEST_CASE("a user hook on the public API replaces the built-in", "[ddp][reducer]") {
  const int n = 3;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(4, 16);
  const auto results = on_ranks(n, [&](int r) {
    ReducerOptions o = small_buckets();
    o.comm_hook = std::make_shared<SumThenScaleHook>();
    return run_mean_check(comms[r], model, o, MarkOrder::Shuffled, 2);
  });
  for (const auto& e : results) CHECK(e == "");
}

TEST_CASE("mark_ready from several threads at once", "[ddp][reducer]") {
  const int n = 2;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(10, 12);
  const auto results = on_ranks(n, [&](int r) -> std::string {
    std::vector<std::byte> params(model.bytes), grads(model.bytes);
    Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, small_buckets());
    for (int it = 0; it < 3; ++it) {
      fill_grads(model, grads, r, it);
      const auto order = mark_order(MarkOrder::Shuffled, model.views.size(), r, it);
      std::atomic<std::size_t> next{0};
      std::vector<std::thread> workers;
      for (int t = 0; t < 3; ++t)
        workers.emplace_back([&] {
          for (std::size_t k; (k = next++) < order.size();) reducer.mark_ready(order[k]);
        });
      for (auto& w : workers) w.join();
      reducer.finalize();
      const std::string e = check_mean(model, grads, r, n, it, Compression::None);
      if (!e.empty()) return e;
    }
    return "";
  });
  for (const auto& e : results) CHECK(e == "");
}

TEST_CASE("misuse is an InvalidArgument naming what is wrong", "[ddp][reducer]") {
  const Comms comms = ddp_comms(1);
  const Model model = make_model(2, 8);
  std::vector<std::byte> params(model.bytes), grads(model.bytes);
  auto make = [&](std::vector<Parameter> views, ReducerOptions o = {}) {
    Reducer reducer(comms[0], params.data(), grads.data(), model.bytes, std::move(views), o);
  };
  auto expect = [](const Error& e, const char* part) {
    CHECK(e.code() == ErrorCode::InvalidArgument);
    CHECK_THAT(e.what(), Catch::Contains(part));
  };

  auto views = model.views;
  views[1].offset = 4;
  expect(error_of_call([&] { make(views); }), "overlap");
  views = model.views;
  views[3].count += 1000;
  expect(error_of_call([&] { make(views); }), "ends beyond");
  views = model.views;
  views[1].name = views[0].name;
  expect(error_of_call([&] { make(views); }), "same name");
  views = model.views;
  views[0].shape = {3, 3};
  expect(error_of_call([&] { make(views); }), "its shape holds 9");
  views = model.views;
  views[2].offset += 2;
  expect(error_of_call([&] { make(views); }), "not aligned");
  views = model.views;
  views[0].dtype = DataType::Int32;
  expect(error_of_call([&] { make(views); }), "averaging needs floating");
  {
    ReducerOptions o;
    o.compression = Compression::Float16;
    o.comm_hook = CommHook::allreduce();
    expect(error_of_call([&] { make(model.views, o); }), "not both");
  }

  Reducer reducer(comms[0], params.data(), grads.data(), model.bytes, model.views);
  expect(error_of_call([&] { reducer.mark_ready("nope"); }), "no parameter named 'nope'");
  expect(error_of_call([&] { reducer.mark_ready(99); }), "no parameter #99");
  reducer.mark_ready(std::size_t{1});
  expect(error_of_call([&] { reducer.mark_ready(std::size_t{1}); }), "marked ready twice");
  expect(error_of_call([&] { auto guard = reducer.no_sync(); }), "no_sync inside");
  for (std::size_t p = 0; p < reducer.num_parameters(); ++p)
    if (p != 1) reducer.mark_ready(p);
  reducer.finalize();
  CHECK(reducer.iteration() == 1);
  CHECK(reducer.index_of("layer1.bias") == 3);
}

TEST_CASE("a failed communicator fails finalize() instead of hanging", "[ddp][reducer]") {
  const int n = 2;
  const Comms comms = ddp_comms(n);
  const Model model = make_model(3, 8);
  const auto results = on_ranks(n, [&](int r) -> std::string {
    std::vector<std::byte> params(model.bytes), grads(model.bytes);
    Reducer reducer(comms[r], params.data(), grads.data(), model.bytes, model.views, small_buckets());
    if (r == 0) comms[0]->abort("test abort");
    for (std::size_t p = model.views.size(); p-- > 0;) reducer.mark_ready(p);
    reducer.finalize();
    return "finalize returned";
  });
  for (const auto& e : results) {
    CHECK_THAT(e, Catch::StartsWith("error"));
    CHECK_THAT(e, !Catch::Contains("finalize returned"));
  }
}

TEST_CASE("device gradients: what needs the host is refused, and so is a CPU communicator", "[ddp][reducer]") {
  // Checked before anything touches the buffers, so a CPU machine can say
  // it; the reduction itself is tests/gpu's.
  const Comms comms = ddp_comms(1);
  const Model model = make_model(2, 8);
  std::vector<float> params(model.bytes / 4), grads(model.bytes / 4);
  auto refused = [&](ReducerOptions o) -> std::string {
    o.stream.handle = reinterpret_cast<void*>(0x1);  // never used: refused first
    try {
      Reducer(comms[0], params.data(), grads.data(), model.bytes, model.views, o);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::InvalidArgument);
      return e.what();
    }
    return "accepted";
  };
  ReducerOptions compressed;
  compressed.compression = Compression::Float16;
  CHECK_THAT(refused(compressed), Catch::Contains("compression of device gradients"));
  ReducerOptions unused;
  unused.find_unused_parameters = true;
  CHECK_THAT(refused(unused), Catch::Contains("find_unused_parameters with device gradients"));
  CHECK_THAT(refused(ReducerOptions{}), Catch::Contains("is a CPU communicator"));
}
