// The memory-traffic profile of the emulated kernels: what a GPU's load/store units would make of
// each warp-wide access, counted per place in the kernels' source (as Nsight Compute's
// shared-memory wavefronts and global sectors a request), on the CPU.
//
// The emulator is compiled with -fsanitize=thread -DDWCONV_MEMORY_PROFILE and linked with this file
// instead of ThreadSanitizer's runtime: the compiler's instrumentation calls __tsan_readN/__tsan_writeN
// before every load and store, and these record, for the emulated thread running, each access to the
// launch's shared memory (its dynamic buffer and its static __shared__ arrays, which the profile
// build makes thread_local: the executable's TLS block holds those alone) and to the device buffers
// the program registers. The emulator tells this file which thread runs, hides its own bookkeeping,
// and reports the asynchronous copies and the ldmatrix rows itself (cuda_emulation.h).
//
// A warp's accesses are grouped into instructions when its lanes next stop (a barrier, a warp
// meeting, their end). Built with -fsanitize-coverage=trace-pc too, the program reports every basic
// block it enters, and a block entered at an address not past the last one's in the same function is
// a loop's next iteration: an access is placed by the loop iterations its lane has run since the
// stop, and the k-th access that lane l makes from one place in one iteration meets the k-th of every
// other lane in theirs, as lanes that run one path do on a GPU, where a lane whose access is
// predicated off sits the instruction out (counted in iterations, it does not shift the lane's
// later accesses). A lane's contiguous accesses within one 16-byte chunk in one iteration are one
// access (the CPU compiler splits a 16-byte vector into 8- or 4-byte moves), and an access is cut into
// aligned pieces of 16 bytes or fewer. Then, per instruction:
// - shared memory: 32 banks of 4 bytes; a warp's 1-, 2- and 4-byte accesses go as one phase, 8-byte
//   ones as two (half warps), 16-byte ones and ldmatrix's 8 rows a matrix as four (quarter warps)
//   or one a matrix; a phase takes as many wavefronts as the most distinct words any bank holds
//   among its lanes' (one word read by many lanes is one), ideally one;
// - global memory: the 32-byte sectors the lanes' bytes touch, ideally the distinct bytes / 32.
// Written, at exit, as a table to $DWCONV_MEMORY_PROFILE_OUT (else stderr): the place (an
// instruction's address in the executable, which build_scripts/memory_profile.py turns into source
// lines, or file:line for what the emulator reports), the memory, the operation, the bytes a lane,
// the warp instructions, their wavefronts or sectors, and the ideal count.

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

enum class Space : std::uint8_t { kShared, kGlobal };
enum class Op : std::uint8_t { kLoad, kStore, kCopyRead, kCopyWrite, kMatrixLoad };

const char* space_name(Space space) { return space == Space::kShared ? "shared" : "global"; }
const char* op_name(Op op) {
  switch (op) {
    case Op::kLoad: return "load";
    case Op::kStore: return "store";
    case Op::kCopyRead: return "cp.async-read";
    case Op::kCopyWrite: return "cp.async-write";
    case Op::kMatrixLoad: return "ldmatrix";
  }
  return "?";
}

// A place: an instruction's address (its offset in the executable), or an index into `named_sites`
// (file:line of what the emulator reports) with the top bit set.
using Site = std::uintptr_t;
constexpr Site kNamedSite = Site(1) << (8 * sizeof(Site) - 1);
std::vector<std::string> named_sites;
std::map<std::string, Site> named_site_index;

struct Access {
  Site site;
  long iteration;  // the loop iterations its lane had run since its last stop
  std::uintptr_t address;
  std::uint32_t bytes;
  Op op;
  Space space;
  bool merges;  // a compiled load or store, which a lane's next contiguous one may extend
};

struct Totals {
  long requests = 0, cost = 0, ideal = 0;
};
using StatKey = std::tuple<Site, Space, Op, std::uint32_t>;
std::map<StatKey, Totals> totals;

int running_thread = -1;  // the emulated thread whose accesses count; -1: the scheduler, the host
// Since its last stop, by linear thread index: each thread's accesses, and how deep it is in the
// emulator's own bookkeeping (the scheduler's depth apart: a fiber switch leaves the scheduler's
// scope open while the thread runs).
std::vector<std::vector<Access>> thread_accesses;
std::vector<int> thread_quiet_depth;
int scheduler_quiet_depth = 0;
// Each thread's loop iterations since its last stop, and, a function call deep each, the last basic
// block it entered there.
std::vector<long> thread_iterations;
std::vector<std::vector<std::uintptr_t>> thread_last_blocks;

