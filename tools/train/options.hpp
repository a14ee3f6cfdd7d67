// tools/train/options.hpp: kizuna-train's command line.
//
// parse_command_line() fills CliOptions from argv, parsed by CLI11
// (common/cli.hpp): every flag takes its value as the next argument or after
// '=' (--epochs=5), the last one counting when given twice; a bad flag or
// value is a tools::UsageError whose message names the flag and what it
// accepts. The table in options.cpp is also the --help text, so the two
// never disagree.
#pragma once

#include <cstdint>
#include <string>

#include "mlp/trainer.hpp"

namespace kizuna::train {

struct CliOptions {
  mlp::TrainOptions train;
  bool lr_given = false;
  // Data.
  std::string data = "fashion-mnist";  // or "random"
  std::string data_dir = mlp::kFashionMnistDir;
  std::size_t train_subset = 0;  // 0: all
  std::size_t test_subset = 0;
  mlp::RandomDataOptions random;
  // Run.
  bool resume = false;
  std::string metrics;
  std::string plot;
  int blas_threads = 1;
  double target_accuracy = 0;  // report when the test accuracy first reaches it
  int measure_overlap = -1;    // steps of Trainer::measure_overlap at the end (-1: 50 when world > 1)
  bool help = false;
};

// Throws tools::UsageError; returns with help = true for -h/--help.
CliOptions parse_command_line(int argc, const char* const* argv);

std::string usage_line();
std::string help_text();

}  // namespace kizuna::train
