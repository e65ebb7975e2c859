// Collectives matched across ranks within their process groups (by sequence number, else by
// order checked on name, sizes and dtype), arrival skew, the last arriver, the straggler and the
// cause of its lateness, communication hidden by compute per rank, and the ranks' clocks compared
// on the collectives' ends.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

bool is_collective(std::string_view name) {
  // gloo's collectives are record_function ranges on its worker threads ("gloo:all_reduce"),
  // with no "Collective name", sizes or sequence number in PyTorch 2.11's traces.
  for (std::string_view prefix :
       {"nccl:", "ncclDevKernel", "ncclKernel", "gloo:", "mpi:", "MPI_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// The string value of "key": "value" in a slice's args text; empty when absent.
std::string arg_string(std::string_view args, std::string_view key) {
  const std::string quoted = "\"" + std::string(key) + "\"";
  size_t at = args.find(quoted);
  if (at == std::string_view::npos) return {};
  at = args.find(':', at + quoted.size());
  if (at == std::string_view::npos) return {};
  at = args.find_first_not_of(" \t", at + 1);
  if (at == std::string_view::npos) return {};
  if (args[at] == '"') {
    const size_t end = args.find('"', at + 1);
    return end == std::string_view::npos ? std::string()
                                         : std::string(args.substr(at + 1, end - at - 1));
  }
  size_t end = args.find_first_of(",}", at);
  if (end == std::string_view::npos) end = args.size();
  while (end > at && (args[end - 1] == ' ' || args[end - 1] == '\n' || args[end - 1] == '\r' ||
                      args[end - 1] == '\t')) {
    --end;
  }
  return std::string(args.substr(at, end - at));
}

// P(X >= k) for X the number of successes of independent trials with the given chances (a
// Poisson-binomial): exact up to 4,096 trials, a normal approximation (continuity-corrected)
// beyond.
double tail_at_least(const std::vector<double>& chances, uint64_t k) {
  if (k == 0) return 1.0;
  if (k > chances.size()) return 0.0;
  if (chances.size() > 4096) {
    double mean = 0, variance = 0;
    for (double chance : chances) mean += chance, variance += chance * (1 - chance);
    if (variance <= 0) return static_cast<double>(k) <= mean ? 1.0 : 0.0;
    const double z = (static_cast<double>(k) - 0.5 - mean) / std::sqrt(variance);
    return 0.5 * std::erfc(z / std::sqrt(2.0));
  }
  std::vector<double> mass(chances.size() + 1, 0.0);
  mass[0] = 1.0;
  for (size_t trial = 0; trial < chances.size(); ++trial) {
    for (size_t count = trial + 1; count > 0; --count) {
      mass[count] = mass[count] * (1 - chances[trial]) + mass[count - 1] * chances[trial];
    }
    mass[0] *= 1 - chances[trial];
  }
  double tail = 0;
  for (size_t count = k; count < mass.size(); ++count) tail += mass[count];
  return std::min(1.0, tail);
}

// A host call that runs a collective: what a GPU collective kernel's launch is made inside.
bool is_host_collective(std::string_view name) {
  return name == "record_param_comms" ||
         (is_collective(name) && name.substr(0, 10) != "ncclKernel" &&
          name.substr(0, 13) != "ncclDevKernel");
}

// A collective's operation, comparable across spellings: what follows "gloo:" / "nccl:" (the whole
// name without one), lower case, underscores dropped ("all_reduce" and "allReduce": "allreduce").
std::string squeezed_operation(std::string_view name) {
  std::string squeezed;
  for (const char c :
       name.substr(name.find(':') == std::string_view::npos ? 0 : name.find(':') + 1)) {
    if (c != '_') squeezed += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return squeezed;
}

// A collective whose ranks legitimately move different amounts (all-to-all with uneven splits,
// gather's root, scatter's root): its element counts say nothing about which call it is.
bool sizes_differ_by_rank(std::string_view name) {
  const std::string squeezed = squeezed_operation(name);
  return squeezed.find("alltoall") != std::string::npos || squeezed.rfind("gather", 0) == 0 ||
         squeezed.rfind("scatter", 0) == 0;
}

// A collective no member can finish before every member has joined (each needs every other's
// data): all-reduce, all-gather, reduce-scatter, all-to-all, barrier. A broadcast's root, a
// reduce's members or a send may finish before a late peer begins.
bool every_member_waits(std::string_view name) {
  const std::string squeezed = squeezed_operation(name);
  for (std::string_view kind : {"allreduce", "allgather", "reducescatter", "alltoall", "barrier"}) {
    if (squeezed.find(kind) != std::string::npos) return true;
  }
  return false;
}

// The element count of the first tensor of "Input Dims" ([[4096, 16], ...]), PyTorch's record of
// a collective before it wrote "In msg nelems"; empty when absent.
std::string first_input_elements(std::string_view args) {
  const size_t key = args.find("\"Input Dims\"");
  if (key == std::string_view::npos) return {};
  const size_t open = args.find("[[", key);
  const size_t close = open == std::string_view::npos ? open : args.find(']', open);
  if (close == std::string_view::npos) return {};
  uint64_t product = 1;
  bool any = false;
  int64_t value = -1;
  for (const char c : std::string(args.substr(open + 2, close - open - 2)) + ",") {
    if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
    } else if (c == ',' && value >= 0) {
      product *= static_cast<uint64_t>(value);
      any = true;
      value = -1;
    }
  }
  return any ? std::to_string(product) : std::string();
}

// The first entry of "Input type" (["float", ...]); empty when absent.
std::string first_input_type(std::string_view args) {
  const size_t key = args.find("\"Input type\"");
  if (key == std::string_view::npos) return {};
  const size_t open = args.find('[', key);
  const size_t first = open == std::string_view::npos ? open : args.find('"', open);
  const size_t end = first == std::string_view::npos ? first : args.find('"', first + 1);
  if (end == std::string_view::npos) return {};
  return std::string(args.substr(first + 1, end - first - 1));
}

int64_t median(std::vector<int64_t> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

}  // namespace

Collectives compute_collectives(const Model& model, const TrackIndex& index) {
  Collectives out;
  std::set<int> rank_set;
  for (const FileInfo& file : model.files) {
    if (file.rank >= 0) rank_set.insert(file.rank);
  }
  if (rank_set.size() < 2) return out;
  out.ranks.assign(rank_set.begin(), rank_set.end());
  const size_t ranks = out.ranks.size();
  std::map<int, size_t> position;
  for (size_t at = 0; at < ranks; ++at) position[out.ranks[at]] = at;

  // Per group (kernel or host, per process group): its member ranks and, per rank, its
  // collective slices in start order with what Kineto says about each.
  struct Call {
    SliceId slice;
    int64_t seq;            // Kineto's "Seq", or -1
    std::string signature;  // collective name, element counts and dtype
    std::string name;       // the collective's name ("allreduce"), else the slice's
  };
  struct Group {
    std::vector<std::vector<Call>> per_rank;  // by rank position
    std::vector<uint8_t> member;              // by rank position
    bool ranks_known = false;                 // members read from "Process Group Ranks"
    std::string label;                        // the process group's name
  };
  std::map<std::string, Group> groups;
  std::map<SliceId, std::string> group_of_slice;  // each collective slice's process group
  bool any_kernel = false;
  const bool shared_clock = model.one_clock;
  // The launch call of each GPU collective kernel (its ac2g flow's or correlation's source).
  std::map<SliceId, SliceId> launched_by;
  for (size_t row = 0; row < model.flows.size(); ++row) {
    const SliceId from = model.flows.from_slice[row], to = model.flows.to_slice[row];
    if (from == kNoSlice || to == kNoSlice || !is_collective(model.slice_name(to))) continue;
    if (model.tracks[model.slices.track[to]].kind == TrackKind::kGpuStream) {
      launched_by.emplace(to, from);
    }
  }
  // gloo's collectives record no process group: each runs on a worker thread of its group's, and
  // every gloo group starts its worker threads (alike in number) when it is made, in the order
  // Kineto's distributedInfo.pg_config lists the rank's groups. So a rank's worker threads in
  // creation (thread id) order, split evenly over its gloo groups, say which group ran each range.
  // Where the split is not even (a thread recorded nothing, or the file lists no groups) the ranges
  // stay in one group per rank, matched as before, and data.collectives.host_groups says so.
  std::map<TrackId, const FileInfo::ProcessGroup*> thread_group;  // by the thread's main lane
  {
    std::vector<std::vector<TrackId>> workers(model.files.size());
    std::vector<uint8_t> has_gloo(model.files.size(), 0);
    for (TrackId track = 0; track < model.tracks.size(); ++track) {
      const Track& info = model.tracks[track];
      if (info.kind != TrackKind::kThread) continue;
      if (info.name.find("pt_gloo_runloop") != std::string::npos) {
        workers[info.file_index].push_back(info.main);
      }
    }
    for (SliceId id = 0; id < model.slices.size(); ++id) {
      if (model.slice_name(id).substr(0, 5) != "gloo:") continue;
      const Track& info = model.tracks[model.slices.track[id]];
      if (info.kind != TrackKind::kThread) continue;
      workers[info.file_index].push_back(info.main);
      has_gloo[info.file_index] = 1;
    }
    auto thread_number = [&](TrackId track) {
      const std::string& tid = model.tracks[track].tid;
      return !tid.empty() && tid.size() < 19 &&
                     tid.find_first_not_of("0123456789") == std::string::npos
                 ? std::stoll(tid)
                 : INT64_MAX;
    };
    std::string unread;
    uint64_t read = 0;
    for (size_t file = 0; file < model.files.size(); ++file) {
      if (has_gloo[file] == 0 || model.files[file].rank < 0) continue;
      auto& threads = workers[file];
      std::sort(threads.begin(), threads.end(), [&](TrackId left, TrackId right) {
        return std::make_pair(thread_number(left), left) <
               std::make_pair(thread_number(right), right);
      });
      threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
      std::vector<const FileInfo::ProcessGroup*> gloo_groups;
      for (const FileInfo::ProcessGroup& group : model.files[file].process_groups) {
        if (group.backend.empty() || group.backend.find("gloo") != std::string::npos) {
          gloo_groups.push_back(&group);
        }
      }
      if (!gloo_groups.empty() && threads.size() % gloo_groups.size() == 0) {
        const size_t per_group = threads.size() / gloo_groups.size();
        for (size_t at = 0; at < threads.size(); ++at) {
          thread_group[threads[at]] = gloo_groups[at / per_group];
        }
        ++read;
      } else {
        unread += (unread.empty() ? "rank " : ", rank ") + std::to_string(model.files[file].rank) +
                  " (" + std::to_string(threads.size()) + " worker threads, " +
                  std::to_string(gloo_groups.size()) + " gloo groups)";
      }
    }
    if (!unread.empty()) {
      out.host_groups =
          "gloo's collectives record no process group; not read from the worker "
          "threads on " +
          unread + ": matched as one group per rank";
    } else if (read > 0) {
      out.host_groups =
          "gloo's collectives record no process group: read from each range's "
          "worker thread (distributedInfo.pg_config, threads split in creation "
          "order)";
    }
  }
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    if (!is_collective(model.slice_name(id))) continue;
    const TrackId track = model.slices.track[id];
    const int rank = model.track_rank(track);
    if (rank < 0 || model.tracks[track].lane == Lane::kAnnotation) continue;
    const bool kernel = model.tracks[track].kind == TrackKind::kGpuStream;
    any_kernel |= kernel;
    // A kernel that records nothing of its own (PyTorch before 2.1 wrote the collective's name,
    // sizes, group and "Seq" on the host call only; every kernel of an all-to-all, an all-reduce
    // or a send/recv is then ncclKernel_SendRecv alike) is the collective whose host call its
    // launch was made inside: the innermost that records a "Collective name", else the innermost.
    SliceId identity = id;
    if (kernel && arg_string(model.slice_args(id), "Collective name").empty()) {
      const auto launch = launched_by.find(id);
      SliceId innermost = kNoSlice;
      for (SliceId at = launch == launched_by.end() ? kNoSlice : launch->second; at != kNoSlice;
           at = model.slices.parent[at]) {
        if (!is_host_collective(model.slice_name(at))) continue;
        if (innermost == kNoSlice) innermost = at;
        if (!arg_string(model.slice_args(at), "Collective name").empty()) {
          innermost = at;
          break;
        }
      }
      if (innermost != kNoSlice) identity = innermost;
    }
    const std::string_view args = model.slice_args(identity);
    std::string group_name = arg_string(args, "Process Group Name");
    const FileInfo::ProcessGroup* thread_pg = nullptr;
    if (group_name.empty() && !kernel) {
      const auto found = thread_group.find(model.tracks[track].main);
      if (found != thread_group.end()) thread_pg = found->second, group_name = thread_pg->name;
    }
    if (group_name.empty()) group_name = "0";
    const std::string key = std::string(kernel ? "kernel" : "host") + " pg " + group_name;
    Group& group = groups[key];
    if (group.per_rank.empty()) {
      group.per_rank.resize(ranks);
      group.member.assign(ranks, 0);
      group.label = group_name;
    }
    if (!group.ranks_known && thread_pg != nullptr) {
      std::vector<uint8_t> member(ranks, 0);
      bool any = false;
      for (const int member_rank : thread_pg->ranks) {
        const auto it = position.find(member_rank);
        if (it != position.end()) member[it->second] = 1, any = true;
      }
      if (any) group.member = member, group.ranks_known = true;
    }
    if (!group.ranks_known) {
      // "[0, 1, 2, 3]"; PyTorch truncates long lists with "...", which says nothing of members.
      const std::string list = arg_string(args, "Process Group Ranks");
      if (!list.empty() && list.find("...") == std::string::npos) {
        std::vector<uint8_t> member(ranks, 0);
        bool any = false, foreign = false;
        int64_t value = -1;
        for (const char c : list + ",") {
          if (c >= '0' && c <= '9') {
            value = (value < 0 ? 0 : value * 10) + (c - '0');
          } else if (value >= 0) {
            const auto it = position.find(static_cast<int>(value));
            if (it != position.end()) {
              member[it->second] = 1;
              any = true;
            } else {
              foreign = true;  // a member whose trace was not given
            }
            value = -1;
          }
        }
        (void)foreign;
        if (any) {
          group.member = member;
          group.ranks_known = true;
        }
      }
    }
    Call call{id, -1, "", arg_string(args, "Collective name")};
    if (call.name.empty() && identity != id) call.name = std::string(model.slice_name(identity));
    const std::string seq = arg_string(args, "Seq");
    if (!seq.empty() && seq.find_first_not_of("0123456789") == std::string::npos &&
        seq.size() < 18) {
      call.seq = std::stoll(seq);
    }
    // Without a recorded collective name, a host range's own name ("gloo:broadcast") tells the
    // operation apart; a kernel's name also says its algorithm, which may differ between ranks.
    // Older PyTorch records "Input Dims" and "Input type" instead of the counts and dtype. The
    // counts are left out where ranks legitimately move different amounts (sizes_differ_by_rank).
    const std::string operation =
        call.name.empty() && !kernel ? std::string(model.slice_name(id)) : call.name;
    std::string in_elements = arg_string(args, "In msg nelems");
    if (in_elements.empty()) in_elements = first_input_elements(args);
    std::string out_elements = arg_string(args, "Out msg nelems");
    if (sizes_differ_by_rank(operation)) in_elements.clear(), out_elements.clear();
    std::string dtype = arg_string(args, "dtype");
    if (dtype.empty()) dtype = first_input_type(args);
    call.signature = operation + "|" + in_elements + "|" + out_elements + "|" + dtype;
    if (call.name.empty()) call.name = std::string(model.slice_name(id));
    group_of_slice[id] = group.label;
    group.per_rank[position[rank]].push_back(std::move(call));
  }
  out.per_rank.resize(ranks);
  for (size_t at = 0; at < ranks; ++at) out.per_rank[at].rank = out.ranks[at];

  // The mismatches of the groups that do not decide (host calls where kernels are present): kept
  // below only where they disagree with the deciding groups' view.
  std::vector<Collectives::Mismatch> other_view;
  for (auto& [key, group] : groups) {
    if (!group.ranks_known) {
      for (size_t at = 0; at < ranks; ++at) group.member[at] = !group.per_rank[at].empty();
    }
    std::vector<size_t> members;
    bool sequenced = true;
    for (size_t at = 0; at < ranks; ++at) {
      auto& calls = group.per_rank[at];
      std::sort(calls.begin(), calls.end(), [&](const Call& left, const Call& right) {
        return model.slices.start_ns[left.slice] < model.slices.start_ns[right.slice];
      });
      if (group.member[at] != 0) members.push_back(at);
      for (const Call& call : calls) sequenced &= call.seq >= 0;
      // A rank outside the group that recorded the group's collectives anyway: ignored, said.
      if (group.member[at] == 0 && !calls.empty()) out.outside_group += calls.size();
    }
    if (members.size() < 2) continue;
    const bool kernel_group = key.rfind("kernel", 0) == 0;
    const bool decides = kernel_group == any_kernel;
    const char* const kind = kernel_group ? "kernel" : "host";
    // Rows: one per collective call of the group, each with the member's call or none.
    std::vector<std::vector<const Call*>> rows;
    if (sequenced) {
      // Kineto numbers a group's collectives on every rank alike: match on the number.
      std::map<int64_t, std::vector<const Call*>> by_seq;
      for (size_t at : members) {
        for (const Call& call : group.per_rank[at]) {
          auto& row = by_seq[call.seq];
          row.resize(ranks, nullptr);
          if (row[at] == nullptr) row[at] = &call;
        }
      }
      for (auto& [seq, row] : by_seq) rows.push_back(std::move(row));
    } else {
      // In order, a rank whose next call differs from what most members run next (name, sizes,
      // dtype) lacks this one: it waits for the next row instead of shifting every later match.
      // Votes alone cannot decide between two ranks (or an even split): a signature counts
      // against itself for each member now at another call that runs it within its next
      // kLookAhead calls (that member has it still to come, so it is not the one missing), and
      // of signatures still level, the one whose call began first leads.
      // On one clock the members of a collective that every member must join are all inside it
      // when the first of them leaves: where the members' next calls all look alike (so the vote
      // cannot tell), a member whose next call began after the earliest end among them is not at
      // that collective (it lacks it). Two members, or calls that record nothing to tell them
      // apart (gloo's), need this.
      constexpr size_t kLookAhead = 8;
      std::vector<size_t> cursor(ranks, 0);
      for (;;) {
        std::vector<size_t> here;  // the members whose next call may be this collective
        int64_t first_end = INT64_MAX, shortest = INT64_MAX;
        bool alike = true;  // every member's next call has one signature: the vote sees nothing
        const Call* first_next = nullptr;
        for (size_t at : members) {
          if (cursor[at] >= group.per_rank[at].size()) continue;
          const Call& next = group.per_rank[at][cursor[at]];
          if (first_next == nullptr) first_next = &next;
          alike &= next.signature == first_next->signature;
          if (shared_clock && every_member_waits(next.name)) {
            first_end = std::min(first_end, model.slices.end_ns[next.slice]);
            shortest = std::min(
                shortest, model.slices.end_ns[next.slice] - model.slices.start_ns[next.slice]);
          }
        }
        // Files of one clock domain from several hosts agree only as far as the hosts' clocks
        // do: a call counts as later only when it began more than the shortest of these calls
        // after the first ended (a call that waited for a late member is long; the late one's is
        // not).
        const int64_t cut = alike && first_end != INT64_MAX ? first_end + shortest : INT64_MAX;
        for (size_t at : members) {
          if (cursor[at] >= group.per_rank[at].size()) continue;
          if (model.slices.start_ns[group.per_rank[at][cursor[at]].slice] > cut) continue;
          here.push_back(at);
        }
        std::map<std::string, std::pair<int64_t, int64_t>> votes;  // (score, first start)
        for (size_t at : here) {
          if (cursor[at] >= group.per_rank[at].size()) continue;
          const Call& next = group.per_rank[at][cursor[at]];
          auto [it, fresh] = votes.try_emplace(next.signature, 0, INT64_MAX);
          it->second.first += 1;
          it->second.second = std::min(it->second.second, model.slices.start_ns[next.slice]);
        }
        if (votes.empty()) break;
        if (votes.size() > 1) {
          for (auto& [signature, vote] : votes) {
            for (size_t at : here) {
              const auto& calls = group.per_rank[at];
              if (cursor[at] >= calls.size() || calls[cursor[at]].signature == signature) continue;
              const size_t stop = std::min(calls.size(), cursor[at] + 1 + kLookAhead);
              for (size_t ahead = cursor[at] + 1; ahead < stop; ++ahead) {
                if (calls[ahead].signature == signature) {
                  vote.first -= 1;
                  break;
                }
              }
            }
          }
        }
        std::string majority;
        int64_t best = INT64_MIN, earliest = INT64_MAX;
        for (const auto& [signature, vote] : votes) {
          if (vote.first > best || (vote.first == best && vote.second < earliest)) {
            best = vote.first, earliest = vote.second, majority = signature;
          }
        }
        std::vector<const Call*> row(ranks, nullptr);
        for (size_t at : here) {
          if (cursor[at] >= group.per_rank[at].size()) continue;
          const Call& call = group.per_rank[at][cursor[at]];
          if (call.signature != majority) continue;
          row[at] = &call;
          ++cursor[at];
        }
        rows.push_back(std::move(row));
      }
    }
    uint64_t ordinal = 0;
    for (const auto& row : rows) {
      ++ordinal;
      const Call* any_call = nullptr;
      size_t present = 0;
      std::map<std::string, size_t> votes;
      for (size_t at : members) {
        if (row[at] == nullptr) continue;
        ++present;
        if (any_call == nullptr) any_call = row[at];
        ++votes[row[at]->signature];
      }
      const int64_t number = sequenced ? any_call->seq : static_cast<int64_t>(ordinal);
      std::string majority;
      size_t most = 0;
      for (const auto& [signature, count] : votes) {
        if (count > most) most = count, majority = signature;
      }
      std::string name = any_call->name;
      for (size_t at : members) {
        if (row[at] != nullptr && row[at]->signature == majority) {
          name = row[at]->name;
          break;
        }
      }
      if (present < members.size()) {
        for (size_t at : members) {
          if (row[at] != nullptr) continue;
          (decides ? out.mismatches : other_view)
              .push_back({group.label, number, name, out.ranks[at],
                          "rank " + std::to_string(out.ranks[at]) + " has no " + name + " #" +
                              std::to_string(number) + " of group " + group.label,
                          kind, true, key});
        }
      }
      for (size_t at : members) {
        if (row[at] == nullptr || row[at]->signature == majority) continue;
        auto part = [](const std::string& signature, int field) {
          size_t from = 0;
          for (int skip = 0; skip < field; ++skip) from = signature.find('|', from) + 1;
          return signature.substr(from, signature.find('|', from) - from);
        };
        std::string what;
        const char* fields[] = {"collective", "In msg nelems", "Out msg nelems", "dtype"};
        for (int field = 0; field < 4; ++field) {
          const std::string mine = part(row[at]->signature, field);
          const std::string theirs = part(majority, field);
          if (mine == theirs) continue;
          if (!what.empty()) what += ", ";
          what += std::string(fields[field]) + " " + (mine.empty() ? "(none)" : mine) +
                  " where the others have " + (theirs.empty() ? "(none)" : theirs);
        }
        (decides ? out.mismatches : other_view)
            .push_back({group.label, number, name, out.ranks[at],
                        "rank " + std::to_string(out.ranks[at]) + "'s " + name + " #" +
                            std::to_string(number) + " of group " + group.label +
                            " differs: " + what,
                        kind, false, key});
      }
      if (present < 2) continue;
      CollectiveInstance instance;
      instance.group = key;
      instance.index = ordinal - 1;
      instance.seq = number;
      instance.name = name;
      instance.decides = decides;
      instance.slices.assign(ranks, kNoSlice);
      for (size_t at : members) {
        if (row[at] != nullptr) instance.slices[at] = row[at]->slice;
      }
      out.sequence_numbers |= sequenced;
      out.instances.push_back(std::move(instance));
    }
  }

  // A collective missing (or different) on a rank shows in both kinds' matching when a trace holds
  // host calls and kernels: it is said once, from the deciding kind. The other kind's mismatch
  // stays where the deciding kind saw none like it (same group, rank, number and operation).
  {
    auto operation = [](std::string_view name) {
      std::string squeezed;
      const size_t colon = name.find(':');
      for (const char c : name.substr(colon == std::string_view::npos ? 0 : colon + 1)) {
        if (c != '_') squeezed += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      return squeezed;
    };
    std::set<std::tuple<std::string, int, int64_t, bool, std::string>> seen;
    for (const Collectives::Mismatch& mismatch : out.mismatches) {
      seen.emplace(mismatch.group, mismatch.rank, mismatch.seq, mismatch.missing,
                   operation(mismatch.collective));
    }
    for (Collectives::Mismatch& mismatch : other_view) {
      if (seen.count({mismatch.group, mismatch.rank, mismatch.seq, mismatch.missing,
                      operation(mismatch.collective)}) == 0) {
        out.mismatches.push_back(std::move(mismatch));
      }
    }
    std::set<std::pair<std::string, int64_t>> unmatched;
    for (const Collectives::Mismatch& mismatch : out.mismatches) {
      if (mismatch.missing) unmatched.emplace(mismatch.matched_in, mismatch.seq);
    }
    out.unmatched = unmatched.size();
  }

  // Clocks: the ends of one collective coincide on every rank (none leaves before the last
  // arrives), so end differences measure the clocks' offset; their spread bounds it.
  std::vector<std::vector<int64_t>> end_offsets(ranks);
  for (const CollectiveInstance& instance : out.instances) {
    if (!instance.decides) continue;
    // Offsets are to the first rank: sub-groups without it give no sample.
    if (instance.slices[0] == kNoSlice) continue;
    const int64_t reference = model.slices.end_ns[instance.slices[0]];
    for (size_t at = 1; at < ranks; ++at) {
      if (instance.slices[at] == kNoSlice) continue;
      end_offsets[at].push_back(model.slices.end_ns[instance.slices[at]] - reference);
    }
  }
  int64_t worst_uncertainty = 0;
  for (size_t at = 1; at < ranks; ++at) {
    RankCollectives& rank = out.per_rank[at];
    rank.clock_samples = end_offsets[at].size();
    if (end_offsets[at].empty()) continue;
    rank.clock_offset_ns = median(end_offsets[at]);
    for (int64_t offset : end_offsets[at]) {
      rank.clock_uncertainty_ns =
          std::max(rank.clock_uncertainty_ns, std::abs(offset - rank.clock_offset_ns));
    }
    worst_uncertainty = std::max(
        worst_uncertainty, std::max(std::abs(rank.clock_offset_ns), rank.clock_uncertainty_ns));
  }
  // How far arrivals can be trusted: on a shared clock, how far the ends of one collective
  // disagree; aligned, the spread of each rank's end offsets around its median.
  int64_t clock_spread = 0;
  if (shared_clock) {
    clock_spread = worst_uncertainty;
  } else {
    for (const RankCollectives& rank : out.per_rank) {
      clock_spread = std::max(clock_spread, rank.clock_uncertainty_ns);
    }
  }
  // A rank arrives at a collective when its contribution is ready. For a GPU kernel and a host
  // call whose operand is on the host that is the slice's start. A host collective on CUDA
  // tensors (gloo) stages its operand through a device-to-host copy: the c10d call makes the
  // copy wait for the compute stream and launches it, and the worker's range begins at once and
  // synchronises on the copy inside. A rank late by its GPU work then begins its range on time and
  // is ready only when the copy ends. So where a synchronisation inside the range waited on a
  // device-to-host copy of the rank's (the copy ended while it was blocked), the arrival is the
  // latest such copy's end (measured: the copy's recorded end).
  std::map<SliceId, int64_t> ready_at;
  if (!any_kernel) {
    const std::vector<uint8_t> copy_roles = category_roles(model);
    std::vector<std::vector<int64_t>> copy_ends(ranks);  // device-to-host copies' ends, by rank
    for (SliceId id = 0; id < model.slices.size(); ++id) {
      const TrackId track = model.slices.track[id];
      if (model.tracks[track].kind != TrackKind::kGpuStream ||
          copy_roles[model.slices.category[id]] != kGpuMemcpyRole ||
          model.slice_name(id).find("DtoH") == std::string_view::npos) {
        continue;
      }
      const int rank = model.track_rank(track);
      if (rank >= 0) copy_ends[position[rank]].push_back(model.slices.end_ns[id]);
    }
    for (auto& ends : copy_ends) std::sort(ends.begin(), ends.end());
    for (const CollectiveInstance& instance : out.instances) {
      if (!instance.decides) continue;
      for (size_t at = 0; at < ranks; ++at) {
        const SliceId range = instance.slices[at];
        if (range == kNoSlice || copy_ends[at].empty()) continue;
        const TrackId track = model.slices.track[range];
        if (model.tracks[track].kind != TrackKind::kThread) continue;
        const int64_t begin = model.slices.start_ns[range], end = model.slices.end_ns[range];
        const auto& ids = index.slices(track);
        auto it = std::lower_bound(ids.begin(), ids.end(), begin, [&](SliceId id, int64_t value) {
          return model.slices.start_ns[id] < value;
        });
        for (; it != ids.end() && model.slices.start_ns[*it] < end; ++it) {
          if (*it == range || !is_host_synchronisation(model.slice_name(*it))) continue;
          const int64_t sync_begin = model.slices.start_ns[*it];
          const int64_t sync_end = std::min(model.slices.end_ns[*it], end);
          const auto& ends = copy_ends[at];
          const auto after = std::upper_bound(ends.begin(), ends.end(), sync_end);
          if (after != ends.begin() && *std::prev(after) >= sync_begin) {
            ready_at[range] = std::max(begin, *std::prev(after));
          }
          break;  // the range's first synchronisation: the wait for its operand
        }
      }
    }
  }
  auto ready = [&](SliceId id) {
    const auto it = ready_at.find(id);
    return it != ready_at.end() ? it->second : model.slices.start_ns[id];
  };
  // Arrivals are compared on the shared clock when the files have one; otherwise each rank's
  // times are shifted by its offset from the collectives' ends.
  auto arrival = [&](size_t at, SliceId id) {
    return ready(id) - (shared_clock ? 0 : out.per_rank[at].clock_offset_ns);
  };
  {
    char text[256];
    uint64_t samples = 0;
    for (const RankCollectives& rank : out.per_rank)
      samples = std::max(samples, rank.clock_samples);
    if (samples == 0) {
      out.clock = "no collective matched across ranks: the ranks' clocks are not compared";
    } else if (shared_clock) {
      std::snprintf(text, sizeof text,
                    "the ranks share one clock domain; the ends of %llu matched collectives "
                    "agree within %s (uncertainty of arrival times)",
                    static_cast<unsigned long long>(samples),
                    format_duration(worst_uncertainty).c_str());
      out.clock = text;
    } else {
      std::snprintf(text, sizeof text,
                    "the ranks' clocks differ: aligned on the ends of %llu matched collectives "
                    "(median offset per rank), uncertainty ±%s",
                    static_cast<unsigned long long>(samples),
                    format_duration(clock_spread).c_str());
      out.clock = text;
    }
  }

  for (CollectiveInstance& instance : out.instances) {
    int64_t first = INT64_MAX, last = INT64_MIN;
    size_t last_at = 0;
    for (size_t at = 0; at < ranks; ++at) {
      if (instance.slices[at] == kNoSlice) continue;
      const int64_t when = arrival(at, instance.slices[at]);
      first = std::min(first, when);
      if (when > last) {
        last = when;
        last_at = at;
      }
    }
    instance.last_rank = out.ranks[last_at];
    instance.skew_ns = last - first;
    for (size_t at = 0; at < ranks; ++at) {
      if (instance.slices[at] != kNoSlice) {
        instance.imposed_ns += last - arrival(at, instance.slices[at]);
      }
    }
    if (!instance.decides) continue;
    for (size_t at = 0; at < ranks; ++at) {
      if (instance.slices[at] == kNoSlice) continue;
      RankCollectives& rank = out.per_rank[at];
      ++rank.collectives;
      rank.waited_ns += last - arrival(at, instance.slices[at]);
    }
    ++out.per_rank[last_at].arrived_last;
    out.per_rank[last_at].imposed_ns += instance.imposed_ns;
  }

  // Communication hidden by compute, per rank: its deciding collectives against its other
  // innermost work (GPU kernels when the collectives are kernels, leaf slices of its threads
  // otherwise).
  std::vector<uint8_t> has_child(model.slices.size(), 0);
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    if (model.slices.parent[id] != kNoSlice) has_child[model.slices.parent[id]] = 1;
  }
  std::vector<std::vector<Interval>> comm(ranks), compute(ranks);
  std::vector<std::vector<SliceId>> compute_slices(ranks);  // by start
  std::vector<std::map<TrackId, int64_t>> comm_tracks(ranks);
  for (const CollectiveInstance& instance : out.instances) {
    if (!instance.decides) continue;
    for (size_t at = 0; at < ranks; ++at) {
      const SliceId id = instance.slices[at];
      if (id == kNoSlice) continue;
      comm[at].push_back({model.slices.start_ns[id], model.slices.end_ns[id]});
      comm_tracks[at][model.slices.track[id]] +=
          model.slices.end_ns[id] - model.slices.start_ns[id];
    }
  }
  // Compute: the ranks' GPU kernels where they ran any besides the collectives (a gloo job on
  // CUDA tensors computes on the GPU though its collectives run on host threads), else their
  // threads' innermost slices. Neither Kineto's span of the whole profile ("PyTorch Profiler
  // (0)", category Trace) nor a copy or memset on a stream (gloo's staging copies) is compute.
  const std::vector<uint8_t> roles = category_roles(model);
  auto not_work = [&](SliceId id) {
    const bool stream = model.tracks[model.slices.track[id]].kind == TrackKind::kGpuStream;
    const StringId category = model.slices.category[id];
    return stream ? roles[category] == kGpuMemcpyRole || roles[category] == kGpuMemsetRole
                  : model.strings.get(category) == "Trace";
  };
  bool gpu_compute = any_kernel;
  for (SliceId id = 0; id < model.slices.size() && !gpu_compute; ++id) {
    const TrackId track = model.slices.track[id];
    gpu_compute = model.tracks[track].kind == TrackKind::kGpuStream &&
                  model.tracks[track].lane != Lane::kAnnotation && model.track_rank(track) >= 0 &&
                  !not_work(id) && !is_collective(model.slice_name(id));
  }
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    const TrackId track = model.slices.track[id];
    const int rank = model.track_rank(track);
    if (rank < 0 || model.tracks[track].lane == Lane::kAnnotation) continue;
    if (is_collective(model.slice_name(id))) continue;
    if (not_work(id)) continue;
    const bool kernel = model.tracks[track].kind == TrackKind::kGpuStream;
    if (gpu_compute ? !kernel : (kernel || has_child[id] != 0)) continue;
    compute[position[rank]].push_back({model.slices.start_ns[id], model.slices.end_ns[id]});
    compute_slices[position[rank]].push_back(id);
  }
  for (size_t at = 0; at < ranks; ++at) {
    RankCollectives& rank = out.per_rank[at];
    const std::vector<Interval> comm_union = union_of(comm[at]);
    rank.comm_ns = total_length(comm_union);
    rank.comm_hidden_ns = total_length(intersect(comm_union, union_of(compute[at])));
    int64_t most = -1;
    for (const auto& [track, ns] : comm_tracks[at]) {
      if (ns > most) {
        most = ns;
        rank.track = track;
      }
    }
  }

  // The straggler: the rank whose late arrivals kept the others waiting longest.
  size_t worst = 0;
  for (size_t at = 1; at < ranks; ++at) {
    if (out.per_rank[at].imposed_ns > out.per_rank[worst].imposed_ns) worst = at;
  }
  if (out.per_rank[worst].imposed_ns > 0) {
    Straggler straggler;
    straggler.rank = out.ranks[worst];
    straggler.arrived_last = out.per_rank[worst].arrived_last;
    // Someone arrives last at every collective: how likely is coming last this often by chance,
    // each collective it ran giving it 1 / (members present) of it?
    std::vector<double> chances;
    for (const CollectiveInstance& instance : out.instances) {
      if (!instance.decides || instance.slices[worst] == kNoSlice) continue;
      size_t present = 0;
      for (SliceId slice : instance.slices) present += slice != kNoSlice ? 1 : 0;
      if (present >= 2) chances.push_back(1.0 / static_cast<double>(present));
    }
    straggler.chance_p = tail_at_least(chances, straggler.arrived_last);
    straggler.collectives = out.per_rank[worst].collectives;
    straggler.imposed_ns = out.per_rank[worst].imposed_ns;
    // It stands out by how often it came last, or by how much: two thirds or more of all the
    // waiting the ranks imposed (one slow step holds the others up once, which no count of
    // arrivals can tell from chance).
    int64_t imposed_by_others = 0;
    for (size_t at = 0; at < ranks; ++at) {
      if (at != worst) imposed_by_others += out.per_rank[at].imposed_ns;
    }
    straggler.stands_out = straggler.collectives < kStragglerMinCollectives ||
                           straggler.chance_p <= kStragglerChance ||
                           straggler.imposed_ns >= 2 * imposed_by_others;
    // Arrivals closer than the clocks are known cannot be put in order: when even the largest
    // skew is within the uncertainty, which rank came last is not measured (two files whose
    // collectives disagree align badly, and then every "late" arrival is the clocks' error).
    straggler.clock_uncertainty_ns = clock_spread;
    int64_t largest_skew = 0;
    for (const CollectiveInstance& instance : out.instances) {
      if (instance.decides && instance.last_rank == straggler.rank) {
        largest_skew = std::max(largest_skew, instance.skew_ns);
      }
    }
    if (largest_skew <= clock_spread) {
      straggler.within_clock_uncertainty = true;
      straggler.stands_out = false;
    }
    straggler.compute_source = gpu_compute ? "GPU kernels" : "thread work";
    // Per rank: its deciding collectives by start, so that "since the previous collective" is
    // the end of the one before in the rank's own order.
    std::vector<std::vector<SliceId>> own(ranks);
    for (const CollectiveInstance& instance : out.instances) {
      if (!instance.decides) continue;
      for (size_t at = 0; at < ranks; ++at) {
        if (instance.slices[at] != kNoSlice) own[at].push_back(instance.slices[at]);
      }
    }
    for (auto& list : own) {
      std::sort(list.begin(), list.end(), [&](SliceId left, SliceId right) {
        return model.slices.start_ns[left] < model.slices.start_ns[right];
      });
    }
    // Before its first collective, a rank's window opens at its first event.
    std::vector<int64_t> rank_start(ranks, INT64_MAX);
    for (SliceId id = 0; id < model.slices.size(); ++id) {
      const int rank = model.track_rank(model.slices.track[id]);
      if (rank < 0) continue;
      int64_t& start = rank_start[position[rank]];
      start = std::min(start, model.slices.start_ns[id]);
    }
    auto window_of = [&](size_t at, SliceId collective) -> Interval {
      const auto it = std::lower_bound(
          own[at].begin(), own[at].end(), collective, [&](SliceId slice, SliceId value) {
            return model.slices.start_ns[slice] < model.slices.start_ns[value];
          });
      const int64_t from =
          it == own[at].begin() ? rank_start[at] : model.slices.end_ns[*std::prev(it)];
      return {from, ready(collective)};
    };
    // Compute slices by start, with the longest per rank (to find those open at a window's start).
    std::vector<int64_t> longest(ranks, 0);
    for (size_t at = 0; at < ranks; ++at) {
      auto& ids = compute_slices[at];
      std::sort(ids.begin(), ids.end(), [&](SliceId left, SliceId right) {
        return model.slices.start_ns[left] < model.slices.start_ns[right];
      });
      for (SliceId id : ids) {
        longest[at] = std::max(longest[at], model.slices.end_ns[id] - model.slices.start_ns[id]);
      }
    }
    std::vector<std::vector<TrackId>> lanes(model.tracks.size());
    for (TrackId track = 0; track < model.tracks.size(); ++track) {
      if (model.tracks[track].kind == TrackKind::kThread)
        lanes[model.tracks[track].main].push_back(track);
    }
    std::vector<uint8_t> sync_name(model.strings.size(), 0);
    for (StringId name = 0; name < model.strings.size(); ++name) {
      const std::string_view text = model.strings.get(name);
      sync_name[name] = is_host_synchronisation(text);
    }
    // The launching thread of a collective: its ac2g flow's source (a GPU kernel), else the
    // collective's own thread (a host op).
    std::vector<uint8_t> is_own(model.slices.size(), 0);
    for (const auto& list : own) {
      for (SliceId id : list) is_own[id] = 1;
    }
    std::map<SliceId, SliceId> launch_of;
    for (size_t row = 0; row < model.flows.size(); ++row) {
      const SliceId from = model.flows.from_slice[row], to = model.flows.to_slice[row];
      if (from != kNoSlice && to != kNoSlice && is_own[to] != 0) launch_of[to] = from;
    }
    // A host collective that runs on a worker thread (gloo's) was handed there by the thread that
    // called c10d's op (c10d::allreduce_): the latest such call of its process that began before
    // it.
    std::map<std::pair<uint32_t, std::string>, std::vector<std::pair<int64_t, TrackId>>> c10d_calls;
    for (SliceId id = 0; id < model.slices.size(); ++id) {
      const Track& track = model.tracks[model.slices.track[id]];
      if (track.kind != TrackKind::kThread || model.slice_name(id).rfind("c10d::", 0) != 0)
        continue;
      c10d_calls[{track.file_index, track.pid}].emplace_back(model.slices.start_ns[id], track.main);
    }
    for (auto& [process, calls] : c10d_calls) std::sort(calls.begin(), calls.end());
    auto thread_of = [&](SliceId collective) -> TrackId {
      const auto it = launch_of.find(collective);
      const SliceId source = it != launch_of.end() ? it->second : collective;
      const Track& track = model.tracks[model.slices.track[source]];
      if (track.kind != TrackKind::kThread) return kNoTrack;
      if (source == collective) {
        const auto calls = c10d_calls.find({track.file_index, track.pid});
        if (calls != c10d_calls.end()) {
          const auto after = std::upper_bound(
              calls->second.begin(), calls->second.end(),
              std::pair<int64_t, TrackId>{model.slices.start_ns[collective], kNoTrack});
          if (after != calls->second.begin()) return std::prev(after)->second;
        }
      }
      return track.main;
    };
    // What the thread did over the window: time in synchronisations, time with nothing open.
    auto host_time = [&](TrackId thread, Interval window, std::vector<Interval> busy, int64_t& sync,
                         int64_t& idle) {
      sync = idle = 0;
      if (thread == kNoTrack) return;
      std::vector<Interval> syncs;
      auto add = [&](SliceId id) {
        if (has_child[id] != 0) return;
        const int64_t start = std::max(model.slices.start_ns[id], window.first);
        const int64_t end = std::min(model.slices.end_ns[id], window.second);
        if (end <= start) return;
        busy.emplace_back(start, end);
        if (sync_name[model.slices.name[id]] != 0) syncs.emplace_back(start, end);
      };
      for (TrackId track : lanes[thread]) {
        const auto& ids = index.slices(track);
        const SliceId open = index.innermost_at(track, window.first);
        if (open != kNoSlice) add(open);
        auto it = std::lower_bound(
            ids.begin(), ids.end(), window.first,
            [&](SliceId id, int64_t value) { return model.slices.start_ns[id] < value; });
        for (; it != ids.end() && model.slices.start_ns[*it] < window.second; ++it) add(*it);
      }
      sync = total_length(union_of(std::move(syncs)));
      idle = (window.second - window.first) - total_length(union_of(std::move(busy)));
    };
    // Each rank's own collective slices (every kind, matched or not), by start: a window may hold
    // one that did not match (its group's other members recorded none) or of another group, and
    // the rank then waited inside it for a member late there, which is neither its compute nor
    // an idle thread.
    std::vector<std::vector<SliceId>> rank_collectives(ranks);
    std::vector<int64_t> longest_collective(ranks, 0);
    for (const auto& [slice, label] : group_of_slice) {
      const int rank = model.track_rank(model.slices.track[slice]);
      if (rank < 0) continue;
      const size_t at = position[rank];
      rank_collectives[at].push_back(slice);
      longest_collective[at] = std::max(longest_collective[at],
                                        model.slices.end_ns[slice] - model.slices.start_ns[slice]);
    }
    for (auto& list : rank_collectives) {
      std::sort(list.begin(), list.end(), [&](SliceId left, SliceId right) {
        return model.slices.start_ns[left] < model.slices.start_ns[right];
      });
    }
    std::vector<int64_t> in_collectives_ns(ranks, 0);
    std::map<SliceId, int64_t> straggler_inside;  // the straggler's time in each such collective
    // Per rank, over the windows before the collectives the straggler held up: compute per name,
    // compute in all, and its launching thread's synchronisations and untraced time.
    std::vector<std::map<std::string, int64_t>> by_name(ranks);
    std::vector<int64_t> compute_ns(ranks, 0), sync_ns(ranks, 0), idle_ns(ranks, 0);
    std::vector<uint64_t> windows(ranks, 0);
    const CollectiveInstance* heaviest = nullptr;
    int64_t held = 0;  // the wait it imposed on each other member, on average, summed
    for (const CollectiveInstance& instance : out.instances) {
      if (!instance.decides || instance.last_rank != straggler.rank) continue;
      straggler.max_skew_ns = std::max(straggler.max_skew_ns, instance.skew_ns);
      size_t present = 0;
      for (SliceId slice : instance.slices) present += slice != kNoSlice ? 1 : 0;
      held += instance.imposed_ns / static_cast<int64_t>(std::max<size_t>(1, present - 1));
      if (heaviest == nullptr || instance.imposed_ns > heaviest->imposed_ns) heaviest = &instance;
      for (size_t at = 0; at < ranks; ++at) {
        const SliceId collective = instance.slices[at];
        if (collective == kNoSlice) continue;
        const Interval window = window_of(at, collective);
        ++windows[at];
        std::vector<Interval> clipped;
        const auto& ids = compute_slices[at];
        const int64_t from = window.first - longest[at];
        auto it = std::lower_bound(ids.begin(), ids.end(), from, [&](SliceId id, int64_t value) {
          return model.slices.start_ns[id] < value;
        });
        for (; it != ids.end() && model.slices.start_ns[*it] < window.second; ++it) {
          const SliceId id = *it;
          const int64_t start = std::max(model.slices.start_ns[id], window.first);
          const int64_t end = std::min(model.slices.end_ns[id], window.second);
          if (end <= start) continue;
          by_name[at][std::string(model.slice_name(id))] += end - start;
          clipped.emplace_back(start, end);
        }
        compute_ns[at] += total_length(union_of(std::move(clipped)));
        // The launching thread's part ends when it handed the collective over (a staged host
        // collective's range begins then; its wait for the copy is not the thread's doing).
        const Interval host_window = {window.first,
                                      std::max(window.first, model.slices.start_ns[collective])};
        std::vector<Interval> inside;  // its other collectives over the launching thread's part
        {
          const auto& list = rank_collectives[at];
          auto other = std::lower_bound(
              list.begin(), list.end(), host_window.first - longest_collective[at],
              [&](SliceId id, int64_t value) { return model.slices.start_ns[id] < value; });
          for (; other != list.end() && model.slices.start_ns[*other] < host_window.second;
               ++other) {
            if (std::find(instance.slices.begin(), instance.slices.end(), *other) !=
                instance.slices.end())
              continue;
            const int64_t start = std::max(model.slices.start_ns[*other], host_window.first);
            const int64_t end = std::min(model.slices.end_ns[*other], host_window.second);
            if (end <= start) continue;
            inside.emplace_back(start, end);
            if (at == worst) straggler_inside[*other] += end - start;
          }
        }
        in_collectives_ns[at] += total_length(union_of(std::vector<Interval>(inside)));
        int64_t sync = 0, idle = 0;
        host_time(thread_of(collective), host_window, std::move(inside), sync, idle);
        sync_ns[at] += sync;
        idle_ns[at] += idle;
      }
    }
    auto others_median = [&](const std::vector<int64_t>& values) {
      std::vector<int64_t> others;
      for (size_t at = 0; at < ranks; ++at) {
        if (at != worst && windows[at] > 0) others.push_back(values[at]);
      }
      straggler.others = others.size();
      return others.empty() ? int64_t{-1} : median(others);
    };
    straggler.compute_ns = compute_ns[worst];
    straggler.compute_median_others_ns = others_median(compute_ns);
    straggler.sync_ns = sync_ns[worst];
    straggler.sync_median_others_ns = others_median(sync_ns);
    straggler.host_idle_ns = idle_ns[worst];
    straggler.host_idle_median_others_ns = others_median(idle_ns);
    straggler.in_collectives_ns = in_collectives_ns[worst];
    straggler.in_collectives_median_others_ns = others_median(in_collectives_ns);
    for (const auto& [slice, ns] : straggler_inside) {
      if (straggler.waited_in == kNoSlice || ns > straggler_inside[straggler.waited_in]) {
        straggler.waited_in = slice;
      }
    }
    if (straggler.waited_in != kNoSlice) {
      straggler.waited_in_group = group_of_slice[straggler.waited_in];
      straggler.waited_in_matched = false;
      for (const CollectiveInstance& instance : out.instances) {
        if (instance.slices[worst] == straggler.waited_in) straggler.waited_in_matched = true;
      }
    }
    // The work that ran longer on the straggler than on the median other rank, most first.
    int64_t most = INT64_MIN;
    for (const auto& [name, ns] : by_name[worst]) {
      std::vector<int64_t> others;
      for (size_t at = 0; at < ranks; ++at) {
        if (at == worst || windows[at] == 0) continue;
        const auto it = by_name[at].find(name);
        others.push_back(it == by_name[at].end() ? 0 : it->second);
      }
      const int64_t typical = others.empty() ? 0 : median(others);
      if (ns - typical > most) {
        most = ns - typical;
        straggler.before = name;
        straggler.before_ns = ns;
        straggler.before_median_others_ns = others.empty() ? -1 : typical;
        straggler.before_others = others.size();
      }
    }
    if (straggler.before.empty()) straggler.before = "(nothing traced)";
    straggler.before_share_ns = straggler.imposed_ns;
    if (heaviest != nullptr) {
      straggler.collective_slice = heaviest->slices[worst];
      // Evidence: the straggler's longest slice of that work before the heaviest collective.
      const Interval window = window_of(worst, straggler.collective_slice);
      int64_t longest = 0;
      for (SliceId id : compute_slices[worst]) {
        if (model.slices.end_ns[id] <= window.first || model.slices.start_ns[id] >= window.second)
          continue;
        if (model.slice_name(id) != straggler.before) continue;
        const int64_t length = model.slices.end_ns[id] - model.slices.start_ns[id];
        if (length > longest) longest = length, straggler.before_slice = id;
      }
    }
    // Which explanation the times support (an inference from measured times): the straggler's
    // extra compute, or its launching thread held back (synchronised or idle).
    const int64_t extra_compute = straggler.compute_median_others_ns < 0
                                      ? 0
                                      : straggler.compute_ns - straggler.compute_median_others_ns;
    const int64_t extra_sync = straggler.sync_median_others_ns < 0
                                   ? 0
                                   : straggler.sync_ns - straggler.sync_median_others_ns;
    const int64_t extra_idle = straggler.host_idle_median_others_ns < 0
                                   ? 0
                                   : straggler.host_idle_ns - straggler.host_idle_median_others_ns;
    const int64_t extra_inside =
        straggler.in_collectives_median_others_ns < 0
            ? 0
            : straggler.in_collectives_ns - straggler.in_collectives_median_others_ns;
    if (extra_compute > 0 && extra_compute * 2 >= held) {
      straggler.cause = "compute";
    } else if (extra_inside > 0 && extra_inside * 2 >= held) {
      straggler.cause = "collective";
    } else if (extra_idle > 0 && extra_idle * 2 >= held) {
      straggler.cause = "host idle";
    } else if (extra_sync > 0 && extra_sync * 2 >= held) {
      straggler.cause = "host synchronisation";
    } else {
      straggler.cause = "unexplained";
    }
    out.straggler = std::move(straggler);
  }
  return out;
}

}  // namespace loupe::trace
