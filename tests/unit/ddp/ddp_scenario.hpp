// tests/unit/ddp/ddp_scenario.hpp: models, closed-form gradients and the
// "every rank ends with the mean" check, shared by the threads-as-ranks
// tests and the multi-process worker.
//
// Gradients are computed from (rank, iteration, parameter, index) so the
// expected mean needs no communication: grad() draws 24 bits from a hash and
// maps them to [-2, 2), a value with a full float32 mantissa, so every cast
// and every partial sum really rounds. Parameters of a 16-bit dtype hold
// that value rounded to their type (with the independent reference codecs
// of tests/support/reference.hpp).
//
// Tolerances: for n ranks, a result element may differ from the exact mean
// m = (1/n) sum_r g_r by at most
//     (n + 1) * u * mean_r |g_r|  (+ n * 2^-24 through float16)
// where u is the unit roundoff of the type the values are summed in: 2^-24
// float32, 2^-53 float64, 2^-11 float16, 2^-8 bfloat16 (the bucket's own type,
// or the compressed one). That is n - 1 rounded additions, the rounding of
// each input to the wire type (compression) and of the final division, each
// at most u times a partial sum of magnitudes; the last term is float16's
// subnormal spacing (2^-24), whose half-step errors are absolute, not relative.
#pragma once

#include <kizuna/ddp.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "reference.hpp"
#include "run_ranks.hpp"

namespace kizuna::test {

// Ranks as threads (tests/support/run_ranks.hpp) whose collectives give up
// after 60 s: a bug that leaves a rank waiting fails its test well inside
// CTest's watchdog instead of reaching it.
inline std::vector<std::shared_ptr<Communicator>> ddp_comms(int n) {
  CommOptions o;
  o.timeout = std::chrono::seconds(60);
  return make_comms(n, o);
}

inline std::uint64_t ddp_hash(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  for (std::uint64_t v : {a, b, c, d}) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9ull;
  }
  return h ^ (h >> 29);
}

// Rank `rank`'s gradient of element i of parameter p in iteration `iter`, before
// rounding to the parameter's type.
inline double grad(int rank, std::uint64_t iter, std::size_t p, std::size_t i) {
  const std::uint64_t h = ddp_hash(static_cast<std::uint64_t>(rank) + 1, iter, p, i);
  return static_cast<double>(h >> 40) / static_cast<double>(1 << 22) - 2.0;
}

// Element access in any floating dtype, through the reference codecs.
inline double load_as_double(const std::byte* base, DataType t, std::size_t i) {
  switch (t) {
    case DataType::Float32: { float f; std::memcpy(&f, base + 4 * i, 4); return f; }
    case DataType::Float64: { double d; std::memcpy(&d, base + 8 * i, 8); return d; }
    case DataType::Float16: { std::uint16_t h; std::memcpy(&h, base + 2 * i, 2); return ref_half_to_double(h); }
    case DataType::BFloat16: { std::uint16_t h; std::memcpy(&h, base + 2 * i, 2); return ref_bf16_to_float(h); }
    default: return NAN;
  }
}

inline void store_from_double(std::byte* base, DataType t, std::size_t i, double v) {
  switch (t) {
    case DataType::Float32: { const float f = static_cast<float>(v); std::memcpy(base + 4 * i, &f, 4); break; }
    case DataType::Float64: std::memcpy(base + 8 * i, &v, 8); break;
    case DataType::Float16: { const std::uint16_t h = ref_double_to_half(v); std::memcpy(base + 2 * i, &h, 2); break; }
    case DataType::BFloat16: { const std::uint16_t h = ref_double_to_bf16(v); std::memcpy(base + 2 * i, &h, 2); break; }
    default: break;
  }
}

// The value rank `rank` really holds: grad() rounded to the parameter's type.
inline double held_grad(DataType t, int rank, std::uint64_t iter, std::size_t p, std::size_t i) {
  std::byte tmp[8];
  store_from_double(tmp, t, 0, grad(rank, iter, p, i));
  return load_as_double(tmp, t, 0);
}

inline double unit_roundoff(DataType t) {
  switch (t) {
    case DataType::Float16: return std::ldexp(1.0, -11);
    case DataType::BFloat16: return std::ldexp(1.0, -8);
    case DataType::Float64: return std::ldexp(1.0, -53);
    default: return std::ldexp(1.0, -24);
  }
}

