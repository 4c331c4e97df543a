// An immutable string that commands share: a recorded op's blob and the
// controller's file:line repeat from one Call to the next (a loop records
// the same few), so a CommandBatch carries each distinct one once (its
// table of texts is the only way one travels) and a copied Call copies a
// pointer. Reads as a std::string_view. Any thread (it never changes once
// made).
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace crown::tensor {

class SharedText {
 public:
  SharedText() = default;
  SharedText(std::string text)  // NOLINT: implicit, as the std::string it stands for
      : text_(text.empty() ? nullptr : std::make_shared<const std::string>(std::move(text))) {}
  SharedText(const char* text) : SharedText(std::string(text)) {}  // NOLINT
  SharedText(std::string_view text) : SharedText(std::string(text)) {}  // NOLINT

  std::string_view view() const { return text_ ? std::string_view(*text_) : std::string_view(); }
  operator std::string_view() const { return view(); }  // NOLINT
  std::string str() const { return std::string(view()); }
  bool empty() const { return view().empty(); }
  /// The same text object (not merely equal text): what a batch is keyed by first.
  const void* identity() const { return text_.get(); }

  friend bool operator==(const SharedText& a, std::string_view b) { return a.view() == b; }

 private:
  std::shared_ptr<const std::string> text_;
};

}  // namespace crown::tensor
