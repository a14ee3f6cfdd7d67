// Checkpoint: round trips, the atomic write, corruption and truncation
// detection at every byte, and the collective save/load with ranks as threads.
#include <catch2/catch.hpp>

#include <kizuna/checkpoint.hpp>
#include <kizuna/error.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "ddp/crc32c.hpp"
#include "ddp_scenario.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

// A fresh directory under /tmp, removed with its files at the end.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/kizuna-ckpt-XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() {
    for (const auto& f : files()) ::unlink((path_ + "/" + f).c_str());
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
      ::closedir(d);
    }
    return out;
  }

 private:
  std::string path_;
};

Checkpoint sample(int variant = 0) {
  Checkpoint c;
  std::vector<float> weights(1000);
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(grad(variant, 0, 0, i));
  c.put("model.params", weights.data(), weights.size(), DataType::Float32);
  const std::vector<double> moments{1.5, -2.25, 1e300};
  c.put("adam.m", moments.data(), moments.size(), DataType::Float64);
  const std::vector<std::uint16_t> half{0x3c00, 0x7bff, 0x0001};
  c.put("half", half.data(), half.size(), DataType::Float16);
  c.put("empty", nullptr, 0, DataType::Int8);
  c.put_int("step", 1234 + variant);
  return c;
}

void check_sample(const Checkpoint& c, int variant = 0) {
  CHECK(c.names() == std::vector<std::string>{"model.params", "adam.m", "half", "empty", "step"});
  std::vector<float> weights(1000);
  c.get("model.params", weights.data(), weights.size(), DataType::Float32);
  for (std::size_t i = 0; i < weights.size(); ++i)
    REQUIRE(weights[i] == static_cast<float>(grad(variant, 0, 0, i)));
  std::vector<double> moments(3);
  c.get("adam.m", moments.data(), 3, DataType::Float64);
  CHECK(moments == std::vector<double>{1.5, -2.25, 1e300});
  std::vector<std::uint16_t> half(3);
  c.get("half", half.data(), 3, DataType::Float16);
  CHECK(half == std::vector<std::uint16_t>{0x3c00, 0x7bff, 0x0001});
  CHECK(c.count("empty") == 0);
  CHECK(c.dtype("empty") == DataType::Int8);
  CHECK(c.get_int("step") == 1234 + variant);
}

std::string error_text(const std::vector<std::uint8_t>& bytes) {
  try {
    Checkpoint::deserialize(bytes, "test");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::InvalidArgument) return "wrong code: " + std::string(e.what());
    return e.what();
  }
  return "";
}