// The type a parameter's gradient is summed in under `compression`.
inline DataType wire_type(DataType t, Compression c) {
  if (t != DataType::Float32 && t != DataType::Float64) return t;
  if (c == Compression::Float16) return DataType::Float16;
  if (c == Compression::BFloat16) return DataType::BFloat16;
  return t;
}

inline double tolerance(DataType wire, int n, double mean_abs) {
  double tol = (n + 1) * unit_roundoff(wire) * mean_abs;
  if (wire == DataType::Float16) tol += n * std::ldexp(1.0, -24);
  return tol;
}

// A flat model: `views` laid out back to back in registration order (or with
// gaps), and the two buffers.
struct Model {
  std::vector<Parameter> views;
  std::size_t bytes = 0;
};

// A little MLP-like model: layers of (weight, bias), sizes varying with the
// layer so that buckets split at different places; `gap` bytes between views.
inline Model make_model(int layers, std::size_t width, DataType dtype = DataType::Float32,
                        std::size_t gap = 0) {
  Model m;
  std::size_t at = 0;
  const std::size_t elem = size_of(dtype);
  for (int l = 0; l < layers; ++l) {
    const std::size_t rows = width + 13 * static_cast<std::size_t>(l % 5);
    const std::size_t cols = width / 2 + 7 * static_cast<std::size_t>(l % 3) + 1;
    for (bool bias : {false, true}) {
      Parameter p;
      p.name = "layer" + std::to_string(l) + (bias ? ".bias" : ".weight");
      p.dtype = dtype;
      p.count = bias ? rows : rows * cols;
      p.shape = bias ? std::vector<std::int64_t>{static_cast<std::int64_t>(rows)}
                     : std::vector<std::int64_t>{static_cast<std::int64_t>(rows),
                                                 static_cast<std::int64_t>(cols)};
      at = (at + elem - 1) / elem * elem;
      p.offset = at;
      at += p.bytes() + gap;
      m.views.push_back(p);
    }
  }
  m.bytes = at;
  return m;
}

// float32, float64, bfloat16 and float16 parameters interleaved in runs, so
// that buckets split at every change of type.
inline Model make_mixed_model() {
  Model m;
  const DataType types[] = {DataType::Float32, DataType::Float32, DataType::Float64,
                            DataType::BFloat16, DataType::BFloat16, DataType::Float16,
                            DataType::Float32, DataType::Float64, DataType::Float16};
  std::size_t at = 0;
  for (std::size_t k = 0; k < std::size(types); ++k) {
    Parameter p;
    p.name = "mixed" + std::to_string(k);
    p.dtype = types[k];
    p.count = 100 + 37 * k;
    at = (at + 7) / 8 * 8;
    p.offset = at;
    at += p.bytes();
    m.views.push_back(p);
  }
  m.bytes = (at + 7) / 8 * 8;
  return m;
}

enum class MarkOrder { Reverse, Forward, Shuffled };

inline const char* name(MarkOrder o) {
  return o == MarkOrder::Reverse ? "reverse" : o == MarkOrder::Forward ? "forward" : "shuffled";
}

// The order rank `rank` marks parameters in, in iteration `iter`: Shuffled
// differs per rank and per iteration, so buckets complete out of order.
inline std::vector<std::size_t> mark_order(MarkOrder o, std::size_t n, int rank, std::uint64_t iter) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (o == MarkOrder::Reverse) std::reverse(order.begin(), order.end());
  if (o == MarkOrder::Shuffled)
    for (std::size_t i = n; i > 1; --i)
      std::swap(order[i - 1], order[ddp_hash(rank, iter, i, 77) % i]);
  return order;
}

// Writes rank `rank`'s gradients of iteration `iter` into `grads`.
inline void fill_grads(const Model& m, std::vector<std::byte>& grads, int rank, std::uint64_t iter) {
  for (std::size_t p = 0; p < m.views.size(); ++p) {
    const Parameter& v = m.views[p];
    for (std::size_t i = 0; i < v.count; ++i)
      store_from_double(grads.data() + v.offset, v.dtype, i, grad(rank, iter, p, i));
  }
}

