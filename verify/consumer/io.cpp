// Linked to reshard::io alone: its imported target brings RE2 (the rename regexes,
// reshard/io/name_rules.hpp) with its include directory and library.
#include <reshard/io/name_rules.hpp>

int main() {
  const reshard::io::rename_regex layer("layer(\\d+)", "block$1", "consumer");
  return layer.replace_all("layer12.weight") == "block12.weight" ? 0 : 1;
}
