#include "bindings/plugin.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bindings/update_kernel.h"
#include "ops/registry.h"

#ifndef METAOP_PLUGIN_DIR
#define METAOP_PLUGIN_DIR ""
#endif

namespace metaop {

void PluginRegistrar::add(BindingDescription d) {
  if (d.name.empty() || !d.make)
    fail("plugin: a binding description needs a name and a make function ('{}')", d.name);
  bindings_.push_back(std::move(d));
}

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::atomic<int> g_threads{1};

// --- loading a plugin into this process

struct Loaded {
  std::string path;
  void* handle = nullptr;
  PluginRegistrar registrar;
};

std::mutex g_load_mutex;
std::vector<std::unique_ptr<Loaded>>& loaded() {
  static std::vector<std::unique_ptr<Loaded>> all;
  return all;
}

// A plugin's references to MetaOp's own code resolve against the process's global symbols. In
// the metaop executable they are there (it exports them); when MetaOp is a shared library loaded
// locally (the Python module, which Python loads with RTLD_LOCAL), that library is made global
// first, in this process only: plugins load in the worker processes MetaOp forks.
void make_metaop_global() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info self{};
    if (::dladdr(reinterpret_cast<void*>(&make_metaop_global), &self) == 0 || !self.dli_fname)
      return;
    void* exe = ::dlopen(nullptr, RTLD_NOW);
    void* here = ::dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (here && here != exe) ::dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  });
}

// The libraries a shared object needs (its DT_NEEDED entries), read from the file's dynamic
// section; empty when the file is not a 64-bit ELF object.
std::vector<std::string> needed_libraries(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  auto fits = [&](std::uint64_t off, std::uint64_t n) {
    return off <= bytes.size() && n <= bytes.size() - off;
  };
  if (!fits(0, sizeof(Elf64_Ehdr)) || bytes.compare(0, SELFMAG, ELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64)
    return out;
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  auto section = [&](std::uint64_t i) {
    Elf64_Shdr sh{};
    std::uint64_t off = eh.e_shoff + i * sizeof(Elf64_Shdr);
    if (i < eh.e_shnum && fits(off, sizeof sh)) std::memcpy(&sh, bytes.data() + off, sizeof sh);
    return sh;
  };
  for (std::uint64_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr dyn = section(i);
    if (dyn.sh_type != SHT_DYNAMIC || !fits(dyn.sh_offset, dyn.sh_size)) continue;
    Elf64_Shdr str = section(dyn.sh_link);
    if (!fits(str.sh_offset, str.sh_size)) continue;
    for (std::uint64_t e = 0; e + sizeof(Elf64_Dyn) <= dyn.sh_size; e += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, bytes.data() + dyn.sh_offset + e, sizeof d);
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED && d.d_un.d_val < str.sh_size)
        out.emplace_back(bytes.c_str() + str.sh_offset + d.d_un.d_val);
    }
  }
  return out;
}

// "libc10" of "libc10.so.1.13".
std::string library_stem(const std::string& name) {
  return name.substr(0, name.find(".so"));
}

// A library this process has loaded already that stands for another version of one `plugin`
// needs: the same stem under another file name (libc10.so where the plugin needs
// libc10.so.1.13). A program that runs MetaOp in its own process may have loaded a framework
// before MetaOp did (Python with PyTorch imported); the plugin's framework library would then
// bind to the other version's symbols. Returns its path, or empty.
std::string clashing_library(const std::string& plugin) {
  std::set<std::string> stems;
  std::set<std::string> names;
  for (const auto& n : needed_libraries(plugin)) {
    // The C and C++ runtimes and MetaOp's own libraries are shared by design.
    static const char* const shared[] = {"libc",       "libm",  "libstdc++", "libgcc_s",
                                         "libpthread", "libdl", "librt",     "ld-linux-x86-64",
                                         "libfmt"};
    std::string stem = library_stem(n);
    if (std::find(std::begin(shared), std::end(shared), stem) != std::end(shared)) continue;
    stems.insert(stem);
    names.insert(n);
  }
  struct Scan {
    const std::set<std::string>* stems;
    const std::set<std::string>* names;
    std::string found;
  } scan{&stems, &names, {}};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Scan*>(data);
        if (!info->dlpi_name || !*info->dlpi_name) return 0;
        std::string name = fs::path(info->dlpi_name).filename().string();
        if (s->stems->count(library_stem(name)) && !s->names->count(name)) {
          s->found = info->dlpi_name;
          return 1;
        }
        return 0;
      },
      &scan);
  return scan.found;
}

