#include "cuda/device_activations.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace slake::gpu {

std::shared_ptr<DeviceActivations> shared_device_activations(const Model& m, const DevicePlan& plan) {
  static std::mutex mu;
  static std::map<std::pair<const Model*, std::string>, std::weak_ptr<DeviceActivations>> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = cache.begin(); it != cache.end();) it = it->second.expired() ? cache.erase(it) : std::next(it);
  std::weak_ptr<DeviceActivations>& slot = cache[{&m, plan.activation_layout()}];
  std::shared_ptr<DeviceActivations> a = slot.lock();
  if (!a) {
    require_device_memory(plan.activation_bytes(), "the contexts' shared activations need", "; lower the context size or the batch");
    a = std::make_shared<DeviceActivations>(plan.activation_bytes());
    slot = a;
  }
  return a;
}

}  // namespace slake::gpu
