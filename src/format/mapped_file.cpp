#include "slake/format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "slake/error.h"

namespace slake {
namespace {

class MappedFile final : public ByteBuffer {
 public:
  explicit MappedFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int e = errno;
      ::close(fd);
      fail(path + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      fail(path + ": not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        ::close(fd);
        fail(path + ": cannot mmap: " + std::strerror(e));
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  void release_pages(const uint8_t* p, size_t n) const override {
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGE_SIZE));
    const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    if (p < data_ || p + n > data_ + size_ || e <= b) return;
    ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);  // private and never written: reread from the file
  }
  ~MappedFile() override {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
};

class OwnedBytes final : public ByteBuffer {
 public:
  explicit OwnedBytes(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {
    data_ = bytes_.data();
    size_ = bytes_.size();
  }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace

std::shared_ptr<const ByteBuffer> map_file(const std::string& path) {
  return std::make_shared<MappedFile>(path);
}

std::shared_ptr<const ByteBuffer> buffer_from_bytes(std::vector<uint8_t> bytes) {
  return std::make_shared<OwnedBytes>(std::move(bytes));
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(path + ": read error");
  return ss.str();
}

}  // namespace slake
