#include "core/json.hpp"

#include <cmath>
#include <limits>

namespace loupe {
namespace {

using json = Json;

const json& require(const json& object, std::string_view field) {
  if (!object.is_object()) {
    throw Error(ErrorCode::kInput, "expected a JSON object holding '" + std::string(field) + "'");
  }
  auto it = object.find(std::string(field));
  if (it == object.end()) {
    throw Error(ErrorCode::kInput, "missing field '" + std::string(field) + "'");
  }
  return *it;
}

std::string require_string(const json& object, std::string_view field) {
  const json& value = require(object, field);
  if (!value.is_string()) {
    throw Error(ErrorCode::kInput, "field '" + std::string(field) + "' must be a string, found " +
                                       std::string(value.type_name()));
  }
  return value.get<std::string>();
}

json params_to_json(const Params& params) {
  json out = json::object();
  for (const auto& [name, value] : params) out[name] = value_to_json(value);
  return out;
}

Params params_from_json(const json& object, std::string_view field) {
  if (!object.is_object()) {
    throw Error(ErrorCode::kInput, "field '" + std::string(field) + "' must be an object");
  }
  Params params;
  for (auto it = object.begin(); it != object.end(); ++it) {
    params.emplace_back(it.key(), value_from_json(it.value(), std::string(field) + "." + it.key()));
  }
  return params;
}

}  // namespace

json number_to_json(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

double number_from_json(const json& value, std::string_view field) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf") return -std::numeric_limits<double>::infinity();
  }
  throw Error(ErrorCode::kInput, "field '" + std::string(field) +
                                     "' must be a number (or \"nan\", \"inf\", \"-inf\"), found " +
                                     value.dump());
}

json value_to_json(const Value& value) {
  struct Visitor {
    json operator()(bool b) const { return b; }
    json operator()(int64_t i) const { return i; }
    json operator()(double d) const { return number_to_json(d); }
    json operator()(const std::string& s) const { return s; }
  };
  return std::visit(Visitor{}, value);
}

Value value_from_json(const json& value, std::string_view field) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) return value.get<std::string>();
  throw Error(ErrorCode::kInput, "field '" + std::string(field) +
                                     "' must be a bool, number or string, found " +
                                     std::string(value.type_name()));
}

json finding_to_json(const Finding& finding) {
  json where = {{"subject", finding.where.subject},
                {"probe", finding.where.probe},
                {"path", finding.where.path},
                {"params", params_to_json(finding.where.params)},
                {"coords", json::object()},
                {"thread", nullptr},
                {"interval_ns", nullptr}};
  for (const auto& [name, coord] : finding.where.coords) where["coords"][name] = coord;
  if (finding.where.thread) where["thread"] = *finding.where.thread;
  if (finding.where.interval_ns) {
    where["interval_ns"] = {finding.where.interval_ns->first, finding.where.interval_ns->second};
  }
  json metrics = json::object();
  for (const auto& [name, value] : finding.evidence.metrics) metrics[name] = number_to_json(value);
  json events = json::array();
  for (const auto& event : finding.evidence.events) {
    events.push_back({{"id", event.id},
                      {"name", event.name},
                      {"track", event.track},
                      {"start_ns", event.start_ns},
                      {"end_ns", event.end_ns}});
  }
  // kind (and verify_with for inferred findings) were added by issue 25: readers of older
  // documents without them take the layer's default.
  json evidence = {{"metrics", std::move(metrics)},
                   {"events", std::move(events)},
                   {"files", finding.evidence.files},
                   {"kind", evidence_kind_name(evidence_kind(finding))}};
  // An inferred finding's `next` is the experiment that would verify it; one without a `next`
  // names the controlled A/B here (not repeated otherwise: answers have a byte budget).
  if (evidence_kind(finding) == EvidenceKind::kInferred && finding.next.empty()) {
    evidence["verify_with"] = verification_experiment(finding);
  }
  return {{"id", finding.id},
          {"layer", layer_name(finding.layer)},
          {"severity", severity_name(finding.severity)},
          {"claim", finding.claim},
          {"where", std::move(where)},
          {"evidence", std::move(evidence)},
          {"next", finding.next},
          {"reproduce", finding.reproduce}};
}

