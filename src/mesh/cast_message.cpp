#include "mesh/cast_message.h"

namespace crown::mesh::detail {

std::vector<SeqRun> encodeRuns(const std::vector<std::uint64_t>& seqs) {
  std::vector<SeqRun> runs;
  for (std::uint64_t seq : seqs) {
    if (!runs.empty() && runs.back().seq == seq) {
      ++runs.back().count;
    } else {
      runs.push_back({1, seq});
    }
  }
  return runs;
}

std::uint64_t seqAt(const std::vector<SeqRun>& runs, std::uint64_t index) {
  for (const SeqRun& run : runs) {
    if (index < run.count) return run.seq;
    index -= run.count;
  }
  throw ProtocolError("a cast carries no order position for one of its members");
}

ReceivedCast decodeCast(const wire::Bytes& bytes, Rank here, std::size_t worldSize) {
  ReceivedCast cast;
  cast.message = wire::fromBytes<CastMessage>(bytes);  // the slice checks itself as it loads
  const CastMessage& message = cast.message;
  if (message.mode > static_cast<std::uint8_t>(CastMode::kStream)) {
    throw ProtocolError("unknown cast mode " + std::to_string(message.mode));
  }
  cast.mode = static_cast<CastMode>(message.mode);
  if (message.fanout == 0) throw ProtocolError("a cast with a fan-out of 0");
  // Members beyond the job would be sent to; and since the members are
  // distinct ranks of the job, no hop's children, nor any subtree it walks
  // when a child is lost, can outnumber the job's ranks, whatever slice and
  // fan-out the bytes claim. The last member in row-major order is the
  // largest rank: every stride that counts is positive.
  const Slice& slice = message.slice;
  std::size_t largest = slice.rankAt(slice.size() - 1);
  if (largest >= worldSize) {
    throw ProtocolError("a cast to rank " + std::to_string(largest) + " in a job of " +
                        std::to_string(worldSize) + " ranks");
  }
  if (!slice.contains(here)) {
    throw ProtocolError("rank " + std::to_string(here) + " received a cast to slice " +
                        slice.toString() + ", which does not hold it");
  }
  // The tree keeps the slice; the message needs it no more (ReceivedCast).
  cast.tree = std::make_shared<const CastTree>(std::move(cast.message.slice), message.fanout);
  cast.seq = seqAt(message.seqs, cast.tree->indexOf(here));
  return cast;
}

}  // namespace crown::mesh::detail