std::uintptr_t shared_begin = 0, shared_end = 0;   // the launch's dynamic shared memory
std::uintptr_t static_shared_begin = 0, static_shared_end = 0;  // the executable's TLS block
std::map<std::uintptr_t, std::uintptr_t> global_regions;  // begin -> end
std::uintptr_t executable_base = 0;

int find_executable_tls(dl_phdr_info* info, size_t, void* found) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_TLS) continue;
    // x86-64 (TLS variant II): the executable's block ends at the thread pointer, rounded to its alignment.
    std::uintptr_t thread_pointer;
    asm("mov %%fs:0, %0" : "=r"(thread_pointer));
    const std::uintptr_t align = std::max<std::uintptr_t>(header.p_align, 1);
    const std::uintptr_t size = (header.p_memsz + align - 1) / align * align;
    static_shared_begin = thread_pointer - size;
    static_shared_end = static_shared_begin + header.p_memsz;
  }
  *static_cast<bool*>(found) = true;
  return 1;  // the first object listed is the executable
}

void find_static_shared() {
  static bool found = false;
  if (!found) dl_iterate_phdr(find_executable_tls, &found);
}

bool space_of(std::uintptr_t address, Space& space) {
  if (address >= shared_begin && address < shared_end) {
    space = Space::kShared;
    return true;
  }
  if (address >= static_shared_begin && address < static_shared_end) {
    space = Space::kShared;
    return true;
  }
  auto next = global_regions.upper_bound(address);
  if (next == global_regions.begin()) return false;
  --next;
  if (address >= next->second) return false;
  space = Space::kGlobal;
  return true;
}

Site instruction_site(void* return_address) {
  if (executable_base == 0) {
    Dl_info info;
    if (dladdr(return_address, &info) != 0) executable_base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  }
  return reinterpret_cast<std::uintptr_t>(return_address) - 1 - executable_base;
}

Site named_site(const char* file, int line) {
  const std::string name = std::string(file) + ":" + std::to_string(line);
  auto [at, fresh] = named_site_index.emplace(name, kNamedSite | named_sites.size());
  if (fresh) named_sites.push_back(name);
  return at->second;
}

void record(Site site, std::uintptr_t address, std::uint32_t bytes, Op op, bool merges) {
  Space space;
  if (!space_of(address, space)) return;
  auto& accesses = thread_accesses[running_thread];
  const long iteration = thread_iterations[running_thread];
  if (merges && !accesses.empty()) {
    Access& last = accesses.back();
    if (last.merges && last.iteration == iteration && last.op == op && last.space == space &&
        last.address + last.bytes == address && last.address / 16 == (address + bytes - 1) / 16) {
      last.bytes += bytes;
      return;
    }
  }
  accesses.push_back({site, iteration, address, bytes, op, space, merges});
}

void record_compiled(void* return_address, void* address, unsigned long bytes, bool write) {
  if (running_thread < 0 || thread_quiet_depth[running_thread] > 0) return;
  const Site site = instruction_site(return_address);
  const auto first = reinterpret_cast<std::uintptr_t>(address);
  for (std::uintptr_t at = first; at < first + bytes;) {  // a range in 16-byte chunks
    const std::uintptr_t end = std::min<std::uintptr_t>(first + bytes, (at / 16 + 1) * 16);
    record(site, at, static_cast<std::uint32_t>(end - at), write ? Op::kStore : Op::kLoad, true);
    at = end;
  }
}

// The aligned pieces of 16 bytes or fewer a lane's access is made of.
void aligned_pieces(const Access& access, std::vector<Access>& out) {
  std::uintptr_t at = access.address;
  const std::uintptr_t end = access.address + access.bytes;
  while (at < end) {
    std::uint32_t piece = 16;
    while (piece > 1 && (at % piece != 0 || at + piece > end)) piece /= 2;
    Access part = access;
    part.address = at;
    part.bytes = piece;
    out.push_back(part);
    at += piece;
  }
}

struct LaneAccess {
  unsigned lane;
  Access access;
};

