// tools/train/options.cpp: see options.hpp.
#include "options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <sstream>
#include <vector>

#include "common/cli.hpp"
#include "core/env.hpp"

namespace kizuna::train {

namespace {

using tools::UsageError;

struct Flag {
  const char* name;
  const char* metavar;  // nullptr: a switch without a value
  const char* help;
  std::function<void(CliOptions&, std::string_view)> set;
};

std::int64_t integer(std::string_view flag, std::string_view text, std::int64_t min, std::int64_t max) {
  return core::parse_int(flag, text, min, max);
}

double real(std::string_view flag, std::string_view text, double min, double max) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < min || v > max) {
    std::ostringstream o;
    o << flag << "='" << text << "' is not accepted; expected a number in [" << min << ", " << max << "]";
    throw UsageError(o.str());
  }
  return v;
}

std::vector<int> widths(std::string_view flag, std::string_view text) {
  std::vector<int> out;
  if (text.empty() || text == "none") return out;  // a linear model
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(static_cast<int>(integer(flag, text.substr(start, comma - start), 1, 1 << 16)));
    start = comma + 1;
  }
  return out;
}

std::size_t megabytes(std::string_view flag, std::string_view text) {
  return static_cast<std::size_t>(real(flag, text, 1.0 / 1024, 1 << 16) * (1 << 20));
}

