// tools/train/report.cpp: see report.hpp.
#include "report.hpp"

#include <kizuna/error.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kizuna::train {

namespace {

constexpr auto kPlainInterval = std::chrono::seconds(10);
constexpr const char* kHeader = "step,epoch,train_loss,test_loss,test_accuracy,samples_per_s,comm_wait_s,lr";

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

}  // namespace

Report::Report(int epochs, const std::string& metrics_path, std::optional<std::int64_t> resumed_step,
               bool taking_over)
    : epochs_(epochs), tty_(::isatty(STDERR_FILENO) == 1) {
  if (metrics_path.empty()) return;
  std::string kept;  // the earlier rows a resumed run keeps
  if (resumed_step) {
    if (std::FILE* old = std::fopen(metrics_path.c_str(), "r")) {
      kept = history(old, metrics_path, *resumed_step, taking_over);
      std::fclose(old);
    }
  }
  csv_ = std::fopen(metrics_path.c_str(), "w");
  if (!csv_)
    throw Error(ErrorCode::SystemError, "cannot write --metrics " + metrics_path + ": " + std::strerror(errno));
  std::fprintf(csv_, "%s\n%s", kHeader, kept.c_str());
  std::fflush(csv_);
}

std::string Report::history(std::FILE* old, const std::string& path, std::int64_t resumed_step, bool taking_over) {
  std::string text;
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, old)) > 0;) text.append(buf, n);
  const std::size_t header_end = text.find('\n');
  if (text.compare(0, header_end, kHeader) != 0)
    throw Error(ErrorCode::InvalidArgument, "--metrics " + path + " is not a kizuna-train metrics file (its first "
                                            "line is not '" + kHeader + "'): give another file to resume into");
  std::string kept;
  std::int64_t last = -1;
  for (std::size_t at = header_end + 1; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();  // a row cut short by the crash: dropped below if partial
    const std::string row = text.substr(at, end - at);
    at = end + 1;
    long long step = -1;
    double epoch = 0, a = NAN, b = NAN;
    char sep[4];
    if (std::sscanf(row.c_str(), "%lld,%lf%1[,]", &step, &epoch, sep) != 3 || end == text.size()) continue;
    last = std::max<std::int64_t>(last, step);
    if (step > resumed_step) continue;
    kept += row + "\n";
    // train rows: step,epoch,loss,,,...; test rows: step,epoch,,loss,accuracy,,,
    const std::size_t c2 = row.find(',', row.find(',') + 1);
    const std::size_t c3 = row.find(',', c2 + 1);
    const std::size_t c4 = row.find(',', c3 + 1);
    if (c3 > c2 + 1 && std::sscanf(row.c_str() + c2 + 1, "%lf", &a) == 1) train_loss_.push_back({step, a});
    if (c4 > c3 + 1 && std::sscanf(row.c_str() + c3 + 1, "%lf", &b) == 1) test_loss_.push_back({step, b});
    const std::size_t c5 = row.find(',', c4 + 1);
    double acc = NAN;
    if (c5 > c4 + 1 && std::sscanf(row.c_str() + c4 + 1, "%lf", &acc) == 1) accuracy_.push_back({step, acc});
  }
  if (last < resumed_step && !taking_over)
    throw Error(ErrorCode::InvalidArgument,
                "--metrics " + path + " ends at step " + std::to_string(last) + ", before the checkpoint's step " +
                    std::to_string(resumed_step) + ": it is another run's; give another file to resume into");
  return kept;
}

Report::~Report() {
  end_line();
  if (csv_) std::fclose(csv_);
}

void Report::end_line() {
  if (bar_open_) {
    std::fputc('\n', stderr);
    bar_open_ = false;
  }
}

void Report::on_step(const mlp::StepReport& r) {
  const double epoch = r.epoch + static_cast<double>(r.step_in_epoch) / r.steps_per_epoch;
  train_loss_.push_back({r.step, r.loss});
  if (csv_) {
    std::fprintf(csv_, "%lld,%.4f,%.6f,,,%.1f,%.6f,%.6g\n", static_cast<long long>(r.step), epoch, r.loss,
                 r.samples_per_s, r.comm_wait_s, r.lr);
    std::fflush(csv_);
  }
  const double left_steps = static_cast<double>(r.steps_per_epoch - r.step_in_epoch);
  const double eta = left_steps * r.step_s;
  char scale[48] = "";
  if (r.loss_scale != 1.0f)
    std::snprintf(scale, sizeof scale, " scale %g (%lld skipped)", r.loss_scale,
                  static_cast<long long>(r.skipped_steps));
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * r.step_in_epoch / r.steps_per_epoch);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\repoch %d/%d [%s] %3d%% %8.0f samples/s  loss %.4f  lr %.3g%s  ETA %s   ", r.epoch + 1,
                 epochs_, bar.c_str(), static_cast<int>(100 * r.step_in_epoch / r.steps_per_epoch), r.samples_per_s,
                 r.loss, r.lr, scale, duration(eta).c_str());
    std::fflush(stderr);
    bar_open_ = true;
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (r.step_in_epoch != r.steps_per_epoch && now - last_line_ < kPlainInterval) return;
  last_line_ = now;
  std::printf("epoch %d/%d step %lld/%lld  %.0f samples/s  loss %.4f  lr %.3g%s  ETA %s\n", r.epoch + 1, epochs_,
              static_cast<long long>(r.step_in_epoch), static_cast<long long>(r.steps_per_epoch), r.samples_per_s,
              r.loss, r.lr, scale, duration(eta).c_str());
  std::fflush(stdout);
}

