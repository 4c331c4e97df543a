// The parts of Boost.Serialization's archive machinery that are compiled
// once per archive type (Boost does this in its library for its own).
#include "crown/wire/archive.h"

#include <boost/archive/impl/archive_serializer_map.ipp>

namespace boost::archive {
template class detail::archive_serializer_map<crown::wire::OArchive>;
template class detail::archive_serializer_map<crown::wire::IArchive>;
}  // namespace boost::archive
