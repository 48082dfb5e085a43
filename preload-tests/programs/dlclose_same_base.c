/* dlopen library A, keep a block from its a_keep(), wait (under the shim) until a report has
 * been written (so that A's addresses are symbolized and A's unwind rules cached), dlclose A,
 * dlopen library B, which the loader usually maps at the same base, and keep a block from
 * b_keep(). The report at exit must name b_keep for B's block, with main as its caller.
 * Arguments: libA libB reporting-dir base-file. Prints the same in both runs; the two bases
 * go to base-file (they differ between runs). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define A_SIZE 40000 /* mirrored in tests/dlclose.rs */
#define B_SIZE 70000 /* mirrored in tests/dlclose.rs */

void *kept_a, *kept_b;

typedef void *(*keep_fn)(size_t);

static int has_text_report(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] != '.' && n > 4 && strcmp(e->d_name + n - 4, ".txt") == 0) found = 1;
    }
    closedir(d);
    return found;
}

static void wait_for_report(const char *dir) {
    if (!getenv("LD_PRELOAD")) return; /* the plain run has no profiler to wait for */
    for (int i = 0; i < 400 && !has_text_report(dir); i++) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void *load(const char *path, const char *fn, keep_fn *out, ElfW(Addr) *base) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen failed: %s\n", dlerror());
        exit(1);
    }
    *out = (keep_fn)dlsym(h, fn);
    struct link_map *lm = NULL;
    if (!*out || dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0) {
        printf("no %s\n", fn);
        exit(1);
    }
    *base = lm->l_addr;
    return h;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s libA libB reporting-dir base-file\n", argv[0]);
        return 2;
    }
    keep_fn a, b;
    ElfW(Addr) base_a, base_b;
    void *ha = load(argv[1], "a_keep", &a, &base_a);
    kept_a = a(A_SIZE);
    memset(kept_a, 1, A_SIZE);
    wait_for_report(argv[3]);
    if (dlclose(ha) != 0) {
        printf("dlclose failed: %s\n", dlerror());
        return 1;
    }
    load(argv[2], "b_keep", &b, &base_b);
    kept_b = b(B_SIZE);
    memset(kept_b, 2, B_SIZE);
    FILE *f = fopen(argv[4], "w");
    if (f) {
        fprintf(f, "A at %#lx, B at %#lx\n", (unsigned long)base_a, (unsigned long)base_b);
        fclose(f);
    }
    printf("%s\n", base_a == base_b ? "same base" : "different base");
    return 0;
}
