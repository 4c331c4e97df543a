// The debug module (crown/debug/stacks.h, status.h, logs.h, pdb.h,
// trace.h): its agent answers a StacksRequest with this process's stacks, a
// StatusRequest with its proc's counts and a TraceRequest with what this
// process recorded; it takes log lines and the prompts of remote pdb
// sessions on the controller, and their input on every rank.
// The Python dump is faulthandler's, raised on the agent's own thread:
// raise() returns once the handler has written every thread's traceback to
// the file, and no GIL is taken.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <mutex>

#include "crown/actor/actor.h"
#include "crown/actor/module.h"
#include "crown/common/log.h"
#include "crown/debug/logs.h"
#include "crown/debug/pdb.h"
#include "crown/debug/stacks.h"
#include "crown/debug/status.h"
#include "crown/debug/trace.h"
#include "debug/log_relay.h"
#include "debug/pdb_sessions.h"

namespace crown::debug {
namespace {

constexpr std::size_t kMaxDumpBytes = 4 << 20;  // a dump past this is cut, and says so
constexpr std::size_t kTraceChunkEvents = 50000;  // a reply well under the message bound

std::string readWhole(int fd) {
  std::string text;
  std::array<char, 65536> chunk;
  if (::lseek(fd, 0, SEEK_SET) < 0) return "(cannot read the dump: lseek failed)";
  for (;;) {
    ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got <= 0) break;
    text.append(chunk.data(), static_cast<std::size_t>(got));
    if (text.size() > kMaxDumpBytes) {
      text.resize(kMaxDumpBytes);
      text += "\n(cut at " + std::to_string(kMaxDumpBytes) + " bytes)\n";
      break;
    }
  }
  return text;
}

// eu-stack attaches with ptrace and prints every thread's native frames; a
// bound of its own (timeout) so that a process it cannot stop costs 5 s at most.
std::string nativeStacks() {
  if (::access("/usr/bin/eu-stack", X_OK) != 0) {
    return "(no native stacks: eu-stack is not installed; apt-get install elfutils)";
  }
  std::string command =
      "timeout 5 /usr/bin/eu-stack -p " + std::to_string(::getpid()) + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "(no native stacks: cannot start eu-stack)";
  std::string text;
  std::array<char, 4096> chunk;
  std::size_t got = 0;
  while ((got = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0 && text.size() < kMaxDumpBytes)
    text.append(chunk.data(), got);
  int status = ::pclose(pipe);
  if (status != 0 && text.empty()) return "(no native stacks: eu-stack failed)";
  return text;
}

std::uint64_t residentBytes() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  unsigned long long pages = 0, resident = 0;
  int read = std::fscanf(statm, "%llu %llu", &pages, &resident);
  std::fclose(statm);
  return read == 2 ? resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

// Asks every rank of `ranks` at once; a rank that does not answer by the
// deadline, or is lost, is in the answer with `error` saying why.
template <class Reply, class Request>
std::vector<Reply> askAll(Proc& proc, std::uint64_t agent, const std::vector<Rank>& ranks,
                          const Request& request, std::chrono::milliseconds timeout) {
  std::vector<Future<Reply>> asked;
  asked.reserve(ranks.size());
  for (Rank rank : ranks) asked.push_back(proc.request<Reply>({rank, agent}, request));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<Reply> out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    try {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      out.push_back(asked[i].get(std::max(left, std::chrono::milliseconds(1))));
    } catch (const std::exception& e) {
      Reply missing;
      missing.rank = ranks[i];
      missing.host = proc.host(ranks[i]);
      missing.error = e.what();
      out.push_back(std::move(missing));
    }
  }
  return out;
}

class DebugModule : public Proc::Module {
 public:
  void install(Proc& proc, SystemIds& ids) override {
    proc_ = &proc;
    agent_ = ids.claim();
    forwarder_ = std::make_unique<detail::LogForwarder>(proc, ActorId{0, agent_});
    proc.spawnLocalAt(agent_, std::make_unique<Agent>(*this), "stacks-agent");
  }

  void stop() override {
    pdbInbox_.stop();  // a session still stopped continues: nobody can type to it now
    std::lock_guard lock(mutex_);
    if (collector_) collector_->print();
  }

  detail::LogForwarder& forwarder() { return *forwarder_; }
  detail::LogCollector& collector() {
    std::lock_guard lock(mutex_);
    if (!collector_) collector_ = std::make_unique<detail::LogCollector>();
    return *collector_;
  }

