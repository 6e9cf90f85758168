// The tuned-parameter database (lowbit/tune.h): parsing, merging, lookup
// with the device-family fallback, and the database in use.
#include "lowbit/tune.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <tuple>

#include "core/check.h"
#include "core/tune_shipped.h"
#include "lowbit/ops/kernel_config.h"

namespace lowbit {
namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> words(std::string_view s) {
  std::istringstream in{std::string(s)};
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string joined(const std::vector<std::string>& w) {
  std::string s;
  for (const std::string& x : w) {
    if (!s.empty()) s += ' ';
    s += x;
  }
  return s;
}

auto order(const TuneEntry& e) { return std::tie(e.op, e.device, e.version, e.key); }

bool same_slot(const TuneEntry& a, const TuneEntry& b) { return order(a) == order(b); }

}  // namespace

std::string device_family(std::string_view device) {
  // The words up to the first holding a digit (the model), cut at its first '-'.
  std::string out;
  for (const std::string& w : words(device)) {
    const bool model =
        std::any_of(w.begin(), w.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (!out.empty()) out += ' ';
    out += model ? w.substr(0, w.find('-')) : w;
    if (model) break;
  }
  return out;
}

TuneDb TuneDb::parse(std::string_view text, const std::string& origin) {
  TuneDb db;
  std::istringstream in{std::string(text)};
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const std::string body = trim(line.substr(0, line.find('#')));
    if (body.empty()) continue;
    std::vector<std::string> fields;
    for (size_t start = 0;;) {
      const size_t bar = body.find('|', start);
      fields.push_back(trim(std::string_view(body).substr(start, bar == std::string::npos ? bar : bar - start)));
      if (bar == std::string::npos) break;
      start = bar + 1;
    }
    LOWBIT_REQUIRE(fields.size() == 5 && !fields[0].empty() && !fields[1].empty(), ErrorCode::invalid_argument, origin,
                   ":", line_no, ": expected 'op | device | version | key | parameters' (got '", body, "')");
    TuneEntry e{fields[0], fields[1], fields[2], words(fields[3]), {}, {}};
    const std::vector<std::string> params = words(fields[4]);
    if (params.size() == 1 && std::isalpha(static_cast<unsigned char>(params[0][0]))) {  // a kernel config's name
      if (params[0] != "default") {
        try {
          (void)parse_kernel_config(params[0]);
        } catch (const Error& err) {
          core::fail(ErrorCode::invalid_argument, core::cat(origin, ":", line_no, ": ", err.what()));
        }
      }
      e.config = params[0];
      db.set(std::move(e));
      continue;
    }
    for (const std::string& w : params) {
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(w, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      LOWBIT_REQUIRE(used == w.size(), ErrorCode::invalid_argument, origin, ":", line_no,
                     ": parameters must be integers or one kernel config name (got '", w, "')");
      e.params.push_back(v);
    }
    LOWBIT_REQUIRE(!e.params.empty(), ErrorCode::invalid_argument, origin, ":", line_no, ": no parameters");
    db.set(std::move(e));
  }
  return db;
}

TuneDb TuneDb::load(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return TuneDb{};
  std::ifstream f(path);
  LOWBIT_REQUIRE(f.good(), ErrorCode::io_error, path.string(), ": cannot be read");
  std::ostringstream text;
  text << f.rdbuf();
  return parse(text.str(), path.string());
}

void TuneDb::set(TuneEntry entry) {
  const auto at = std::lower_bound(entries_.begin(), entries_.end(), entry,
                                   [](const TuneEntry& a, const TuneEntry& b) { return order(a) < order(b); });
  if (at != entries_.end() && same_slot(*at, entry)) {
    *at = std::move(entry);
  } else {
    entries_.insert(at, std::move(entry));
  }
}

void TuneDb::merge(const TuneDb& other) {
  for (const TuneEntry& e : other.entries_) set(e);
}

std::string TuneDb::dump() const {
  std::string out = "# op | device | version | key | parameters\n";
  for (const TuneEntry& e : entries_) {
    std::string params = e.config;
    for (int64_t p : e.params) {
      if (!params.empty()) params += ' ';
      params += std::to_string(p);
    }
    out += e.op + " | " + e.device + " | " + e.version + " | " + joined(e.key) + " | " + params + "\n";
  }
  return out;
}

std::vector<TuneEntry> TuneDb::match(std::string_view op, std::string_view device, std::string_view version,
                                     const std::vector<std::string>& key) const {
  std::vector<TuneEntry> out;
  for (const TuneEntry& e : entries_) {
    if (e.op != op || e.device != device || e.version != version || e.key.size() != key.size()) continue;
    bool hit = true;
    for (size_t i = 0; i < key.size() && hit; ++i) hit = key[i] == "*" || key[i] == e.key[i];
    if (hit) out.push_back(e);
  }
  return out;
}

const TuneEntry* TuneDb::find(std::string_view op, std::string_view device, std::string_view version,
                              const std::vector<std::string>& key, bool exact) const {
  for (const TuneEntry& e : entries_) {
    if (e.op == op && e.device == device && e.version == version && e.key == key) return &e;
  }
  if (exact) return nullptr;
  const std::string family = device_family(device);
  for (const TuneEntry& e : entries_) {  // sorted: the first device of the family by name
    if (e.op == op && e.version == version && e.key == key && device_family(e.device) == family) return &e;
  }
  return nullptr;
}

std::optional<std::vector<int64_t>> TuneDb::get(std::string_view op, std::string_view device, std::string_view version,
                                                const std::vector<std::string>& key, bool exact) const {
  const TuneEntry* e = find(op, device, version, key, exact);
  if (e == nullptr || !e->config.empty()) return std::nullopt;
  return e->params;
}

std::optional<std::string> TuneDb::get_config(std::string_view op, std::string_view device, std::string_view version,
                                              const std::vector<std::string>& key, bool exact) const {
  const TuneEntry* e = find(op, device, version, key, exact);
  if (e == nullptr || e->config.empty()) return std::nullopt;
  return e->config;
}

bool TuneDb::has_op(std::string_view op) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const TuneEntry& e) { return e.op == op; });
}

void save_tune_db(const TuneDb& db, const std::filesystem::path& path) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << db.dump();
    f.flush();
    LOWBIT_REQUIRE(f.good(), ErrorCode::io_error, tmp.string(), ": cannot be written");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    core::fail(ErrorCode::io_error, core::cat(path.string(), ": cannot be replaced"));
  }
}

std::filesystem::path user_tune_db_path() {
  if (const char* p = std::getenv("LOWBIT_TUNE_DB"); p != nullptr && *p != '\0') return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::filesystem::path(x) / "lowbit" / "tune.txt";
  }
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : ".") / ".cache" / "lowbit" / "tune.txt";
}

const TuneDb& tune_db() {
  static const TuneDb db = [] {
    TuneDb d = TuneDb::parse(core::kShippedTuneDb, "lowbit's shipped tune database");
    d.merge(TuneDb::load(user_tune_db_path()));
    return d;
  }();
  return db;
}

}  // namespace lowbit
