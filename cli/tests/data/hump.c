/* Memory that rises to a hump in the middle of the run and is freed before the end, as
 * sqlite3 building and dropping a table does (cli/tests/page.rs): 48 MiB in 4 KiB blocks, half
 * through load_a and half through load_b, both by one store_block (one name and one
 * file:line: the chart must tell them apart by their callers); held for 2 s, all freed, then
 * 2.5 s near empty before the exit. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BLOCK 4096
#define HALF (24 * 1024 * 1024 / BLOCK)

static void *blocks[2 * HALF];

static void pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

__attribute__((noinline)) void *store_block(void) {
    void *p = malloc(BLOCK);
    memset(p, 7, BLOCK);
    return p;
}

__attribute__((noinline)) void load_a(void) {
    for (int i = 0; i < HALF; i++) blocks[i] = store_block();
}

__attribute__((noinline)) void load_b(void) {
    for (int i = HALF; i < 2 * HALF; i++) blocks[i] = store_block();
}

int main(void) {
    pause_ms(1200);
    load_a();
    load_b();
    pause_ms(2000);
    for (int i = 0; i < 2 * HALF; i++) free(blocks[i]);
    pause_ms(2500);
    return 0;
}
