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
// meeting, their end), by where in the loops around it each was made. Built with
// -fsanitize-coverage=trace-pc (and -fno-reorder-blocks, so that only loops jump back), the program
// reports every basic block it enters; within a function's frame (from the instrumentation's
// function entries and exits), a jump back to an address is a loop's next iteration, and a block past
// the furthest one its loop jumped back from leaves the loop. An access's context is then the
// iteration of every loop it is in, in every frame, and the k-th access that lane l makes from one
// place in one context meets the k-th of every other lane in theirs, as lanes that run one path do
// on a GPU: a lane whose access is predicated off sits the instruction out, and a loop that ran more
// times in some lanes does not shift their accesses after it. A lane's consecutive accesses in one
// context that join (in either order) into one whole aligned 16-byte chunk are one 16-byte access
// (the CPU compiler splits a 16-byte vector into 8-byte moves or scalars); any others stay as they
// were made. Accesses are cut into aligned pieces of 16 bytes or fewer. Then, per instruction:
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
  std::uint64_t context;  // the iterations of the loops around it (a hash)
  std::uintptr_t address;
  std::uint32_t bytes;
  Op op;
  Space space;
  bool merges;  // a compiled load or store, which may be part of a vector the CPU compiler split
};

struct Totals {
  long requests = 0, cost = 0, ideal = 0;
};
using StatKey = std::tuple<Site, Space, Op, std::uint32_t>;
std::map<StatKey, Totals> totals;

int running_thread = -1;  // the emulated thread whose accesses count; -1: the scheduler, the host
// A loop a thread is in: the block it jumps back to, the furthest block it jumped back from, and the
// iterations begun by jumping back.
struct Loop {
  std::uintptr_t header, latch;
  long iterations;
};
// A function call of a thread's: the last basic block it entered there, and the loops it is in.
struct Frame {
  std::uintptr_t last_block = 0;
  std::vector<Loop> loops;
};
// An emulated thread: its accesses since its last stop, how deep it is in the emulator's own
// bookkeeping, its calls, and where its last function exit was made (the returning function's
// last block is entered after it).
struct ThreadState {
  std::vector<Access> accesses;
  int quiet_depth = 0;
  std::vector<Frame> frames{1};
  std::size_t body_frames = 0;  // the frames below the block's work (the emulator's, whose loops run on)
  std::uintptr_t exited_at = 0;
};
std::vector<ThreadState> thread_states;  // by linear thread index
int scheduler_quiet_depth = 0;  // the scheduler's, apart: a fiber switch leaves its scope open while a thread runs
// A function's last block follows its exit call within this many bytes.
constexpr std::uintptr_t kExitTailBytes = 64;

