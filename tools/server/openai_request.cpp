#include "openai_request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "api_error.h"
#include "slake/error.h"

namespace slake::server {

namespace {

using nlohmann::json;

const char* type_name(const json& j) { return j.type_name(); }

// The field's value when present and not null; else null.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& body, const char* name, bool dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_boolean()) throw bad_field(name, std::string("'") + name + "' must be a boolean, got " + type_name(*v));
  return v->get<bool>();
}

// An integer field in [lo, hi]. Integral numbers written as floats (1e3) count as integers; a
// value outside the range, however large (2^63, 1e18), is refused quoting what the client sent.
long long get_int(const json& body, const char* name, long long dflt, long long lo, long long hi) {
  const json* v = field(body, name);
  if (!v) return dflt;
  const bool integral = v->is_number_integer() || (v->is_number_float() && std::isfinite(v->get<double>()) &&
                                                   std::floor(v->get<double>()) == v->get<double>());
  if (!integral) throw bad_field(name, std::string("'") + name + "' must be an integer, got " + type_name(*v));
  bool in_range = false;
  long long x = 0;
  if (v->is_number_unsigned()) {
    const unsigned long long u = v->get<unsigned long long>();
    in_range = hi >= 0 && u <= static_cast<unsigned long long>(hi) && static_cast<long long>(u) >= lo;
    x = in_range ? static_cast<long long>(u) : 0;
  } else if (v->is_number_integer()) {
    x = v->get<long long>();
    in_range = x >= lo && x <= hi;
  } else {
    const double d = v->get<double>();
    in_range = d >= static_cast<double>(lo) && d <= static_cast<double>(hi) && std::fabs(d) < 9.0e15;
    x = in_range ? static_cast<long long>(d) : 0;
  }
  if (!in_range)
    throw bad_field(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + v->dump());
  return x;
}

// The fields a request may carry: those read here, and those accepted that change nothing by
// design (user, metadata, store; llama-server's cache_prompt: a slot's cache is always reused).
// Any other is a 400 naming it, as OpenAI's own API answers an unrecognized argument: a field
// that would change the reply is never ignored in silence.
const std::set<std::string> kFields = {"model", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                                       "temperature", "top_p", "top_k", "min_p", "repeat_penalty", "repeat_last_n",
                                       "presence_penalty", "frequency_penalty", "seed", "stop", "ignore_eos", "n",
                                       "typical_p", "xtc_probability", "xtc_threshold", "mirostat", "mirostat_tau",
                                       "mirostat_eta", "dry_multiplier", "dry_base", "dry_allowed_length",
                                       "dry_penalty_last_n", "dry_sequence_breakers",
                                       "logit_bias", "grammar", "response_format", "json_schema", "return_tokens",
                                       "kv_policy", "kv_budget", "kv_window", "kv_observe", "kv_prefill_chunk", "kv_recall_pages",
                                       "kv_store_type", "kv_recall_score", "kv_recall_every", "kv_selector", "kv_ahakv", "kv_sre_mass",
                                       "kv_sre_floor", "logprobs",
                                       "user", "metadata", "store", "cache_prompt", "service_tier"};
const std::set<std::string> kChatFields = {"messages", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
                                           "reasoning_format", "chat_template_kwargs"};
const std::set<std::string> kCompletionFields = {"prompt", "echo", "best_of"};

void check_fields(const json& body, bool chat) {
  for (const auto& [k, v] : body.items()) {
    (void)v;
    if (kFields.count(k) || (chat ? kChatFields : kCompletionFields).count(k)) continue;
    if (k == "functions" || k == "function_call")
      throw bad_field(k, "'" + k + "' is OpenAI's deprecated form: send 'tools' and 'tool_choice'");
    if (k == "tools" || k == "tool_choice" || k == "parallel_tool_calls")
      throw bad_field(k, "'" + k + "' is for chat completions (/v1/chat/completions)");
    throw bad_field(k, "'" + k + "' is not a field this server understands (" +
                           std::string(chat ? "chat" : "text") + " completions)");
  }
}

// The body as sent, parsed again keeping its keys' order (nlohmann::json sorts them) the first
// time a field needs it: a schema's properties are generated in the order it gives them, and the
// tools and template variables go to the template in theirs.
class OrderedBody {
 public:
  explicit OrderedBody(const std::string& text) : text_(text) {}
  const nlohmann::ordered_json& get() {
    if (!j_) j_ = nlohmann::ordered_json::parse(text_);
    return *j_;
  }