Compression compression(std::string_view text) {
  if (text == "none") return Compression::None;
  if (text == "fp16") return Compression::Float16;
  if (text == "bf16") return Compression::BFloat16;
  throw UsageError("--compress='" + std::string(text) + "' is not accepted; expected none, fp16 or bf16");
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"--data", "fashion-mnist|random",
       "the data set: Fashion-MNIST (Debian's dataset-fashion-mnist), or the DDP tutorial's random regression set",
       [](CliOptions& o, std::string_view v) {
         if (v != "fashion-mnist" && v != "random")
           throw UsageError("--data='" + std::string(v) + "' is not accepted; expected fashion-mnist or random");
         o.data = v;
       }},
      {"--data-dir", "DIR", "where the four Fashion-MNIST .gz files are (default /usr/share/datasets/fashion-mnist)",
       [](CliOptions& o, std::string_view v) { o.data_dir = v; }},
      {"--train-subset", "N", "train on the first N training samples only (default: all)",
       [](CliOptions& o, std::string_view v) { o.train_subset = integer("--train-subset", v, 1, 1LL << 40); }},
      {"--test-subset", "N", "evaluate on the first N test samples only (default: all)",
       [](CliOptions& o, std::string_view v) { o.test_subset = integer("--test-subset", v, 1, 1LL << 40); }},
      {"--random-samples", "N", "random data: training samples (default 8192; 1024 test samples)",
       [](CliOptions& o, std::string_view v) { o.random.train_samples = integer("--random-samples", v, 1, 1LL << 32); }},
      {"--random-features", "N", "random data: inputs per sample (default 10, the tutorial's)",
       [](CliOptions& o, std::string_view v) { o.random.features = integer("--random-features", v, 1, 1 << 20); }},
      {"--random-outputs", "N", "random data: targets per sample (default 5, the tutorial's)",
       [](CliOptions& o, std::string_view v) { o.random.outputs = integer("--random-outputs", v, 1, 1 << 20); }},
      {"--hidden", "W1,W2,...", "hidden layer widths (default 512,256; 'none' for a linear model)",
       [](CliOptions& o, std::string_view v) { o.train.hidden = widths("--hidden", v); }},
      {"--epochs", "E", "epochs (default 10)",
       [](CliOptions& o, std::string_view v) { o.train.epochs = integer("--epochs", v, 1, 1 << 20); }},
      {"--batch-size", "B", "samples per step per rank (default 64); the global batch is B x ranks",
       [](CliOptions& o, std::string_view v) { o.train.batch_size = integer("--batch-size", v, 1, 1 << 20); }},
      {"--lr", "LR", "peak learning rate (default 0.05 for sgd, 0.001 for adamw)",
       [](CliOptions& o, std::string_view v) {
         o.train.lr = static_cast<float>(real("--lr", v, 1e-9, 1e3));
         o.lr_given = true;
       }},
      {"--optimizer", "sgd|adamw", "SGD with momentum, or AdamW (default sgd)",
       [](CliOptions& o, std::string_view v) { o.train.optimizer.kind = mlp::parse_optimizer(v); }},
      {"--momentum", "M", "SGD momentum (default 0.9)",
       [](CliOptions& o, std::string_view v) { o.train.optimizer.momentum = static_cast<float>(real("--momentum", v, 0, 0.999999)); }},
      {"--weight-decay", "WD", "weight decay: L2 for sgd, decoupled for adamw (default 0)",
       [](CliOptions& o, std::string_view v) { o.train.optimizer.weight_decay = static_cast<float>(real("--weight-decay", v, 0, 10)); }},
      {"--schedule", "constant|step|cosine", "learning-rate schedule after the warm-up (default cosine)",
       [](CliOptions& o, std::string_view v) { o.train.schedule = mlp::parse_schedule(v); }},
      {"--warmup", "STEPS", "linear warm-up steps (default 0)",
       [](CliOptions& o, std::string_view v) { o.train.warmup_steps = integer("--warmup", v, 0, 1LL << 40); }},
      {"--step-epochs", "E", "step schedule: epochs between decays (default a third of --epochs)",
       [](CliOptions& o, std::string_view v) { o.train.step_epochs = integer("--step-epochs", v, 1, 1 << 20); }},
      {"--gamma", "G", "step schedule: decay factor (default 0.1)",
       [](CliOptions& o, std::string_view v) { o.train.step_gamma = static_cast<float>(real("--gamma", v, 0, 1)); }},
      {"--bucket-mb", "MB", "DDP bucket cap in MiB (default 25; the first bucket is capped at 1 MiB)",
       [](CliOptions& o, std::string_view v) { o.train.bucket_cap_bytes = megabytes("--bucket-mb", v); }},
      {"--first-bucket-mb", "MB", "cap of the first DDP bucket in MiB (default 1)",
       [](CliOptions& o, std::string_view v) { o.train.first_bucket_bytes = megabytes("--first-bucket-mb", v); }},
      {"--compress", "none|fp16|bf16", "what gradients travel as in the all-reduce (default none)",
       [](CliOptions& o, std::string_view v) { o.train.compression = compression(v); }},
      {"--precision", "fp32|bf16|fp16",
       "forward/backward precision (emulated; float32 master weights; fp16 with dynamic loss scaling)",
       [](CliOptions& o, std::string_view v) { o.train.precision = mlp::parse_precision(v); }},
      {"--loss-scale", "S", "fp16: initial loss scale (default 65536)",
       [](CliOptions& o, std::string_view v) { o.train.loss_scale.init_scale = static_cast<float>(real("--loss-scale", v, 1, 1e30)); }},
      {"--loss-scale-window", "N", "fp16: good steps before the scale doubles (default 2000)",
       [](CliOptions& o, std::string_view v) { o.train.loss_scale.growth_interval = integer("--loss-scale-window", v, 1, 1LL << 40); }},
      {"--checkpoint", "PATH", "write a checkpoint here after every epoch (rank 0, atomically)",
       [](CliOptions& o, std::string_view v) { o.train.checkpoint = v; }},
      {"--resume", nullptr, "continue from --checkpoint if it exists (start afresh if it does not)",
       [](CliOptions& o, std::string_view) { o.resume = true; }},
      {"--elastic", nullptr,
       "keep training when a rank dies: the survivors shrink the group and go on, and a replacement "
       "(kizuna-run --elastic) joins at the next step",
       [](CliOptions& o, std::string_view) { o.train.elastic = true; }},
      {"--seed", "S", "seed of the weights and the data order (default 0)",
       [](CliOptions& o, std::string_view v) {
         o.train.seed = static_cast<std::uint64_t>(integer("--seed", v, 0, INT64_MAX));
       }},
      {"--eval-every", "STEPS", "also evaluate every STEPS steps (default: after each epoch only)",
       [](CliOptions& o, std::string_view v) { o.train.eval_every = integer("--eval-every", v, 1, 1LL << 40); }},
      {"--log-every", "STEPS", "progress every STEPS steps (default: 20 times per epoch)",
       [](CliOptions& o, std::string_view v) { o.train.log_every = integer("--log-every", v, 1, 1LL << 40); }},
      {"--metrics", "FILE", "write CSV: step, epoch, loss, test loss, accuracy, samples/s, comm time, lr",
       [](CliOptions& o, std::string_view v) { o.metrics = v; }},
      {"--plot", "FILE.png", "draw the loss and accuracy curves with gnuplot at the end",
       [](CliOptions& o, std::string_view v) { o.plot = v; }},
      {"--blas-threads", "N", "OpenBLAS threads per rank (default 1)",
       [](CliOptions& o, std::string_view v) { o.blas_threads = integer("--blas-threads", v, 1, 1024); }},
      {"--target-accuracy", "A", "report the time at which test accuracy first reaches A",
       [](CliOptions& o, std::string_view v) { o.target_accuracy = real("--target-accuracy", v, 0, 1); }},
      {"--measure-overlap", "N",
       "at the end, time N steps of compute alone, communication alone and both overlapped (default 50 with several ranks; 0: skip)",
       [](CliOptions& o, std::string_view v) { o.measure_overlap = integer("--measure-overlap", v, 0, 1 << 20); }},
  };
  return table;
}

