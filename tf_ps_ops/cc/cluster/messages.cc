#include "tf_ps_ops/cc/cluster/messages.h"

#include <cstdint>
#include <map>
#include <set>

#include "tf_ps_ops/cc/common/config.h"

namespace tfps {

namespace {

using Fields = std::map<std::string, std::string>;

// "name=value" lines. Each name at most once and one of `known`: a registrant of the same
// release never sends anything else, so anything else is a corrupt or foreign message.
Status ParseFields(const std::string& what, const std::string& text,
                   const std::set<std::string>& known, Fields* fields) {
  size_t start = 0, line = 1;
  for (; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument(what + ": line " + std::to_string(line) + " '" + item +
                             "' is not name=value");
    }
    const std::string name = item.substr(0, eq);
    if (known.count(name) == 0) return InvalidArgument(what + ": unknown field '" + name + "'");
    if (!fields->emplace(name, item.substr(eq + 1)).second) {
      return InvalidArgument(what + ": field '" + name + "' appears twice");
    }
  }
  return Status::Ok();
}

// The field's value, "" when absent (without inserting it, unlike operator[]).
std::string Get(const Fields& fields, const std::string& name) {
  auto it = fields.find(name);
  return it == fields.end() ? std::string() : it->second;
}

std::string Format(const Fields& fields) {
  std::string out;
  for (const auto& f : fields) out += f.first + "=" + f.second + "\n";
  return out;
}

// All digits (no sign, no space, no trailing junk) and within [low, high]: what atoi
// would silently turn into 0 or a truncated number is an error naming the field.
Status ParseNumber(const std::string& what, const std::string& field, const std::string& text,
                   int64_t low, int64_t high, int* out) {
  const Status bad = InvalidArgument(what + ": field '" + field + "' is '" + text +
                                     "', not a whole number from " + std::to_string(low) +
                                     " to " + std::to_string(high));
  if (text.empty() || text.size() > 10) return bad;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return bad;
    value = value * 10 + (c - '0');
  }
  if (value < low || value > high) return bad;
  *out = static_cast<int>(value);
  return Status::Ok();
}

Status ParseField(const std::string& what, const Fields& fields, const std::string& field,
                  int64_t low, int64_t high, int* out) {
  auto it = fields.find(field);
  if (it == fields.end()) return InvalidArgument(what + ": field '" + field + "' is missing");
  return ParseNumber(what, field, it->second, low, high, out);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(',', start);
    out.push_back(text.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string JoinList(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// Each "host:port" of a list, the port within [low_port, 65535] (the host's own colons,
// IPv6, stay with the host: the port follows the last one).
Status CheckEndpoints(const std::string& what, const std::string& field,
                      const std::vector<std::string>& endpoints, int low_port) {
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const std::string& e = endpoints[i];
    const size_t colon = e.rfind(':');
    const std::string name = field + "[" + std::to_string(i) + "]";
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgument(what + ": field '" + name + "' is '" + e + "', not host:port");
    }
    int port = 0;
    TFPS_RETURN_IF_ERROR(ParseNumber(what, name + " port", e.substr(colon + 1), low_port,
                                     65535, &port));
  }
  return Status::Ok();
}

// "7000/7001": a server's ports, each within 1..65535, 1 to kMaxIoThreads of them.
Status ParsePorts(const std::string& what, const std::string& field, const std::string& text,
                  char separator, std::vector<int>* ports) {
  ports->clear();
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(separator, start);
    const std::string item = text.substr(start, pos - start);
    if (ports->size() == kMaxIoThreads) {
      return InvalidArgument(what + ": field '" + field + "' lists more than " +
                             std::to_string(kMaxIoThreads) + " ports (TFPS_IO_THREADS' limit)");
    }
    int port = 0;
    TFPS_RETURN_IF_ERROR(ParseNumber(what, field, item, 1, 65535, &port));
    ports->push_back(port);
    if (pos == std::string::npos) return Status::Ok();
    start = pos + 1;
  }
}