Finding finding_from_json(const json& object) {
  Finding finding;
  finding.id = require_string(object, "id");
  finding.layer = parse_layer(require_string(object, "layer"));
  finding.severity = parse_severity(require_string(object, "severity"));
  finding.claim = require_string(object, "claim");
  finding.next = require_string(object, "next");
  finding.reproduce = require_string(object, "reproduce");

  const json& where = require(object, "where");
  finding.where.subject = require_string(where, "subject");
  finding.where.probe = require_string(where, "probe");
  finding.where.path = require_string(where, "path");
  finding.where.params = params_from_json(require(where, "params"), "where.params");
  const json& coords = require(where, "coords");
  if (!coords.is_object()) throw Error(ErrorCode::kInput, "field 'where.coords' must be an object");
  for (auto it = coords.begin(); it != coords.end(); ++it) {
    if (!it.value().is_number_integer()) {
      throw Error(ErrorCode::kInput, "field 'where.coords." + it.key() + "' must be an integer");
    }
    finding.where.coords.emplace_back(it.key(), it.value().get<int64_t>());
  }
  const json& thread = require(where, "thread");
  if (thread.is_string()) finding.where.thread = thread.get<std::string>();
  const json& interval = require(where, "interval_ns");
  if (interval.is_array() && interval.size() == 2 && interval[0].is_number_integer() &&
      interval[1].is_number_integer()) {
    finding.where.interval_ns = {interval[0].get<int64_t>(), interval[1].get<int64_t>()};
  } else if (!interval.is_null()) {
    throw Error(ErrorCode::kInput, "field 'where.interval_ns' must be null or [start, end]");
  }

  const json& evidence = require(object, "evidence");
  const json& metrics = require(evidence, "metrics");
  if (!metrics.is_object()) {
    throw Error(ErrorCode::kInput, "field 'evidence.metrics' must be an object");
  }
  for (auto it = metrics.begin(); it != metrics.end(); ++it) {
    finding.evidence.metrics.emplace_back(
        it.key(), number_from_json(it.value(), "evidence.metrics." + it.key()));
  }
  for (const json& event : require(evidence, "events")) {
    EventRef ref;
    ref.id = require(event, "id").get<uint64_t>();
    ref.name = require_string(event, "name");
    ref.track = require_string(event, "track");
    ref.start_ns = require(event, "start_ns").get<int64_t>();
    ref.end_ns = require(event, "end_ns").get<int64_t>();
    finding.evidence.events.push_back(std::move(ref));
  }
  for (const json& file : require(evidence, "files")) {
    if (!file.is_string()) throw Error(ErrorCode::kInput, "evidence.files must hold strings");
    finding.evidence.files.push_back(file.get<std::string>());
  }
  if (evidence.contains("kind")) {
    if (!evidence["kind"].is_string()) {
      throw Error(ErrorCode::kInput, "field 'evidence.kind' must be a string");
    }
    const EvidenceKind kind = parse_evidence_kind(evidence["kind"].get<std::string>());
    // Kept only when it differs from the layer's default, so a document read back compares equal.
    Finding probe = finding;
    probe.evidence.kind.reset();
    if (kind != evidence_kind(probe)) finding.evidence.kind = kind;
  }
  return finding;
}

json stats_to_json(const StatsRegistry& stats) {
  json out = json::object();
  for (size_t index = 0; index < static_cast<size_t>(Stat::kCount); ++index) {
    Stat stat = static_cast<Stat>(index);
    if (stats.count(stat) == 0) continue;
    const StatInfo& info = stat_info(stat);
    out[std::string(info.name)] = {{"count", stats.count(stat)},
                                   {"severity", stat_severity_name(info.severity)},
                                   {"description", info.description}};
  }
  return out;
}

json envelope_to_json(const Envelope& envelope) {
  json findings = json::array();
  for (const auto& finding : envelope.findings) findings.push_back(finding_to_json(finding));
  json error = nullptr;
  if (envelope.error) {
    error = {{"code", error_code_name(envelope.error->code())},
             {"message", envelope.error->message()},
             {"hint", envelope.error->hint()}};
  }
  return {{"loupe", 1},
          {"kind", envelope.kind},
          {"verdict", verdict_name(envelope.verdict)},
          {"findings", std::move(findings)},
          {"data", envelope.data},
          {"error", std::move(error)},
          {"truncated", envelope.truncated},
          {"stats", stats_to_json(envelope.stats)}};
}

std::string render_envelope(const Envelope& envelope) {
  // Replace invalid UTF-8 instead of throwing: a message may quote bytes from a broken file.
  return envelope_to_json(envelope).dump(-1, ' ', false,
                                         nlohmann::detail::error_handler_t::replace);
}

std::string json_error_text(const std::exception& error) {
  std::string text = error.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    const size_t close = text.find("] ");
    if (close != std::string::npos) text.erase(0, close + 2);
    // "parse error at line 1, column 2: ..." reads as a position already.
    if (text.rfind("parse error at ", 0) == 0) text.erase(0, 15);
  }
  return text;
}

}  // namespace loupe