 private:
  const std::string& text_;
  std::optional<nlohmann::ordered_json> j_;
};

// The grammar the reply must match: `grammar` (GBNF), `response_format` (json_object, or
// json_schema with its schema) or llama-server's `json_schema`; at most one of them.
std::shared_ptr<const Grammar> get_grammar(const json& body, OrderedBody& ordered) {
  const auto schema_text = [&](std::initializer_list<const char*> path) {
    const nlohmann::ordered_json* j = &ordered.get();
    for (const char* k : path) j = &j->at(k);
    return j->dump();
  };
  std::string gbnf, param;
  const auto one = [&](const char* name, std::string g) {
    if (!param.empty()) throw bad_field(name, "give one of 'grammar', 'response_format' and 'json_schema', not '" + param + "' and '" + name + "'");
    param = name;
    gbnf = std::move(g);
  };
  try {
    if (const json* g = field(body, "grammar")) {
      if (!g->is_string()) throw bad_field("grammar", std::string("'grammar' must be a string of GBNF, got ") + type_name(*g));
      one("grammar", g->get<std::string>());
    }
    if (const json* rf = field(body, "response_format")) {
      const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
      if (!type || !type->is_string())
        throw bad_field("response_format", "'response_format' must be an object with a 'type': text, json_object or json_schema");
      if (*type == "json_object") {
        one("response_format", json_object_gbnf());
      } else if (*type == "json_schema") {
        const json* js = field(*rf, "json_schema");
        const json* schema = js && js->is_object() ? field(*js, "schema") : nullptr;
        if (!schema) throw bad_field("response_format", "'response_format.json_schema.schema' is required");
        one("response_format", json_schema_to_gbnf(schema_text({"response_format", "json_schema", "schema"})));
      } else if (*type != "text") {
        throw bad_field("response_format", "'response_format.type' must be text, json_object or json_schema, got " + type->dump());
      }
    }
    if (field(body, "json_schema")) one("json_schema", json_schema_to_gbnf(schema_text({"json_schema"})));
    if (param.empty()) return nullptr;
    GrammarLimits limits;
    limits.max_text_bytes = 1u << 20;
    auto g = Grammar::parse(gbnf, "root", limits);
    GrammarMatcher(g, nullptr);  // its first expansion (bounded) here, not in the scheduler
    return g;
  } catch (const Error& e) {
    throw bad_field(param.empty() ? "response_format" : param, e.what());
  }
}

// logit_bias: {"token id": bias in [-100, 100]}, OpenAI's form.
std::vector<std::pair<int32_t, float>> get_logit_bias(const json& body, int n_vocab) {
  const json* v = field(body, "logit_bias");
  if (!v) return {};
  if (!v->is_object()) throw bad_field("logit_bias", std::string("'logit_bias' must be an object of token id -> bias, got ") + type_name(*v));
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [k, b] : v->items()) {
    const bool digits = !k.empty() && k.size() <= 10 && std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stoll(k) >= n_vocab)
      throw bad_field("logit_bias", "'logit_bias' keys must be token ids in [0, " + std::to_string(n_vocab) + "), got " + json(k).dump());
    if (!b.is_number() || !(b.get<double>() >= -100.0 && b.get<double>() <= 100.0))
      throw bad_field("logit_bias", "'logit_bias' values must be numbers in [-100, 100], got " + b.dump() + " for token " + k);
    out.emplace_back(static_cast<int32_t>(std::stoll(k)), b.get<float>());
  }
  return out;
}

// seed: -1 (a random one) or any integer in [0, 2^64 - 1], kept exactly.
uint64_t get_seed(const json& body) {
  const json* v = field(body, "seed");
  if (v && v->is_number_unsigned()) return v->get<unsigned long long>();
  const long long s = get_int(body, "seed", -1, -1, std::numeric_limits<long long>::max());
  if (s >= 0) return static_cast<uint64_t>(s);
  std::random_device rd;
  return static_cast<uint64_t>(rd()) << 32 | rd();
}

