// The CUDA IPC path's protocol and walk (kernels/fifo_program.cuh), checked
// without a GPU: one host thread per rank runs run_fifo_program, the very
// code the kernel runs, over FIFO channels in ordinary memory, with real
// concurrency and atomics; every result must equal the simulator's, bit for
// bit. FIFOs of one or three tiny slots make every message wrap and every
// sender wait for room; several calls in a row reuse the channels, as the
// GPU does across launches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "collective_reference.hpp"
#include "fifo_memory.hpp"
#include "host_sync.hpp"
#include "comm/device_parts.hpp"
#include "comm/device_steps.hpp"
#include "rank_schedules.hpp"
#include "kernels/fifo_layout.hpp"
#include "kernels/fifo_program.cuh"

using namespace kizuna;
using namespace kizuna::test;
using algo::Algorithm;
using algo::Collective;

namespace {

// Every rank's channels and counters, as CUDA IPC lays them out
// (kernels/fifo_layout.hpp): one block's records in each rank's memory.
struct World {
  int n;
  std::uint32_t slots, slot_bytes;
  std::vector<FifoMemory> memory;  // [r]
  std::vector<kernels::FifoCounters> counters;
  std::vector<std::vector<kernels::FifoChannel>> in, out;  // [r][p]

  World(int world, std::uint32_t slot_count, std::uint32_t bytes)
      : n(world), slots(slot_count), slot_bytes(bytes), memory(n, FifoMemory({1, slots, slot_bytes}, n)), counters(n),
        in(n, std::vector<kernels::FifoChannel>(n)), out(n, std::vector<kernels::FifoChannel>(n)) {
    for (auto& c : counters) std::memset(&c, 0, sizeof c);
    const kernels::FifoShape shape{1, slots, slot_bytes};
    std::vector<unsigned char*> bases;
    for (auto& m : memory) bases.push_back(m.data());
    for (int r = 0; r < n; ++r)
      for (int p = 0; p < n; ++p) {
        in[r][p] = kernels::fifo_channel(bases.data(), n, shape, 0, p, r);
        out[r][p] = kernels::fifo_channel(bases.data(), n, shape, 0, r, p);
      }
  }

