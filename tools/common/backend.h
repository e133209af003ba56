// The --backend flag shared by the tools, and the session it names (slake/session.h): a
// CpuSession (cpu) or a gpu::CudaSession (cuda, when the tools were built with the CUDA backend:
// SLAKE_HAVE_CUDA_BACKEND). A build without CUDA refuses --backend cuda with an error saying so.
#pragma once
#include <CLI/CLI.hpp>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "slake/context.h"
#include "slake/error.h"
#include "slake/model/model.h"
#include "slake/session.h"
#if SLAKE_HAVE_CUDA_BACKEND
#include "cuda/cuda_session.h"
#endif

namespace slake::tools {

using slake::CpuSession;
using slake::Session;

inline bool cuda_backend_built() { return SLAKE_HAVE_CUDA_BACKEND + 0 != 0; }

inline CLI::Option* add_backend_flag(CLI::App& app, std::string& backend) {
  return app.add_option("--backend", backend, "where the forward pass runs: cpu, or cuda (one GPU, bf16 weights)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

// Throws slake::Error for a backend this build cannot run.
inline void check_backend(const std::string& backend) {
  if (backend == "cuda" && !cuda_backend_built())
    fail("--backend cuda: this build has no CUDA backend (built without CUDA: nvcc was not found or SLAKE_CUDA=OFF)");
  if (backend != "cpu" && backend != "cuda") fail("--backend: unknown backend " + backend);
}

inline std::unique_ptr<Session> make_session(const std::string& backend, const Model& m, const ContextParams& p) {
  check_backend(backend);
#if SLAKE_HAVE_CUDA_BACKEND
  if (backend == "cuda") return std::make_unique<gpu::CudaSession>(m, p);
#endif
  return std::make_unique<CpuSession>(m, p);
}

}  // namespace slake::tools