double get_number(const json& body, const char* name, double dflt, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_number()) throw bad_field(name, std::string("'") + name + "' must be a number, got " + type_name(*v));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    throw bad_field(name, std::string("'") + name + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " +
                              json(x).dump());
  return x;
}

std::string get_string(const json& body, const char* name, const std::string& dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_string()) throw bad_field(name, std::string("'") + name + "' must be a string, got " + type_name(*v));
  return v->get<std::string>();
}

// A string field naming one of a set (a KV row type, a page score): `parse` turns it into its value
// or throws slake::Error, answered as a 400 naming the field.
template <typename T, typename Parse>
T get_named(const json& body, const char* name, T dflt, Parse parse) {
  if (!field(body, name)) return dflt;
  const std::string s = get_string(body, name, "");
  try {
    return parse(s);
  } catch (const Error& e) {
    throw bad_field(name, e.what());
  }
}

std::string utf8_or_400(std::string s, const std::string& what) {
  if (find_invalid_utf8(s) != std::string::npos) throw bad_field(what, "'" + what + "' is not valid UTF-8");
  return s;
}

// stop: a string or an array of up to 4 strings (OpenAI's limit); empty strings are ignored.
std::vector<std::string> get_stop(const json& body) {
  const json* v = field(body, "stop");
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) out.push_back(v->get<std::string>());
    return out;
  }
  if (!v->is_array()) throw bad_field("stop", std::string("'stop' must be a string or an array of strings, got ") + type_name(*v));
  if (v->size() > 4) throw bad_field("stop", "'stop' takes at most 4 sequences, got " + std::to_string(v->size()));
  for (const json& s : *v) {
    if (!s.is_string()) throw bad_field("stop", std::string("'stop' must hold strings, got ") + type_name(s));
    if (!s.get<std::string>().empty()) out.push_back(utf8_or_400(s.get<std::string>(), "stop"));
  }
  return out;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts joined.
std::string message_content(const json& m, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  const json* c = field(m, "content");
  if (!c) return "";
  if (c->is_string()) return utf8_or_400(c->get<std::string>(), where);
  if (!c->is_array()) throw bad_field(where, "'" + where + "' must be a string or an array of text parts, got " + type_name(*c));
  std::string text;
  for (const json& part : *c) {
    // json::value would throw its own type_error for a "type" that is not a string: a 500.
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    if (!type || !type->is_string() || *type != "text" || !part.contains("text") || !part["text"].is_string())
      throw bad_field(where, "'" + where + "' parts must be {\"type\": \"text\", \"text\": string} (only text is supported)");
    text += part["text"].get<std::string>();
  }
  return utf8_or_400(text, where);
}

// An assistant message's tool_calls as Hugging Face templates take them: OpenAI's objects, each
// function's arguments (a JSON string) parsed into an object.
std::string template_tool_calls(const json& calls, const std::string& where) {
  if (!calls.is_array()) throw bad_field(where, "'" + where + "' must be an array");
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json* fn = c.is_object() ? field(c, "function") : nullptr;
    const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    const json* args = fn && fn->is_object() ? field(*fn, "arguments") : nullptr;
    if (!name || !name->is_string() || !args || !args->is_string())
      throw bad_field(at, "'" + at + "' must be {\"id\", \"type\": \"function\", \"function\": {\"name\": string, \"arguments\": string}}");
    json parsed = json::parse(args->get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) throw bad_field(at, "'" + at + ".function.arguments' must be a JSON object as a string");
    const json* id = field(c, "id");
    out.push_back({{"id", id && id->is_string() ? id->get<std::string>() : new_tool_call_id()},
                   {"type", "function"},
                   {"function", {{"name", name->get<std::string>()}, {"arguments", parsed}}}});
  }
  return out.dump();
}

