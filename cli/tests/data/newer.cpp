// C++ allocations through operator new, for `ying top` against `go tool pprof -top`: the
// shim's stacks start in libstdc++'s operator new, which Ying's profiles ask pprof to drop
// (Profile.drop_frames), so both tools must give the flat bytes to the callers below.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

// Never destroyed: the exit report still sees them retained.
auto &kept = *new std::vector<std::unique_ptr<char[]>>;
auto &names = *new std::vector<std::string>;

__attribute__((noinline)) void keep_buffers() {
    for (int i = 0; i < 48; i++) kept.emplace_back(new char[40000]());
}

__attribute__((noinline)) void keep_strings() {
    for (int i = 0; i < 3000; i++) names.push_back(std::string(500, static_cast<char>('a' + i % 26)));
}

int main() {
    kept.reserve(48);
    names.reserve(3000);
    keep_buffers();
    keep_strings();
    std::printf("%zu %zu\n", kept.size(), names.size());
    return 0;
}
