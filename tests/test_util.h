// Shared helpers of the unit tests: paths of fixtures and shared material, small file utilities.
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "slake/context.h"
#include "slake/error.h"

namespace slake::test {

inline std::string fixtures_dir() { return SLAKE_FIXTURES_DIR; }

// Context parameters with an f32 KV cache: for comparisons of the fp32 forward pass against fp32
// references (the default f16 cache rounds every key and value; test_kv_type.cpp measures that).
inline ContextParams f32_cache(int n_ctx, int n_threads, int n_batch) {
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_threads = n_threads;
  p.n_batch = n_batch;
  p.kv.type_k = p.kv.type_v = KvType::F32;
  return p;
}
inline std::string shared_dir() {
  const char* env = std::getenv("SLAKE_SHARED_DIR");
  return env && *env ? env : SLAKE_SHARED_DIR;
}
inline bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}
// Path of a file under ../shared; skips the calling test (with the reason) when it is missing.
#define SLAKE_SHARED_OR_SKIP(var, rel)                                                       \
  const std::string var = ::slake::test::shared_dir() + "/" + (rel);                         \
  if (!::slake::test::exists(var)) GTEST_SKIP() << "shared material missing: " << var

inline std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
inline std::vector<float> read_f32(const std::string& p) {
  const std::vector<uint8_t> b = read_bytes(p);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// The stories260K files of ../shared (GGUF, llama2.c checkpoint and tokenizer): their directory,
// ending in '/', or "" when any is missing.
inline std::string stories_dir() {
  const std::string dir = shared_dir() + "/models/";
  for (const char* f : {"stories260K.gguf", "stories260K.bin", "tok512.bin"})
    if (!exists(dir + f)) return "";
  return dir;
}
#define SLAKE_STORIES_OR_SKIP(var)              \
  const std::string var = ::slake::test::stories_dir(); \
  if (var.empty())                              \
  GTEST_SKIP() << "shared material missing: " << ::slake::test::shared_dir() << "/models/stories260K.{gguf,bin}, tok512.bin"

// The project's real test model (scripts/fetch-models.sh): the path of models/downloads/NAME, or
// "" when it is missing.
inline std::string real_model(const std::string& name) {
  const std::string p = std::string(SLAKE_MODELS_DIR) + "/" + name;
  return exists(p) ? p : "";
}
#define SLAKE_REAL_MODEL_OR_SKIP(var, name)     \
  const std::string var = ::slake::test::real_model(name); \
  if (var.empty())                              \
  GTEST_SKIP() << "model missing: " << SLAKE_MODELS_DIR << "/" << (name) << " (scripts/fetch-models.sh fetches it)"

// The id of the token whose piece is `piece` (a test failure, and the vocabulary size, if none).
inline int32_t token_id(const std::vector<std::string>& tokens, const std::string& piece) {
  const auto it = std::find(tokens.begin(), tokens.end(), piece);
  if (it == tokens.end()) ADD_FAILURE() << "no token '" << piece << "'";
  return static_cast<int32_t>(it - tokens.begin());
}

// The message of the slake::Error that `f` throws, or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A fresh temporary directory, removed (with its files) at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/slake-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace slake::test
