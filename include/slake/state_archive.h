// Binary reading and writing of a context's state (state_file.h): a class lists its fields once,
// in a member `template <class A> void io(A& a) { a(x, y, ...); }`, and the same list writes and
// reads them. Numbers and enums go as their bytes (this machine's order: a state file is read
// where it was written), vectors and strings with their length first, classes through their io.
// The reader checks every length against the bytes left and throws slake::Error when they run out.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "slake/error.h"

namespace slake {

class StateWriter {
 public:
  template <class... T>
  void operator()(const T&... xs) {
    (put(xs), ...);
  }
  std::string& bytes() { return out_; }

 private:
  template <class T>
  void put(const T& x) {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      out_.append(reinterpret_cast<const char*>(&x), sizeof x);
    } else if constexpr (std::is_same_v<T, std::string>) {
      put(static_cast<uint64_t>(x.size()));
      out_.append(x);
    } else {
      const_cast<T&>(x).io(*this);
    }
  }
  template <class T>
  void put(const std::optional<T>& x) {
    put(x.has_value());
    if (x) put(*x);
  }
  template <class T, class Al>
  void put(const std::vector<T, Al>& v) {
    put(static_cast<uint64_t>(v.size()));
    if constexpr (std::is_arithmetic_v<T>) {
      if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
    }
    else
      for (const T& x : v) put(x);
  }
  std::string out_;
};

class StateReader {
 public:
  StateReader(const char* data, size_t size) : p_(data), end_(data + size) {}
  template <class... T>
  void operator()(T&... xs) {
    (get(xs), ...);
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

 private:
  void need(size_t n) const {
    if (n > left()) fail("state file: truncated (" + std::to_string(n) + " bytes needed, " + std::to_string(left()) + " left)");
  }
  template <class T>
  void get(T& x) {
    if constexpr (std::is_same_v<T, bool>) {
      need(1);
      if (static_cast<unsigned char>(*p_) > 1) fail("state file: a flag that is neither 0 nor 1");
      x = *p_++ == 1;
    } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      need(sizeof x);
      std::memcpy(&x, p_, sizeof x);
      p_ += sizeof x;
    } else if constexpr (std::is_same_v<T, std::string>) {
      const size_t n = count(1);
      x.assign(p_, n);
      p_ += n;
    } else {
      x.io(*this);
    }
  }
  template <class T>
  void get(std::optional<T>& x) {
    bool has = false;
    get(has);
    x.reset();
    if (has) get(x.emplace());
  }
  template <class T, class Al>
  void get(std::vector<T, Al>& v) {
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      const size_t n = count(sizeof(T));
      v.resize(n);
      if (n > 0) std::memcpy(v.data(), p_, n * sizeof(T));
      p_ += n * sizeof(T);
    } else {
      const size_t n = count(1);  // every element takes at least one byte
      v.clear();
      v.resize(n);
      for (T& x : v) get(x);
    }
  }
  // A length, checked against the bytes left for elements of at least `each` bytes.
  size_t count(size_t each) {
    uint64_t n = 0;
    get(n);
    if (n > left() / each) fail("state file: a length of " + std::to_string(n) + " runs past the end");
    return static_cast<size_t>(n);
  }
  const char* p_;
  const char* end_;
};

}  // namespace slake