void write_raw(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("CRC-32C matches its check value", "[ddp][checkpoint]") {
  ddp::Crc32c crc;
  crc.update("123456789", 9);
  CHECK(crc.value() == 0xe3069283u);
  // Incremental and one-shot agree, at every split (the 8-byte path and the tail).
  const std::string text = "The quick brown fox jumps over the lazy dog, twice over.";
  ddp::Crc32c whole;
  whole.update(text.data(), text.size());
  for (std::size_t split = 0; split <= text.size(); ++split) {
    ddp::Crc32c parts;
    parts.update(text.data(), split);
    parts.update(text.data() + split, text.size() - split);
    CHECK(parts.value() == whole.value());
  }
}

TEST_CASE("checkpoint round trip in memory and through a file", "[ddp][checkpoint]") {
  const Checkpoint c = sample();
  check_sample(Checkpoint::deserialize(c.serialize()));

  TempDir dir;
  const std::string path = dir.path() + "/model.kzckpt";
  c.write_file(path);
  check_sample(Checkpoint::read_file(path));
  CHECK(dir.files() == std::vector<std::string>{"model.kzckpt"});  // no temporary left behind

  // Overwriting replaces the whole file.
  sample(5).write_file(path);
  check_sample(Checkpoint::read_file(path), 5);
  CHECK(dir.files().size() == 1);

  // put() of an existing name replaces the entry in place.
  Checkpoint d = sample();
  d.put_int("step", 99);
  CHECK(d.get_int("step") == 99);
  CHECK(d.names().size() == 5);
}

TEST_CASE("a checkpoint of many entries keeps their order, replaces in place, and refuses a name twice in a file",
          "[ddp][checkpoint]") {
  Checkpoint c;
  const int n = 20'000;
  for (int i = 0; i < n; ++i) c.put_int("entry/" + std::to_string(i), i);
  for (int i = 0; i < n; i += 1000) c.put_int("entry/" + std::to_string(i), -i);
  const Checkpoint back = Checkpoint::deserialize(c.serialize(), "test");
  const std::vector<std::string> names = back.names();
  REQUIRE(names.size() == static_cast<std::size_t>(n));
  int wrong = 0;
  for (int i = 0; i < n; ++i) {
    if (names[i] != "entry/" + std::to_string(i)) ++wrong;
    if (back.get_int(names[i]) != (i % 1000 == 0 ? -i : i)) ++wrong;
  }
  CHECK(wrong == 0);
  CHECK_FALSE(back.contains("entry/20000"));

  // Two entries, "a" then "b", the second renamed "a" (the CRC fixed up).
  Checkpoint two;
  two.put_int("a", 1);
  two.put_int("b", 2);
  std::vector<std::uint8_t> bytes = two.serialize();
  const auto b = std::find(bytes.begin() + 24, bytes.end() - 4, std::uint8_t{'b'});
  REQUIRE(b != bytes.end() - 4);
  *b = 'a';
  ddp::Crc32c crc;
  crc.update(bytes.data(), bytes.size() - 4);
  for (int k = 0; k < 4; ++k) bytes[bytes.size() - 4 + k] = static_cast<std::uint8_t>(crc.value() >> (8 * k));
  CHECK_THAT(error_text(bytes), Catch::Contains("entry 'a' appears twice"));
}

TEST_CASE("checkpoint get() checks name, dtype and count", "[ddp][checkpoint]") {
  const Checkpoint c = sample();
  std::vector<float> buf(1000);
  auto code = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;
  };
  CHECK(code([&] { c.get("missing", buf.data(), 1, DataType::Float32); }) == ErrorCode::InvalidArgument);
  CHECK(code([&] { c.get("model.params", buf.data(), 999, DataType::Float32); }) == ErrorCode::InvalidArgument);
  CHECK(code([&] { c.get("model.params", buf.data(), 500, DataType::Float64); }) == ErrorCode::InvalidArgument);
  CHECK_FALSE(c.contains("missing"));
  Checkpoint e;
  CHECK(code([&] { e.put("", buf.data(), 1, DataType::Float32); }) == ErrorCode::InvalidArgument);
}

TEST_CASE("a corrupt or truncated checkpoint is a clear error, at every byte", "[ddp][checkpoint]") {
  Checkpoint c;
  const std::vector<std::int32_t> small{1, 2, 3, -4};
  c.put("a", small.data(), small.size(), DataType::Int32);
  c.put_int("step", 7);
  const auto good = c.serialize();
  REQUIRE(error_text(good) == "");

  SECTION("every single-bit flip is caught") {
    for (std::size_t i = 0; i < good.size(); ++i)
      for (int bit = 0; bit < 8; ++bit) {
        auto bad = good;
        bad[i] ^= static_cast<std::uint8_t>(1 << bit);
        CAPTURE(i, bit);
        REQUIRE(error_text(bad) != "");
      }
  }
  SECTION("every truncation, and an extra byte, is caught") {
    for (std::size_t len = 0; len < good.size(); ++len) {
      CAPTURE(len);
      REQUIRE(error_text(std::vector<std::uint8_t>(good.begin(), good.begin() + len)) != "");
    }
    auto longer = good;
    longer.push_back(0);
    CHECK_THAT(error_text(longer), Catch::Contains("wrong size"));
  }
  SECTION("the message says what is wrong") {
    auto bad = good;
    bad[0] = 'X';
    CHECK_THAT(error_text(bad), Catch::Contains("bad magic"));
    bad = good;
    bad[8] = 2;
    CHECK_THAT(error_text(bad), Catch::Contains("format version 2"));
    bad = good;
    bad[30] ^= 0x10;  // inside the payload
    CHECK_THAT(error_text(bad), Catch::Contains("checksum mismatch"));
    CHECK_THAT(error_text(std::vector<std::uint8_t>(good.begin(), good.end() - 10)),
               Catch::Contains("truncated"));
    CHECK_THAT(error_text({}), Catch::Contains("truncated"));
  }
  SECTION("a structurally bad file with a valid checksum is still refused") {
    // Claim one more entry than the payload holds, and fix the CRC up.
    auto bad = good;
    bad[12] = 3;
    ddp::Crc32c crc;
    crc.update(bad.data(), bad.size() - 4);
    for (int k = 0; k < 4; ++k) bad[bad.size() - 4 + k] = static_cast<std::uint8_t>(crc.value() >> (8 * k));
    CHECK_THAT(error_text(bad), Catch::Contains("overruns the payload"));
  }
  SECTION("through a file") {
    TempDir dir;
    const std::string path = dir.path() + "/x";
    write_raw(path, std::vector<std::uint8_t>(good.begin(), good.begin() + good.size() / 2));
    try {
      Checkpoint::read_file(path);
      FAIL("read a truncated file");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::InvalidArgument);
      CHECK_THAT(e.what(), Catch::Contains(path));
      CHECK_THAT(e.what(), Catch::Contains("truncated"));
    }
    try {
      Checkpoint::read_file(dir.path() + "/missing");
      FAIL("read a missing file");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::SystemError);
      CHECK_THAT(e.what(), Catch::Contains("No such file"));
    }
  }
}