// tools, tool_choice and parallel_tool_calls of a chat request. `text` is the body as sent (the
// tools go to the template in their own order).
ToolRequest get_tools(const json& body, OrderedBody& ordered, const RequestEnv& env) {
  const json* t = field(body, "tools");
  const json* choice = field(body, "tool_choice");
  ToolRequest r;
  if (!t || (t->is_array() && t->empty())) {
    if (choice && !(choice->is_string() && *choice == "none"))
      throw bad_field("tool_choice", "'tool_choice' needs 'tools'");
    return r;
  }
  if (!t->is_array()) throw bad_field("tools", std::string("'tools' must be an array, got ") + type_name(*t));
  for (size_t i = 0; i < t->size(); ++i) {
    const json& tool = (*t)[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json* type = tool.is_object() ? field(tool, "type") : nullptr;
    const json* fn = tool.is_object() ? field(tool, "function") : nullptr;
    if (!type || *type != "function" || !fn || !fn->is_object())
      throw bad_field(at, "'" + at + "' must be {\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}");
    const json* name = field(*fn, "name");
    const std::string n = name && name->is_string() ? name->get<std::string>() : "";
    const bool ok_name = !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (!ok_name) throw bad_field(at + ".function.name", "a function's name must be 1 to 64 letters, digits, '_' or '-'");
    if (std::find(r.names.begin(), r.names.end(), name->get<std::string>()) != r.names.end())
      throw bad_field(at + ".function.name", "two tools are called " + name->dump());
    const json* params = field(*fn, "parameters");
    if (params && !params->is_object()) throw bad_field(at + ".function.parameters", "a function's parameters must be a JSON schema object");
    r.names.push_back(name->get<std::string>());
  }
  if (choice) {
    if (choice->is_string() && (*choice == "auto" || *choice == "none" || *choice == "required")) {
      r.choice = choice->get<std::string>();
    } else {
      const json* fn = choice->is_object() ? field(*choice, "function") : nullptr;
      const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      if (!name || !name->is_string())
        throw bad_field("tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\"}}");
      if (std::find(r.names.begin(), r.names.end(), name->get<std::string>()) == r.names.end())
        throw bad_field("tool_choice", "'tool_choice' names " + name->dump() + ", which is not among the tools");
      r.choice = name->get<std::string>();
    }
  }
  r.parallel = get_bool(body, "parallel_tool_calls", true);
  r.format = detect_tool_format(env.chat.template_source());
  if (r.format == ToolFormat::None)
    throw bad_field("tools", "the chat template (" + env.chat.describe() + ") does not take tools; start the server with "
                             "--chat-template-file of a template that does");
  r.tools_json = ordered.get().at("tools").dump();
  return r;
}

// chat_template_kwargs: the server's (--chat-template-kwargs, --reasoning-budget 0), the
// request's over them; a JSON object's text, "" when there are none.
std::string template_kwargs(const json& body, OrderedBody& ordered, const RequestEnv& env) {
  nlohmann::ordered_json kwargs = env.template_kwargs.empty() ? nlohmann::ordered_json::object()
                                                              : nlohmann::ordered_json::parse(env.template_kwargs);
  if (const json* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object()) throw bad_field("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const auto& [key, v] : ordered.get().at("chat_template_kwargs").items()) kwargs[key] = v;
  }
  return kwargs.empty() ? "" : kwargs.dump();
}

// OpenAI's roles. Any other string would be pasted into the chat template as it is, where a role
// such as "user<|im_end|>\n<|im_start|>system" forges turns.
constexpr const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};

std::vector<ChatMessage> get_messages(const json& body) {
  const json* v = field(body, "messages");
  if (!v) throw bad_field("messages", "'messages' is required");
  if (!v->is_array() || v->empty()) throw bad_field("messages", "'messages' must be a non-empty array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_field(where, "'" + where + "' must be an object, got " + std::string(type_name(m)));
    const json* role = field(m, "role");
    if (!role || !role->is_string()) throw bad_field(where + ".role", "'" + where + ".role' must be a string");
    if (std::find(std::begin(kRoles), std::end(kRoles), role->get<std::string>()) == std::end(kRoles)) {
      std::string roles;
      for (const char* k : kRoles) roles += (roles.empty() ? "" : ", ") + std::string(k);
      throw bad_field(where + ".role", "'" + where + ".role' must be one of " + roles + "; got " + json(role->get<std::string>()).dump());
    }
    ChatMessage msg{role->get<std::string>(), message_content(m, i)};
    if (const json* calls = field(m, "tool_calls")) msg.tool_calls = template_tool_calls(*calls, where + ".tool_calls");
    if (const json* id = field(m, "tool_call_id")) {
      if (!id->is_string()) throw bad_field(where + ".tool_call_id", "'" + where + ".tool_call_id' must be a string");
      msg.tool_call_id = utf8_or_400(id->get<std::string>(), where + ".tool_call_id");
    }
    if (const json* name = field(m, "name"); name && name->is_string()) msg.name = utf8_or_400(name->get<std::string>(), where + ".name");
    out.push_back(std::move(msg));
  }
  return out;
}