// The table on `app`, setting `o`; -h/--help last. Given twice, a flag's
// last value counts.
void declare(CLI::App& app, CliOptions& o) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const Flag& f : flags()) {
    if (f.metavar)
      tools::add_value(app, f.name, f.metavar, f.help, [&o, &f](const std::string& v) { f.set(o, v); });
    else
      tools::add_switch(app, f.name, f.help, [&o, &f] { f.set(o, ""); });
  }
  tools::add_help(app, "this text");
}

}  // namespace

std::string usage_line() {
  return "usage: kizuna-train [--data fashion-mnist|random] [--hidden 512,256] [--epochs E] [--batch-size B]\n"
         "                    [--lr LR] [--optimizer sgd|adamw] [--schedule constant|step|cosine] [--warmup N]\n"
         "                    [--weight-decay WD] [--bucket-mb MB] [--compress none|fp16|bf16]\n"
         "                    [--precision fp32|bf16|fp16] [--checkpoint PATH [--resume]] [--elastic] [--seed S]\n"
         "                    [--eval-every N] [--metrics FILE] [--plot FILE.png] [more: --help]";
}

std::string help_text() {
  CLI::App app;
  CliOptions unused;
  declare(app, unused);
  return "kizuna-train: an autograd-free MLP trained data-parallel with kizuna's DDP layer.\n"
         "Alone it trains on one rank; under kizuna-run, mpirun or srun every process is a rank.\n\n" +
         usage_line() + "\n\n" + tools::option_table(app, 34);
}

CliOptions parse_command_line(int argc, const char* const* argv) {
  CliOptions o;
  CLI::App app;
  declare(app, o);
  if (!tools::parse(app, argc, argv)) {
    o.help = true;
    return o;
  }
  tools::reject_extras(app);
  o.random.seed = o.train.seed;
  if (!o.lr_given) o.train.lr = o.train.optimizer.kind == mlp::OptimizerKind::AdamW ? 1e-3f : 0.05f;
  if (o.resume && o.train.checkpoint.empty()) throw UsageError("--resume needs --checkpoint PATH");
  o.train.first_bucket_bytes = std::min(o.train.first_bucket_bytes, o.train.bucket_cap_bytes);
  return o;
}

}  // namespace kizuna::train
