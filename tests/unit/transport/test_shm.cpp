// Shared memory: shared files and segments (create, map, refuse foreign
// ones, a /dev/shm too small is an error, not a crash) and ShmLink between
// two segments of one process, with a socket pair as the control
// connection; the doorbell's sleep and ring.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>
#include <tuple>

#include "transport/shm/shared_file.hpp"
#include "transport/shm/shm_link.hpp"
#include "transport/tcp/tcp_link.hpp"

#include "fence_pairings.hpp"

using namespace kizuna;
using namespace kizuna::transport;
using namespace kizuna::transport::shm;

namespace {

std::string unique_name(const char* what) {
  static int n = 0;
  return "/kizuna-test-" + std::to_string(::getpid()) + "-" + what + std::to_string(n++);
}

struct ShmPair {
  Segment s0, s1;
  std::unique_ptr<Link> a, b;  // a: rank 0's link to rank 1; b: rank 1's link to rank 0
  // `start`: where both channels' slot numbers begin (0 in a fresh segment).
  explicit ShmPair(Geometry g = {2, 4, 4096}, std::uint32_t start = 0) {
    s0 = Segment::create(unique_name("a"), g, 42, 0);
    s1 = Segment::create(unique_name("b"), g, 42, 1);
    s0.channel(1)->tail.store(start);
    s1.channel(0)->tail.store(start);
    Segment m1 = Segment::map(s1.name(), 42, 1, g.channels);  // rank 0's view of rank 1's segment
    Segment m0 = Segment::map(s0.name(), 42, 0, g.channels);
    s0.unlink();
    s1.unlink();
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    mapped1 = std::move(m1);
    mapped0 = std::move(m0);
    a = make_shm_link(1, s0, 1, mapped1, 0, make_tcp_link(1, sv[0]));
    b = make_shm_link(0, s1, 0, mapped0, 1, make_tcp_link(0, sv[1]));
  }
  Segment mapped0, mapped1;
};

template <typename Done>
void pump(ShmPair& p, Done&& done) {
  for (long i = 0; i < 100'000'000 && !done(); ++i) {
    p.a->progress();
    p.b->progress();
  }
  REQUIRE(done());
}

}  // namespace

TEST_CASE("a segment is mapped by its peers and unlinked without harm", "[shm]") {
  const Geometry g{3, 4, 4096};
  Segment s = Segment::create(unique_name("s"), g, 7, 2);
  const std::string path = "/dev/shm" + s.name();
  CHECK(std::filesystem::exists(path));
  Segment m = Segment::map(s.name(), 7, 2, 3);
  CHECK(m.geometry().channels == 3);
  CHECK(m.geometry().slot_bytes == 4096);
  s.unlink();
  CHECK_FALSE(std::filesystem::exists(path));
  // still usable through both mappings
  s.channel(1)->tail.store(5);
  CHECK(m.channel(1)->tail.load() == 5);
}

TEST_CASE("SharedFile: created, opened at its size, refused at another, unlinked by name", "[shm]") {
  SharedFile f = SharedFile::create(unique_name("sf"), 3 * 4096);
  const std::string path = "/dev/shm" + f.name();
  CHECK(std::filesystem::exists(path));
  f.data()[4096] = 7;
  SharedFile g = SharedFile::open(f.name(), 3, 3 * 4096, true);
  CHECK(g.bytes() == 3 * 4096);
  CHECK(g.data()[4096] == 7);
  CHECK(SharedFile::open(f.name(), 3, 0, false).bytes() == 3 * 4096);
  CHECK_THROWS_WITH(SharedFile::open(f.name(), 3, 2 * 4096, false),
                    Catch::Contains("rank 3's shared memory") && Catch::Contains("holds 12288 bytes where 8192"));
  f.unlink();
  CHECK_FALSE(std::filesystem::exists(path));
  g.data()[0] = 1;  // the memory lives on while mapped
  CHECK(f.data()[0] == 1);
  SharedFile moved = std::move(f);
  CHECK(moved.data()[4096] == 7);
  CHECK(f.data() == nullptr);
}

TEST_CASE("a foreign or stale segment is refused", "[shm]") {
  Segment s = Segment::create(unique_name("f"), {2, 4, 4096}, 7, 0);
  CHECK_THROWS_WITH(Segment::map(s.name(), 8, 0, 2), Catch::Contains("not rank 0's segment of this communicator"));
  CHECK_THROWS_WITH(Segment::map(s.name(), 7, 1, 2), Catch::Contains("not rank 1's segment"));
  CHECK_THROWS_WITH(Segment::map("/kizuna-test-none", 7, 0, 2), Catch::Contains("cannot open rank 0's shared memory"));
}

