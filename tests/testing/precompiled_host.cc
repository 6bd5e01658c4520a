// The executable that builds tests/testing/precompiled.h once, with the
// flags of every gtest executable (a PIE, -pthread, gtest's definitions),
// for them to reuse (tests/CMakeLists.txt). It runs no test.
int main() { return 0; }
