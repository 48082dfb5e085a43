/* Writes RECORDS records of 8 KiB to FILE, one every 2 ms, growing its heap by 64 KiB every 10
   records, and prints how many records were written whole (exit status 1 if any was not).
   For tests/full_disk.rs: a program that fills the filesystem its reports share, whose own
   writes must never fail because of Ying's.
   usage: disk_writer FILE RECORDS */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RECORD 8192

void *kept[4096];

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILE RECORDS\n", argv[0]);
        return 2;
    }
    int records = atoi(argv[2]);
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(argv[1]);
        return 2;
    }
    static char buf[RECORD];
    memset(buf, 'r', sizeof buf);
    int whole = 0, nkept = 0;
    for (int i = 0; i < records; i++) {
        ssize_t n = write(fd, buf, RECORD);
        if (n == RECORD)
            whole++;
        if (i % 10 == 0 && nkept < 4096) {
            kept[nkept] = malloc(64 << 10);
            memset(kept[nkept], 1, 64 << 10);
            nkept++;
        }
        usleep(2000);
    }
    close(fd);
    printf("wrote %d of %d records\n", whole, records);
    for (int i = 0; i < nkept; i++)
        free(kept[i]);
    return whole == records ? 0 : 1;
}
