// repro.json text through the reproducer manifest reader: JSON parsing, every field's type,
// the files it names confined to the folder.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "report/core/repro.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)metaop::parse_repro_manifest(text, fuzz::scratch(), "repro.json");
  } catch (const std::exception&) {
  }
  return 0;
}
