// Fashion-MNIST's IDX files: well-formed files load; a missing package, a
// wrong magic, wrong dimensions, a truncated gzip stream, truncated or
// excess data, mismatched counts and bad labels are each reported by name.
// The real data set is checked when Debian's package is installed.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "mlp/dataset.hpp"

using namespace kizuna::mlp;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kizuna-mlp-data-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::uint8_t> idx(std::uint8_t type, std::vector<std::uint32_t> dims, std::size_t data_bytes,
                              std::uint8_t fill = 1) {
  std::vector<std::uint8_t> b{0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(d >> s));
  for (std::size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<std::uint8_t>((i * 7 + fill) % 10));
  return b;
}

void write_gz(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = ::gzopen(path.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(::gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  ::gzclose(f);
}

// A small but well-formed copy of the data set's four files.
void write_set(const fs::path& dir, std::uint32_t train = 20, std::uint32_t test = 10) {
  write_gz(dir / "train-images-idx3-ubyte.gz", idx(8, {train, 28, 28}, train * 784));
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx(8, {train}, train));
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx(8, {test, 28, 28}, test * 784));
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx(8, {test}, test));
}

std::string error_of(const std::string& dir) {
  try {
    load_fashion_mnist(dir);
  } catch (const kizuna::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("well-formed IDX files load and are standardised", "[mlp][data]") {
  TempDir dir;
  write_set(dir.path);
  const DataSplits s = load_fashion_mnist(dir.path);
  CHECK(s.train.size == 20);
  CHECK(s.test.size == 10);
  CHECK(s.train.features == 784);
  CHECK(s.train.outputs == 10);
  CHECK(s.train.inputs.size() == 20 * 784);
  CHECK(s.train.labels[1] == 8);  // (1 * 7 + 1) % 10
  double sum = 0, sum_sq = 0;
  for (float x : s.train.inputs) sum += x, sum_sq += static_cast<double>(x) * x;
  CHECK(sum / s.train.inputs.size() == Approx(0.0).margin(1e-5));
  CHECK(sum_sq / s.train.inputs.size() == Approx(1.0).epsilon(1e-4));
  const Dataset head = s.train.head(5);
  CHECK(head.size == 5);
  CHECK(head.inputs.size() == 5 * 784);
  CHECK(std::equal(head.labels.begin(), head.labels.end(), s.train.labels.begin()));
}

TEST_CASE("a missing data set names the Debian package", "[mlp][data]") {
  TempDir dir;
  const std::string e = error_of((dir.path / "nowhere").string());
  CHECK_THAT(e, Catch::Contains("dataset-fashion-mnist") && Catch::Contains("does not exist"));
}

TEST_CASE("corrupt and truncated IDX files are detected", "[mlp][data]") {
  TempDir dir;
  write_set(dir.path);
  const fs::path images = dir.path / "train-images-idx3-ubyte.gz";
  const fs::path labels = dir.path / "train-labels-idx1-ubyte.gz";

  SECTION("bad magic") {
    auto b = idx(8, {20, 28, 28}, 20 * 784);
    b[0] = 0x1f;
    write_gz(images, b);
    CHECK_THAT(error_of(dir.path), Catch::Contains("not an IDX file"));
  }
  SECTION("wrong element type") {
    write_gz(images, idx(0x0d, {20, 28, 28}, 20 * 784));
    CHECK_THAT(error_of(dir.path), Catch::Contains("element type"));
  }
  SECTION("wrong image size") {
    write_gz(images, idx(8, {20, 32, 32}, 20 * 1024));
    CHECK_THAT(error_of(dir.path), Catch::Contains("28x28"));
  }
  SECTION("data shorter than the header promises") {
    write_gz(images, idx(8, {20, 28, 28}, 20 * 784 - 100));
    CHECK_THAT(error_of(dir.path), Catch::Contains("is truncated") && Catch::Contains("promises 15680"));
  }
  SECTION("data longer than the header promises") {
    write_gz(images, idx(8, {20, 28, 28}, 20 * 784 + 3));
    CHECK_THAT(error_of(dir.path), Catch::Contains("is corrupt"));
  }
  SECTION("a gzip stream cut short") {
    write_gz(images, idx(8, {20, 28, 28}, 20 * 784));
    const auto size = fs::file_size(images);
    fs::resize_file(images, size / 2);
    CHECK_THAT(error_of(dir.path), Catch::Contains("truncated"));
  }
  SECTION("a header cut short") {
    write_gz(labels, {0, 0, 8, 1, 0});
    CHECK_THAT(error_of(dir.path), Catch::Contains("truncated inside its header"));
  }
  SECTION("image and label counts differ") {
    write_gz(labels, idx(8, {19}, 19));
    CHECK_THAT(error_of(dir.path), Catch::Contains("20 images") && Catch::Contains("19 labels"));
  }
  SECTION("a label that is not a class") {
    auto b = idx(8, {20}, 20);
    b.back() = 12;
    write_gz(labels, b);
    CHECK_THAT(error_of(dir.path), Catch::Contains("label 12"));
  }
  SECTION("garbage that is not gzip at all is read as plain bytes and rejected") {
    std::ofstream(images, std::ios::binary) << "hello, world: not a data set";
    CHECK_THAT(error_of(dir.path), Catch::Contains("not an IDX file"));
  }
}

TEST_CASE("IDX bytes in memory parse as the files do", "[mlp][data]") {
  std::vector<std::uint32_t> dims;
  const auto file = idx(8, {2, 3}, 6);
  const auto elements = parse_idx(file.data(), file.size(), dims, "memory");
  CHECK(dims == std::vector<std::uint32_t>{2, 3});
  CHECK(elements == std::vector<std::uint8_t>(file.end() - 6, file.end()));
  const auto cut = idx(8, {2, 3}, 5);
  CHECK_THROWS_WITH(parse_idx(cut.data(), cut.size(), dims, "memory"),
                    Catch::Contains("memory is truncated"));
  CHECK_THROWS_WITH(parse_idx(file.data(), 2, dims, "memory"), Catch::Contains("less than an IDX header"));
  CHECK_THROWS_WITH(parse_idx(file.data(), file.size(), dims, "memory", 5),
                    Catch::Contains("more than 5 elements"));

  const auto images = idx(8, {3, 28, 28}, 3 * 784);
  const auto labels = idx(8, {3}, 3);
  const Dataset d = parse_image_split(images.data(), images.size(), "images", labels.data(), labels.size(),
                                      "labels", "memory/train");
  CHECK(d.name == "memory/train");
  CHECK(d.size == 3);
  CHECK(d.labels == std::vector<std::int32_t>{1, 8, 5});  // (i * 7 + 1) % 10
  CHECK(d.inputs.size() == 3 * 784);
  CHECK(d.inputs[1] == Approx(8 / 255.0f));
  const auto two = idx(8, {2}, 2);
  CHECK_THROWS_WITH(parse_image_split(images.data(), images.size(), "images", two.data(), two.size(), "labels", "x"),
                    Catch::Contains("images holds 3 images but labels holds 2 labels"));
}

TEST_CASE("the random regression set is seeded and standard normal", "[mlp][data]") {
  const DataSplits a = make_random_regression({4096, 16, 10, 5, 7});
  const DataSplits b = make_random_regression({4096, 16, 10, 5, 7});
  const DataSplits c = make_random_regression({4096, 16, 10, 5, 8});
  CHECK(a.train.inputs == b.train.inputs);
  CHECK(a.train.targets == b.train.targets);
  CHECK(a.train.inputs != c.train.inputs);
  CHECK(a.train.task == Loss::MeanSquaredError);
  CHECK(a.train.targets.size() == 4096 * 5);
  double sum = 0, sum_sq = 0;
  for (float x : a.train.inputs) sum += x, sum_sq += static_cast<double>(x) * x;
  CHECK(std::abs(sum / a.train.inputs.size()) < 0.03);
  CHECK(sum_sq / a.train.inputs.size() == Approx(1.0).epsilon(0.05));
}

TEST_CASE("the installed Fashion-MNIST has its published shape", "[mlp][data]") {
  if (!fs::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  const DataSplits s = load_fashion_mnist();
  CHECK(s.train.size == 60000);
  CHECK(s.test.size == 10000);
  std::vector<int> counts(10, 0);
  for (auto l : s.train.labels) ++counts[l];
  for (int c : counts) CHECK(c == 6000);  // the published class balance
}