std::string JoinPorts(const std::vector<int>& ports, char separator) {
  std::string out;
  for (int port : ports) {
    if (!out.empty()) out += separator;
    out += std::to_string(port);
  }
  return out;
}

// The view's "server_ports": one "/"-separated list per server, the first port that of
// its "servers" entry.
Status ParseServerPorts(const std::string& what, const std::string& text, ClusterView* view) {
  const std::vector<std::string> lists = SplitList(text);
  if (lists.size() != view->servers.size()) {
    return InvalidArgument(what + ": field 'server_ports' has " + std::to_string(lists.size()) +
                           " entries for " + std::to_string(view->servers.size()) + " servers");
  }
  view->server_ports.resize(lists.size());
  for (size_t i = 0; i < lists.size(); ++i) {
    const std::string field = "server_ports[" + std::to_string(i) + "]";
    TFPS_RETURN_IF_ERROR(ParsePorts(what, field, lists[i], '/', &view->server_ports[i]));
    const std::string& address = view->servers[i];
    const std::string first = address.substr(address.rfind(':') + 1);
    if (std::to_string(view->server_ports[i][0]) != first) {
      return InvalidArgument(what + ": field '" + field + "' starts with port " +
                             std::to_string(view->server_ports[i][0]) + ", not " + first +
                             " as servers[" + std::to_string(i) + "] does");
    }
  }
  return Status::Ok();
}

constexpr int64_t kMaxInt = INT32_MAX;
const char kRegisterWhat[] = "register message";
const char kReplyWhat[] = "register reply";

}  // namespace

std::string FormatRegister(const RegisterRequest& r) {
  Fields fields;
  if (!r.host.empty()) fields["host"] = r.host;
  if (r.role == Role::kServer) {
    fields["role"] = "server";
    fields["port"] = std::to_string(r.port);
    if (!r.more_ports.empty()) fields["more_ports"] = JoinPorts(r.more_ports, ',');
  } else {
    fields["role"] = "worker";
    fields["rank"] = std::to_string(r.rank);
    fields["size"] = std::to_string(r.size);
    fields["peer_port"] = std::to_string(r.port);
    if (!r.consistency.bsp()) fields["consistency"] = ConsistencyName(r.consistency);
  }
  return Format(fields);
}

Status ParseRegister(const std::string& text, RegisterRequest* r) {
  Fields fields;
  TFPS_RETURN_IF_ERROR(ParseFields(kRegisterWhat, text,
                                   {"role", "host", "port", "more_ports", "rank", "size",
                                    "peer_port", "consistency"},
                                   &fields));
  *r = RegisterRequest();
  r->host = Get(fields, "host");
  const std::string role = Get(fields, "role");
  if (role == "server") {
    r->role = Role::kServer;
    TFPS_RETURN_IF_ERROR(ParseField(kRegisterWhat, fields, "port", 1, 65535, &r->port));
    if (fields.count("more_ports") == 0) return Status::Ok();
    TFPS_RETURN_IF_ERROR(
        ParsePorts(kRegisterWhat, "more_ports", Get(fields, "more_ports"), ',', &r->more_ports));
    if (r->more_ports.size() >= static_cast<size_t>(kMaxIoThreads)) {
      return InvalidArgument(std::string(kRegisterWhat) + ": field 'more_ports' lists " +
                             std::to_string(r->more_ports.size()) + " ports; a server has at "
                             "most " + std::to_string(kMaxIoThreads) + " in all (TFPS_IO_THREADS)");
    }
    return Status::Ok();
  }
  if (role != "worker") return InvalidArgument("unknown role '" + role + "'");
  r->role = Role::kWorker;
  TFPS_RETURN_IF_ERROR(ParseField(kRegisterWhat, fields, "rank", 0, kMaxInt - 1, &r->rank));
  TFPS_RETURN_IF_ERROR(ParseField(kRegisterWhat, fields, "size", 1, kMaxInt, &r->size));
  if (fields.count("consistency")) {
    TFPS_RETURN_IF_ERROR(ParseConsistency(std::string(kRegisterWhat) + ": field 'consistency'",
                                          Get(fields, "consistency"), &r->consistency));
  }
  return ParseField(kRegisterWhat, fields, "peer_port", 0, 65535, &r->port);
}