// Loads `path` (once per process) and runs its registration. Fails naming the file.
Loaded& load_library(const std::string& path) {
  for (auto& l : loaded())
    if (l->path == path) return *l;
  make_metaop_global();
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) fail("plugin {}: cannot be loaded: {}", path, ::dlerror());
  auto abi = reinterpret_cast<int (*)()>(::dlsym(h, "metaop_plugin_abi"));
  auto reg = reinterpret_cast<void (*)(PluginRegistrar&)>(::dlsym(h, "metaop_plugin_register"));
  if (!abi || !reg) fail("plugin {}: not a MetaOp plugin (no metaop_plugin_register)", path);
  if (abi() != kPluginAbi)
    fail("plugin {}: built for plugin ABI {}, this MetaOp has {}: rebuild it against this source",
         path, abi(), kPluginAbi);
  auto l = std::make_unique<Loaded>();
  l->path = path;
  l->handle = h;
  reg(l->registrar);
  for (auto& d : l->registrar.bindings())
    if (d.set_threads) d.set_threads(g_threads.load());
  loaded().push_back(std::move(l));
  return *loaded().back();
}

// --- the manifest: what MetaOp knows of a plugin without loading it

std::string registry_fingerprint() {
  std::string all;
  for (const auto& t : OpRegistry::instance().types()) all += t + ",";
  return fmt::format("{:x}", std::hash<std::string>{}(all));
}

struct FileStamp {
  std::int64_t size = -1, mtime_ns = -1;
};

FileStamp stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {static_cast<std::int64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

json describe(const std::string& path) {
  Loaded& l = load_library(path);
  json doc;
  doc["abi"] = kPluginAbi;
  doc["registry"] = registry_fingerprint();
  FileStamp s = stamp_of(path);
  doc["size"] = s.size;
  doc["mtime_ns"] = s.mtime_ns;
  json list = json::array();
  for (auto& d : l.registrar.bindings()) {
    json j;
    j["name"] = d.name;
    j["framework"] = d.framework;
    j["version"] = d.version;
    j["isolate"] = d.isolate;
    j["update"] = static_cast<bool>(d.update);
    j["whole_model"] = static_cast<bool>(d.whole_model);
    BindingInfo info;
    describe_ops(*d.make(), info);
    json ops = json::object();
    for (const auto& [t, sup] : info.support) {
      std::vector<int> dtypes(sup.dtypes.size());
      std::transform(sup.dtypes.begin(), sup.dtypes.end(), dtypes.begin(),
                     [](DType dt) { return static_cast<int>(dt); });
      ops[t] = {{"f", sup.forward}, {"b", sup.backward}, {"dtypes", dtypes}, {"why", sup.reason}};
    }
    j["ops"] = std::move(ops);
    j["where"] = info.where;
    list.push_back(std::move(j));
  }
  doc["bindings"] = std::move(list);
  return doc;
}

// The manifest written by a child process, so that this one loads no framework. Its text, or
// fails with the child's message.
std::string describe_in_child(const std::string& path) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("plugin {}: pipe failed: {}", path, std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) fail("plugin {}: fork failed: {}", path, std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      out = "M" + describe(path).dump();
    } catch (const std::exception& e) {
      out = std::string("E") + e.what();
    }
    std::size_t at = 0;
    while (at < out.size()) {
      ssize_t n = ::write(fds[1], out.data() + at, out.size() - at);
      if (n <= 0) _exit(1);
      at += static_cast<std::size_t>(n);
    }
    _exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    fail("plugin {}: describing it crashed (signal {})", path, WTERMSIG(status));
  if (text.empty()) fail("plugin {}: describing it gave nothing", path);
  if (text[0] == 'E') fail("{}", text.substr(1));
  return text.substr(1);
}

