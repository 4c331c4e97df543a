// The cost of SEC-1's frame protection alone (frame_seal.h), beside a plain
// copy of the same bytes as the anchor: seal + open of one frame per
// iteration, under integrity (GMAC) and encrypt (AES-256-GCM).
//   build/bench/frame_seal [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstring>

#include "crown/wire/frame.h"
#include "transport/frame_seal.h"

namespace crown::transport {
namespace {

SessionKey someKey() {
  SessionKey key{};
  Nonce random = randomNonce();
  std::memcpy(key.data(), random.data(), key.size());
  return key;
}

void sealAndOpen(benchmark::State& state, FabricSecurity security) {
  auto bytes = static_cast<std::size_t>(state.range(0));
  SessionKey key = someKey();
  FrameSealer sealer(security, key);
  FrameOpener opener(security, key);
  std::string payload(bytes, 'x');
  wire::Payload segments;  // the payload where it lies, as a send has it
  segments.append(nullptr, payload.data(), payload.size());
  wire::Envelope envelope{wire::MessageKind::kOneWay, {0, 1}, {1, 2}, 0, "bench"};
  std::string ciphertext;
  FrameTag tag{};
  for (auto _ : state) {
    std::string head = wire::encodeFrameHead(envelope, bytes);
    sealer.seal(head, segments, ciphertext, tag);
    auto* frame = reinterpret_cast<std::byte*>(head.data());
    opener.begin(frame, wire::kFrameHeaderBytes);
    opener.update(frame + wire::kFrameHeaderBytes, head.size() - wire::kFrameHeaderBytes);
    std::string& body = security == FabricSecurity::kEncrypt ? ciphertext : payload;
    opener.update(reinterpret_cast<std::byte*>(body.data()), body.size());
    opener.finish(reinterpret_cast<const std::byte*>(tag.data()));
    benchmark::DoNotOptimize(tag);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void Integrity(benchmark::State& state) { sealAndOpen(state, FabricSecurity::kIntegrity); }
void Encrypt(benchmark::State& state) { sealAndOpen(state, FabricSecurity::kEncrypt); }

// The anchor: two copies of the payload (what one send and one receive
// through the kernel cost at least).
void TwoCopies(benchmark::State& state) {
  auto bytes = static_cast<std::size_t>(state.range(0));
  std::string payload(bytes, 'x'), out(bytes, '\0'), back(bytes, '\0');
  for (auto _ : state) {
    std::memcpy(out.data(), payload.data(), bytes);
    std::memcpy(back.data(), out.data(), bytes);
    benchmark::DoNotOptimize(back.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

BENCHMARK(Integrity)->Arg(64)->Arg(64 << 20);
BENCHMARK(Encrypt)->Arg(64)->Arg(64 << 20);
BENCHMARK(TwoCopies)->Arg(64)->Arg(64 << 20);

}  // namespace
}  // namespace crown::transport

BENCHMARK_MAIN();