TEST_CASE("collective save: one rank writes, every rank returns after it and loads it",
          "[ddp][checkpoint]") {
  const int n = GENERATE(1, 3);
  const int root = n - 1;
  const auto comms = ddp_comms(n);
  TempDir dir;
  const std::string path = dir.path() + "/ckpt";
  std::vector<std::string> errors(n);
  run_ranks(n, [&](int r) {
    // Only root's content counts: the others pass something else.
    const Checkpoint mine = r == root ? sample() : sample(100 + r);
    mine.save(*comms[r], path, root);
    // Returned: the file is complete, whoever wrote it.
    const Checkpoint back = Checkpoint::load(*comms[r], path);
    try {
      check_sample(back);
    } catch (...) {
      errors[r] = "rank " + std::to_string(r) + " loaded something else";
    }
  });
  for (const auto& e : errors) CHECK(e == "");
  CHECK(dir.files() == std::vector<std::string>{"ckpt"});
}

TEST_CASE("collective save and load failures reach every rank", "[ddp][checkpoint]") {
  const int n = 3;
  const auto comms = ddp_comms(n);
  TempDir dir;
  std::vector<std::string> what(n);
  std::vector<ErrorCode> codes(n, ErrorCode::Internal);
  auto collect = [&](int r, auto&& fn) {
    try {
      fn();
      what[r] = "no error";
    } catch (const Error& e) {
      codes[r] = e.code();
      what[r] = e.what();
    }
  };

  SECTION("root cannot write: SystemError on every rank") {
    run_ranks(n, [&](int r) {
      collect(r, [&] { sample().save(*comms[r], dir.path() + "/no/such/dir/ckpt", 1); });
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r, what[r]);
      CHECK(codes[r] == ErrorCode::SystemError);
      CHECK_THAT(what[r], Catch::Contains("no/such/dir"));
      if (r != 1) CHECK_THAT(what[r], Catch::Contains("rank 1 failed to write"));
    }
  }
  SECTION("a rank cannot read: every rank hears of it") {
    sample().write_file(dir.path() + "/a");
    run_ranks(n, [&](int r) {
      collect(r, [&] { Checkpoint::load(*comms[r], dir.path() + (r == 2 ? "/missing" : "/a")); });
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r, what[r]);
      CHECK(codes[r] == ErrorCode::SystemError);
      if (r != 2) CHECK_THAT(what[r], Catch::Contains("rank 2 could not load"));
    }
  }
  SECTION("ranks reading different files: Mismatch") {
    sample().write_file(dir.path() + "/a");
    sample(1).write_file(dir.path() + "/b");
    run_ranks(n, [&](int r) {
      collect(r, [&] { Checkpoint::load(*comms[r], dir.path() + (r == 1 ? "/b" : "/a")); });
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r, what[r]);
      CHECK(codes[r] == ErrorCode::Mismatch);
      CHECK_THAT(what[r], Catch::Contains("on rank 1"));
      CHECK_THAT(what[r], Catch::Contains("on ranks 0, 2"));
    }
  }
}