bool fresh(const json& m, const std::string& path) {
  FileStamp s = stamp_of(path);
  return m.value("abi", 0) == kPluginAbi && m.value("registry", "") == registry_fingerprint() &&
         m.value("size", std::int64_t{-2}) == s.size &&
         m.value("mtime_ns", std::int64_t{-2}) == s.mtime_ns;
}

// Where a plugin's manifest is kept: beside it, or in the user's cache when that folder is not
// writable.
std::vector<std::string> manifest_places(const std::string& path) {
  std::vector<std::string> places{path + ".json"};
  std::string cache;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    cache = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    cache = std::string(h) + "/.cache";
  if (!cache.empty())
    places.push_back(fmt::format("{}/metaop/plugins/{:x}-{}.json", cache,
                                 std::hash<std::string>{}(fs::absolute(path).string()),
                                 fs::path(path).filename().string()));
  return places;
}

json read_manifest(const std::string& path) {
  auto places = manifest_places(path);
  for (const auto& p : places) {
    std::ifstream in(p);
    if (!in) continue;
    json m = json::parse(in, nullptr, false);
    if (!m.is_discarded() && fresh(m, path)) return m;
  }
  json m = json::parse(describe_in_child(path));
  // Written to a temporary file and renamed, so that runs side by side never read half of one.
  for (const auto& p : places) {
    std::error_code ec;
    fs::create_directories(fs::path(p).parent_path(), ec);
    std::string tmp = fmt::format("{}.{}.tmp", p, ::getpid());
    {
      std::ofstream out(tmp);
      if (!out) continue;
      out << m.dump(1) << "\n";
      if (!out) continue;
    }
    if (::rename(tmp.c_str(), p.c_str()) == 0) break;
    ::unlink(tmp.c_str());
  }
  return m;
}

BindingInfo info_from(const json& j, const std::string& path) {
  BindingInfo info;
  info.name = j.at("name");
  info.framework = j.at("framework");
  info.version = j.at("version");
  info.plugin = path;
  info.isolate = j.at("isolate");
  info.update = j.at("update");
  info.whole_model = j.at("whole_model");
  for (const auto& [op, s] : j.at("ops").items()) {
    Support sup;
    sup.forward = s.at("f");
    sup.backward = s.at("b");
    sup.reason = s.at("why");
    for (int dt : s.at("dtypes")) sup.dtypes.push_back(static_cast<DType>(dt));
    info.support[op] = std::move(sup);
  }
  for (const auto& [op, w] : j.at("where").items())
    info.where[op] = w.get<std::vector<std::string>>();
  return info;
}

// The plugin files: METAOP_PLUGIN_PATH's entries, then the build's folder; metaop-*.so in a
// folder, in name order.
std::vector<std::string> plugin_files() {
  std::vector<std::string> places;
  if (const char* env = std::getenv("METAOP_PLUGIN_PATH"); env && *env) {
    std::stringstream ss(env);
    for (std::string p; std::getline(ss, p, ':');)
      if (!p.empty()) places.push_back(p);
  }
  if (std::string dir = METAOP_PLUGIN_DIR; !dir.empty()) places.push_back(dir);
  std::vector<std::string> files;
  for (const auto& p : places) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> here;
    for (const auto& e : fs::directory_iterator(p, ec)) {
      std::string name = e.path().filename().string();
      if (name.starts_with("metaop-") && name.ends_with(".so")) here.push_back(e.path().string());
    }
    std::sort(here.begin(), here.end());
    files.insert(files.end(), here.begin(), here.end());
  }
  return files;
}

struct Found {
  std::vector<BindingInfo> infos;
  std::vector<std::pair<std::string, std::string>> problems;
};