std::string FormatWaiting(const std::string& waiting) {
  return Format({{"status", "waiting"}, {"waiting", waiting}});
}

std::string FormatClusterView(const ClusterView& view) {
  Fields fields = {{"status", "ready"},
                   {"servers", JoinList(view.servers)},
                   {"workers", JoinList(view.worker_hosts)}};
  if (!view.consistency.bsp()) fields["consistency"] = ConsistencyName(view.consistency);
  if (!view.server_ports.empty()) {
    std::vector<std::string> lists;
    for (const std::vector<int>& ports : view.server_ports) {
      lists.push_back(JoinPorts(ports, '/'));
    }
    fields["server_ports"] = JoinList(lists);
  }
  if (view.server_id >= 0) {
    fields["server_id"] = std::to_string(view.server_id);
  } else {
    fields["peers"] = JoinList(view.worker_peers);
  }
  return Format(fields);
}

Status ParseRegisterReply(const std::string& text, bool* ready, std::string* waiting,
                          ClusterView* view) {
  Fields fields;
  TFPS_RETURN_IF_ERROR(ParseFields(
      kReplyWhat, text, {"status", "waiting", "servers", "server_ports", "workers", "peers",
                          "server_id", "consistency"},
      &fields));
  *ready = Get(fields, "status") == "ready";
  if (!*ready) {
    if (Get(fields, "status") != "waiting") {
      return InvalidArgument(std::string(kReplyWhat) + ": field 'status' is '" +
                             Get(fields, "status") + "', neither ready nor waiting");
    }
    *waiting = Get(fields, "waiting");
    return Status::Ok();
  }
  *view = ClusterView();
  view->servers = SplitList(Get(fields, "servers"));
  view->worker_hosts = SplitList(Get(fields, "workers"));
  view->worker_peers = SplitList(Get(fields, "peers"));
  if (fields.count("consistency")) {
    TFPS_RETURN_IF_ERROR(ParseConsistency(std::string(kReplyWhat) + ": field 'consistency'",
                                          Get(fields, "consistency"), &view->consistency));
  }
  TFPS_RETURN_IF_ERROR(CheckEndpoints(kReplyWhat, "servers", view->servers, 1));
  TFPS_RETURN_IF_ERROR(CheckEndpoints(kReplyWhat, "peers", view->worker_peers, 0));
  if (fields.count("server_ports")) {
    TFPS_RETURN_IF_ERROR(ParseServerPorts(kReplyWhat, Get(fields, "server_ports"), view));
  }
  if (fields.count("peers") && view->worker_peers.size() != view->worker_hosts.size()) {
    return InvalidArgument(std::string(kReplyWhat) + ": " +
                           std::to_string(view->worker_peers.size()) + " peers for " +
                           std::to_string(view->worker_hosts.size()) + " workers");
  }
  if (fields.count("server_id") == 0) return Status::Ok();
  const int servers = static_cast<int>(view->servers.size());
  return ParseField(kReplyWhat, fields, "server_id", 0, servers - 1, &view->server_id);
}

std::string ServerAddressFor(const ClusterView& view, int server, int rank) {
  const std::string& address = view.servers[server];
  if (view.server_ports.empty() || rank < 0) return address;
  const std::vector<int>& ports = view.server_ports[server];
  const int port = ports[static_cast<size_t>(rank) % ports.size()];
  return address.substr(0, address.rfind(':') + 1) + std::to_string(port);
}

}  // namespace tfps