  // Rank r's walk of `table` on these channels, queueing sends in `pending`
  // (an entry per step).
  kernels::FifoProgram program(int r, const std::vector<kernels::DeviceStep>& table,
                               std::vector<kernels::FifoSend>& pending) {
    kernels::FifoProgram p;
    p.steps = table.data();
    p.step_count = static_cast<std::uint32_t>(table.size());
    p.rank = r;
    p.world = n;
    p.slots = slots;
    p.slot_bytes = slot_bytes;
    p.in = in[r].data();
    p.out = out[r].data();
    p.counters = &counters[r];
    p.pending = pending.data();
    return p;
  }
};

std::vector<algo::RankSchedule> schedules_for(Collective c, Algorithm a, int world, std::uint64_t count,
                                              std::size_t elem, std::uint64_t block_stride = 0) {
  return rank_schedules(c, a, world, count, elem, 48, block_stride);
}

// Whether every chunk rank r sent through `w` has come home as a credit in
// its own memory (kernels/fifo_layout.hpp): what a GPU world waits for
// before it frees that memory. Call it with no walk running.
bool credits_home(const World& w, int r) {
  return kernels::fifo_credits_home(r, w.n, 1, &w.counters[r], [&](std::uint32_t, int p) { return *w.out[r][p].tail; });
}

// Rank 0's walk of a 2-rank ring all-reduce of 100 floats on `w`, alone
// (rank 1 never walks), with `deadline` without progress: how it ended and
// how long it took.
struct Walked {
  kernels::FifoStatus status;
  std::chrono::steady_clock::duration took;
};
Walked walk_rank_0_alone(World& w, std::chrono::milliseconds deadline) {
  using namespace kizuna::kernels;
  const algo::RankSchedule schedule = schedules_for(Collective::AllReduce, Algorithm::Ring, 2, 100, 4)[0];
  const auto table = comm::encode_steps(schedule);
  std::vector<float> data(100, 1.0f), scratch(schedule.scratch_count + 1);
  std::vector<FifoSend> pending(table.size() + 1);
  const FifoProgram p = w.program(0, table, pending);
  StepBuffers<float> b{{data.data(), data.data(), scratch.data()}};
  auto state = std::make_unique<FifoState<float>>();
  const auto start = std::chrono::steady_clock::now();
  HostSync sync{deadline};
  const FifoStatus status = run_fifo_program<Plain<float>, SumOp>(p, b, *state, sync);
  return {status, std::chrono::steady_clock::now() - start};
}

// Runs one collective on every rank of `w` at once, each rank's input and
// output starting where `inputs` and `outputs` say; returns each rank's status.
template <typename Codec, typename Op>
std::vector<kernels::FifoStatus> run_world_at(World& w, const std::vector<algo::RankSchedule>& schedules,
                                              const std::vector<unsigned char*>& inputs,
                                              const std::vector<unsigned char*>& outputs,
                                              std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  using S = typename Codec::Storage;
  const int n = w.n;
  std::vector<kernels::FifoStatus> status(n, kernels::FifoStatus::Running);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const auto table = comm::encode_steps(schedules[r]);
      std::vector<S> scratch(schedules[r].scratch_count + 1);
      std::vector<kernels::FifoSend> pending(table.size() + 1);
      const kernels::FifoProgram p = w.program(r, table, pending);
      S* input = reinterpret_cast<S*>(inputs[r]);
      S* output = reinterpret_cast<S*>(outputs[r]);
      kernels::StepBuffers<S> b{{input, output, scratch.data()}};
      auto state = std::make_unique<kernels::FifoState<S>>();
      HostSync sync{limit};
      status[r] = kernels::run_fifo_program<Codec, Op>(p, b, *state, sync);
    });
  for (auto& t : threads) t.join();
  return status;
}

template <typename Codec, typename Op>
std::vector<kernels::FifoStatus> run_world(World& w, const std::vector<algo::RankSchedule>& schedules,
                                           std::vector<std::vector<unsigned char>>& inputs,
                                           std::vector<std::vector<unsigned char>>& outputs, bool in_place) {
  std::vector<unsigned char*> in, out;
  for (std::size_t r = 0; r < inputs.size(); ++r) {
    in.push_back(inputs[r].data());
    out.push_back(in_place ? inputs[r].data() : outputs[r].data());
  }
  return run_world_at<Codec, Op>(w, schedules, in, out);
}

