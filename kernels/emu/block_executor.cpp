#include "emu/block_executor.h"

#include <ucontext.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace slake::emu {

namespace {

enum class State { Runnable, AtBlockBarrier, AtWarpBarrier, Done };

struct Fiber {
  ucontext_t ctx{};
  std::unique_ptr<char[]> stack;
  dim3 idx;
  int linear = 0;
  State state = State::Runnable;
  uint32_t warp_mask = 0;    // the mask of the warp operation it waits in
  unsigned exchanges = 0;    // warp exchanges made: selects the exchange buffer half
  size_t shared_decls = 0;   // static shared arrays declared so far in this block
  std::string error;         // an exception that escaped the kernel body
};

struct SharedDecl {
  size_t offset, bytes;
};

// One executor per OS thread: launches from different threads do not interfere.
struct Executor {
  ucontext_t main_ctx{};
  std::vector<Fiber> fibers;  // the first n_threads belong to the running block; the rest are spare
  Fiber* begin() { return fibers.data(); }
  Fiber* end() { return fibers.data() + n_threads; }
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  int n_threads = 0;
  // Block state.
  std::vector<unsigned char> shared, dynamic;
  std::vector<SharedDecl> decls;
  size_t shared_used = 0;
  std::vector<uint64_t> exchange;  // [warp][2][32]

  static void entry();
  void run_block();
  void fail(const std::string& what) const;
  std::string where(const Fiber& f) const;
  void yield_to_scheduler(State s) {
    current->state = s;
    swapcontext(&current->ctx, &main_ctx);
  }
};

thread_local Executor exec;

std::string dim_str(dim3 d) {
  std::ostringstream o;
  o << "(" << d.x << "," << d.y << "," << d.z << ")";
  return o.str();
}

std::string Executor::where(const Fiber& f) const { return "thread " + dim_str(f.idx) + " of block " + dim_str(blockIdx); }

void Executor::fail(const std::string& what) const { throw KernelError("emulated kernel: " + what); }

void Executor::entry() {
  Fiber* f = exec.current;
  try {
    (*exec.body)();
  } catch (const std::exception& e) {
    f->error = e.what();
  } catch (...) {
    f->error = "unknown exception";
  }
  f->state = State::Done;
  // Returning resumes uc_link: the scheduler.
}

void Executor::run_block() {
  for (Fiber& f : *this) {
    f.state = State::Runnable;
    f.exchanges = 0;
    f.shared_decls = 0;
    f.error.clear();
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = kFiberStackBytes;
    f.ctx.uc_link = &main_ctx;
    makecontext(&f.ctx, &Executor::entry, 0);
  }
  decls.clear();
  shared_used = 0;
  const int n_warps = (n_threads + kWarpSize - 1) / kWarpSize;
  for (;;) {
    for (Fiber& f : *this) {
      if (f.state != State::Runnable) continue;
      current = &f;
      threadIdx = f.idx;
      swapcontext(&main_ctx, &f.ctx);
      current = nullptr;
      if (!f.error.empty()) fail(where(f) + ": " + f.error);
    }
    bool released = false;
    // Warp operations: released once every lane they name has arrived.
    for (int w = 0; w < n_warps; ++w) {
      const int lane0 = w * kWarpSize, lanes = std::min(kWarpSize, n_threads - lane0);
      uint32_t arrived = 0, mask = 0;
      for (int l = 0; l < lanes; ++l) {
        const Fiber& f = fibers[static_cast<size_t>(lane0 + l)];
        if (f.state != State::AtWarpBarrier) continue;
        if (arrived && f.warp_mask != mask) fail(where(f) + ": warp operations with different masks meet");
        arrived |= 1u << l;
        mask = f.warp_mask;
      }
      if (!arrived) continue;
      const uint32_t existing = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
      const uint32_t needed = mask & existing;
      if ((needed & arrived) != needed) {
        for (int l = 0; l < lanes; ++l)
          if ((needed >> l & 1) && fibers[static_cast<size_t>(lane0 + l)].state == State::Done)
            fail(where(fibers[static_cast<size_t>(lane0 + l)]) + " exited while its warp waits for it in a warp operation");
        continue;  // the missing lanes are at a block barrier: decided below
      }
      for (int l = 0; l < lanes; ++l)
        if (arrived >> l & 1) fibers[static_cast<size_t>(lane0 + l)].state = State::Runnable;
      released = true;
    }
    if (released) continue;
    int done = 0, at_block = 0;
    for (const Fiber& f : *this) {
      done += f.state == State::Done;
      at_block += f.state == State::AtBlockBarrier;
    }
    if (done == n_threads) return;
    if (at_block == n_threads) {
      for (Fiber& f : *this) f.state = State::Runnable;
      continue;
    }
    // Nothing can proceed: describe the first thread that waits and one that will never come.
    const Fiber* waiting = nullptr;
    const Fiber* missing = nullptr;
    for (const Fiber& f : *this) {
      if (!waiting && f.state != State::Done) waiting = &f;
      if (!missing && f.state != State::AtBlockBarrier) missing = &f;
    }
    std::string why = where(*waiting) + " waits at " +
                      (waiting->state == State::AtBlockBarrier ? "__syncthreads" : "a warp operation") +
                      " that " + where(*missing) +
                      (missing->state == State::Done ? " never reaches (it exited)" : " never reaches (it waits elsewhere)");
    fail("deadlock: " + why);
  }
}

}  // namespace

