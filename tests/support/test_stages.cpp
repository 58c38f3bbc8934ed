#include "tests/support/test_stages.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "runtime/error.hpp"
#include "runtime/stage_decl.hpp"

// A real invalid access, on purpose; UBSan would diagnose the null store before it faults.
__attribute__((no_sanitize("undefined"))) static void segfault() { *static_cast<volatile int*>(nullptr) = 1; }

// Recursion far deeper than any stack, which the compiler can neither turn into a loop nor remove:
// each frame keeps a page that is written and read after the call.
__attribute__((noinline)) static int overflow_stack(int depth) {
  if (depth == 1 << 30) return 0;  // 4 TiB of stack: never reached
  volatile char page[4096];
  page[depth % 4096] = char(depth);
  return overflow_stack(depth + 1) + page[(depth * 7) % 4096];
}

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

// Each test stage's declaration, then its backend. Every port carries Numbers in host memory.
template <Arity a = Arity::stream>
constexpr In<Numbers> numbers_in(std::string_view name) {
  return {.name = name, .arity = a, .residency = Residency::host, .doc = "numbers"};
}
template <Arity a = Arity::stream>
constexpr Out<Numbers> numbers_out(std::string_view name) {
  return {.name = name, .arity = a, .residency = Residency::host, .doc = "numbers"};
}

namespace source {
inline constexpr Out<Numbers> out = numbers_out("out");
struct Params {
  std::int64_t n = 10;
  std::int64_t size = 4;
  std::int64_t delay_ms = 0;
  bool fail_on_open = false;
};
const StageDecl<Params> decl{
    .type = "test.source",
    .summary = "emit n blocks of `size` copies of the block index",
    .outputs = {out},
    .params = {{&Params::n, {.name = "n", .min = 0, .max = 1e6, .doc = "items"}},
               {&Params::size, {.name = "size", .min = 1, .max = 1e6, .doc = "values per item"}},
               {&Params::delay_ms, {.name = "delay_ms", .unit = "ms", .min = 0, .max = 1e4, .doc = "sleep per item"}},
               {&Params::fail_on_open, {.name = "fail_on_open", .doc = "fail in prepare"}}},
};
}  // namespace source

class Source : public DeclaredStage<source::decl> {
 public:
  void prepare(PrepareContext& ctx) override {
    if (params().fail_on_open && !ctx.dry_run) throw InputError("test.source: cannot open the test input (column TEST)");
  }
  std::int64_t stream_length() const override { return params().n; }
  void process(Context& ctx) override {
    if (params().delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(params().delay_ms));
    ctx.emit(source::out, numbers(ctx.item(), size_t(params().size), double(ctx.item())));
  }
};

namespace scale {
inline constexpr In<Numbers> in = numbers_in("in");
inline constexpr Out<Numbers> out = numbers_out("out");
struct Params {
  double factor = 2.0;
};
const StageDecl<Params> decl{
    .type = "test.scale",
    .summary = "multiply every value by a factor",
    .inputs = {in},
    .outputs = {out},
    .params = {{&Params::factor, {.name = "factor", .min = -100, .max = 100, .doc = "the factor"}}},
    .concurrency = Concurrency::parallel,
};
}  // namespace scale

class Scale : public DeclaredStage<scale::decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(scale::in);
    auto out = numbers(in->index, in->values.size(), 0);
    for (size_t i = 0; i < in->values.size(); ++i) out->values[i] = in->values[i] * params().factor;
    ctx.emit(scale::out, out);
  }
};

namespace sum {
inline constexpr In<Numbers> in = numbers_in("in");
inline constexpr Out<Numbers> total = numbers_out<Arity::once>("total");
struct Params {
  std::int64_t delay_ms = 0;
};
const StageDecl<Params> decl{
    .type = "test.sum",
    .summary = "sum every value of the stream; emit the total at the end",
    .inputs = {in},
    .outputs = {total},
    .params = {{&Params::delay_ms, {.name = "delay_ms", .unit = "ms", .min = 0, .max = 1e4, .doc = "sleep per item"}}},
};
}  // namespace sum

class Sum : public DeclaredStage<sum::decl> {
 public:
  void process(Context& ctx) override {
    if (params().delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(params().delay_ms));
    auto in = ctx.in(sum::in);
    sum_order().push_back(ctx.item());
    for (double x : in->values) total_ += x;
  }
  void finish(Context& ctx) override { ctx.emit(sum::total, numbers(0, 1, total_)); }

 private:
  double total_ = 0;
};

namespace join {
inline constexpr In<Numbers> a = numbers_in("a");
inline constexpr In<Numbers> b = numbers_in("b");
inline constexpr Out<Numbers> out = numbers_out("out");
struct Params {};
const StageDecl<Params> decl{
    .type = "test.join",
    .summary = "add two streams item by item",
    .inputs = {a, b},
    .outputs = {out},
    .concurrency = Concurrency::parallel,
};
}  // namespace join

