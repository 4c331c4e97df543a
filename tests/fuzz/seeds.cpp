// crown_fuzz_seeds DIR: writes valid inputs for each fuzzer, made by crown's
// own encoders, to DIR/<fuzzer>/: the starting points from which
// tests/fuzz/corpus was merged (README.md). Rerun it when a wire format
// changes.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "crown/wire/frame.h"
#include "crown/wire/serialize.h"
#include "fuzz/archive_types.h"
#include "fuzz/inputs.h"
#include "transport/frame_seal.h"

namespace {

namespace fs = std::filesystem;
using namespace crown;

class SeedWriter {
 public:
  SeedWriter(const fs::path& root, const std::string& fuzzer) : dir_(root / fuzzer) {
    fs::create_directories(dir_);
  }

  template <class Settings>
  void write(const Settings& settings, const std::string& body) {
    std::string input(sizeof settings, '\0');
    std::memcpy(input.data(), &settings, sizeof settings);
    input += body;
    std::ofstream(dir_ / ("seed-" + std::to_string(count_++)), std::ios::binary) << input;
  }

 private:
  fs::path dir_;
  int count_ = 0;
};

mesh::detail::CastMessage castTo(mesh::Slice slice, std::uint32_t fanout, mesh::CastMode mode) {
  std::vector<std::uint64_t> seqs(slice.size(), 1);
  if (!seqs.empty()) seqs.back() = 2;  // two runs
  return {{0, 5},
          1,
          std::move(slice),
          fanout,
          9,
          mesh::detail::encodeRuns(seqs),
          static_cast<std::uint8_t>(mode),
          mode == mesh::CastMode::kReduce ? "crown.sum" : "",
          "tests.Ping",
          wire::toBytes(std::string("ping"))};
}

// One sample of each of ArchiveTypes, in its order.
fuzz::ArchiveTypes archiveSamples() {
  using mesh::Slice;
  Slice slice = Slice::rowMajor({2, 4});
  mesh::CastEntry entry{3, true, "int", wire::toBytes(42)};
  mesh::CastResult result{{}, true, "int", wire::toBytes(7)};
  result.entries.push_back(entry);
  return {true,
          42,
          "text",
          L"wide",
          {1, 2, 3},
          {"a", "bc"},
          {{"k", 1}, {"l", -2}},
          {"pi", 3.14},
          {3, 7},
          {9},
          {"factory", "name", wire::packValues(1, std::string("x"))},
          {detail::RemoteFailure::kRaised, "ValueError", "bad", "echo", "", 2},
          slice,
          mesh::Shape({"hosts", "procs"}, slice),
          {"factory", "mesh", wire::packValues(7), 11, mesh::Shape({{"procs", 4}})},
          {11},
          entry,
          result,
          castTo(slice, 2, mesh::CastMode::kCollect),
          {0, 1, entry}};
}

// Frames as a link writes them: sealed under `security` (with the fuzzer's key).
std::string frameStream(transport::FabricSecurity security,
                        const std::vector<std::pair<wire::Envelope, std::string>>& frames) {
  std::optional<transport::FrameSealer> sealer;
  if (security != transport::FabricSecurity::kAuth) sealer.emplace(security, fuzz::kFrameKey);
  std::string stream;
  for (const auto& [envelope, payload] : frames) {
    std::string head = wire::encodeFrameHead(envelope, payload.size());
    if (!sealer) {
      stream += head + payload;
      continue;
    }
    std::string ciphertext;
    transport::FrameTag tag;
    sealer->seal(head, wire::Payload(payload), ciphertext, tag);
    bool encrypted = security == transport::FabricSecurity::kEncrypt;
    stream += head + (encrypted ? ciphertext : payload) + std::string(tag.begin(), tag.end());
  }
  return stream;
}

void writeFrames(const fs::path& root) {
  using wire::MessageKind;
  SeedWriter seeds(root, "frame");
  auto frame = [](MessageKind kind, const std::string& type, std::string payload) {
    return std::pair{wire::Envelope{kind, {1, 2}, {3, 4}, 5, type, 6}, std::move(payload)};
  };
  std::string cast =
      wire::toBytes(castTo(mesh::Slice::rowMajor({4, 4}), 16, mesh::CastMode::kCollect));
  std::vector frames{frame(MessageKind::kRequest, "crown::CastMessage", cast),
                     frame(MessageKind::kReply, "crown::CastResult", ""),
                     frame(MessageKind::kHeartbeat, "", ""),
                     frame(MessageKind::kNotice, "bad-frame", "a frame failed its integrity check"),
                     frame(MessageKind::kOneWay, "tests.Large", std::string(5000, 'x')),
                     frame(MessageKind::kFailure, "crown::RemoteFailure", "failure")};
  for (std::uint8_t mode = 0; mode < 3; ++mode) {  // auth, integrity, encrypt
    auto security = static_cast<transport::FabricSecurity>(1 + mode);
    seeds.write(fuzz::FrameSettings{0, 0, 0, mode},
                frameStream(security, {frame(MessageKind::kOneWay, "tests.Ping", "ping")}));
    // A 4 KiB buffer and reads; a 32-byte buffer and 1..8-byte reads.
    seeds.write(fuzz::FrameSettings{4095, 4095, 1, mode}, frameStream(security, frames));
    seeds.write(fuzz::FrameSettings{31, 7, 2, mode}, frameStream(security, frames));
  }
}

template <std::size_t... I>
void writeArchives(const fs::path& root, std::index_sequence<I...>) {
  SeedWriter seeds(root, "archive");
  auto samples = archiveSamples();
  (seeds.write(fuzz::ArchiveSettings{I}, wire::toBytes(std::get<I>(samples))), ...);
}

void writeCasts(const fs::path& root) {
  using mesh::CastMode;
  using mesh::Slice;
  SeedWriter seeds(root, "cast");
  Slice grid = Slice::rowMajor({4, 4});
  auto write = [&](const Slice& slice, std::uint32_t fanout, CastMode mode, std::uint16_t here) {
    seeds.write(fuzz::CastSettings{15, here}, wire::toBytes(castTo(slice, fanout, mode)));
  };
  write(grid, 16, CastMode::kCollect, 0);
  write(grid, 2, CastMode::kReduce, 5);
  write(grid, 1, CastMode::kStream, 15);
  write(grid.select(1, 1, mesh::kEnd, 2), 2, CastMode::kBroadcast, 7);  // strided
  write(grid.at(0, 2), 3, CastMode::kCollect, 9);                       // a row
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: crown_fuzz_seeds DIR\n";
    return 2;
  }
  fs::path root = argv[1];
  writeFrames(root);
  writeArchives(root, std::make_index_sequence<std::tuple_size_v<fuzz::ArchiveTypes>>());
  writeCasts(root);
  return 0;
}
