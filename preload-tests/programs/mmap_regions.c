/* Anonymous mappings made and unmapped from named functions, for tests/mmap.rs. Each
 * `map_*` marker leaves a known number of pages mapped at exit, which the program writes as
 * `expect <marker> <bytes>` lines to $EXPECT_FILE (its own arithmetic, with the page size it
 * reads): a partial munmap, mremap growth, shrink and move, a MAP_FIXED mapping over a counted
 * region, a PROT_NONE reservation with a MAP_FIXED commit inside it, a file mapping, mmap64,
 * and a big malloc (which glibc maps itself: it must not show as a mapping). stdout is the
 * same with and without the shim. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static long page;
static FILE *expect;
static unsigned long checksum;
static long expected_total;

#define NOINLINE __attribute__((noinline))

/* Writes the bytes `marker` is expected to retain at exit, and adds them to the total. */
static void note(const char *marker, long pages) {
    fprintf(expect, "expect %s %ld\n", marker, pages * page);
    expected_total += pages * page;
}

static char *anon(long pages, int prot) {
    void *p = mmap(NULL, pages * page, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

static void touch(char *p, long pages) {
    for (long i = 0; i < pages; i++) {
        p[i * page] = (char)i;
        checksum += (unsigned char)p[i * page];
    }
}

/* Kept whole: 5 pages. */
NOINLINE char *map_keep(void) {
    char *p = anon(5, PROT_READ | PROT_WRITE);
    touch(p, 5);
    return p;
}

/* Through mmap64: 4 pages. */
NOINLINE char *map_keep64(void) {
    char *p = mmap64(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(1);
    touch(p, 4);
    return p;
}

/* 10 pages, 3 unmapped from the middle and 1 from the end: 6 pages in two pieces. The length
 * of the first munmap is not a page multiple: the kernel unmaps whole pages. */
NOINLINE char *map_partial(void) {
    char *p = anon(10, PROT_READ | PROT_WRITE);
    touch(p, 10);
    if (munmap(p + 3 * page, 3 * page - 100) != 0) exit(1);
    if (munmap(p + 9 * page, page) != 0) exit(1);
    return p;
}

/* 4 pages grown to 9 (may move), then shrunk to 7: 7 pages. */
NOINLINE char *map_grow(void) {
    char *p = anon(4, PROT_READ | PROT_WRITE);
    touch(p, 4);
    p = mremap(p, 4 * page, 9 * page, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) exit(1);
    touch(p, 9);
    p = mremap(p, 9 * page, 7 * page, 0);
    if (p == MAP_FAILED) exit(1);
    return p;
}

/* 12 pages shrunk in place to 3. */
NOINLINE char *map_shrink(void) {
    char *p = anon(12, PROT_READ | PROT_WRITE);
    touch(p, 12);
    p = mremap(p, 12 * page, 3 * page, 0);
    if (p == MAP_FAILED) exit(1);
    return p;
}

/* 8 pages moved to a fixed place (a reservation unmapped first) and grown to 11. */
NOINLINE char *map_move(char *target) {
    char *p = anon(8, PROT_READ | PROT_WRITE);
    touch(p, 8);
    p = mremap(p, 8 * page, 11 * page, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    if (p != target) exit(1);
    touch(p, 11);
    return p;
}

/* Mapped and unmapped whole: nothing. */
NOINLINE void map_freed(void) {
    char *p = anon(8, PROT_READ | PROT_WRITE);
    touch(p, 8);
    if (munmap(p, 8 * page) != 0) exit(1);
}

/* 6 pages, of which map_fixed_over replaces 2 in the middle: 4 pages stay here. */
NOINLINE char *map_fixed_base(void) {
    char *p = anon(6, PROT_READ | PROT_WRITE);
    touch(p, 6);
    return p;
}

NOINLINE char *map_fixed_over(char *base) {
    char *p = mmap(base + 2 * page, 2 * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p != base + 2 * page) exit(1);
    touch(p, 2);
    return p;
}

/* A 64-page PROT_NONE reservation: address space, not memory. */
NOINLINE char *map_reserve(void) {
    return anon(64, PROT_NONE);
}

/* 3 pages committed inside the reservation with MAP_FIXED: counted here. */
NOINLINE char *map_commit(char *reserve) {
    char *p = mmap(reserve + 8 * page, 3 * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p != reserve + 8 * page) exit(1);
    touch(p, 3);
    return p;
}

/* A file mapping (the program's own file): not counted; nor is a file mapping placed with
 * MAP_FIXED over 2 pages of a counted region, which uncounts them (5 - 2 = 3 pages). */
NOINLINE char *map_file_over(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) exit(1);
    char *f = mmap(NULL, page, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f == MAP_FAILED) exit(1);
    checksum += (unsigned char)f[1];
    char *base = anon(5, PROT_READ | PROT_WRITE);
    touch(base, 5);
    char *g = mmap(base, 2 * page, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (g != base) exit(1);
    checksum += (unsigned char)g[1];
    close(fd);
    return base;
}

/* glibc's malloc maps a big block itself: counted as a malloc'd chunk, not as a mapping. */
NOINLINE char *big_malloc(void) {
    char *p = malloc(3 << 20);
    if (!p) exit(1);
    memset(p, 1, 3 << 20);
    return p;
}

char *volatile keep[16];

int main(int argc, char **argv) {
    (void)argc;
    page = sysconf(_SC_PAGESIZE);
    const char *path = getenv("EXPECT_FILE");
    expect = fopen(path ? path : "/dev/null", "w");
    if (!expect) return 1;

    keep[0] = map_keep();
    note("map_keep", 5);
    keep[1] = map_keep64();
    note("map_keep64", 4);
    keep[2] = map_partial();
    note("map_partial", 6);
    keep[3] = map_grow();
    note("map_grow", 7);
    keep[4] = map_shrink();
    note("map_shrink", 3);
    char *target = anon(16, PROT_NONE); /* a place to move to, replaced by the move */
    keep[5] = map_move(target);
    note("map_move", 11);
    map_freed();
    note("map_freed", 0);
    char *base = map_fixed_base();
    keep[6] = base;
    keep[7] = map_fixed_over(base);
    note("map_fixed_base", 4);
    note("map_fixed_over", 2);
    char *reserve = map_reserve();
    keep[8] = reserve;
    note("map_reserve", 0);
    keep[9] = map_commit(reserve);
    note("map_commit", 3);
    keep[10] = map_file_over(argv[0]);
    note("map_file_over", 3);
    keep[11] = big_malloc();
    fprintf(expect, "total %ld\n", expected_total);
    fclose(expect);
    printf("mapped regions done, checksum %lu\n", checksum);
    return 0;
}
