#include "bindings/phase.h"

#include "tensor/error.h"
#include "tensor/text.h"

namespace metaop {

const char* to_string(Phase p) {
  switch (p) {
    case Phase::Forward:
      return "forward";
    case Phase::Backward:
      return "backward";
    case Phase::Update:
      return "update";
  }
  return "?";
}

Phase parse_phase(std::string_view word, std::string_view where) {
  for (Phase p : {Phase::Forward, Phase::Backward, Phase::Update})
    if (word == to_string(p)) return p;
  fail("{}: phase '{}' (expected forward, backward or update)", where, printable(word, 80));
}

}  // namespace metaop
