// C++ allocation failure under the shim: `operator new` must throw std::bad_alloc through the
// shim's exports (no frame of the shim's may be between the throw and the catch), call the
// program's new-handler first, and the nothrow forms must return null. Prints one line per
// case; the plain run of the same allocator is the reference.
#include <cstdio>
#include <cstdlib>
#include <new>

static int handler_calls;

// Called by operator new on failure: the second call gives up (removes itself), so the next
// failure throws.
static void handler() {
    if (++handler_calls >= 2) std::set_new_handler(nullptr);
}

int main(int argc, char **argv) {
    // Impossible on any machine: 2^62 bytes.
    const size_t huge = size_t(1) << 62;
    // Giant for the shim's YING_MAX_ALLOC_BYTES in the test, small for the machine.
    const size_t giant = argc > 1 ? strtoull(argv[1], nullptr, 10) : huge;
    try {
        char *p = new char[huge];
        std::printf("new[] of 2^62 returned %s\n", p ? "a block" : "null");
    } catch (const std::bad_alloc &) {
        std::printf("new[] of 2^62 threw bad_alloc\n");
    }
    char *q = new (std::nothrow) char[huge];
    std::printf("nothrow new[] of 2^62 returned %s\n", q ? "a block" : "null");
    struct alignas(4096) Page { char c[4096]; };
    try {
        Page *pg = new Page[huge / 4096 / 2];
        std::printf("aligned new[] of 2^61 returned %s\n", pg ? "a block" : "null");
    } catch (const std::bad_alloc &) {
        std::printf("aligned new[] of 2^61 threw bad_alloc\n");
    }
    std::set_new_handler(handler);
    try {
        char *p = new char[huge];
        std::printf("with a handler: returned %s\n", p ? "a block" : "null");
    } catch (const std::bad_alloc &) {
        std::printf("with a handler: threw bad_alloc after %d handler calls\n", handler_calls);
    }
    // A request the shim refuses as giant but the allocator could satisfy: refused too (the
    // shim's run), or allocated (the plain run): printed apart, compared by the test.
    try {
        char *g = new char[giant];
        g[0] = 1;
        std::printf("giant: allocated\n");
        delete[] g;
    } catch (const std::bad_alloc &) {
        std::printf("giant: threw bad_alloc\n");
    }
    return 0;
}