// Wavefronts of a shared-memory instruction: phases of 32, 16 or 8 lanes by the access's width.
std::pair<long, long> shared_cost(const std::vector<LaneAccess>& lanes, std::uint32_t bytes) {
  const unsigned phase_lanes = bytes <= 4 ? 32 : bytes == 8 ? 16 : 8;
  std::map<unsigned, std::map<unsigned, std::set<std::uintptr_t>>> words_by_phase_bank;
  for (const LaneAccess& la : lanes) {
    auto& banks = words_by_phase_bank[la.lane / phase_lanes];
    for (std::uintptr_t word = la.access.address / 4; word <= (la.access.address + la.access.bytes - 1) / 4; ++word) {
      banks[word % 32].insert(word);
    }
  }
  long cost = 0;
  for (const auto& [phase, banks] : words_by_phase_bank) {
    std::size_t most = 0;
    for (const auto& [bank, words] : banks) most = std::max(most, words.size());
    cost += static_cast<long>(most);
  }
  return {cost, static_cast<long>(words_by_phase_bank.size())};
}

// Sectors of a global-memory instruction, and the fewest its distinct bytes could take.
std::pair<long, long> global_cost(const std::vector<LaneAccess>& lanes) {
  std::set<std::uintptr_t> sectors, bytes;
  for (const LaneAccess& la : lanes) {
    for (std::uintptr_t b = la.access.address; b < la.access.address + la.access.bytes; ++b) {
      bytes.insert(b);
      sectors.insert(b / 32);
    }
  }
  return {static_cast<long>(sectors.size()), static_cast<long>((bytes.size() + 31) / 32)};
}

void add_instruction(Site site, Space space, Op op, std::uint32_t bytes, long cost, long ideal) {
  Totals& t = totals[{site, space, op, bytes}];
  ++t.requests;
  t.cost += cost;
  t.ideal += ideal;
}

// One warp's accesses since its lanes last stopped, as instructions.
void close_warp(unsigned first, unsigned threads) {
  using Instruction = std::tuple<Site, Op, long, long>;  // place, operation, iteration, the lane's how-manieth there
  std::map<Instruction, std::vector<LaneAccess>> instructions;
  std::vector<Access> pieces;
  for (unsigned t = first; t < first + 32 && t < threads; ++t) {
    std::map<std::tuple<Site, Op, long>, long> seen;
    pieces.clear();
    for (const Access& access : thread_accesses[t]) aligned_pieces(access, pieces);
    for (const Access& piece : pieces) {
      const long nth = seen[{piece.site, piece.op, piece.iteration}]++;
      instructions[{piece.site, piece.op, piece.iteration, nth}].push_back({t - first, piece});
    }
    thread_accesses[t].clear();
    thread_iterations[t] = 0;
  }
  for (const auto& [instruction, lanes] : instructions) {
    std::uint32_t bytes = 0;
    for (const LaneAccess& la : lanes) bytes = std::max(bytes, la.access.bytes);
    const Access& a = lanes.front().access;
    const auto [cost, ideal] = a.space == Space::kShared ? shared_cost(lanes, bytes) : global_cost(lanes);
    add_instruction(a.site, a.space, a.op, bytes, cost, ideal);
  }
}

void write_report() {
  const char* path = std::getenv("DWCONV_MEMORY_PROFILE_OUT");
  FILE* out = path != nullptr ? std::fopen(path, "w") : stderr;
  if (out == nullptr) {
    std::perror("memory profile: cannot write $DWCONV_MEMORY_PROFILE_OUT");
    std::_Exit(2);
  }
  std::fprintf(out, "site\tspace\top\tbytes\trequests\tcost\tideal\n");
  for (const auto& [key, t] : totals) {
    const auto& [site, space, op, bytes] = key;
    if (site & kNamedSite) {
      std::fprintf(out, "%s", named_sites[site & ~kNamedSite].c_str());
    } else {
      std::fprintf(out, "pc:0x%lx", static_cast<unsigned long>(site));
    }
    std::fprintf(out, "\t%s\t%s\t%u\t%ld\t%ld\t%ld\n", space_name(space), op_name(op), bytes, t.requests, t.cost,
                 t.ideal);
  }
  if (out != stderr) std::fclose(out);
}

struct ReportAtExit {
  ~ReportAtExit() { write_report(); }
} report_at_exit;

}  // namespace

