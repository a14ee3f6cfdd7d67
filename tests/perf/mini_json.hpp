// tests/perf/mini_json.hpp: just enough of a JSON reader to check what
// kizuna-perf writes with --json (objects, arrays, strings, numbers,
// true/false/null). Throws std::runtime_error with the offset on bad input.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kizuna::test {

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  const Json& operator[](const std::string& key) const {
    const auto it = object.find(key);
    if (kind != Kind::Object || it == object.end()) throw std::runtime_error("no key '" + key + "'");
    return it->second;
  }
  const Json& operator[](std::size_t i) const { return array.at(i); }
  bool is_null() const { return kind == Kind::Null; }
};

class JsonReader {
 public:
  static Json parse(const std::string& text) {
    JsonReader r(text);
    Json v = r.value();
    r.space();
    if (r.pos_ != text.size()) r.fail("trailing characters");
    return v;
  }

 private:
  explicit JsonReader(const std::string& text) : s_(text) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(pos_));
  }
  void space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    space();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  bool word(const char* w) {
    const std::string x(w);
    if (s_.compare(pos_, x.size(), x) == 0) return pos_ += x.size(), true;
    return false;
  }

  std::string string_body() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) fail("bad escape");
        const char e = s_[pos_++];
        if (e == 'u') {
          if (pos_ + 4 > s_.size()) fail("bad \\u escape");
          c = static_cast<char>(std::strtol(s_.substr(pos_, 4).c_str(), nullptr, 16));
          pos_ += 4;
        } else {
          c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
        }
      }
      out += c;
    }
    expect('"');
    return out;
  }

  Json value() {
    space();
    if (pos_ >= s_.size()) fail("unexpected end");
    Json v;
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      v.kind = Json::Kind::Object;
      if (eat('}')) return v;
      do {
        space();
        std::string key = string_body();
        expect(':');
        v.object[key] = value();
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++pos_;
      v.kind = Json::Kind::Array;
      if (eat(']')) return v;
      do v.array.push_back(value());
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::Kind::String;
      v.string = string_body();
    } else if (word("true")) {
      v.kind = Json::Kind::Bool, v.boolean = true;
    } else if (word("false")) {
      v.kind = Json::Kind::Bool;
    } else if (word("null")) {
      v.kind = Json::Kind::Null;
    } else {
      char* end = nullptr;
      v.number = std::strtod(s_.c_str() + pos_, &end);
      if (end == s_.c_str() + pos_) fail("bad value");
      v.kind = Json::Kind::Number;
      pos_ = static_cast<std::size_t>(end - s_.c_str());
    }
    return v;
  }

  const std::string& s_;
  std::size_t pos_ = 0;
};

}  // namespace kizuna::test
