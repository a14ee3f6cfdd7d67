// tools/train/report.hpp: what rank 0 shows and writes while training.
//
// Progress: on a terminal (stderr is a tty) one line redrawn in place per
// epoch, a bar with samples/s, loss and the epoch's ETA; otherwise (a pipe,
// kizuna-run, a log file) plain lines on stdout, at most one every
// `plain_interval` and one at the end of each epoch, flushed at once so a
// launcher shows them as they happen. Evaluations are always a line.
//
// Metrics: every progress report and evaluation is a CSV row
//   step,epoch,train_loss,test_loss,test_accuracy,samples_per_s,comm_wait_s,lr
// (a train row leaves the test columns empty and vice versa; epoch is
// fractional, comm_wait_s is the time rank 0 waited for the all-reduce
// since the previous row). plot() draws loss and accuracy against the step
// with gnuplot (pngcairo, else png), its own messages kept off the console
// unless it fails.
//
// Resuming (`resumed_step` set): the CSV that is there is this run's
// history. Its rows up to the checkpoint's step are kept (and plotted), the
// later ones (work the checkpoint lost, done again now) dropped, and the new
// rows appended. A file with another header, or one that ends before the
// checkpoint's step, is another run's: an error, and it is left as it was.
//
// Taking over (`taking_over`, with `resumed_step` the current step): the
// group's rank 0 was lost in an elastic job and this rank is rank 0 now.
// The lost rank's rows up to the step are kept as on resuming; they may end
// before it (rows are written every few steps).
//
// Only rank 0 makes a Report. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "mlp/trainer.hpp"

namespace kizuna::train {

class Report {
 public:
  Report(int epochs, const std::string& metrics_path, std::optional<std::int64_t> resumed_step = std::nullopt,
         bool taking_over = false);
  ~Report();

  void on_step(const mlp::StepReport& r);
  void on_eval(const mlp::EvalReport& r, double elapsed_s);
  // Ends a progress bar that is still drawn (before other output).
  void end_line();

  // Draws the curves to png_path; returns an error text, or "" on success.
  std::string plot(const std::string& png_path, const std::string& title) const;

 private:
  struct Point {
    std::int64_t step;
    double value;
  };

  int epochs_;
  bool tty_;
  bool bar_open_ = false;
  // The rows of `old` up to `resumed_step`, as text, also loaded into the
  // plot's series; throws InvalidArgument for another run's file.
  std::string history(std::FILE* old, const std::string& path, std::int64_t resumed_step, bool taking_over);

  std::FILE* csv_ = nullptr;
  std::chrono::steady_clock::time_point last_line_{};
  std::vector<Point> train_loss_, test_loss_, accuracy_;
};

}  // namespace kizuna::train