void Report::on_eval(const mlp::EvalReport& r, double elapsed_s) {
  end_line();
  test_loss_.push_back({r.step, r.loss});
  if (r.accuracy >= 0) accuracy_.push_back({r.step, r.accuracy});
  const double epoch = r.epochs;
  if (csv_) {
    std::fprintf(csv_, "%lld,%.4f,,%.6f,", static_cast<long long>(r.step), epoch, r.loss);
    if (r.accuracy >= 0) std::fprintf(csv_, "%.6f", r.accuracy);
    std::fprintf(csv_, ",,,\n");
    std::fflush(csv_);
  }
  if (r.accuracy >= 0)
    std::printf("epoch %.2f: test loss %.4f, test accuracy %.4f (%llu samples), %s elapsed\n", epoch, r.loss,
                r.accuracy, static_cast<unsigned long long>(r.samples), duration(elapsed_s).c_str());
  else
    std::printf("epoch %.2f: test loss (mse) %.6f (%llu samples), %s elapsed\n", epoch, r.loss,
                static_cast<unsigned long long>(r.samples), duration(elapsed_s).c_str());
  std::fflush(stdout);
}

std::string Report::plot(const std::string& png_path, const std::string& title) const {
  // Inline data blocks, so the script needs no temporary files.
  std::string script;
  script += "set terminal pngcairo size 1000,600 noenhanced\n";
  script += "set output '" + png_path + "'\n";
  script += "set title '" + title + "'\nset key outside bottom center horizontal\nset grid\n";
  script += "set xlabel 'step'\nset ylabel 'loss'\n";
  // A y2 axis only for an accuracy to draw on it (else gnuplot warns "empty y2 range").
  if (!accuracy_.empty()) script += "set y2label 'test accuracy'\nset y2tics\nset ytics nomirror\n";
  auto block = [&](const char* name, const std::vector<Point>& pts) {
    script += std::string("$") + name + " << EOD\n";
    for (const Point& p : pts) script += std::to_string(p.step) + " " + std::to_string(p.value) + "\n";
    script += "EOD\n";
  };
  block("train", train_loss_);
  block("test", test_loss_);
  block("acc", accuracy_);
  script += "plot $train with lines lw 1 title 'train loss', $test with linespoints lw 2 title 'test loss'";
  if (!accuracy_.empty()) script += ", $acc axes x1y2 with linespoints lw 2 title 'test accuracy'";
  script += "\n";
  // pngcairo is in gnuplot-nox; fall back to the plain png terminal.
  // gnuplot's own messages go to a file, shown only when it fails: the
  // console is the trainer's.
  char said_path[] = "/tmp/kizuna-gnuplot.XXXXXX";
  const int said_fd = ::mkstemp(said_path);
  if (said_fd < 0) return std::string("cannot run gnuplot: ") + std::strerror(errno);
  ::close(said_fd);
  const std::string command = std::string("gnuplot >'") + said_path + "' 2>&1";
  std::string said;
  for (const char* terminal : {"pngcairo", "png"}) {
    std::string s = script;
    if (std::string(terminal) == "png") s.replace(0, s.find('\n'), "set terminal png size 1000,600");
    std::FILE* p = ::popen(command.c_str(), "w");
    if (!p) {
      ::unlink(said_path);
      return std::string("cannot run gnuplot: ") + std::strerror(errno);
    }
    std::fwrite(s.data(), 1, s.size(), p);
    const int status = ::pclose(p);
    if (status == 0) {
      ::unlink(said_path);
      return "";
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
      ::unlink(said_path);
      return "gnuplot is not installed (Debian package gnuplot-nox)";
    }
    if (std::FILE* f = std::fopen(said_path, "r")) {
      char buf[4096];
      said.assign(buf, std::fread(buf, 1, sizeof buf, f));
      std::fclose(f);
    }
  }
  ::unlink(said_path);
  while (!said.empty() && said.back() == '\n') said.pop_back();
  return "gnuplot failed to draw " + png_path + (said.empty() ? "" : ": " + said);
}

}  // namespace kizuna::train
