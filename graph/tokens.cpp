#include "graph/tokens.hpp"

namespace uvflow {

Token::~Token() {
  if (!alive_->load()) return;
  if (pending_.empty() || !watcher_) release_();
  else watcher_->after(std::move(pending_), std::move(release_));
}

void Token::add_pending(device::Event e) {
  std::lock_guard lk(m_);
  pending_.push_back(std::move(e));
}

}  // namespace uvflow