class Join : public DeclaredStage<join::decl> {
 public:
  void process(Context& ctx) override {
    auto a = ctx.in(join::a);
    auto b = ctx.in(join::b);
    if (a->index != b->index) throw std::logic_error("joined items of different blocks");
    auto out = numbers(a->index, a->values.size(), 0);
    for (size_t i = 0; i < a->values.size(); ++i) out->values[i] = a->values[i] + b->values[i];
    ctx.emit(join::out, out);
  }
};

namespace fail {
inline constexpr In<Numbers> in = numbers_in("in");
inline constexpr Out<Numbers> out = numbers_out("out");
struct Params {
  std::int64_t at = 0;
};
const StageDecl<Params> decl{
    .type = "test.fail",
    .summary = "pass items through; throw at item `at`",
    .inputs = {in},
    .outputs = {out},
    .params = {{&Params::at, {.name = "at", .min = 0, .max = 1e6, .doc = "item that fails"}}},
};
}  // namespace fail

class Fail : public DeclaredStage<fail::decl> {
 public:
  void process(Context& ctx) override {
    if (ctx.item() == params().at) throw std::runtime_error("deliberate failure");
    ctx.emit(fail::out, std::const_pointer_cast<Numbers>(ctx.in(fail::in)));
  }
};

namespace crash {
inline constexpr In<Numbers> in = numbers_in("in");
inline constexpr Out<Numbers> out = numbers_out("out");
struct Params {
  std::int64_t at = 0;
  std::string how = "segv";
};
const StageDecl<Params> decl{
    .type = "test.crash",
    .summary = "pass items through; at item `at`, crash (segv, abort, stack overflow) or ask for more memory than there is (alloc)",
    .inputs = {in},
    .outputs = {out},
    .params = {{&Params::at, {.name = "at", .min = 0, .max = 1e6, .doc = "item that crashes"}},
               {&Params::how, {.name = "how", .choices = {"segv", "abort", "stack", "alloc"}, .doc = "how it crashes"}}},
};
}  // namespace crash

class Crash : public DeclaredStage<crash::decl> {
 public:
  void process(Context& ctx) override {
    if (ctx.item() == params().at) {
      if (params().how == "segv") segfault();  // a plugin's bug, on purpose
      if (params().how == "abort") std::abort();
      if (params().how == "stack") overflow_stack(0);
      if (params().how == "alloc") {
        auto huge = Array<double>::host(std::size_t(1) << 55);  // 256 PiB: more than any machine has
        (void)huge;
      }
    }
    ctx.emit(crash::out, std::const_pointer_cast<Numbers>(ctx.in(crash::in)));
  }
};

namespace write_total {
inline constexpr In<Numbers> in = numbers_in("in");
struct Params {
  std::filesystem::path path;
};
const StageDecl<Params> decl{
    .type = "test.write_total",
    .summary = "write the first value of each item to a file",
    .inputs = {in},
    .params = {{&Params::path, {.name = "path", .doc = "output file", .required = true, .role = PathRole::output}}},
};
}  // namespace write_total

class WriteTotal : public DeclaredStage<write_total::decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(write_total::in);
    std::ofstream f(ctx.output_file(params().path));
    f << in->values[0] << "\n";
  }
};

}  // namespace

std::string stream_state_loop(const std::filesystem::path& total, int size) {
  return "schema: uvflow/1\n"
         "run: {max_in_flight: 2}\n"
         "stages:\n"
         "  - {id: src, type: test.source, params: {n: 6, size: " + std::to_string(size) + "}}\n"
         "  - id: acc\n"
         "    loop: {max_cycles: 3}\n"
         "    state:\n"
         "      s: {init: src, next: add}\n"
         "    stages:\n"
         "      - {id: add, type: test.join, in: {a: s, b: src}}\n"
         "  - {id: sum, type: test.sum, in: {in: acc.s}}\n"
         "  - {id: write, type: test.write_total, params: {path: " + total.string() + "}, in: {in: sum}}\n";
}

void register_test_stages(Registry& r) {
  r.add(source::decl.spec({cpu_backend<Source>()}));
  r.add(scale::decl.spec({cpu_backend<Scale>()}));
  r.add(sum::decl.spec({cpu_backend<Sum>()}));
  r.add(join::decl.spec({cpu_backend<Join>()}));
  r.add(fail::decl.spec({cpu_backend<Fail>()}));
  r.add(write_total::decl.spec({cpu_backend<WriteTotal>()}));
  r.add(crash::decl.spec({cpu_backend<Crash>()}));
}

}  // namespace uvflow::test