TEST_CASE("a /dev/shm too small is a clear error, not a crash", "[shm]") {
  const std::uint64_t too_much = shm_free_bytes() + (1ull << 30);
  const Geometry g{2, std::bit_ceil(static_cast<std::uint32_t>(too_much / (1 << 20)) + 1), 1 << 20};
  try {
    Segment::create(unique_name("big"), g, 1, 0);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::SystemError);
    CHECK(std::string(e.what()).find("is /dev/shm too small?") != std::string::npos);
  }
}

TEST_CASE("segments left by a process that is gone are removed once their set-up is over, no others", "[shm]") {
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  REQUIRE(gone > 0);
  REQUIRE(::waitpid(gone, nullptr, 0) == gone);
  const auto now = std::chrono::system_clock::now();
  const auto hour = std::chrono::hours(1);
  const std::string stale = segment_name(gone, 0x5eed, 0, now - hour);
  const std::string setting_up = segment_name(gone, 0x5eed, 1, now + hour);  // its set-up may still run
  const std::string alive = segment_name(::getpid(), 0x5eed, 2, now - hour);
  const std::string other = stale + "-not-ours";
  CHECK(stale.rfind("/kizuna-" + std::to_string(gone) + "-5eed-0-", 0) == 0);
  for (const std::string& name : {stale, setting_up, alive, other}) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  const std::vector<std::string> removed = remove_stale_segments();
  CHECK(std::count(removed.begin(), removed.end(), stale) == 1);
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + stale));
  for (const std::string& kept : {setting_up, alive, other}) {
    CHECK(std::filesystem::exists("/dev/shm" + kept));
    CHECK(std::count(removed.begin(), removed.end(), kept) == 0);
    ::shm_unlink(kept.c_str());
  }
}

TEST_CASE("ShmLink: messages of every size, both ways, copy and reduce", "[shm]") {
  ShmPair p;
  for (std::size_t n : {0ul, 1ul, 6ul, 7ul, 1024ul, 1025ul, 100'003ul}) {
    CAPTURE(n);
    std::vector<float> x(n), y(n), got(n), sum(n);
    std::iota(x.begin(), x.end(), 1.0f);
    std::fill(y.begin(), y.end(), 2.0f);
    p.a->post_send(x.data(), n * 4, {9, 0});
    p.b->post_send(y.data(), n * 4, {9, 0});
    p.b->post_recv({got.data(), nullptr, n * 4, DataType::Float32, ReduceOp::Sum}, {9, 0});
    p.a->post_recv({sum.data(), x.data(), n * 4, DataType::Float32, ReduceOp::Sum}, {9, 0});
    pump(p, [&] { return p.a->recv_done() && p.b->recv_done() && p.a->send_idle() && p.b->send_idle(); });
    CHECK(got == x);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(sum[i] == x[i] + 2.0f);
  }
}

TEST_CASE("ShmLink: messages stay whole and in order where the slot numbers wrap at 2^32", "[shm]") {
  // 4 slots of 4 KiB, numbers starting 6 short of the wrap: messages of 0 to
  // 5 slots cross it at every offset within the ring.
  ShmPair p({2, 4, 4096}, 0xffffffffu - 5);
  std::uint32_t index = 0;
  for (std::size_t n : {1ul, 1024ul, 1025ul, 0ul, 5000ul, 7ul, 4096ul, 3000ul, 1ul, 2ul}) {
    CAPTURE(n, index);
    std::vector<float> x(n), y(n), got(n), sum(n);
    std::iota(x.begin(), x.end(), static_cast<float>(index));
    std::fill(y.begin(), y.end(), 3.0f);
    p.a->post_send(x.data(), n * 4, {5, index});
    p.b->post_send(y.data(), n * 4, {5, index});
    p.b->post_recv({got.data(), nullptr, n * 4, DataType::Float32, ReduceOp::Sum}, {5, index});
    p.a->post_recv({sum.data(), x.data(), n * 4, DataType::Float32, ReduceOp::Sum}, {5, index});
    pump(p, [&] { return p.a->recv_done() && p.b->recv_done() && p.a->send_idle() && p.b->send_idle(); });
    CHECK(got == x);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(sum[i] == x[i] + 3.0f);
    ++index;
  }
  CHECK(p.s1.channel(0)->tail.load() < 100);  // it did wrap
}

TEST_CASE("a segment whose header declares an impossible ring is refused", "[shm]") {
  // A slot count that is not a power of two would put two slot numbers
  // fewer than `slots` apart in one slot once they wrap.
  CHECK_THROWS_AS(Segment::create(unique_name("odd"), {2, 48, 4096}, 7, 0), Error);
  Segment s = Segment::create(unique_name("h"), {2, 4, 4096}, 7, 0);
  auto refused = [&](auto&& change) {
    SegmentHeader& h = *s.header();
    const auto [slots, slot_bytes, channels] = std::tuple(h.slots, h.slot_bytes, h.channels);
    change(h);
    CHECK_THROWS_WITH(Segment::map(s.name(), 7, 0, 2), Catch::Contains("which no kizuna segment has"));
    h.slots = slots;
    h.slot_bytes = slot_bytes;
    h.channels = channels;
  };
  refused([](SegmentHeader& h) { h.slots = 3; });
  refused([](SegmentHeader& h) { h.slots = 0; });
  refused([](SegmentHeader& h) { h.channels = 0; });
  refused([](SegmentHeader& h) { h.slot_bytes = ~0ull; });
  refused([](SegmentHeader& h) { h.slot_bytes = 4100; });  // not whole cache lines
  refused([](SegmentHeader& h) {
    h.slots = 1u << 31;
    h.slot_bytes = 1ull << 30;
    h.channels = ~0u;
  });
  CHECK_NOTHROW(Segment::map(s.name(), 7, 0, 2));
  // Well formed, but not this node's: another number of channels, or
  // more slots than a channel may have (a sparse file can claim any size).
  CHECK_THROWS_WITH(Segment::map(s.name(), 7, 0, 4), Catch::Contains("has 2 channels where this node has 4 ranks"));
  SegmentHeader& h = *s.header();
  h.slots = 1u << 20;
  h.slot_bytes = 4096;
  CHECK_THROWS_WITH(Segment::map(s.name(), 7, 0, 2), Catch::Contains("more than a channel may hold (1024 MiB)"));
}

TEST_CASE("ShmLink: a slot that claims more bytes than the message has left is an error, not an overrun", "[shm]") {
  ShmPair p;
  int v = 1;
  std::array<int, 2> w{0, 0x5a5a};
  p.a->post_send(&v, 4, {1, 0});  // one slot, published at once
  auto* h = reinterpret_cast<SlotHeader*>(p.s1.slot(0, 0));
  h->slot_bytes = 8;  // within a slot, but 4 more than the 4-byte receive has room for
  p.b->post_recv({w.data(), nullptr, 4, DataType::Int32, ReduceOp::Sum}, {1, 0});
  try {
    pump(p, [] { return false; });
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::Internal);
    CHECK_THAT(e.what(), Catch::Contains("a slot of 8 bytes at offset 0 of a 4-byte message"));
  }
  CHECK(w[1] == 0x5a5a);
}