// `slot_bytes` of 16 makes every message wrap; larger slots and counts
// make whole 16-byte packs (kernels/step_table.cuh's run_packs) and tails.
template <typename Codec, typename Op>
void compare_with_simulator(DataType dtype, ReduceOp rop, std::uint32_t slot_bytes = 16,
                            std::vector<std::uint64_t> counts = {0, 1, 37, 100}, int max_world = 9) {
  const CollectiveReference ref(dtype, rop);
  const std::size_t elem = ref.elem();
  for (int world = 1; world <= max_world; ++world) {
    for (std::uint32_t slots : {1u, 3u, 4u}) {
      // The channels live across all the calls below, as on the GPU.
      World w(world, slots, slot_bytes);
      for (Collective c : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
                           Collective::Broadcast, Collective::Reduce}) {
        for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::OneShot, Algorithm::TwoShot, Algorithm::Doubling}) {
          for (std::uint64_t count : counts) {
            // In place only where the output is the input's size (all-reduce, broadcast).
            const bool in_place = count % 2 == 1 && (c == Collective::AllReduce || c == Collective::Broadcast);
            CAPTURE(world, slots, algo::name(c), algo::name(a), count, in_place);
            const auto schedules = schedules_for(c, a, world, count, elem);
            Simulated s = simulate_ranks(ref, schedules, dtype, rop, in_place);
            const auto status = run_world<Codec, Op>(w, schedules, s.in, s.out, in_place);
            for (int r = 0; r < world; ++r) {
              CAPTURE(r);
              REQUIRE(status[r] == kernels::FifoStatus::Done);
              if (in_place) REQUIRE(s.in[r] == s.sim_in[r]);
              else REQUIRE(s.out[r] == s.sim_out[r]);
              REQUIRE(credits_home(w, r));  // once every walk ended, nothing more is written into r's memory
            }
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("the FIFO walk runs every schedule exactly like the simulator", "[fifo_program]") {
  using namespace kizuna::kernels;
  compare_with_simulator<Plain<float>, SumOp>(DataType::Float32, ReduceOp::Sum);
  compare_with_simulator<Half, MaxOp>(DataType::Float16, ReduceOp::Max);
  compare_with_simulator<Plain<std::uint64_t>, ProdOp>(DataType::Int64, ReduceOp::Prod);
}

TEST_CASE("the FIFO walk moves whole 16-byte packs and their tails exactly like the simulator", "[fifo_program]") {
  using namespace kizuna::kernels;
  // Slots of 256 bytes: 16 packs a chunk; counts that leave tails of every
  // length and rank offsets that are aligned and not (then element by element).
  const std::vector<std::uint64_t> counts = {1000, 1003, 4099};
  compare_with_simulator<Plain<float>, SumOp>(DataType::Float32, ReduceOp::Sum, 256, counts, 5);
  compare_with_simulator<Plain<std::uint8_t>, SumOp>(DataType::UInt8, ReduceOp::Sum, 256, counts, 5);
  compare_with_simulator<BFloat, MinOp>(DataType::BFloat16, ReduceOp::Min, 256, counts, 5);
  compare_with_simulator<Plain<double>, ProdOp>(DataType::Float64, ReduceOp::Prod, 256, counts, 5);
}

TEST_CASE("run_packs computes what run_streams does for every kind of step, in place too", "[fifo_program]") {
  using namespace kizuna::kernels;
  using Codec = Plain<float>;
  using S = Codec::Storage;
  constexpr std::uint64_t kCount = 1000;  // 250 packs
  // Buffers of whole packs, so that every stream is 16-byte aligned.
  auto fill = [](std::vector<Raw16>& v, unsigned seed) {
    auto* f = reinterpret_cast<float*>(v.data());
    for (std::uint64_t i = 0; i < kCount; ++i) f[i] = static_cast<float>((i * seed) % 97) * 0.5f;
  };
  for (int shape = 0; shape < 5; ++shape) {
    std::vector<Raw16> x(kCount / 4), y(kCount / 4), a(kCount / 4), b(kCount / 4), a2(kCount / 4), b2(kCount / 4);
    fill(x, 3);
    fill(y, 7);
    fill(a, 11);
    a2 = a;
    auto* px = reinterpret_cast<S*>(x.data());
    auto* py = reinterpret_cast<S*>(y.data());
    // 0: copy; 1: reduce; 2: reduce and send; 3: copy and send; 4: in place (w1 is x).
    StepStreams<S> packs{px, shape == 1 || shape == 2 || shape == 4 ? py : nullptr, reinterpret_cast<S*>(a.data()),
                         shape == 2 || shape == 3 ? reinterpret_cast<S*>(b.data()) : nullptr};
    StepStreams<S> plain{packs.x, packs.y, reinterpret_cast<S*>(a2.data()),
                         packs.w2 ? reinterpret_cast<S*>(b2.data()) : nullptr};
    std::vector<Raw16> x2 = x;
    if (shape == 4) {
      packs.x = packs.w1 = reinterpret_cast<S*>(x.data());
      plain.x = plain.w1 = reinterpret_cast<S*>(x2.data());
    }
    CAPTURE(shape);
    REQUIRE(packs_aligned(packs));
    // Four "threads" side by side, as the kernel strides them.
    constexpr int kThreads = 4, kUnroll = 4;
    for (std::uint64_t t = 0; t < kThreads; ++t)
      for (std::uint64_t g = t; g < kCount / 4; g += kThreads * kUnroll)
        run_packs<Codec, SumOp, kUnroll>(packs, g, kThreads, kCount / 4);
    run_streams<Codec, SumOp>(plain, 0, kCount);
    CHECK(std::memcmp(packs.w1, plain.w1, kCount * sizeof(S)) == 0);
    if (packs.w2) CHECK(std::memcmp(packs.w2, plain.w2, kCount * sizeof(S)) == 0);
  }
  // A stream off the 16-byte grid is not for packs.
  std::vector<Raw16> v(4);
  const StepStreams<S> off{reinterpret_cast<S*>(v.data()) + 1, nullptr, reinterpret_cast<S*>(v.data()), nullptr};
  CHECK_FALSE(packs_aligned(off));
}

TEST_CASE("in-place all-gather and reduce-scatter run through FIFOs far smaller than a rank's share",
          "[fifo_program]") {
  // In place, an all-gather's input is the rank's own block of the output
  // (a reduce-scatter's output its own block of the input): the schedule's
  // copy of that block onto itself must not wait for the sends that read
  // it, which only the peers' later receives can finish.
  using namespace kizuna::kernels;
  const CollectiveReference ref(DataType::Float32, ReduceOp::Sum);
  const std::size_t e = ref.elem();
  for (int world = 2; world <= 5; ++world) {
    World w(world, 1, 16);
    for (Collective c : {Collective::AllGather, Collective::ReduceScatter}) {
      for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::OneShot, Algorithm::TwoShot, Algorithm::Doubling}) {
        const std::uint64_t count = 37;
        CAPTURE(world, algo::name(c), algo::name(a));
        const auto schedules = schedules_for(c, a, world, count, e);
        Simulated s = simulate_ranks(ref, schedules, DataType::Float32, ReduceOp::Sum);
        // One buffer per rank, of the larger side, holding both.
        std::vector<std::vector<unsigned char>> buffer(world);
        std::vector<unsigned char*> in(world), out(world);
        for (int r = 0; r < world; ++r) {
          const std::size_t own = static_cast<std::size_t>(r) * count * e;
          if (c == Collective::AllGather) {
            buffer[r].assign(count * world * e, 0);
            std::memcpy(buffer[r].data() + own, s.in[r].data(), count * e);
            in[r] = buffer[r].data() + own;
            out[r] = buffer[r].data();
          } else {
            buffer[r] = s.in[r];
            in[r] = buffer[r].data();
            out[r] = buffer[r].data() + own;
          }
        }
        const auto status = run_world_at<Plain<float>, SumOp>(w, schedules, in, out, std::chrono::seconds(5));
        for (int r = 0; r < world; ++r) {
          CAPTURE(r);
          REQUIRE(status[r] == FifoStatus::Done);
          REQUIRE(std::memcmp(out[r], s.sim_out[r].data(), s.sim_out[r].size()) == 0);
        }
      }
    }
  }
}

TEST_CASE("fifo layout: every wait reads the waiting rank's own memory, and no two channels share a word",
          "[fifo_program]") {
  // 3 ranks, 2 blocks, as CUDA IPC lays out their exported memory: the
  // receiver waits on `ready` and the sender on `tail`, so `ready` must be
  // in the receiver's memory and `tail` in the sender's; the slots, which
  // the sender writes over the link, in the receiver's.
  const int world = 3;
  const kernels::FifoShape shape{2, 4, 512};
  const std::size_t bytes = kernels::fifo_memory_bytes(shape, world);
  std::vector<std::vector<unsigned char>> memory(world, std::vector<unsigned char>(bytes));
  std::vector<unsigned char*> bases;
  for (auto& m : memory) bases.push_back(m.data());
  const auto in_memory_of = [&](const void* p, std::size_t n, int r) {
    const auto* c = static_cast<const unsigned char*>(p);
    return c >= bases[r] && c + n <= bases[r] + bytes;
  };
  std::vector<const void*> words;  // every ready and tail word
  std::vector<const void*> slots;  // every channel's first slot
  for (std::uint32_t b = 0; b < shape.blocks; ++b)
    for (int from = 0; from < world; ++from)
      for (int to = 0; to < world; ++to) {
        if (from == to) continue;
        const kernels::FifoChannel ch = kernels::fifo_channel(bases.data(), world, shape, b, from, to);
        CHECK(in_memory_of(ch.ready, std::size_t(shape.slots) * 8, to));
        CHECK(in_memory_of(ch.data, std::size_t(shape.slots) * shape.slot_bytes, to));
        CHECK(in_memory_of(ch.tail, 8, from));
        CHECK((ch.data - bases[to]) % 256 == 0);  // 256-aligned where the allocation is (cudaMalloc's are)
        for (std::uint32_t k = 0; k < shape.slots; ++k) words.push_back(ch.ready + k);
        words.push_back(ch.tail);
        slots.push_back(ch.data);
      }
  std::sort(words.begin(), words.end());
  CHECK(std::adjacent_find(words.begin(), words.end()) == words.end());
  std::sort(slots.begin(), slots.end());
  CHECK(std::adjacent_find(slots.begin(), slots.end()) == slots.end());
  // No word inside any channel's slots.
  for (std::uint32_t b = 0; b < shape.blocks; ++b)
    for (int from = 0; from < world; ++from)
      for (int to = 0; to < world; ++to) {
        if (from == to) continue;
        const kernels::FifoChannel ch = kernels::fifo_channel(bases.data(), world, shape, b, from, to);
        const auto* end = ch.data + std::size_t(shape.slots) * shape.slot_bytes;
        for (const void* w : words) {
          const bool inside = static_cast<const unsigned char*>(w) >= ch.data && static_cast<const unsigned char*>(w) < end;
          CHECK_FALSE(inside);
        }
      }
}

TEST_CASE("a FIFO walk whose peer never comes stops at its deadline", "[fifo_program]") {
  using namespace kizuna::kernels;
  // Rank 1 of 2 never runs: rank 0's all-reduce must give up, not hang.
  World w(2, 2, 16);
  const Walked walked = walk_rank_0_alone(w, std::chrono::milliseconds(100));
  REQUIRE(walked.status == FifoStatus::Stopped);
  REQUIRE(walked.took < std::chrono::seconds(5));
  // What rank 0 sent never came home: a GPU world would not free its memory.
  CHECK(w.counters[0].sent[1] > 0);
  CHECK_FALSE(credits_home(w, 0));
}

TEST_CASE("a FIFO walk stops at a peer's poison, long before its deadline, whichever word it waits on",
          "[fifo_program]") {
  using namespace kizuna::kernels;
  // Rank 1 of 2 never walks and aborts after 50 ms, poisoning what rank 0
  // waits on for it: the ready words of its channel to rank 0, or the
  // credit word of rank 0's channel to it (one slot, so rank 0's second
  // chunk waits for a credit). Rank 0's deadline is 30 s.
  const bool ready_words = GENERATE(true, false);
  CAPTURE(ready_words);
  World w(2, 1, 16);
  std::vector<unsigned char*> memory{w.memory[0].data(), w.memory[1].data()};
  const FifoShape shape{1, 1, 16};
  std::vector<std::uint64_t*> words;
  fifo_poison_words(memory.data(), 2, shape, 1, [&](std::uint64_t* word) { words.push_back(word); });
  REQUIRE(words.size() == 2);  // one ready word (one slot), one credit word
  CHECK(words[0] == w.in[0][1].ready);
  CHECK(words[1] == w.out[0][1].tail);
  std::thread aborting([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::atomic_ref<std::uint64_t>(*words[ready_words ? 0 : 1]).store(kFifoPoison, std::memory_order_release);
  });
  const Walked walked = walk_rank_0_alone(w, std::chrono::seconds(30));
  aborting.join();
  CHECK(walked.status == FifoStatus::Stopped);
  CHECK(walked.took < std::chrono::seconds(5));
}

TEST_CASE("a FIFO walk's deadline is a time without progress: a slow peer that keeps moving is waited for",
          "[fifo_program]") {
  // Rank 1 pauses 2 ms at each of its hundreds of actions, so the
  // all-reduce takes far longer than rank 0's 100 ms of patience, but rank 0
  // never waits 100 ms for a next move. A deadline counted from the start
  // would stop it.
  using namespace kizuna::kernels;
  struct SlowSync : HostSync {
    void progressed() {
      HostSync::progressed();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  World w(2, 2, 16);
  const algo::RankSchedule schedules[] = {schedules_for(Collective::AllReduce, Algorithm::Ring, 2, 400, 4)[0],
                                          schedules_for(Collective::AllReduce, Algorithm::Ring, 2, 400, 4)[1]};
  std::vector<std::vector<float>> data(2, std::vector<float>(400, 1.0f));
  FifoStatus status[2] = {FifoStatus::Running, FifoStatus::Running};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      const auto table = comm::encode_steps(schedules[r]);
      std::vector<float> scratch(schedules[r].scratch_count + 1);
      std::vector<FifoSend> pending(table.size() + 1);
      const FifoProgram p = w.program(r, table, pending);
      StepBuffers<float> b{{data[r].data(), data[r].data(), scratch.data()}};
      auto state = std::make_unique<FifoState<float>>();
      if (r == 0) {
        HostSync sync{std::chrono::milliseconds(100)};
        status[r] = run_fifo_program<Plain<float>, SumOp>(p, b, *state, sync);
      } else {
        SlowSync sync{{std::chrono::seconds(20)}};
        status[r] = run_fifo_program<Plain<float>, SumOp>(p, b, *state, sync);
      }
    });
  for (auto& t : ranks) t.join();
  CHECK(std::chrono::steady_clock::now() - start > std::chrono::milliseconds(100));
  CHECK(status[0] == FifoStatus::Done);
  CHECK(status[1] == FifoStatus::Done);
  CHECK(std::count(data[0].begin(), data[0].end(), 2.0f) == 400);
  CHECK(std::count(data[1].begin(), data[1].end(), 2.0f) == 400);
}

TEST_CASE("slots go in batches: one fence per batch of half the FIFO, one credit per batch received",
          "[fifo_program]") {
  // 4 slots of 16 floats, a message of 4 chunks and 3 floats: the sender
  // fills slots 0-1 and publishes them with one fence, then 2-3 with one
  // more (the FIFO is full), then waits for credits before the fifth chunk.
  // Rank 1 starts once rank 0 is waiting there, so it finds 4 chunks
  // published and takes them two by two, one credit each.
  using namespace kizuna::kernels;
  struct CountingSync : HostSync {
    int credits = 0;
    void store_release(std::uint64_t* p, std::uint64_t v) {
      ++credits;
      HostSync::store_release(p, v);
    }
  };
  constexpr std::uint64_t kCount = 67;
  World w(2, 4, 64);
  auto step = [](DeviceOp op, int recv_peer, int send_peer) {
    DeviceStep s{};
    s.op = op;
    s.src = DeviceBuffer::Input;
    s.dst = DeviceBuffer::Output;
    s.recv_peer = recv_peer;
    s.send_peer = send_peer;
    s.count = kCount;
    return s;
  };
  const std::vector<DeviceStep> tables[] = {{step(DeviceOp::Send, -1, 1)}, {step(DeviceOp::Recv, 0, -1)}};
  std::vector<float> in(kCount), out(kCount, -1.0f), none(1);
  for (std::uint64_t i = 0; i < kCount; ++i) in[i] = float(i);
  std::vector<FifoSend> pending[2] = {std::vector<FifoSend>(2), std::vector<FifoSend>(2)};
  const FifoProgram programs[] = {w.program(0, tables[0], pending[0]), w.program(1, tables[1], pending[1])};
  const StepBuffers<float> buffers[] = {{{in.data(), none.data(), none.data()}},
                                        {{none.data(), out.data(), none.data()}}};
  CountingSync syncs[2] = {CountingSync{{std::chrono::seconds(20)}}, CountingSync{{std::chrono::seconds(20)}}};
  auto states = std::make_unique<FifoState<float>[]>(2);
  FifoStatus status[2] = {FifoStatus::Running, FifoStatus::Running};
  std::thread sender([&] { status[0] = run_fifo_program<Plain<float>, SumOp>(programs[0], buffers[0], states[0], syncs[0]); });
  const auto patience = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  const std::uint64_t* fourth = w.in[1][0].ready + 3;  // slot 3's ready word, in rank 1's memory
  while (HostSync{}.load_acquire(fourth) != 4 && std::chrono::steady_clock::now() < patience) std::this_thread::yield();
  status[1] = run_fifo_program<Plain<float>, SumOp>(programs[1], buffers[1], states[1], syncs[1]);
  sender.join();
  CHECK(status[0] == FifoStatus::Done);
  CHECK(status[1] == FifoStatus::Done);
  CHECK(out == in);
  CHECK(syncs[0].fences == 3);   // slots 0-1, 2-3, then the fifth chunk alone
  CHECK(syncs[1].credits == 3);  // the same batches, received
  CHECK(credits_home(w, 0));
}

TEST_CASE("a long ring queues more sends than any fixed bound, and finishes", "[fifo_program]") {
  // 2 and 5 ranks, 24k floats in 48-byte slices: a ring's first step queues
  // hundreds of sends on every rank before any rank receives; with a
  // bounded queue every rank would wait at a Send for room that only a
  // receive, never reached, would make.
  using namespace kizuna::kernels;
  const CollectiveReference ref(DataType::Float32, ReduceOp::Sum);
  for (int world : {2, 5}) {
    for (Algorithm a : {Algorithm::Ring, Algorithm::Tree}) {
      CAPTURE(world, algo::name(a));
      World w(world, 2, 64);
      const auto schedules = schedules_for(Collective::AllReduce, a, world, 24000, 4);
      Simulated s = simulate_ranks(ref, schedules, DataType::Float32, ReduceOp::Sum);
      const auto status = run_world<Plain<float>, SumOp>(w, schedules, s.in, s.out, false);
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        REQUIRE(status[r] == FifoStatus::Done);
        REQUIRE(s.out[r] == s.sim_out[r]);
      }
    }
  }
}

