// Where a recall store (kv_recall.h) keeps its rows: on the heap, or, with --kv-store-file DIR, in
// memory-mapped files of DIR (created and unlinked at once: nothing outlives the process; blocks
// under kStoreFileMinBytes stay on the heap). A mapped store's rows live in the page cache, where
// the kernel may write them out and drop them; the store gives the pages of its mapping back
// (release_store_pages) in batches after writing and reading them (kv_recall.h), so they leave the
// process's resident set and are read back from the page cache (or the disk) when a query recalls
// them. DIR should be on a disk's file system: on tmpfs the pages stay in memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace slake {

namespace detail {
// `bytes` of a new unlinked file of `dir`, mapped shared; throws slake::Error naming `dir`.
void* map_store_file(const std::string& dir, size_t bytes);
void unmap_store_file(void* p, size_t bytes);
}  // namespace detail

// Throws slake::Error unless a store file can be made and mapped in `dir` (checked at start-up).
void check_store_dir(const std::string& dir);

// Allocations below this many bytes stay on the heap even for a mapped store.
inline constexpr size_t kStoreFileMinBytes = size_t{64} << 10;

// A std::allocator for a store's rows: the heap, or mapped files of `dir` for blocks of
// kStoreFileMinBytes or more. Copies (and containers copied with it) keep the directory.
template <class T>
class StoreAllocator {
 public:
  using value_type = T;
  // A container moved, copied or swapped takes the other's place (and directory) with its rows.
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  StoreAllocator() = default;
  explicit StoreAllocator(std::shared_ptr<const std::string> dir) : dir_(std::move(dir)) {}
  template <class U>
  StoreAllocator(const StoreAllocator<U>& o) : dir_(o.dir()) {}  // NOLINT: rebinding, as std::allocator

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (mapped(bytes)) return static_cast<T*>(detail::map_store_file(*dir_, bytes));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (mapped(bytes))
      detail::unmap_store_file(p, bytes);
    else
      std::allocator<T>().deallocate(p, n);
  }
  const std::shared_ptr<const std::string>& dir() const { return dir_; }
  bool file_backed() const { return dir_ != nullptr; }
  template <class U>
  bool operator==(const StoreAllocator<U>& o) const {
    return dir_ == o.dir() || (dir_ && o.dir() && *dir_ == *o.dir());
  }
  template <class U>
  bool operator!=(const StoreAllocator<U>& o) const {
    return !(*this == o);
  }

 private:
  bool mapped(size_t bytes) const { return dir_ != nullptr && bytes >= kStoreFileMinBytes; }
  std::shared_ptr<const std::string> dir_;
};

using StoreBytes = std::vector<uint8_t, StoreAllocator<uint8_t>>;

// Drops the pages holding bytes [offset, offset + bytes) of `v` from the process's resident set
// when `v` is mapped (madvise MADV_DONTNEED: their contents stay in the file, and a later read
// faults them back in); a no-op on the heap.
void release_store_pages(const StoreBytes& v, size_t offset, size_t bytes);

}  // namespace slake