const Found& found() {
  static const Found f = [] {
    Found out;
    for (const auto& file : plugin_files()) {
      try {
        json m = read_manifest(file);
        for (const auto& j : m.at("bindings")) {
          BindingInfo info = info_from(j, file);
          bool shadowed = std::any_of(out.infos.begin(), out.infos.end(),
                                      [&](const BindingInfo& i) { return i.name == info.name; });
          if (!shadowed) out.infos.push_back(std::move(info));
        }
      } catch (const std::exception& e) {
        out.problems.emplace_back(file, e.what());
      }
    }
    return out;
  }();
  return f;
}

// --- a plugin's binding as MetaOp's process sees it

class PluginBinding final : public Binding {
 public:
  explicit PluginBinding(const BindingInfo& info) : info_(info) {}
  std::string name() const override { return info_.name; }
  Support supports(const std::string& op_type) const override {
    auto it = info_.support.find(op_type);
    if (it != info_.support.end()) return it->second;
    Support s;
    s.reason = fmt::format("not in {}'s manifest", info_.name);
    return s;
  }
  std::vector<std::string> where(const std::string& op_type) const override {
    auto it = info_.where.find(op_type);
    return it == info_.where.end() ? std::vector<std::string>{} : it->second;
  }
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override {
    return real().forward(node, opset, inputs);
  }
  Tensors backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                   const Tensors& outputs, const Tensors& output_grads) override {
    return real().backward(node, opset, inputs, outputs, output_grads);
  }
  void prepare() override { real().prepare(); }
  std::unique_ptr<UpdateKernel> update_kernel(const OptimizerConfig& c) const override {
    const BindingDescription& d = load_plugin_binding(info_);
    return d.update ? d.update(c) : nullptr;
  }

 private:
  Binding& real() {
    if (!real_) real_ = load_plugin_binding(info_).make();
    return *real_;
  }
  const BindingInfo& info_;
  std::unique_ptr<Binding> real_;
};

}  // namespace

void describe_ops(const Binding& b, BindingInfo& info) {
  for (const auto& t : OpRegistry::instance().types()) {
    info.support[t] = b.supports(t);
    if (auto w = b.where(t); !w.empty()) info.where[t] = w;
  }
}

const std::vector<BindingInfo>& plugin_infos() {
  return found().infos;
}

const std::vector<std::pair<std::string, std::string>>& plugin_problems() {
  return found().problems;
}

const BindingDescription& load_plugin_binding(const BindingInfo& info) {
  std::lock_guard lock(g_load_mutex);
  for (auto& l : loaded())
    for (auto& d : l->registrar.bindings())
      if (l->path != info.plugin && d.framework == info.framework)
        fail(
            "binding '{}' ({} {}) cannot be loaded beside {} {} from {} in one process: run it "
            "isolated (--isolation process, the default)",
            info.name, info.framework, info.version, d.framework, d.version, l->path);
  bool loaded_here = std::any_of(loaded().begin(), loaded().end(),
                                 [&](const auto& l) { return l->path == info.plugin; });
  if (!loaded_here)
    if (std::string other = clashing_library(info.plugin); !other.empty())
      fail(
          "binding '{}' ({} {}) cannot be loaded in this process: it has {} loaded already, "
          "another version of that framework's library (in Python, importing the framework "
          "loads it: run this binding from the command line, or from a Python process that has "
          "not imported it)",
          info.name, info.framework, info.version, other);
  Loaded& l = load_library(info.plugin);
  for (auto& d : l.registrar.bindings())
    if (d.name == info.name) return d;
  fail("plugin {} no longer registers binding '{}'", info.plugin, info.name);
}

std::unique_ptr<Binding> plugin_binding(const BindingInfo& info) {
  return std::make_unique<PluginBinding>(info);
}

void set_framework_threads(int n) {
  g_threads = n;
  std::lock_guard lock(g_load_mutex);
  for (auto& l : loaded())
    for (auto& d : l->registrar.bindings())
      if (d.set_threads) d.set_threads(n);
}

int framework_threads() {
  return g_threads.load();
}

}  // namespace metaop
