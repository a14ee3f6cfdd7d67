// tools/common/cli.hpp: the tools' command lines, parsed by CLI11 and worded
// as kizuna's tools word them.
//
// A tool declares its flags on a CLI::App with add_value() and add_switch(),
// adds -h/--help with add_help() where --help is to list it, and calls
// parse(). Over CLI11's defaults this keeps:
//   - values parsed by kizuna's own parsers (core::parse_size, parse_int,
//     parse_duration...) in the flag's setter. An error from a setter is a
//     UsageError; a message that does not start with a flag (the core
//     parsers' all do) gets the flag's long name in front;
//   - the tools' wording where CLI11 has its own: "-b needs a value",
//     "--nnodes is given twice" (a flag left at CLI11's policy Throw; flags
//     under TakeLast keep the last value), "--tee takes no value";
//   - -h/--help ahead of everything else on the command line;
//   - the words that are no flag of the App (an unknown option, a stray
//     argument) in CLI::App::remaining(): reject_extras() refuses them,
//     kizuna-run takes them as the program, kizuna-store as the arguments.
// option_table() renders the flags that have a help text, for --help.
//
// Header-only, like CLI11: the comparison harnesses in bench/compare/ build
// perf/args.cpp, which uses it, with sources of their own.
#pragma once

#include <CLI/CLI.hpp>

#include <exception>
#include <functional>
#include <string>
#include <utility>

#include "common/usage.hpp"

namespace kizuna::tools {

// "unknown option '--x'" (without its "=value") or "unexpected argument 'x'".
inline std::string unknown(const std::string& word) {
  if (word.size() > 1 && word[0] == '-') return "unknown option '" + word.substr(0, word.find('=')) + "'";
  return "unexpected argument '" + word + "'";
}

// A flag that takes one value, handed to `set` as typed. `names` as CLI11
// spells them ("-b,--minbytes"); `metavar` follows them in --help.
inline CLI::Option* add_value(CLI::App& app, const std::string& names, const std::string& metavar,
                              const std::string& help, std::function<void(const std::string&)> set) {
  const std::size_t dashes = names.find("--");
  const std::size_t from = dashes == std::string::npos ? 0 : dashes;
  const std::string shown = names.substr(from, names.find(',', from) - from);
  auto checked = [shown, set = std::move(set)](const std::string& value) {
    try {
      set(value);
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      throw UsageError(what.rfind('-', 0) == 0 ? what : shown + ": " + what);
    }
  };
  return app.add_option_function<std::string>(names, checked, help)->type_name(metavar);
}

// A flag without a value: "--tee=1" is refused.
inline CLI::Option* add_switch(CLI::App& app, const std::string& names, const std::string& help,
                               std::function<void()> set) {
  return app.add_flag_callback(names, std::move(set), help)->disable_flag_override();
}

// -h/--help, listed in --help where it is added among the other flags.
inline void add_help(CLI::App& app, const std::string& help) {
  app.set_help_flag();
  // Thrown as the flag is read, before any other flag's setter runs.
  add_switch(app, "-h,--help", help, [] { throw CLI::CallForHelp(); })->trigger_on_parse();
}

namespace detail {

// CLI11's ArgumentMismatch in the tools' words: a flag under the policy
// Throw given twice, a switch given "=value", or else a value missing,
// which only the last word can lack.
inline UsageError mismatch(const CLI::App& app, int argc, const char* const* argv) {
  for (const CLI::Option* o : app.get_options())
    if (o->count() > 1 && o->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw)
      return UsageError(o->get_name() + " is given twice");
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    const std::string name = word.substr(0, word.find('='));
    const CLI::Option* o = app.get_option_no_throw(name);
    if (name.size() < word.size() && o && o->get_expected_max() == 0) return UsageError(name + " takes no value");
  }
  const std::string last = argv[argc - 1];
  const std::string name = last.substr(0, last.find('='));
  const CLI::Option* o = app.get_option_no_throw(name);
  // Named as typed, a long name in its first spelling (--nproc_per_node
  // as --nproc-per-node).
  return UsageError((o && name.rfind("--", 0) == 0 ? o->get_name() : name) + " needs a value");
}

}  // namespace detail

// Parses argv (argv[0] the program's name) into `app`, whose setters run;
// false when -h/--help asks for the help text. Throws UsageError.
inline bool parse(CLI::App& app, int argc, const char* const* argv) {
  app.allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return false;
  } catch (const CLI::ArgumentMismatch&) {
    throw detail::mismatch(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  return true;
}

// Refuses what parse() left over: the first unknown option or stray argument.
inline void reject_extras(const CLI::App& app) {
  if (const auto words = app.remaining(); !words.empty()) throw UsageError(unknown(words.front()));
}

// The flags that have a help text, in the order they were added, one per
// line: "  -b, --minbytes SIZE" (the first short and long name), then the
// text from `column` on, or from the next line where the names reach it. A
// text's further lines start at `column` too.
inline std::string option_table(const CLI::App& app, std::size_t column) {
  const std::string indent(column, ' ');
  std::string out;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_description().empty()) continue;
    std::string head = "  ";
    if (!o->get_snames().empty()) head += "-" + o->get_snames().front() + (o->get_lnames().empty() ? "" : ", ");
    if (!o->get_lnames().empty()) head += "--" + o->get_lnames().front();
    if (!o->get_type_name().empty()) head += " " + o->get_type_name();
    out += head.size() + 2 <= column ? head + std::string(column - head.size(), ' ') : head + "\n" + indent;
    for (const char c : o->get_description()) out += c == '\n' ? "\n" + indent : std::string(1, c);
    out += "\n";
  }
  return out;
}

}  // namespace kizuna::tools
