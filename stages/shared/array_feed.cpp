#include "stages/shared/array_feed.hpp"

#include <algorithm>
#include <map>

namespace uvflow::array_feed {
namespace {

struct Table {
  std::mutex m;
  std::map<std::string, std::shared_ptr<const VisArrays>> vis;
  std::map<std::string, std::shared_ptr<const ImageArrays>> images;
  std::map<std::string, std::vector<std::pair<std::int64_t, std::shared_ptr<const Payload>>>> collected;
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

void put(const std::string& name, VisArrays a) {
  auto& t = table();
  std::lock_guard lk(t.m);
  t.vis[name] = std::make_shared<const VisArrays>(std::move(a));
}

void put(const std::string& name, ImageArrays a) {
  auto& t = table();
  std::lock_guard lk(t.m);
  t.images[name] = std::make_shared<const ImageArrays>(std::move(a));
}

std::shared_ptr<const VisArrays> vis(const std::string& name) {
  auto& t = table();
  std::lock_guard lk(t.m);
  auto it = t.vis.find(name);
  return it == t.vis.end() ? nullptr : it->second;
}

std::shared_ptr<const ImageArrays> images(const std::string& name) {
  auto& t = table();
  std::lock_guard lk(t.m);
  auto it = t.images.find(name);
  return it == t.images.end() ? nullptr : it->second;
}

void collect(const std::string& name, std::int64_t item, std::shared_ptr<const Payload> p) {
  auto& t = table();
  std::lock_guard lk(t.m);
  t.collected[name].emplace_back(item, std::move(p));
}

std::vector<std::shared_ptr<const Payload>> take(const std::string& name) {
  auto& t = table();
  std::vector<std::pair<std::int64_t, std::shared_ptr<const Payload>>> items;
  {
    std::lock_guard lk(t.m);
    auto it = t.collected.find(name);
    if (it == t.collected.end()) return {};
    items = std::move(it->second);
    t.collected.erase(it);
  }
  // A parallel producer may hand items on out of order.
  std::stable_sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<std::shared_ptr<const Payload>> out;
  for (auto& [_, p] : items) out.push_back(std::move(p));
  return out;
}

void clear() {
  decltype(Table::vis) v;
  decltype(Table::images) i;
  decltype(Table::collected) c;
  auto& t = table();
  {
    std::lock_guard lk(t.m);
    v.swap(t.vis);
    i.swap(t.images);
    c.swap(t.collected);
  }
  // Dropped here, outside the lock: external arrays' owners may need the interpreter's lock.
}

}  // namespace uvflow::array_feed
