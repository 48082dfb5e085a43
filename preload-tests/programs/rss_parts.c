// Grows one part of the resident set (tests/rss_breakdown.rs), measures the kernel's own figure
// before and after (the `Rss:` of /proc/self/smaps_rollup) and writes them to $EXPECT_FILE:
//   rss_before <bytes>, rss_after <bytes>, and per mode what it added by its own count.
// Modes (argv[1]):
//   none       nothing (the baseline)
//   overhead   200,000 blocks of 240 bytes, every other one freed: glibc keeps the holes
//   threads    100 threads, each touching 256 KiB of its stack, alive at exit
//   file       a 32 MiB file (argv[2]) mapped and read
//   binary     dlopen of argv[2] and every page of its segments read
//   raw        32 MiB mapped by syscall(SYS_mmap) (not seen by the shim) and touched
//   mmap       32 MiB mapped by mmap (counted by the shim) and touched
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static FILE *out;
static volatile unsigned long sink;

static long long rss_now(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Rss: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

static void touch(char *p, size_t len) {
    for (size_t i = 0; i < len; i += 4096) p[i] = 1;
}

static pthread_barrier_t grown;

static void *stack_user(void *arg) {
    (void)arg;
    volatile char buf[256 * 1024];
    for (size_t i = 0; i < sizeof buf; i += 4096) buf[i] = 1;
    pthread_barrier_wait(&grown);
    for (;;) pause();
    return NULL;
}

static const char *wanted;
static size_t segments;

static int read_segments(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (!strstr(info->dlpi_name, wanted)) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
        for (size_t o = 0; o < ph->p_filesz; o += 4096) sink += (unsigned char)p[o];
        segments += ph->p_filesz;
    }
    return 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "none";
    out = fopen(getenv("EXPECT_FILE"), "w");
    if (!out) return 2;
    long long before = rss_now();
    const size_t big = 32u << 20;
    if (!strcmp(mode, "overhead")) {
        enum { N = 200000, SIZE = 240 };
        static void *blocks[N];
        for (int i = 0; i < N; i++) memset(blocks[i] = malloc(SIZE), 1, SIZE);
        for (int i = 0; i < N; i += 2) free(blocks[i]);
        fprintf(out, "retained %llu\nfreed %llu\n", (unsigned long long)N / 2 * SIZE,
                (unsigned long long)N / 2 * SIZE);
    } else if (!strcmp(mode, "threads")) {
        enum { T = 100 };
        pthread_barrier_init(&grown, NULL, T + 1);
        pthread_t t;
        for (int i = 0; i < T; i++)
            if (pthread_create(&t, NULL, stack_user, NULL)) return 3;
        pthread_barrier_wait(&grown);
        fprintf(out, "added %llu\n", (unsigned long long)T * 256 * 1024);
    } else if (!strcmp(mode, "file")) {
        int fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || ftruncate(fd, big)) return 4;
        char *p = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) return 5;
        touch(p, big);
        fprintf(out, "added %llu\n", (unsigned long long)big);
    } else if (!strcmp(mode, "binary")) {
        if (!dlopen(argv[2], RTLD_NOW | RTLD_LOCAL)) return 6;
        wanted = strrchr(argv[2], '/') ? strrchr(argv[2], '/') + 1 : argv[2];
        dl_iterate_phdr(read_segments, NULL);
        if (!segments) return 7;
        fprintf(out, "added %llu\n", (unsigned long long)segments);
    } else if (!strcmp(mode, "raw") || !strcmp(mode, "mmap")) {
        char *p = !strcmp(mode, "raw")
            ? (char *)syscall(SYS_mmap, NULL, big, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
            : mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 8;
        touch(p, big);
        fprintf(out, "added %llu\n", (unsigned long long)big);
    } else if (strcmp(mode, "none")) {
        return 9;
    }
    fprintf(out, "rss_before %lld\nrss_after %lld\n", before, rss_now());
    fclose(out);
    printf("rss_parts %s done\n", mode);
    return 0;
}
