/* A position-dependent executable (-no-pie) that takes malloc's address: the executable's PLT
 * entry becomes malloc's canonical address, so dlsym(RTLD_DEFAULT, "malloc") names the
 * executable although every call still reaches the shim (as in Debian's python3.11). Allocates
 * 8 MiB through the pointer and keeps it until exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *(*volatile alloc)(size_t);

int main(void) {
    alloc = malloc; /* an absolute address in code: the linker makes the PLT entry canonical */
    char *blocks[128];
    for (int i = 0; i < 128; i++) {
        blocks[i] = alloc(64 * 1024);
        memset(blocks[i], i, 64 * 1024);
    }
    printf("kept %d bytes\n", 128 * 64 * 1024);
    return blocks[5][7] == 5 ? 0 : 1;
}
