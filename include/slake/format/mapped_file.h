// A read-only byte buffer backed by mmap (files) or by owned memory (tests, fuzzing).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace slake {

class ByteBuffer {
 public:
  virtual ~ByteBuffer() = default;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Hands the resident pages wholly inside [p, p + n) back to the OS where they can be read again
  // (a file mapping: the next touch reads the file); does nothing for owned memory.
  virtual void release_pages(const uint8_t* /*p*/, size_t /*n*/) const {}

 protected:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Maps a whole file read-only. Throws slake::Error naming the file when it cannot.
std::shared_ptr<const ByteBuffer> map_file(const std::string& path);

// Wraps a copy of `bytes`.
std::shared_ptr<const ByteBuffer> buffer_from_bytes(std::vector<uint8_t> bytes);

// Reads a whole (small) file into a string. Throws slake::Error naming the file.
std::string read_text_file(const std::string& path);

}  // namespace slake
