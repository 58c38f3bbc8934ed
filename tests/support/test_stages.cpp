#include "tests/support/test_stages.hpp"

#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include "runtime/error.hpp"

namespace uvflow::test {

std::vector<std::int64_t>& sum_order() {
  static std::vector<std::int64_t> v;
  return v;
}

namespace {

std::shared_ptr<Numbers> numbers(std::int64_t index, size_t n, double value) {
  auto p = std::make_shared<Numbers>();
  p->index = index;
  p->values = Array<double>::host(n);
  for (auto& x : p->values) x = value;
  return p;
}

class Source : public Stage {
 public:
  void configure(const Params& p) override {
    n_ = p.integer("n");
    size_ = p.integer("size");
    delay_ms_ = p.integer("delay_ms");
    fail_ = p.boolean("fail_on_open");
  }
  void prepare(PrepareContext& ctx) override {
    if (fail_ && !ctx.dry_run) throw InputError("test.source: cannot open the test input (column TEST)");
  }
  std::int64_t stream_length() const override { return n_; }
  void process(Context& ctx) override {
    if (delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    ctx.emit("out", numbers(ctx.item(), size_t(size_), double(ctx.item())));
  }

 private:
  std::int64_t n_ = 0, size_ = 0, delay_ms_ = 0;
  bool fail_ = false;
};

class Scale : public Stage {
 public:
  void configure(const Params& p) override { f_ = p.number("factor"); }
  void process(Context& ctx) override {
    auto in = ctx.in<Numbers>("in");
    auto out = numbers(in->index, in->values.size(), 0);
    for (size_t i = 0; i < in->values.size(); ++i) out->values[i] = in->values[i] * f_;
    ctx.emit("out", out);
  }

 private:
  double f_ = 1;
};

class Sum : public Stage {
 public:
  void configure(const Params& p) override { delay_ms_ = p.integer("delay_ms"); }
  void process(Context& ctx) override {
    if (delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    auto in = ctx.in<Numbers>("in");
    sum_order().push_back(ctx.item());
    for (double x : in->values) total_ += x;
  }
  void finish(Context& ctx) override { ctx.emit("total", numbers(0, 1, total_)); }

 private:
  double total_ = 0;
  std::int64_t delay_ms_ = 0;
};

class Join : public Stage {
 public:
  void process(Context& ctx) override {
    auto a = ctx.in<Numbers>("a");
    auto b = ctx.in<Numbers>("b");
    if (a->index != b->index) throw std::logic_error("joined items of different blocks");
    auto out = numbers(a->index, a->values.size(), 0);
    for (size_t i = 0; i < a->values.size(); ++i) out->values[i] = a->values[i] + b->values[i];
    ctx.emit("out", out);
  }
};

class Fail : public Stage {
 public:
  void configure(const Params& p) override { at_ = p.integer("at"); }
  void process(Context& ctx) override {
    if (ctx.item() == at_) throw std::runtime_error("deliberate failure");
    ctx.emit("out", std::const_pointer_cast<Numbers>(ctx.in<Numbers>("in")));
  }

 private:
  std::int64_t at_ = 0;
};

class WriteTotal : public Stage {
 public:
  void configure(const Params& p) override { path_ = p.string("path"); }
  void process(Context& ctx) override {
    auto in = ctx.in<Numbers>("in");
    std::ofstream f(ctx.output_file(path_));
    f << in->values[0] << "\n";
  }

 private:
  std::string path_;
};

PortSpec numbers_port(const char* name, Arity a = Arity::stream) { return {name, kNumbers, a, Residency::host, "numbers"}; }

}  // namespace

void register_test_stages(Registry& r) {
  {
    StageSpec s{"test.source", "emit n blocks of `size` copies of the block index"};
    s.outputs = {numbers_port("out")};
    s.params = {{"n", ParamType::integer, std::int64_t(10), false, "", 0, 1e6, {}, {}, "items"},
                {"size", ParamType::integer, std::int64_t(4), false, "", 1, 1e6, {}, {}, "values per item"},
                {"delay_ms", ParamType::integer, std::int64_t(0), false, "ms", 0, 1e4, {}, {}, "sleep per item"},
                {"fail_on_open", ParamType::boolean, false, false, "", {}, {}, {}, {}, "fail in prepare"}};
    s.backends = {{"cpu", [] { return std::make_unique<Source>(); }}};
    r.add(s);
  }
  {
    StageSpec s{"test.scale", "multiply every value by a factor"};
    s.inputs = {numbers_port("in")};
    s.outputs = {numbers_port("out")};
    s.params = {{"factor", ParamType::number, 2.0, false, "", -100, 100, {}, {}, "the factor"}};
    s.backends = {{"cpu", [] { return std::make_unique<Scale>(); }}};
    s.concurrency = Concurrency::parallel;
    r.add(s);
  }
  {
    StageSpec s{"test.sum", "sum every value of the stream; emit the total at the end"};
    s.inputs = {numbers_port("in")};
    s.outputs = {numbers_port("total", Arity::once)};
    s.params = {{"delay_ms", ParamType::integer, std::int64_t(0), false, "ms", 0, 1e4, {}, {}, "sleep per item"}};
    s.backends = {{"cpu", [] { return std::make_unique<Sum>(); }}};
    r.add(s);
  }
  {
    StageSpec s{"test.join", "add two streams item by item"};
    s.inputs = {numbers_port("a"), numbers_port("b")};
    s.outputs = {numbers_port("out")};
    s.backends = {{"cpu", [] { return std::make_unique<Join>(); }}};
    s.concurrency = Concurrency::parallel;
    r.add(s);
  }
  {
    StageSpec s{"test.fail", "pass items through; throw at item `at`"};
    s.inputs = {numbers_port("in")};
    s.outputs = {numbers_port("out")};
    s.params = {{"at", ParamType::integer, std::int64_t(0), false, "", 0, 1e6, {}, {}, "item that fails"}};
    s.backends = {{"cpu", [] { return std::make_unique<Fail>(); }}};
    r.add(s);
  }
  {
    StageSpec s{"test.write_total", "write the first value of each item to a file"};
    s.inputs = {numbers_port("in")};
    s.params = {{"path", ParamType::path, {}, false, "", {}, {}, {}, {}, "output file"}};
    s.backends = {{"cpu", [] { return std::make_unique<WriteTotal>(); }}};
    r.add(s);
  }
}

}  // namespace uvflow::test