TEST_CASE("split_parts cuts only what splits, on 256-byte boundaries", "[fifo_program]") {
  using comm::split_parts;
  auto covers = [](const std::vector<comm::DevicePart>& parts, std::uint64_t count) {
    std::uint64_t at = 0;
    for (const auto& p : parts) {
      if (p.offset != at || p.count == 0) return false;
      at += p.count;
    }
    return at == count;
  };
  for (Collective c : {Collective::AllReduce, Collective::Broadcast, Collective::Reduce}) {
    const auto parts = split_parts(c, 1 << 20, 4, 8, 1 << 18);  // 4 MiB in parts of >= 256 KiB: 8
    REQUIRE(parts.size() == 8);
    REQUIRE(covers(parts, 1 << 20));
    for (std::size_t k = 0; k + 1 < parts.size(); ++k) REQUIRE((parts[k].offset + parts[k].count) * 4 % 256 == 0);
    REQUIRE(split_parts(c, 1000, 4, 8, 1 << 18).size() == 1);       // small: whole
    REQUIRE(split_parts(c, 3 << 16, 4, 8, 1 << 18).size() == 3);    // 768 KiB: 3 parts
    REQUIRE(covers(split_parts(c, 100003, 2, 5, 1000), 100003));
  }
  for (Collective c : {Collective::AllGather, Collective::ReduceScatter}) {
    // Their parts need rank blocks a stride apart: whole for a runner without.
    REQUIRE(split_parts(c, 1 << 20, 4, 8, 1 << 18).size() == 1);
    REQUIRE(split_parts(c, 1 << 20, 4, 8, 1 << 18, comm::RankBlocks::Strided).size() == 8);
    REQUIRE(covers(split_parts(c, 100003, 2, 5, 1000, comm::RankBlocks::Strided), 100003));
  }
  REQUIRE(split_parts(Collective::Barrier, 1 << 20, 4, 8, 1 << 18, comm::RankBlocks::Strided).size() == 1);
  REQUIRE(split_parts(Collective::AllReduce, 0, 4, 8, 1).size() == 1);
}

