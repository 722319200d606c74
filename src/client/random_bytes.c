/*
 * random_bytes.c - randomness (see random_bytes.h): the system's, and a
 * last resort that no known system needs.
 */
#include "random_bytes.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/random.h>
#include <unistd.h>

#include "monotonic.h"

void fg_random_bytes(void *buf, size_t n) {
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got <= 0) break;
        p += got;
        n -= (size_t)got;
    }
    if (n == 0) return;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && n > 0) {
        ssize_t got = read(fd, p, n);
        if (got <= 0) break;
        p += got;
        n -= (size_t)got;
    }
    if (fd >= 0) close(fd);
    /* Neither source works (no such system is known): the clock and the
     * address space still make an id unlikely to repeat. */
    uint64_t x = (uint64_t)fg_monotonic_us() ^ ((uint64_t)(uintptr_t)p << 17) ^ (uint64_t)getpid();
    for (; n > 0; n--) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        *p++ = (unsigned char)(x >> 56);
    }
}