void run_grid(dim3 grid, dim3 block, size_t dynamic_smem, const std::function<void()>& body) {
  Executor& e = exec;
  if (e.body) throw KernelError("emulated kernel: a launch from inside a kernel");
  const long n = static_cast<long>(block.x) * block.y * block.z;
  if (n <= 0 || n > 1024) throw KernelError("emulated kernel: block of " + std::to_string(n) + " threads (1..1024)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) throw KernelError("emulated kernel: empty grid");
  if (dynamic_smem > kMaxSharedBytes) throw KernelError("emulated kernel: too much dynamic shared memory");
  e.n_threads = static_cast<int>(n);
  while (e.fibers.size() < static_cast<size_t>(n)) {
    e.fibers.emplace_back();
    e.fibers.back().stack.reset(new char[kFiberStackBytes]);
  }
  for (int t = 0; t < n; ++t) {
    Fiber& f = e.fibers[static_cast<size_t>(t)];
    f.linear = t;
    f.idx = dim3(static_cast<unsigned>(t) % block.x, static_cast<unsigned>(t) / block.x % block.y,
                 static_cast<unsigned>(t) / (block.x * block.y));
  }
  e.shared.assign(kMaxSharedBytes, 0);
  e.dynamic.assign(std::max<size_t>(dynamic_smem, 1), 0);
  e.exchange.assign(static_cast<size_t>((n + kWarpSize - 1) / kWarpSize) * 2 * kWarpSize, 0);
  e.body = &body;
  blockDim = block;
  gridDim = grid;
  struct Restore {
    Executor& e;
    ~Restore() {
      e.body = nullptr;
      e.current = nullptr;
    }
  } restore{e};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3(x, y, z);
        std::fill(e.shared.begin(), e.shared.end(), 0xcd);  // stale data from the last block must not be relied on
        e.run_block();
      }
}

static Fiber& running(const char* what) {
  if (!exec.current) throw KernelError(std::string("emulated kernel: ") + what + " outside a kernel");
  return *exec.current;
}

void block_barrier() {
  running("__syncthreads");
  exec.yield_to_scheduler(State::AtBlockBarrier);
}

void warp_barrier(uint32_t mask) {
  Fiber& f = running("__syncwarp");
  f.warp_mask = mask;
  exec.yield_to_scheduler(State::AtWarpBarrier);
}

int lane_id() { return running("a warp operation").linear % kWarpSize; }

uint64_t warp_exchange(uint32_t mask, uint64_t value, int src) {
  Fiber& f = running("a warp shuffle");
  const int lane = f.linear % kWarpSize, warp = f.linear / kWarpSize;
  // Two halves used alternately: a lane can be at most one exchange ahead of the slowest lane of
  // its warp, so the half it writes is never the one another lane still reads.
  uint64_t* buf = exec.exchange.data() + (static_cast<size_t>(warp) * 2 + (f.exchanges & 1)) * kWarpSize;
  ++f.exchanges;
  buf[lane] = value;
  warp_barrier(mask);
  const int lanes = std::min(kWarpSize, exec.n_threads - warp * kWarpSize);
  if (src < 0 || src >= lanes || !(mask >> src & 1)) return value;
  return buf[src];
}

void* shared_alloc(size_t bytes, size_t align) {
  Fiber& f = running("a shared declaration");
  Executor& e = exec;
  const size_t k = f.shared_decls++;
  if (k < e.decls.size()) {
    if (e.decls[k].bytes != bytes)
      e.fail(e.where(f) + ": shared declaration #" + std::to_string(k) + " is " + std::to_string(bytes) +
             " bytes here but " + std::to_string(e.decls[k].bytes) + " in another thread");
    return e.shared.data() + e.decls[k].offset;
  }
  if (k != e.decls.size()) e.fail("shared declarations out of order");
  const size_t offset = (e.shared_used + align - 1) / align * align;
  if (offset + bytes > kMaxSharedBytes) e.fail("static shared memory over " + std::to_string(kMaxSharedBytes) + " bytes");
  e.decls.push_back({offset, bytes});
  e.shared_used = offset + bytes;
  return e.shared.data() + offset;
}

void* dynamic_shared() {
  running("dynamic shared memory");
  return exec.dynamic.data();
}

}  // namespace slake::emu