std::uint64_t context_of(const ThreadState& state) {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a over the loops' (header, iterations)
  const auto mix = [&hash](std::uint64_t value) {
    for (int i = 0; i < 8; ++i) hash = (hash ^ ((value >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  for (std::size_t f = state.body_frames; f < state.frames.size(); ++f) {
    for (const Loop& loop : state.frames[f].loops) {
      mix(loop.header);
      mix(static_cast<std::uint64_t>(loop.iterations));
    }
    mix(0);
  }
  return hash;
}

void enter_block(ThreadState& state, std::uintptr_t block) {
  if (state.exited_at != 0 && block - state.exited_at < kExitTailBytes) {
    state.exited_at = 0;  // the returned function's last block, not its caller's
    return;
  }
  state.exited_at = 0;
  Frame& frame = state.frames.back();
  auto& loops = frame.loops;
  if (frame.last_block != 0 && block <= frame.last_block) {  // a jump back: a loop's next iteration
    while (!loops.empty() && loops.back().header > block) loops.pop_back();  // loops inside it, left
    if (!loops.empty() && loops.back().header == block) {
      ++loops.back().iterations;
      loops.back().latch = std::max(loops.back().latch, frame.last_block);
    } else {
      loops.push_back({block, frame.last_block, 1});
    }
  } else {
    while (!loops.empty() && block > loops.back().latch) loops.pop_back();  // past a loop's end
  }
  frame.last_block = block;
}

std::uintptr_t shared_begin = 0, shared_end = 0;   // the launch's dynamic shared memory
std::uintptr_t static_shared_begin = 0, static_shared_end = 0;  // the executable's TLS block
std::map<std::uintptr_t, std::uintptr_t> global_regions;  // begin -> end
std::uintptr_t executable_base = 0;

int find_executable_tls(dl_phdr_info* info, size_t, void* found) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_TLS || info->dlpi_tls_data == nullptr) continue;
    static_shared_begin = reinterpret_cast<std::uintptr_t>(info->dlpi_tls_data);  // this thread's block
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
  ThreadState& state = thread_states[running_thread];
  state.accesses.push_back({site, context_of(state), address, bytes, op, space, merges});
}

void record_compiled(void* return_address, void* address, unsigned long bytes, bool write) {
  if (running_thread < 0 || thread_states[running_thread].quiet_depth > 0) return;
  const Site site = instruction_site(return_address);
  const auto first = reinterpret_cast<std::uintptr_t>(address);
  for (std::uintptr_t at = first; at < first + bytes;) {  // a range in 16-byte chunks
    const std::uintptr_t end = std::min<std::uintptr_t>(first + bytes, (at / 16 + 1) * 16);
    record(site, at, static_cast<std::uint32_t>(end - at), write ? Op::kStore : Op::kLoad, true);
    at = end;
  }
}

// The aligned pieces of 16 bytes or fewer of [at, end).
void aligned_pieces(const Access& access, std::uintptr_t at, std::uintptr_t end, std::vector<Access>& out) {
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

// A lane's accesses as its instructions make them: consecutive compiled accesses in one context
// that join, in either order, into a whole aligned 16-byte chunk are one access (at the first's
// place); every other access as it was made, in aligned pieces.
void instruction_pieces(const std::vector<Access>& accesses, std::vector<Access>& out) {
  for (std::size_t i = 0; i < accesses.size();) {
    const Access& a = accesses[i];
    std::uintptr_t low = a.address, high = a.address + a.bytes;
    std::size_t j = i + 1;
    while (a.merges && high - low < 16 && j < accesses.size()) {
      const Access& b = accesses[j];
      const bool joins = b.merges && b.context == a.context && b.op == a.op && b.space == a.space &&
                         (b.address == high || b.address + b.bytes == low) &&
                         std::min(low, b.address) / 16 == (std::max(high, b.address + b.bytes) - 1) / 16;
      if (!joins) break;
      low = std::min(low, b.address);
      high = std::max(high, b.address + b.bytes);
      ++j;
    }
    if (j > i + 1 && low % 16 == 0 && high - low == 16) {
      aligned_pieces(a, low, high, out);
      i = j;
    } else {
      aligned_pieces(a, a.address, a.address + a.bytes, out);
      ++i;
    }
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
  // place, memory, operation, context, the lane's how-manieth there
  using Instruction = std::tuple<Site, Space, Op, std::uint64_t, long>;
  std::map<Instruction, std::vector<LaneAccess>> instructions;
  std::vector<Access> pieces;
  for (unsigned t = first; t < first + 32 && t < threads; ++t) {
    std::map<std::tuple<Site, Space, Op, std::uint64_t>, long> seen;
    pieces.clear();
    instruction_pieces(thread_states[t].accesses, pieces);
    for (const Access& piece : pieces) {
      const long nth = seen[{piece.site, piece.space, piece.op, piece.context}]++;
      instructions[{piece.site, piece.space, piece.op, piece.context, nth}].push_back({t - first, piece});
    }
    thread_states[t].accesses.clear();
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
  if (thread_states.size() < threads) thread_states.resize(threads);
  running_thread = thread;
}
// The running thread starts a block's work: loops from here on are the kernel's.
void dwconv_profile_body_begins() {
  if (running_thread >= 0) thread_states[running_thread].body_frames = thread_states[running_thread].frames.size();
}
void dwconv_profile_quiet(int delta) {
  (running_thread < 0 ? scheduler_quiet_depth : thread_states[running_thread].quiet_depth) += delta;
}
void dwconv_profile_launch_shared(const void* begin, unsigned long bytes) {
  find_static_shared();
  for (ThreadState& state : thread_states) state.accesses.clear();  // a failed launch's, never grouped
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
void dwconv_profile_async_copy(const void* shared_dst, const void* src, unsigned long bytes, int inside,
                               const char* file, int line) {
  if (running_thread < 0) return;
  const Site site = named_site(file, line);
  const auto width = static_cast<std::uint32_t>(bytes);
  if (inside) record(site, reinterpret_cast<std::uintptr_t>(src), width, Op::kCopyRead, false);
  record(site, reinterpret_cast<std::uintptr_t>(shared_dst), width, Op::kCopyWrite, false);
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
  if (running_thread >= 0) thread_states[running_thread].frames.emplace_back();
}
void __tsan_func_exit() {
  if (running_thread < 0) return;
  ThreadState& state = thread_states[running_thread];
  if (state.frames.size() > 1) state.frames.pop_back();
  state.exited_at = reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
}
// -fsanitize-coverage=trace-pc: a basic block entered.
void __sanitizer_cov_trace_pc() {
  if (running_thread >= 0) {
    enter_block(thread_states[running_thread], reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
  }
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