ApiError context_exceeded(const std::string& what, long long tokens, bool at_least, int n_ctx, const char* param) {
  return ApiError(400,
                  what + " is " + (at_least ? "at least " : "") + std::to_string(tokens) +
                      " tokens, which leaves no room in the context of " + std::to_string(n_ctx) + " tokens (-c)",
                  "invalid_request_error", param, "context_length_exceeded");
}

// Text of `bytes` bytes is at least bytes / max_piece_bytes tokens: a text that cannot fit the
// context is refused before it is tokenized (tokenizing megabytes costs seconds and memory).
void check_text_fits(size_t bytes, const RequestEnv& env, const char* param) {
  if (env.max_piece_bytes == 0) return;
  const long long at_least = static_cast<long long>(bytes / env.max_piece_bytes);
  if (at_least >= env.n_ctx) throw context_exceeded("the prompt", at_least, true, env.n_ctx, param);
}

std::vector<int32_t> tokenize_prompt(const std::string& text, const RequestEnv& env) {
  check_text_fits(text.size(), env, "prompt");
  return env.tokenizer.tokenize(utf8_or_400(text, "prompt"), env.tokenizer.vocab().add_bos, true);
}

// prompt: a string, an array of one string, or an array of token ids.
std::vector<int32_t> get_prompt(const json& body, const RequestEnv& env) {
  const json* v = field(body, "prompt");
  if (!v) throw bad_field("prompt", "'prompt' is required");
  if (v->is_string()) return tokenize_prompt(v->get<std::string>(), env);
  if (v->is_array() && v->size() == 1 && (*v)[0].is_string()) return tokenize_prompt((*v)[0].get<std::string>(), env);
  if (v->is_array() && !v->empty() && (*v)[0].is_number()) {
    if (v->size() >= static_cast<size_t>(env.n_ctx))
      throw context_exceeded("the prompt", static_cast<long long>(v->size()), false, env.n_ctx, "prompt");
    std::vector<int32_t> ids;
    for (const json& t : *v) {
      if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() >= env.cfg.n_vocab)
        throw bad_field("prompt", "'prompt' token ids must be integers in [0, " + std::to_string(env.cfg.n_vocab) + ")");
      ids.push_back(t.get<int32_t>());
    }
    return ids;
  }
  if (v->is_array() && v->size() > 1)
    throw bad_field("prompt", "'prompt' holds " + std::to_string(v->size()) + " prompts; one request takes one");
  throw bad_field("prompt", std::string("'prompt' must be a string, got ") + type_name(*v));
}