  void setPythonDump(int fd, int signal) {
    std::lock_guard lock(mutex_);
    fd_ = fd;
    signal_ = signal;
  }

  std::uint64_t agentId() const { return agent_; }
  detail::PdbRegistry& pdbRegistry() { return pdbRegistry_; }
  detail::PdbInbox& pdbInbox() { return pdbInbox_; }

 private:
  class Agent : public Actor {
   public:
    explicit Agent(DebugModule& module) {
      handle<StacksRequest>([&module](const StacksRequest& request) { return module.stacks(request); });
      handle<StatusRequest>([&module](const StatusRequest&) { return module.status(); });
      handle<TraceRequest>([&module](const TraceRequest& request) { return module.trace(request); });
      handle<LogLines>([&module](const LogLines& lines) { module.collector().add(lines); });
      handle<FlushLogsRequest>([&module](const FlushLogsRequest&) {
        module.forwarder().flushPartial();  // after this rank's earlier lines, before the reply
        return LogsFlushed{};
      });
      handle<PdbPrompt>([&module](const PdbPrompt& prompt) {
        if (module.pdbRegistry().take(PdbPrompt(prompt))) {
          // Nothing else tells the controller's user why the job waits.
          log::get().warn("rank {} stopped in pdb in {} ({}:{}): `crown debug` attaches to it",
                          prompt.where.rank, prompt.where.function, prompt.where.file,
                          prompt.where.line);
        }
      });
      handle<PdbInput>([&module](const PdbInput& input) { module.pdbInbox().put(PdbInput(input)); });
      handle<PrintLogsRequest>([&module](const PrintLogsRequest&) {
        module.collector().print();  // every line that came before this request did
        return LogsFlushed{};
      });
    }
  };

  RankStacks stacks(const StacksRequest& request) {
    RankStacks out;
    out.rank = proc_->rank();
    out.host = proc_->host(out.rank);
    out.pid = static_cast<int>(::getpid());
    {
      std::lock_guard lock(mutex_);  // one dump at a time: they share the file
      // The signal's default would end the process: raised only while
      // faulthandler still holds it (Python's exit gives it back).
      struct sigaction current {};
      bool registered = fd_ >= 0 && ::sigaction(signal_, nullptr, &current) == 0 &&
                        current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN;
      if (fd_ >= 0 && !registered) {
        out.python = "(the Python stack dump is not registered any more: Python is exiting)";
      } else if (fd_ >= 0) {
        if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) < 0 || ::raise(signal_) != 0) {
          out.python = "(the Python stack dump failed)";
        } else {
          out.python = readWhole(fd_);
        }
      }
    }
    if (request.native) out.native = nativeStacks();
    return out;
  }

  RankStatus status() {
    RankStatus out;
    out.rank = proc_->rank();
    out.host = proc_->host(out.rank);
    out.pid = static_cast<int>(::getpid());
    out.rssBytes = residentBytes();
    Proc::Stats stats = proc_->stats();
    out.actors = stats.actors;
    out.queued = stats.queued;
    out.requestsInFlight = stats.requestsInFlight;
    out.handled = stats.handled;
    return out;
  }

  // Chunk 0 takes what this process recorded; the chunks after it read on,
  // and the last one frees it.
  RankTrace trace(const TraceRequest& request) {
    std::lock_guard lock(mutex_);
    if (request.chunk == 0) traced_ = trace::take();
    RankTrace out;
    out.rank = proc_->rank();
    out.host = proc_->host(out.rank);
    std::size_t from = std::min<std::size_t>(request.chunk * kTraceChunkEvents, traced_.events.size());
    std::size_t to = std::min(from + kTraceChunkEvents, traced_.events.size());
    out.events.assign(traced_.events.begin() + static_cast<std::ptrdiff_t>(from),
                      traced_.events.begin() + static_cast<std::ptrdiff_t>(to));
    if (request.chunk == 0) {
      out.threads = traced_.threads;
      out.dropped = traced_.dropped;
    }
    out.more = to < traced_.events.size();
    if (!out.more) traced_ = {};
    return out;
  }

  Proc* proc_ = nullptr;
  std::uint64_t agent_ = 0;
  trace::Recorded traced_;  // taken for a TraceRequest, under mutex_
  std::mutex mutex_;
  int fd_ = -1;
  int signal_ = 0;
  std::unique_ptr<detail::LogForwarder> forwarder_;
  std::unique_ptr<detail::LogCollector> collector_;  // the controller's, made on first use
  detail::PdbRegistry pdbRegistry_;                   // the controller's
  detail::PdbInbox pdbInbox_;
};

