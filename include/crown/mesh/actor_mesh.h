// ActorMesh<A>: one actor of type A on every proc of a ProcMesh (or a slice
// of one), addressed as a whole. Messages to it travel by cast through the
// multicast tree (cast.h); the adverbs follow Monarch's names:
//   call<R>(msg)       every member's reply, as a ValueMesh<R>
//   call_one<R>(msg)   the one member's reply (the mesh must have one actor)
//   choose<R>(msg)     one member's reply, a different member each time
//   stream<R>(msg)     the replies as they arrive
//   broadcast(msg)     no replies
//   reduce<R, Op>(msg) the replies combined up the tree (Sum, Min, Max, own;
//                      reduceByKey<R>(msg, key) for a reducer family's key)
// A cast's message may be a mesh::RawMessage (bytes for a raw handler, cast
// as they are), and its replies mesh::RawReply (kept undecoded).
// ORD-1 holds between these and direct sends from the same sender. A plain
// value that travels inside messages; any thread.
#pragma once

#include <atomic>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "crown/actor/ref.h"
#include "crown/mesh/cast.h"
#include "crown/mesh/mesh_stream.h"
#include "crown/mesh/reducer.h"
#include "crown/mesh/shape.h"
#include "crown/mesh/sliceable.h"
#include "crown/mesh/value_mesh.h"

namespace crown {

namespace mesh::detail {
/// A member for choose(): round robin over the members still alive.
std::size_t chooseMember(Proc& proc, const Shape& shape);
/// Stops mesh actor `local` on every proc of `shape` and waits; a lost
/// member counts as stopped. Throws MeshError naming any other failure.
/// `onlyStarting`: only the members whose constructor has not returned
/// (Proc::stopLocalIfStarting), so that the stop that follows, after the
/// messages sent before, does not wait on a constructor that never returns.
void stopMesh(const Shape& shape, std::uint64_t local, bool onlyStarting = false);
}  // namespace mesh::detail

template <class A>
class ActorMesh : public mesh::Sliceable<ActorMesh<A>> {
 public:
  ActorMesh() = default;
  ActorMesh(mesh::Shape shape, std::uint64_t local) : shape_(std::move(shape)), local_(local) {}

  const mesh::Shape& shape() const { return shape_; }
  /// The same actors over another shape (slicing: mesh::Sliceable).
  ActorMesh with(mesh::Shape shape) const { return ActorMesh(std::move(shape), local_); }
  /// The local id every member has on its own rank.
  std::uint64_t localId() const { return local_; }

  /// The member at coords (one index per label), for direct messages.
  ActorRef<A> ref(const std::map<std::string, std::size_t>& coords) const {
    return ActorRef<A>(ActorId{static_cast<Rank>(shape_.rank(coords)), local_});
  }

  template <class R, class Msg>
  Future<ValueMesh<R>> call(Msg&& message) const {
    auto state = std::make_shared<detail::FutureState<ValueMesh<R>>>();
    castAs(std::forward<Msg>(message), mesh::CastMode::kCollect, {}, [state, shape = shape_](mesh::CastResult&& r) {
      state->setValue(ValueMesh<R>::fromCast(shape, std::move(r)));
    });
    return Future<ValueMesh<R>>(state);
  }

  /// Throws ConfigError, before sending anything, unless the mesh has exactly one actor.
  template <class R, class Msg>
  Future<R> call_one(const Msg& message) const {
    if (this->size() != 1) {
      throw ConfigError("call_one needs a mesh of exactly one actor; this one is " +
                        shape_.toString() + " (" + std::to_string(this->size()) +
                        " actors): slice it to one first, e.g. mesh.at(\"" +
                        (shape_.dims() ? shape_.labels()[0] : std::string("procs")) +
                        "\", 0), or use call()");
    }
    return Proc::current().request<R>(ActorId{static_cast<Rank>(shape_.ranks()[0]), local_},
                                      message);
  }

  template <class R, class Msg>
  Future<R> choose(const Msg& message) const {
    Proc& proc = Proc::current();
    Rank rank = static_cast<Rank>(mesh::detail::chooseMember(proc, shape_));
    return proc.request<R>(ActorId{rank, local_}, message);
  }

  template <class R, class Msg>
  MeshStream<R> stream(Msg&& message) const {
    auto state = std::make_shared<typename MeshStream<R>::State>();
    state->shape = shape_;
    castAs(std::forward<Msg>(message), mesh::CastMode::kStream, {}, {},
           [state](mesh::CastEntry&& entry) { state->push(std::move(entry)); });
    return MeshStream<R>(state);
  }

  template <class Msg>
  void broadcast(Msg&& message) const {
    castAs(std::forward<Msg>(message), mesh::CastMode::kBroadcast, {}, {});
  }

  /// The replies combined by Op (mesh::Sum, Min, Max, or an associative and
  /// commutative type or captureless lambda of your own) at every hop. Fails
  /// with MeshError, naming each failed member, if any failed.
  template <class R, class Op, class Msg>
  Future<R> reduce(const Msg& message, Op = {}) const {
    return reduceByKey<R>(message, mesh::reducerKey<R, Op>());
  }

  /// reduce() with the reducer found under `reducerKey` at every hop: a key
  /// of reducerKey<R, Op>(), or one a reducer family resolves (reducer.h).
  template <class R, class Msg>
  Future<R> reduceByKey(Msg&& message, std::string reducerKey) const {
    auto state = std::make_shared<detail::FutureState<R>>();
    castAs(std::forward<Msg>(message), mesh::CastMode::kReduce, std::move(reducerKey),
           [state, shape = shape_](mesh::CastResult&& result) {
             try {
               std::vector<MeshError::Failure> failures;
               for (const auto& entry : result.entries) {
                 auto error = mesh::detail::errorOf(entry);
                 failures.push_back({entry.rank, error, mesh::detail::describe(error)});
               }
               if (!failures.empty()) throw MeshError("reduce", shape.size(), failures);
               if constexpr (std::is_same_v<R, mesh::RawReply>) {
                 state->setValue(mesh::RawReply{std::move(result.valueType),
                                                std::move(result.value)});
               } else {
                 state->setValue(wire::fromBytes<R>(result.value));
               }
             } catch (...) {
               state->setError(std::current_exception());
             }
           });
    return Future<R>(state);
  }

  /// Stops every actor of this mesh (or slice) once its current message is
  /// handled; later messages to them fail with ActorStopped, and each proc
  /// forgets their state. Blocks until every live member has stopped.
  void stop() const { mesh::detail::stopMesh(shape_, local_); }

  friend bool operator==(const ActorMesh&, const ActorMesh&) = default;

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& shape_& local_;
  }

 private:
  template <class Msg>
  void castAs(Msg&& message, mesh::CastMode mode, std::string reducer,
              std::function<void(mesh::CastResult&&)> done,
              std::function<void(mesh::CastEntry&&)> onEntry = {}) const {
    Proc& proc = Proc::current();
    mesh::CastRequest request{shape_.slice(), mesh::castFanout(proc), local_, {}, {}, mode,
                              std::move(reducer)};
    using M = std::remove_cvref_t<Msg>;
    if constexpr (std::is_same_v<M, mesh::RawMessage>) {
      request.type = message.type;
      request.payload = std::forward<Msg>(message).payload;  // moved when given an rvalue
    } else {
      request.type = wire::messageName<M>();
      request.payload = wire::toBytes(message);
    }
    mesh::cast(proc, std::move(request), std::move(done), std::move(onEntry));
  }

  mesh::Shape shape_;
  std::uint64_t local_ = 0;
};

}  // namespace crown