// "" when every element of `grads` is the mean over `n` ranks of iteration
// `iter`'s gradients within tolerance (the sum when !average; parameters in
// `absent_on` count as zero on those ranks); else the first wrong element.
inline std::string check_mean(const Model& m, const std::vector<std::byte>& grads, int rank, int n,
                              std::uint64_t iter, Compression c, bool average = true,
                              const std::vector<std::pair<std::size_t, int>>& absent_on = {}) {
  for (std::size_t p = 0; p < m.views.size(); ++p) {
    const Parameter& v = m.views[p];
    const DataType wire = wire_type(v.dtype, c);
    for (std::size_t i = 0; i < v.count; ++i) {
      double sum = 0, sum_abs = 0;
      for (int r = 0; r < n; ++r) {
        if (std::find(absent_on.begin(), absent_on.end(), std::make_pair(p, r)) != absent_on.end())
          continue;
        const double g = held_grad(v.dtype, r, iter, p, i);
        sum += g;
        sum_abs += std::fabs(g);
      }
      const double want = average ? sum / n : sum;
      // Not averaging: the bound scales with the sum, not the mean.
      const double tol = tolerance(wire, n, average ? sum_abs / n : sum_abs) +
                         std::fabs(want) * unit_roundoff(v.dtype);
      const double got = load_as_double(grads.data() + v.offset, v.dtype, i);
      if (!(std::fabs(got - want) <= tol)) {
        std::ostringstream out;
        out.precision(10);
        out << "rank " << rank << " of " << n << ", iteration " << iter << ": parameter "
            << v.name << " element " << i << " is " << got << ", expected " << want
            << " within " << tol;
        return out.str();
      }
    }
  }
  return "";
}

// "" when every float32/float64 gradient is exactly a value of the wire type
// (so the compression really happened), else the first that is not.
inline std::string check_wire_values(const Model& m, const std::vector<std::byte>& grads, Compression c) {
  if (c == Compression::None) return "";
  for (const auto& v : m.views) {
    if (v.dtype != DataType::Float32 && v.dtype != DataType::Float64) continue;
    for (std::size_t i = 0; i < v.count; ++i) {
      const double got = load_as_double(grads.data() + v.offset, v.dtype, i);
      const double wire = c == Compression::Float16 ? ref_half_to_double(ref_double_to_half(got))
                                                    : ref_bf16_to_float(ref_double_to_bf16(got));
      if (got != wire)
        return v.name + " element " + std::to_string(i) + " = " + std::to_string(got) +
               " is not a value of the compressed type";
    }
  }
  return "";
}

// One rank of the mean check: `iterations` synchronised steps, marking in
// `order`, each verified. "" or what went wrong.
inline std::string run_mean_check(const std::shared_ptr<Communicator>& comm, const Model& m,
                                  const ReducerOptions& options, MarkOrder order, int iterations) {
  const int r = comm->rank(), n = comm->size();
  std::vector<std::byte> params(m.bytes, std::byte{0}), grads(m.bytes, std::byte{0});
  // Parameters differ per rank until the constructor's broadcast.
  for (std::size_t b = 0; b < params.size(); ++b) params[b] = std::byte(r * 31 + b % 251);
  Reducer reducer(comm, params.data(), grads.data(), m.bytes, m.views, options);
  // Only the views are broadcast; bytes between them are nobody's.
  for (const auto& v : m.views)
    for (std::size_t b = v.offset; b < v.offset + v.bytes(); ++b) {
      const int owner = options.broadcast_parameters ? options.broadcast_root : r;
      if (params[b] != std::byte(owner * 31 + b % 251))
        return "rank " + std::to_string(r) + ": parameter byte " + std::to_string(b) + " of " +
               v.name + " is not rank " + std::to_string(owner) + "'s after construction";
    }
  for (std::size_t b = 0; b < params.size(); ++b) {
    const bool in_view = std::any_of(m.views.begin(), m.views.end(), [&](const Parameter& v) {
      return v.offset <= b && b < v.offset + v.bytes();
    });
    if (!in_view && params[b] != std::byte(r * 31 + b % 251))
      return "rank " + std::to_string(r) + ": byte " + std::to_string(b) +
             " between views was overwritten by the broadcast";
  }
  for (int it = 0; it < iterations; ++it) {
    fill_grads(m, grads, r, it);
    for (std::size_t p : mark_order(order, m.views.size(), r, it)) reducer.mark_ready(p);
    reducer.finalize();
    std::string e = check_mean(m, grads, r, n, it, options.compression, options.average);
    if (e.empty() && !options.comm_hook) e = check_wire_values(m, grads, options.compression);
    if (!e.empty()) return e;
  }
  return "";
}

}  // namespace kizuna::test
