// An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with an
// HTTP status (400 invalid_request_error, 401 authentication_error, 404, 503 server overloaded).
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace slake::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string type = "invalid_request_error", std::string param = "",
           std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string type, param, code;

  nlohmann::json body() const {
    return {{"error",
             {{"message", what()},
              {"type", type},
              {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
              {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}}}};
  }
};

// 400 for a bad field, naming it.
inline ApiError bad_field(const std::string& param, const std::string& message) {
  return ApiError(400, message, "invalid_request_error", param);
}

// A member of the JSON object `j` of the type T (std::string or bool): `dflt` when absent or
// null, a 400 naming `param` when of another type (nlohmann's value() would throw its own
// type_error, a 500).
template <typename T, typename Json>
T member_or(const Json& j, const char* key, const T& dflt, const std::string& param) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  const bool ok = std::is_same<T, bool>::value ? it->is_boolean() : it->is_string();
  if (!ok) throw bad_field(param, "'" + param + "' must be " + (std::is_same<T, bool>::value ? "a boolean" : "a string"));
  return it->template get<T>();
}

}  // namespace slake::server