TEST_CASE("ShmLink: an empty slot in a message with bytes left, or a reduction split inside an element, is an error", "[shm]") {
  auto fails_with = [](std::uint32_t slot_bytes, const std::string& what) {
    ShmPair p;
    std::array<int, 2> v{1, 2}, w{7, 7};
    p.a->post_send(v.data(), 8, {1, 0});  // one slot, published at once
    reinterpret_cast<SlotHeader*>(p.s1.slot(0, 0))->slot_bytes = slot_bytes;
    p.b->post_recv({w.data(), w.data(), 8, DataType::Int32, ReduceOp::Sum}, {1, 0});
    try {
      pump(p, [] { return false; });
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::Internal);
      CHECK_THAT(e.what(), Catch::Contains(what));
    }
    CHECK(w == std::array<int, 2>{7, 7});  // nothing folded
  };
  // an empty slot would leave the receive waiting for ever, moving nothing
  fails_with(0, "an empty slot at offset 0 of a 8-byte message");
  fails_with(6, "a slot of 6 bytes to reduce, not a whole number of int32 elements");
}

TEST_CASE("doorbell_sleep: an owner whose last look throws is not left marked asleep", "[shm]") {
  Segment s = Segment::create(unique_name("d"), {2, 4, 4096}, 7, 0);
  auto throws = []() -> bool { throw Error(ErrorCode::PeerLost, "the peer has gone"); };
  CHECK_THROWS_WITH(doorbell_sleep(s.header(), throws, std::chrono::milliseconds(1)),
                    Catch::Contains("the peer has gone"));
  CHECK(s.header()->sleeping.load() == 0);  // peers would ring it on every message
  CHECK_FALSE(doorbell_sleep(s.header(), [] { return false; }, std::chrono::microseconds(100)));
  CHECK(s.header()->sleeping.load() == 0);
}