DebugModule& moduleOf(Proc& proc) {
  auto* module = proc.findModule<DebugModule>();
  if (module == nullptr) throw Error("this proc has no debug module (debug::debugModule)");
  return *module;
}

detail::PdbRegistry::Alive aliveIn(Proc& proc) {
  return [&proc](Rank r) { return proc.alive(r); };
}

}  // namespace

Proc::ModuleFactory debugModule() {
  return [] { return std::make_unique<DebugModule>(); };
}

void setPythonStackDump(Proc& proc, int fd, int signal) { moduleOf(proc).setPythonDump(fd, signal); }

std::vector<RankStacks> collectStacks(Proc& proc, const std::vector<Rank>& ranks, bool native,
                                      std::chrono::milliseconds timeout) {
  return askAll<RankStacks>(proc, moduleOf(proc).agentId(), ranks, StacksRequest{native}, timeout);
}

void forwardOutput(Proc& proc, int stream, std::string_view text) {
  moduleOf(proc).forwarder().write(stream, text);
}

void setLogWindow(Proc& proc, std::chrono::milliseconds window) {
  moduleOf(proc).collector().setWindow(window);
}

void redirectWorkerOutput(Proc& proc, int out, int err) {
  moduleOf(proc).collector().setOutput(out, err);
}

void flushLogs(Proc& proc, std::chrono::milliseconds timeout) {
  DebugModule& module = moduleOf(proc);
  std::vector<Rank> ranks;
  for (Rank r = 0; r < proc.size(); ++r) {
    if (r != proc.rank() && proc.alive(r)) ranks.push_back(r);
  }
  askAll<LogsFlushed>(proc, module.agentId(), ranks, FlushLogsRequest{}, timeout);
  // Each rank's lines came before its answer; the controller's agent has
  // them in its mailbox, ahead of this request.
  try {
    proc.request<LogsFlushed>({proc.rank(), module.agentId()}, PrintLogsRequest{}).get(timeout);
  } catch (const std::exception&) {  // NOLINT: print what did come, below
  }
  module.collector().print();
}

std::vector<RankStatus> collectStatus(Proc& proc, const std::vector<Rank>& ranks,
                                      std::chrono::milliseconds timeout) {
  return askAll<RankStatus>(proc, moduleOf(proc).agentId(), ranks, StatusRequest{}, timeout);
}

std::vector<RankTrace> collectTrace(Proc& proc, const std::vector<Rank>& ranks,
                                    std::chrono::milliseconds timeout) {
  std::uint64_t agent = moduleOf(proc).agentId();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<RankTrace> out = askAll<RankTrace>(proc, agent, ranks, TraceRequest{0}, timeout);
  for (RankTrace& t : out) {
    for (std::uint64_t chunk = 1; t.more && t.error.empty(); ++chunk) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      try {
        RankTrace next = proc.request<RankTrace>({t.rank, agent}, TraceRequest{chunk})
                             .get(std::max(left, std::chrono::milliseconds(1)));
        t.events.insert(t.events.end(), std::make_move_iterator(next.events.begin()),
                        std::make_move_iterator(next.events.end()));
        t.more = next.more;
      } catch (const std::exception& e) {
        t.error = std::string("its trace was cut short: ") + e.what();
      }
    }
  }
  return out;
}

std::optional<std::string> pdbPrompt(Proc& proc, const PdbSession& where, std::string output) {
  DebugModule& module = moduleOf(proc);
  proc.send({0, module.agentId()}, PdbPrompt{where, std::move(output), false});
  return module.pdbInbox().take(where.session, [&proc] { return !proc.alive(0); });
}

void pdbEnded(Proc& proc, const PdbSession& where, std::string output) {
  proc.send({0, moduleOf(proc).agentId()}, PdbPrompt{where, std::move(output), true});
}

std::vector<PdbSession> pdbSessions(Proc& proc) {
  return moduleOf(proc).pdbRegistry().list(aliveIn(proc));
}

PdbRead pdbRead(Proc& proc, Rank rank, std::uint64_t session, std::chrono::milliseconds wait) {
  return moduleOf(proc).pdbRegistry().read(rank, session, wait, aliveIn(proc));
}

void pdbSend(Proc& proc, Rank rank, std::uint64_t session, const std::string& line) {
  DebugModule& module = moduleOf(proc);
  module.pdbRegistry().leavePrompt(rank, session);
  proc.send({rank, module.agentId()}, PdbInput{session, line});
}

}  // namespace crown::debug