TEST_CASE("a collective cut into parts, each walked on its own channels, equals the whole", "[fifo_program]") {
  // What the kernel's blocks do: each part is the same collective on fewer
  // elements at an offset, on channels of its own (all-gather's and
  // reduce-scatter's the same range of every rank's share); together they
  // must give the simulator's result for the whole call, bit for bit.
  using namespace kizuna::kernels;
  for (DataType dtype : {DataType::Float32, DataType::Float16}) {
    const CollectiveReference ref(dtype, ReduceOp::Sum);
    const std::size_t elem = ref.elem();
    for (int world : {2, 3, 4}) {
      for (Collective c : {Collective::AllReduce, Collective::Broadcast, Collective::Reduce, Collective::AllGather,
                           Collective::ReduceScatter}) {
        for (Algorithm a : {Algorithm::Ring, Algorithm::Tree}) {
          // All-gather's and reduce-scatter's count is per rank; their
          // parts' schedules address rank blocks a whole share apart.
          const bool by_rank = c == Collective::AllGather || c == Collective::ReduceScatter;
          const std::uint64_t count = by_rank ? 1031 : 4099;
          const auto parts = comm::split_parts(c, count, elem, 3, by_rank ? 256 : 1024, comm::RankBlocks::Strided);
          CAPTURE(name(dtype), world, algo::name(c), algo::name(a), parts.size());
          REQUIRE(parts.size() == 3);
          Simulated s = simulate_ranks(ref, schedules_for(c, a, world, count, elem), dtype, ReduceOp::Sum);
          auto& in = s.in;
          auto& out = s.out;
          for (auto& o : out) o.resize(std::max(o.size(), count * elem));  // a non-root's reduce output too: every part's start is inside
          for (const comm::DevicePart& part : parts) {
            World w(world, 2, 64);
            const auto schedules = schedules_for(c, a, world, part.count, elem, by_rank ? count : 0);
            std::vector<unsigned char*> pin, pout;
            for (int r = 0; r < world; ++r) {
              pin.push_back(in[r].data() + part.offset * elem);
              pout.push_back(out[r].data() + part.offset * elem);
            }
            const auto status = dtype == DataType::Float32
                                    ? run_world_at<Plain<float>, SumOp>(w, schedules, pin, pout)
                                    : run_world_at<Half, SumOp>(w, schedules, pin, pout);
            for (int r = 0; r < world; ++r) REQUIRE(status[r] == FifoStatus::Done);
          }
          const int root = world / 2;
          for (int r = 0; r < world; ++r) {
            CAPTURE(r);
            if (c == Collective::Reduce && r != root) continue;  // only the root's output is defined
            REQUIRE(out[r] == s.sim_out[r]);
          }
        }
      }
    }
  }
}