KvPolicyParams get_kv(const json& body, const RequestEnv& env) {
  KvPolicyParams kv = env.kv_default;
  const bool policy_given = field(body, "kv_policy") != nullptr;
  kv.policy = get_string(body, "kv_policy", kv.policy);
  kv.budget = static_cast<int>(get_int(body, "kv_budget", kv.budget, 0, std::numeric_limits<int>::max()));
  kv.window = static_cast<int>(get_int(body, "kv_window", kv.window, 1, std::numeric_limits<int>::max()));
  kv.observe = static_cast<int>(get_int(body, "kv_observe", kv.observe, 0, std::numeric_limits<int>::max()));
  kv.prefill_chunk = static_cast<int>(get_int(body, "kv_prefill_chunk", kv.prefill_chunk, 0, std::numeric_limits<int>::max()));
  kv.recall_pages = static_cast<int>(get_int(body, "kv_recall_pages", kv.recall_pages, 0, 1 << 24));
  kv.store_type = get_named(body, "kv_store_type", kv.store_type, [](const std::string& t) {
    const KvType type = parse_kv_type(t);
    if (kv_is_kivi(type)) fail("'kv_store_type' must be a row type (f32, f16, bf16, q8_0, q4_0), got " + t);
    return type;
  });
  kv.recall_score = get_named(body, "kv_recall_score", kv.recall_score, parse_recall_score);
  kv.recall_every = static_cast<int>(get_int(body, "kv_recall_every", kv.recall_every, 1, 4096));
  // A request that names its policy gets that policy's own token scores unless it names a selector
  // or SRE-mass too: the server's --kv-selector and --kv-sre-mass go with the server's policy.
  if (policy_given && !field(body, "kv_selector") && !field(body, "kv_sre_mass")) {
    kv.selector = "auto";
    kv.sre_mass = 0.0;
    kv.sre_floor = 0;
  }
  kv.selector = get_string(body, "kv_selector", kv.selector);
  kv.aha = get_named(body, "kv_ahakv", kv.aha, parse_aha_parts);
  kv.sre_mass = get_number(body, "kv_sre_mass", kv.sre_mass, 0.0, 1.0);
  kv.sre_floor = static_cast<int>(get_int(body, "kv_sre_floor", kv.sre_floor, 0, 1 << 24));
  KvPolicyParams out;
  try {
    // As --kv-budget alone: a budget with no policy named means slake.
    out = resolve_kv_policy(kv, !policy_given && field(body, "kv_budget"), &env.cfg);
  } catch (const Error& e) {
    const char* name = policy_given ? "kv_policy" : "kv_budget";
    const std::string why = e.what();
    if (field(body, "kv_selector") && why.find("selector") != std::string::npos) name = "kv_selector";
    if (field(body, "kv_sre_mass") && (why.find("sre-mass") != std::string::npos || why.find("SRE") != std::string::npos))
      name = "kv_sre_mass";
    throw bad_field(name, e.what());
  }
  // AhaKV's parts matter only where AhaKV scores: set elsewhere, they are refused; the server's
  // default parts are dropped, so that equal policies compare equal.
  if (!uses_aha(out)) {
    if (field(body, "kv_ahakv")) throw bad_field("kv_ahakv", "'kv_ahakv' sets AhaKV's parts: it needs kv_policy or kv_selector ahakv");
    out.aha = AhaParts{};
  }
  if ((out.sre_mass <= 0 || !out.evicts()) && field(body, "kv_sre_floor"))
    throw bad_field("kv_sre_floor", "'kv_sre_floor' bounds SRE-mass sizing: it needs kv_sre_mass");
  if (!out.evicts() && field(body, "kv_sre_mass") && out.sre_mass > 0)
    throw bad_field("kv_sre_mass", "'kv_sre_mass' sizes what an evicting policy keeps: it needs a kv_budget");
  if (!out.evicts() && field(body, "kv_selector") && out.selector != "auto")
    throw bad_field("kv_selector", "'kv_selector' chooses what an evicting policy keeps: it needs a kv_budget");
  if (!out.evicts()) {  // nothing evicted: the server's selector settings mean nothing here
    out.selector = "auto";
    out.sre_mass = 0.0;
  }
  if (out.sre_mass <= 0) out.sre_floor = 0;
  // The server's --kv-recall-* apply to the requests that recall (evicting, with pages); a request
  // that sets a recall field where nothing is recalled is refused, and the others drop the
  // server's recall settings, so that equal policies compare equal.
  if (!out.recall().on()) {
    if (field(body, "kv_recall_pages") && out.recall_pages > 0)
      throw bad_field("kv_recall_pages", "'kv_recall_pages' recalls evicted tokens: it needs an evicting kv_policy and a kv_budget");
    for (const char* f : {"kv_store_type", "kv_recall_score", "kv_recall_every"})
      if (field(body, f))
        throw bad_field(f, std::string("'") + f + "' sets the recall store: it needs kv_recall_pages and an evicting kv_policy");
    const KvPolicyParams dflt;
    out.recall_pages = 0;
    out.recall_page = dflt.recall_page;
    out.store_type = dflt.store_type;
    out.recall_score = dflt.recall_score;
    out.recall_every = dflt.recall_every;
  }
  return out;
}

}  // namespace

