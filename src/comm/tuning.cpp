#include "comm/tuning.hpp"

#include <algorithm>
#include <optional>
#include <sstream>

#include "comm/mailbox.hpp"
#include "comm/route.hpp"
#include "core/check.hpp"

namespace kizuna::comm {
namespace {

template <class T>
std::optional<std::size_t> size_or_auto(const std::optional<T>& option, std::int64_t variable) {
  if (option) return static_cast<std::size_t>(*option);
  if (variable >= 0) return static_cast<std::size_t>(variable);
  return std::nullopt;
}

std::optional<int> int_or_auto(int variable) {
  return variable >= 0 ? std::optional<int>(variable) : std::nullopt;
}

std::string bytes_text(std::uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// Indexed by the enum's values, in their order.
constexpr const char* kStoresText[] = {"auto", "cache", "stream"};

}  // namespace

Settings settings_from(const CommOptions& options, const core::Env& env) {
  KIZUNA_CHECK_ARG(!options.mailbox_upto || *options.mailbox_upto <= Mailbox::capacity(),
                   "CommOptions.mailbox_upto = ", options.mailbox_upto.value_or(0), " is over the mailboxes' ",
                   Mailbox::capacity(), " bytes");
  Settings s;
  s.algorithm = options.algorithm != Algorithm::Auto ? options.algorithm : env.algo;
  s.transport = options.transport != Transport::Auto ? options.transport : env.transport;
  s.slice_bytes = options.slice_bytes ? options.slice_bytes : env.slice_bytes;
  s.check = options.check.value_or(env.check);
  s.timeout = options.timeout.count() > 0 ? options.timeout : env.timeout;
  s.symmetric_from = size_or_auto(options.symmetric_from, env.symmetric_from);
  s.staged_from = size_or_auto(options.staged_from, env.staged_from);
  s.mailbox_upto = size_or_auto(options.mailbox_upto, env.mailbox_upto);
  s.staging_bytes = size_or_auto(std::optional<std::size_t>(), env.staging_bytes);
  s.stores = options.staged_stores.empty()
                 ? env.staged_stores
                 : core::parse_staged_stores("CommOptions.staged_stores", options.staged_stores);
  s.spin_us = int_or_auto(env.spin_us);
  s.yield_us = int_or_auto(env.yield_us);
  s.tuning_file = options.tuning_file.empty() ? env.tuning_file : options.tuning_file;
  if (env.cuda_link) {
    const auto [alpha_us, mu_us, gbps] = *env.cuda_link;
    s.device_link = algo::LinkModel{alpha_us, 1e-3 / gbps, mu_us};
  }
  return s;
}

namespace {

// Where the tables of private and of symmetric buffers first part: from
// there, a call on symmetric memory is looked up as such (classify pins its
// buffers); below, both tables agree and it runs as a private one.
std::size_t parting(const std::vector<Band>& priv, const std::vector<Band>& sym) {
  if (priv.empty()) return 0;
  std::vector<std::uint64_t> starts;
  for (const Band& b : priv) starts.push_back(b.from);
  for (const Band& b : sym) starts.push_back(b.from);
  std::sort(starts.begin(), starts.end());
  for (std::uint64_t from : starts)
    if (pick(priv, from) != pick(sym, from)) return from;
  return SIZE_MAX;
}

// docs/tuning.md#tuner: the section of these facts decides the all-reduce's
// route and algorithm, and the link model is fitted to it; a route
// threshold the user set keeps the rules instead.
void apply_profile(Tuning& t, const Settings& s, const Facts& f, const Profile* profile) {
  if (!profile || t.algorithm != Algorithm::Auto) return;
  // Ranks per node are rank 0's: it chose the sections every rank got, and
  // with nodes of uneven sizes another rank's count would pick none.
  // The section measured at `placement` (any: the first of these buffers).
  auto section_at = [&](bool symmetric, std::optional<MeasuredPlacement> placement) -> const ProfileSection* {
    for (const ProfileSection& s : profile->sections)
      if (s.key.world == f.world && s.key.nodes == f.nodes && s.key.shared_memory == t.shared_memory &&
          s.key.symmetric == symmetric && (!placement || s.placement == *placement))
        return &s;
    return nullptr;
  };
  // The tables for every call: the section measured far where there is
  // one, as the rules take an unprobed placement for far; and the near
  // section's where there are both (docs/tuning.md#tuner).
  auto section = [&](bool symmetric) {
    const ProfileSection* far = section_at(symmetric, MeasuredPlacement::Far);
    return far ? far : section_at(symmetric, std::nullopt);
  };
  auto near_section = [&](bool symmetric) -> const ProfileSection* {
    const ProfileSection* near = section_at(symmetric, MeasuredPlacement::Near);
    return near && section_at(symmetric, MeasuredPlacement::Far) ? near : nullptr;
  };
  const ProfileSection* priv = section(false);
  const ProfileSection* sym = section(true);
  const ProfileSection* near_priv = near_section(false);
  const ProfileSection* near_sym = near_section(true);
  if (!priv && !sym) return;
  t.profile = profile->source;
  t.link = fit_link(priv ? *priv : *sym, t.link);
  if (s.mailbox_upto || s.staged_from || s.symmetric_from) return;
  auto allowed = [&t](bool symmetric) {
    return [&t, symmetric](Candidate c, std::uint64_t bytes) {
      switch (c) {
        case Candidate::Mailbox: return t.node_memory && bytes <= t.mailbox_upto;
        case Candidate::Staged: return t.node_memory && t.staging_bytes > 0;
        case Candidate::Symmetric: return t.node_memory && symmetric;
        case Candidate::OneShot:
        case Candidate::TwoShot: return t.single_host;
        default: return true;
      }
    };
  };
  // What the rules alone would take (their placement-probe rule as if the
  // CPUs were far apart), with the fitted link.
  auto rules = [&t, &f](bool symmetric) {
    return [&t, &f, symmetric](std::uint64_t bytes) -> std::optional<Candidate> {
      const Paths paths{t.node_memory, t.node_memory && t.staging_bytes > 0, false};
      const Route route = choose_route({CallKind::Collective, algo::Collective::AllReduce, bytes},
                                       symmetric ? Buffers::Symmetric : Buffers::Host, Placement::Unknown, paths, t);
      if (const std::optional<Candidate> c = route_candidate(route)) return c;
      return schedule_candidate(algo::choose_algorithm(algo::Collective::AllReduce, bytes,
                                                       t.hierarchical ? f.nodes : f.world, t.link, t.single_host));
    };
  };
  std::vector<Band> private_bands, symmetric_bands, near_private, near_symmetric;  // decided before any applies
  if (priv) private_bands = decide(*priv, allowed(false), rules(false));
  if (sym) symmetric_bands = decide(*sym, allowed(true), rules(true));
  if (near_priv) near_private = decide(*near_priv, allowed(false), rules(false));
  if (near_sym) near_symmetric = decide(*near_sym, allowed(true), rules(true));
  t.private_bands = std::move(private_bands);
  t.symmetric_bands = std::move(symmetric_bands);
  t.near_private_bands = std::move(near_private);
  t.near_symmetric_bands = std::move(near_symmetric);
  if (priv) t.private_placement = priv->placement;
  if (sym) t.symmetric_placement = sym->placement;
  // A call looks its buffers up from the first size where either
  // placement's tables part.
  if (!t.symmetric_bands.empty()) {
    t.symmetric_from = parting(t.private_bands, t.symmetric_bands);
    if (!t.near_private_bands.empty() || !t.near_symmetric_bands.empty())
      t.symmetric_from =
          std::min(t.symmetric_from, parting(t.near_private_bands.empty() ? t.private_bands : t.near_private_bands,
                                             t.near_symmetric_bands.empty() ? t.symmetric_bands : t.near_symmetric_bands));
  }
}

std::string bands_text(const std::vector<Band>& bands) {
  std::string out;
  for (const Band& b : bands) out += (out.empty() ? "" : ", ") + std::string(name(b.candidate)) + " from " + bytes_text(b.from);
  return out;
}

}  // namespace

Tuning make_tuning(const Settings& s, const Facts& f, const Profile* profile) {
  Tuning t;
  t.shared_memory = s.transport != Transport::Tcp;
  t.single_host = f.nodes == 1;
  t.hierarchical = t.shared_memory && f.nodes > 1;
  t.oversubscribed = f.local_ranks > f.cores;
  t.algorithm = s.algorithm;
  t.slice_bytes = s.slice_bytes;
  t.check = s.check;
  t.timeout = s.timeout;

  if (s.device_link) t.device_link = *s.device_link;
  // docs/tuning.md#link-model
  if (t.shared_memory && t.single_host)
    t.link = algo::LinkModel{t.oversubscribed ? 15.0 : 2.0, 1.0 / 8000.0};
  else if (t.single_host)
    t.link.message_us = 10.0;
  // docs/tuning.md#large-all-reduce-over-tcp: a measured crossover the
  // alpha-beta terms cannot express.
  if (!t.shared_memory && t.single_host && t.oversubscribed && f.world > 2) {
    const bool bbr = f.tcp_congestion == "bbr";
    t.link.large_all_reduce_from = bbr ? 1 << 20 : 512 << 10;
    t.link.large_all_reduce = bbr ? algo::Algorithm::Tree : algo::Algorithm::Ring;
  }

  // docs/tuning.md#spin-and-yield: with more ranks than cores a waiting
  // rank yields its core at once, to the peer it may be waiting for.
  t.spin = std::chrono::microseconds(s.spin_us.value_or(t.oversubscribed ? 0 : 200));
  t.yield = std::chrono::microseconds(s.yield_us.value_or(t.oversubscribed ? 1000 : 50));
  t.light_rings = t.spin.count() > 0 && f.asymmetric_fence;

  // Symmetric memory, the mailboxes and the staging memory exist on one
  // node whose ranks share memory (docs/tuning.md#symmetric-from and on).
  t.node_memory = t.single_host && f.world > 1 && t.shared_memory;
  if (t.node_memory) {
    t.mailbox_upto = s.mailbox_upto.value_or(f.mailbox_capacity);
    t.symmetric_from = s.symmetric_from.value_or(t.oversubscribed ? 64 << 10 : 512 << 10);
    t.staged_from = s.staged_from.value_or(64 << 10);
    // Only for the case measured: 2 ranks, each on a core of its own (the
    // one pair the probe bounces is then every pair).
    if (!s.staged_from && !t.oversubscribed && f.world == 2) {
      t.staged_near_from = 256 << 10;
      t.staged_near_upto = 6 << 20;
    }
    t.staging_bytes = s.staging_bytes.value_or(512 << 10);
  }

  // docs/tuning.md#streaming-stores: with more ranks than cores a probe
  // may find no two ranks running at once, so they stream until told.
  t.stores = s.stores;
  t.stream_until_probed = t.oversubscribed;
  t.slots_stream = s.stores == core::StagedStores::Stream ||
                   (s.stores == core::StagedStores::Auto && t.oversubscribed);
  t.slots_follow_probe = t.node_memory && s.stores == core::StagedStores::Auto && !t.oversubscribed;
  apply_profile(t, s, f, profile);
  return t;
}

std::string Tuning::describe() const {
  std::ostringstream out;
  out << "tuning (docs/tuning.md):\n";
  out << "  machine      " << (single_host ? "one node" : "several nodes")
      << (oversubscribed ? ", more ranks than cores" : ", a core per rank")
      << (shared_memory ? ", shared memory within a node" : ", TCP only") << (hierarchical ? ", hierarchical" : "")
      << "\n";
  out << "  algorithm    " << algo::name(algorithm) << "; link " << link.alpha_us << " us a round, "
      << 1e-3 / link.beta_us_per_byte << " GB/s, " << link.message_us << " us a further message";
  if (link.large_all_reduce_from != UINT64_MAX)
    out << "; " << algo::name(link.large_all_reduce) << " from " << bytes_text(link.large_all_reduce_from);
  out << "; slices of " << bytes_text(slice_bytes) << "\n";
  if (!profile.empty()) {
    out << "  profile      " << profile << (private_bands.empty() && symmetric_bands.empty() ? " (link only: a route threshold is set)" : "") << "\n";
    auto measured = [](MeasuredPlacement p) -> std::string {
      switch (p) {
        case MeasuredPlacement::Near: return "; measured with the CPUs near";
        case MeasuredPlacement::Far: return "; measured with the CPUs far apart";
        case MeasuredPlacement::Unknown: break;
      }
      return "";
    };
    if (!private_bands.empty())
      out << "    private    " << bands_text(private_bands) << measured(private_placement) << "\n";
    if (!near_private_bands.empty())
      out << "    private    " << bands_text(near_private_bands) << measured(MeasuredPlacement::Near) << "\n";
    if (!symmetric_bands.empty())
      out << "    symmetric  " << bands_text(symmetric_bands) << measured(symmetric_placement) << "\n";
    if (!near_symmetric_bands.empty())
      out << "    symmetric  " << bands_text(near_symmetric_bands) << measured(MeasuredPlacement::Near) << "\n";
  }
  if (node_memory) {
    out << "  mailbox      up to " << bytes_text(mailbox_upto) << "\n";
    if (symmetric_bands.empty()) out << "  symmetric    from " << bytes_text(symmetric_from) << "\n";
    else if (symmetric_from != SIZE_MAX) out << "  symmetric    as the profile says, from " << bytes_text(symmetric_from) << "\n";
    else out << "  symmetric    as the profile says: as private buffers\n";
    if (private_bands.empty()) {
      out << "  staged       from " << bytes_text(staged_from);
      if (staged_near_from > 0) out << ", through the slots below " << bytes_text(staged_near_from) << " while near";
      if (staged_near_upto > 0) out << " and from " << bytes_text(staged_near_upto);
    } else {
      out << "  staged       as the profile says";
    }
    out << "; " << bytes_text(staging_bytes) << " of staging\n";
  } else {
    out << "  mailbox, symmetric, staged: none (not one node sharing memory)\n";
  }
  out << "  stores       " << kStoresText[static_cast<int>(stores)] << (stream_until_probed ? ", streaming until probed" : "")
      << "; slots " << (slots_follow_probe ? "as probed" : slots_stream ? "streaming" : "through the caches")
      << "; probe every " << probe_every_calls << " calls or " << bytes_text(probe_every_bytes)
      << "; outputs stream from " << bytes_text(stream_output_from) << " (" << bytes_text(stream_out_of_place_from)
      << " out of place)\n";
  out << "  waiting      spin " << spin.count() << " us, yield " << yield.count() << " us"
      << (light_rings ? ", light rings" : "") << "\n";
  out << "  direct       up to " << bytes_text(direct_bytes) << ", grace " << inline_grace.count() << " us, "
      << exec_tries << " tries; worker naps " << worker_nap.count() << " us, up to " << awake.count()
      << " ms while nothing is queued, while calls come within " << awake.count() << " ms\n";
  out << "  device       parts of " << bytes_text(direct_part_bytes) << " GPU to GPU, " << bytes_text(staged_part_bytes)
      << " staged (at most " << staged_parts << "); GPU to GPU link " << device_link.alpha_us << " us a round, "
      << 1e-3 / device_link.beta_us_per_byte << " GB/s, " << device_link.message_us << " us a further message\n";
  out << "  deadlines    " << timeout.count() << " ms a call" << (check ? "; KIZUNA_CHECK on" : "");
  return out.str();
}

}  // namespace kizuna::comm