// What the emulator (cuda_emulation.h) and the program tell the profile.
extern "C" {
void dwconv_profile_running_thread(int thread, unsigned threads) {
  if (thread_accesses.size() < threads) {
    thread_accesses.resize(threads);
    thread_quiet_depth.resize(threads);
    thread_iterations.resize(threads);
    thread_last_blocks.resize(threads);
  }
  running_thread = thread;
}
void dwconv_profile_quiet(int delta) {
  (running_thread < 0 ? scheduler_quiet_depth : thread_quiet_depth[running_thread]) += delta;
}
void dwconv_profile_launch_shared(const void* begin, unsigned long bytes) {
  find_static_shared();
  shared_begin = reinterpret_cast<std::uintptr_t>(begin);
  shared_end = shared_begin + bytes;
}
void dwconv_profile_global_region(const void* begin, unsigned long bytes, int add) {
  const auto first = reinterpret_cast<std::uintptr_t>(begin);
  if (add) {
    global_regions[first] = first + bytes;
  } else {
    global_regions.erase(first);
  }
}
// Every lane of a block has stopped: each warp's accesses since the last stop become its instructions.
void dwconv_profile_threads_stopped(unsigned threads) {
  for (unsigned first = 0; first < threads; first += 32) close_warp(first, threads);
}
void dwconv_profile_async_copy(const void* shared_dst, const void* src, int inside, const char* file, int line) {
  if (running_thread < 0) return;
  const Site site = named_site(file, line);
  if (inside) record(site, reinterpret_cast<std::uintptr_t>(src), 16, Op::kCopyRead, false);
  record(site, reinterpret_cast<std::uintptr_t>(shared_dst), 16, Op::kCopyWrite, false);
}
// ldmatrix .x{count} for a warp: matrix i's rows are those lanes 8i..8i+7 address, one phase a matrix.
void dwconv_profile_load_matrices(const void* const* rows, int count, const char* file, int line) {
  long cost = 0;
  for (int i = 0; i < count; ++i) {
    std::map<unsigned, std::set<std::uintptr_t>> banks;
    for (int r = 0; r < 8; ++r) {
      const auto row = reinterpret_cast<std::uintptr_t>(rows[8 * i + r]);
      for (std::uintptr_t word = row / 4; word < row / 4 + 4; ++word) banks[word % 32].insert(word);
    }
    std::size_t most = 0;
    for (const auto& [bank, words] : banks) most = std::max(most, words.size());
    cost += static_cast<long>(most);
  }
  add_instruction(named_site(file, line), Space::kShared, Op::kMatrixLoad, 16, cost, count);
}

// ThreadSanitizer's instrumentation calls, made by the compiled kernels (and by every other function
// of the instrumented program, which the thread and region checks leave out).
void __tsan_init() {}
void __tsan_func_entry(void*) {
  if (running_thread >= 0) thread_last_blocks[running_thread].push_back(0);
}
void __tsan_func_exit() {
  if (running_thread >= 0 && !thread_last_blocks[running_thread].empty()) thread_last_blocks[running_thread].pop_back();
}
// -fsanitize-coverage=trace-pc: a basic block entered.
void __sanitizer_cov_trace_pc() {
  if (running_thread < 0) return;
  auto& blocks = thread_last_blocks[running_thread];
  if (blocks.empty()) blocks.push_back(0);
  const auto block = reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
  if (block <= blocks.back()) ++thread_iterations[running_thread];
  blocks.back() = block;
}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_read_range(void* address, unsigned long bytes) {
  record_compiled(__builtin_return_address(0), address, bytes, false);
}
void __tsan_write_range(void* address, unsigned long bytes) {
  record_compiled(__builtin_return_address(0), address, bytes, true);
}
#define DWCONV_PROFILE_ACCESS(bytes)                                         \
  void __tsan_read##bytes(void* address) {                                   \
    record_compiled(__builtin_return_address(0), address, bytes, false);     \
  }                                                                          \
  void __tsan_write##bytes(void* address) {                                  \
    record_compiled(__builtin_return_address(0), address, bytes, true);      \
  }                                                                          \
  void __tsan_unaligned_read##bytes(void* address) {                         \
    record_compiled(__builtin_return_address(0), address, bytes, false);     \
  }                                                                          \
  void __tsan_unaligned_write##bytes(void* address) {                        \
    record_compiled(__builtin_return_address(0), address, bytes, true);      \
  }
DWCONV_PROFILE_ACCESS(1)
DWCONV_PROFILE_ACCESS(2)
DWCONV_PROFILE_ACCESS(4)
DWCONV_PROFILE_ACCESS(8)
DWCONV_PROFILE_ACCESS(16)
#undef DWCONV_PROFILE_ACCESS
}