json parse_object(const std::string& body) {
  // The parser stops at a NUL byte; a body must end where its JSON ends.
  if (body.find('\0') != std::string::npos) throw ApiError(400, "the request body is not valid JSON: it holds a NUL byte");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, std::string("the request body must be a JSON object, got ") + type_name(j));
  return j;
}

ApiRequest parse_request(const std::string& text, bool chat, const RequestEnv& env) {
  const json body = parse_object(text);
  check_fields(body, chat);
  ApiRequest r;
  r.chat = chat;
  // As llama-server: one model is served whatever `model` names, and the reply names what was asked for.
  r.model = get_string(body, "model", env.model_id);
  r.n = static_cast<int>(get_int(body, "n", 1, 1, kMaxChoices));
  if (!chat && get_bool(body, "echo", false)) throw bad_field("echo", "'echo' is not supported");
  if (field(body, "best_of") && get_int(body, "best_of", 1, 1, 1) != 1) throw bad_field("best_of", "'best_of' must be 1");
  r.stream = get_bool(body, "stream", false);
  r.return_tokens = get_bool(body, "return_tokens", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw bad_field("stream_options", "'stream_options' must be an object");
    r.include_usage = get_bool(*so, "include_usage", false);
  }

  GenRequest& g = r.gen;
  const long long max_new = std::numeric_limits<int>::max();
  g.max_tokens = static_cast<int>(get_int(body, "max_tokens", -1, 0, max_new));
  g.max_tokens = static_cast<int>(get_int(body, "max_completion_tokens", g.max_tokens, 0, max_new));
  SamplerParams& s = g.sampling;
  s.temp = static_cast<float>(get_number(body, "temperature", s.temp, 0.0, 100.0));
  s.top_p = static_cast<float>(get_number(body, "top_p", s.top_p, 0.0, 1.0));
  if (s.top_p <= 0.0f) throw bad_field("top_p", "'top_p' must be in (0, 1], got 0");
  s.top_k = static_cast<int>(get_int(body, "top_k", s.top_k, 0, std::numeric_limits<int>::max()));
  s.min_p = static_cast<float>(get_number(body, "min_p", s.min_p, 0.0, 1.0));
  s.repeat_penalty = static_cast<float>(get_number(body, "repeat_penalty", s.repeat_penalty, 1e-3, 100.0));
  s.repeat_last_n = static_cast<int>(get_int(body, "repeat_last_n", s.repeat_last_n, -1, std::numeric_limits<int>::max()));
  s.typical_p = static_cast<float>(get_number(body, "typical_p", s.typical_p, 0.0, 1.0));
  if (s.typical_p <= 0.0f) throw bad_field("typical_p", "'typical_p' must be in (0, 1], got 0");
  s.xtc_probability = static_cast<float>(get_number(body, "xtc_probability", s.xtc_probability, 0.0, 1.0));
  s.xtc_threshold = static_cast<float>(get_number(body, "xtc_threshold", s.xtc_threshold, 0.0, 1.0));
  s.mirostat = static_cast<int>(get_int(body, "mirostat", 0, 0, 2));
  if (s.mirostat == 1) throw bad_field("mirostat", "'mirostat' 1 (v1) is not implemented; 2 (v2) is");
  s.mirostat_tau = static_cast<float>(get_number(body, "mirostat_tau", s.mirostat_tau, 1e-6, 100.0));
  s.mirostat_eta = static_cast<float>(get_number(body, "mirostat_eta", s.mirostat_eta, 1e-6, 10.0));
  s.dry_multiplier = static_cast<float>(get_number(body, "dry_multiplier", 0.0, 0.0, 100.0));
  s.dry_base = static_cast<float>(get_number(body, "dry_base", s.dry_base, 1.0, 100.0));
  s.dry_allowed_length = static_cast<int>(get_int(body, "dry_allowed_length", s.dry_allowed_length, 0, 1 << 20));
  s.dry_penalty_last_n = static_cast<int>(get_int(body, "dry_penalty_last_n", s.dry_penalty_last_n, -1, std::numeric_limits<int>::max()));
  if (const json* b = field(body, "dry_sequence_breakers")) {
    if (!b->is_array() || b->size() > 64) throw bad_field("dry_sequence_breakers", "'dry_sequence_breakers' must be an array of at most 64 strings");
    g.dry_sequence_breakers.clear();
    for (const json& x : *b) {
      if (!x.is_string() || x.get<std::string>().empty())
        throw bad_field("dry_sequence_breakers", "'dry_sequence_breakers' must hold non-empty strings");
      g.dry_sequence_breakers.push_back(utf8_or_400(x.get<std::string>(), "dry_sequence_breakers"));
    }
  }
  s.presence_penalty = static_cast<float>(get_number(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(get_number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  s.seed = get_seed(body);
  g.stop = get_stop(body);
  g.ignore_eos = get_bool(body, "ignore_eos", false);
  try {
    validate(s);
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }

  if (chat) {
    r.logprobs = get_bool(body, "logprobs", false);
    const int top = static_cast<int>(get_int(body, "top_logprobs", 0, 0, 20));
    if (field(body, "top_logprobs") && !r.logprobs) throw bad_field("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    g.top_logprobs = r.logprobs ? top : -1;
  } else {
    g.top_logprobs = static_cast<int>(get_int(body, "logprobs", -1, 0, 20));
    r.logprobs = g.top_logprobs >= 0;
  }
  g.kv = get_kv(body, env);
  g.logit_bias = get_logit_bias(body, env.cfg.n_vocab);
  OrderedBody ordered(text);
  g.grammar = get_grammar(body, ordered);
  if (chat) {
    r.tools = get_tools(body, ordered, env);
    if (r.tools.active() && r.tools.choice != "auto") {
      // A call is required: generated under the grammar of the tools' parameters, so it is well-formed.
      if (g.grammar) throw bad_field("tool_choice", "a required tool call and 'grammar' / 'response_format' cannot be combined");
      try {
        g.grammar = Grammar::parse(tool_call_gbnf(nlohmann::ordered_json::parse(r.tools.tools_json), r.tools));
        GrammarMatcher(g.grammar, nullptr);
      } catch (const Error& e) {
        throw bad_field("tools", e.what());
      }
    }
  }

  try {
    if (chat) {
      const std::vector<ChatMessage> messages = get_messages(body);
      size_t bytes = 0;
      for (const ChatMessage& m : messages) bytes += m.content.size();
      check_text_fits(bytes, env, "messages");
      std::string rendered;
      g.prompt = env.chat.tokens(messages, r.tools.tools_json, template_kwargs(body, ordered, env), &rendered);
      ReasoningFormat rf = env.reasoning;
      if (const json* f = field(body, "reasoning_format")) {
        if (!f->is_string()) throw bad_field("reasoning_format", "'reasoning_format' must be none, deepseek or auto");
        try {
          rf = reasoning_format_from_name(f->get<std::string>());
        } catch (const Error& e) {
          throw bad_field("reasoning_format", e.what());
        }
      }
      r.reasoning = rf == ReasoningFormat::DeepSeek ||
                    (rf == ReasoningFormat::Auto && env.chat.template_source().find("<think>") != std::string::npos);
      r.think_open = r.reasoning && prompt_opens_thinking(rendered);
    } else {
      g.prompt = get_prompt(body, env);
    }
  } catch (const Error& e) {  // the template raised, or there is none
    throw bad_field(chat ? "messages" : "prompt", e.what());
  }
  if (g.prompt.empty())
    throw bad_field(chat ? "messages" : "prompt", "the prompt is empty and the vocabulary adds no BOS: nothing to generate from");
  if (static_cast<long long>(g.prompt.size()) >= env.n_ctx)
    throw context_exceeded("the prompt", static_cast<long long>(g.prompt.size()), false, env.n_ctx, chat ? "messages" : "prompt");
  return r;
}

std::string apply_template(const std::string& text, const RequestEnv& env) {
  const json body = parse_object(text);
  const std::vector<ChatMessage> messages = get_messages(body);
  OrderedBody ordered(text);
  const ToolRequest tools = get_tools(body, ordered, env);
  try {
    return env.chat.text(messages, tools.tools_json, template_kwargs(body, ordered, env));
  } catch (const Error& e) {
    throw bad_field("messages", e.what());
  }
}

size_t longest_piece_bytes(const Vocab& v) {
  size_t n = 0;
  for (const std::string& t : v.tokens) n = std::max(n, t.size());
  return n;
}

}  // namespace slake::server