TEST_CASE("ShmLink: a wrong tag is a Mismatch, a dead peer is PeerLost", "[shm]") {
  {
    ShmPair p;
    int v = 1, w = 0;
    p.a->post_send(&v, 4, {1, 1});
    p.b->post_recv({&w, nullptr, 4, DataType::Int32, ReduceOp::Sum}, {1, 0});
    CHECK_THROWS_WITH(pump(p, [] { return false; }), Catch::Contains("message #1 of collective #1"));
  }
  {
    ShmPair p;
    int w = 0;
    p.b->post_recv({&w, nullptr, 4, DataType::Int32, ReduceOp::Sum}, {1, 0});
    p.a.reset();  // the peer dies: its control connection closes
    try {
      p.b->check_peer();
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::PeerLost);
    }
  }
}

TEST_CASE("ShmLink: a peer that leaves after its last message is no failure until it is needed", "[shm]") {
  ShmPair p;
  int v = 7, w = 0;
  p.a->post_send(&v, 4, {3, 0});
  pump(p, [&] { return p.a->send_idle(); });
  p.a.reset();  // rank 0 is done and leaves; rank 1 has not read its message yet
  // Idle, rank 1 does not need rank 0: watching it is no error.
  p.b->check_peer();
  CHECK_NOTHROW(p.b->progress());
  // What rank 0 published before leaving still arrives.
  p.b->post_recv({&w, nullptr, 4, DataType::Int32, ReduceOp::Sum}, {3, 0});
  for (int i = 0; i < 1000 && !p.b->recv_done(); ++i) p.b->progress();
  CHECK(w == 7);
  // Anything more from (or for) rank 0 can never come: PeerLost at once.
  try {
    p.b->post_recv({&w, nullptr, 4, DataType::Int32, ReduceOp::Sum}, {4, 0});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::PeerLost);
  }
}

TEST_CASE("ShmLink: a send to a peer that has left is PeerLost", "[shm]") {
  ShmPair p;
  p.a.reset();
  p.b->check_peer();
  int v = 1;
  CHECK_THROWS_AS(p.b->post_send(&v, 4, {1, 0}), Error);
}

TEST_CASE("ShmLink: peer_closed sees a peer that left, between calls", "[shm]") {
  ShmPair p;
  CHECK_FALSE(p.b->peer_closed());
  CHECK_FALSE(p.a->peer_closed());
  p.a.reset();  // rank 0 dies
  bool seen = false;
  for (int i = 0; i < 1000 && !seen; ++i) seen = p.b->peer_closed();
  CHECK(seen);
}

// The doorbell's store-load race, run many times at random offsets: the
// owner announces its sleep while the peer publishes. A ring that is lost
// leaves the owner asleep until its timeout (5 s here); every wake must come
// from the ring, in both pairings of fences: a fence on each side, and the
// owner's heavy fence alone (light_ring). The window of a missing fence is
// a store buffer's drain, tens of nanoseconds, which this rarely hits (the
// owner without its heavy fence passed 2 runs of 3000): what it pins is
// that both pairings wake the owner at all, every time.
TEST_CASE("ShmLink: a sleeping owner is woken by the message it waits for, with either fence pairing",
          "[shm]") {
  for (const bool light : test::fence_pairings()) {
    CAPTURE(light);
    ShmPair p;
    if (light) REQUIRE(use_light_ring(p.s1.header()));
    std::mt19937 random(light ? 1 : 2);
    std::chrono::steady_clock::duration longest{};
    for (int i = 0; i < 1000; ++i) {
      std::atomic<bool> go{false};
      // Within a few microseconds of the owner's announcement, where the
      // race is.
      const auto delay = std::chrono::nanoseconds(random() % 4000);
      int v = i, w = -1;
      std::thread peer([&] {
        while (!go.load()) {
        }
        const auto until = std::chrono::steady_clock::now() + delay;
        while (std::chrono::steady_clock::now() < until) {
        }
        p.a->post_send(&v, 4, {1, static_cast<std::uint32_t>(i)});
        while (!p.a->send_idle()) p.a->progress();
      });
      p.b->post_recv({&w, nullptr, 4, DataType::Int32, ReduceOp::Sum}, {1, static_cast<std::uint32_t>(i)});
      go.store(true);
      while (!p.b->recv_done()) {
        const auto start = std::chrono::steady_clock::now();
        doorbell_sleep(p.s1.header(), [&] { return p.b->progress(); }, std::chrono::seconds(5));
        longest = std::max(longest, std::chrono::steady_clock::now() - start);
      }
      peer.join();
      REQUIRE(w == i);
    }
    CHECK(longest < std::chrono::seconds(1));
  }
}
