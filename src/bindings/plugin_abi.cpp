// Compiled into every plugin: the plugin ABI it was built for (plugin.h).
#include "bindings/plugin.h"

int metaop_plugin_abi() {
  return metaop::kPluginAbi;
}
