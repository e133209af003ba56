#include "slake/kv/store_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "slake/error.h"

namespace slake {

namespace detail {

void* map_store_file(const std::string& dir, size_t bytes) {
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {  // a file system without O_TMPFILE: a named file, unlinked at once
    std::string name = dir + "/slake-kv-store-XXXXXX";
    fd = mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) unlink(name.c_str());
  }
  if (fd < 0) fail("--kv-store-file " + dir + ": cannot create a file there (" + std::strerror(errno) + ")");
  // Blocks reserved now, so that a full disk is an error here rather than a SIGBUS at a write.
  int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (e == EOPNOTSUPP || e == EINVAL) e = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (e != 0) {
    close(fd);
    fail("--kv-store-file " + dir + ": cannot reserve a file of " + std::to_string(bytes) + " bytes (" + std::strerror(e) + ")");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  e = errno;
  close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) fail("--kv-store-file " + dir + ": cannot map " + std::to_string(bytes) + " bytes (" + std::strerror(e) + ")");
  return p;
}

void unmap_store_file(void* p, size_t bytes) { munmap(p, bytes); }

}  // namespace detail

void check_store_dir(const std::string& dir) {
  const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  detail::unmap_store_file(detail::map_store_file(dir, bytes), bytes);
}

namespace detail {

}  // namespace detail

void release_store_pages(const StoreBytes& v, size_t offset, size_t bytes) {
  if (!v.get_allocator().file_backed() || v.capacity() < kStoreFileMinBytes || bytes == 0) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Rounded outwards: the mapping starts on a page and its contents stay in the file, so a page
  // given back with a neighbour's rows only costs that neighbour a fault when it is next read.
  const uintptr_t base = reinterpret_cast<uintptr_t>(v.data());
  const uintptr_t first = (base + offset) / page * page;
  const uintptr_t last = std::min((base + offset + bytes + page - 1) / page * page, base + v.capacity());
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace slake
