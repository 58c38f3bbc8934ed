#include "stages/io/collect.hpp"

#include "stages/shared/array_feed.hpp"

namespace uvflow::io_collect {
namespace {

class Collect : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { name_ = p.name; }
  void process(Context& ctx) override { array_feed::collect(name_, ctx.item(), ctx.input(data.name)); }

 private:
  std::string name_;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<Collect>()}); }

}  // namespace uvflow::io_collect
