/* RFC 6455 frame headers, masking and masking keys: pure functions over buffers
 * (the key pool aside). See _wire.h. */
#include "_wire.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

static uint8_t pool[256];
static size_t pool_left = 0;

void wire_forget_keys(void) { pool_left = 0; }

/* A fresh masking key into out[0..3]; -1 with OSError set if none can be had.
 * Keys come from getrandom(2), 256 bytes at a time. */
static int mask_key(uint8_t *out) {
    if (pool_left < 4) {
        ssize_t got = getrandom(pool, sizeof pool, 0);
        if (got != (ssize_t)sizeof pool) {
            if (got >= 0) errno = EIO;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        pool_left = sizeof pool;
    }
    memcpy(out, pool + sizeof pool - pool_left, 4);
    pool_left -= 4;
    return 0;
}

Py_ssize_t wire_client_head(uint8_t *out, int opcode, uint64_t n) {
    Py_ssize_t head;
    out[0] = (uint8_t)(0x80 | opcode);
    if (n < 126) {
        out[1] = (uint8_t)(0x80 | n);
        head = 2;
    } else if (n < 0x10000) {
        out[1] = 0x80 | 126;
        out[2] = (uint8_t)(n >> 8);
        out[3] = (uint8_t)n;
        head = 4;
    } else {
        out[1] = 0x80 | 127;
        for (int i = 0; i < 8; i++) {
            out[2 + i] = (uint8_t)(n >> (56 - 8 * i));
        }
        head = 10;
    }
    return mask_key(out + head) < 0 ? -1 : head + 4;
}

void wire_mask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t *key) {
    uint32_t k32;
    memcpy(&k32, key, 4);
    uint64_t k64 = (uint64_t)k32 << 32 | k32; /* the key twice, in either byte order */
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, 8);
        w ^= k64;
        memcpy(dst + i, &w, 8);
    }
    for (; i < n; i++) {
        dst[i] = src[i] ^ key[i & 3];
    }
}

int wire_parse_head(const uint8_t *p, size_t avail, WireHead *h) {
    if (avail < 2) return 0;
    h->first = p[0];
    h->masked = (p[1] & 0x80) != 0;
    uint64_t length = p[1] & 0x7f;
    Py_ssize_t head = 2;
    if (length == 126) {
        if (avail < 4) return 0;
        length = (uint64_t)p[2] << 8 | p[3];
        head = 4;
    } else if (length == 127) {
        if (avail < 10) return 0;
        length = 0;
        for (int i = 0; i < 8; i++) {
            length = length << 8 | p[2 + i];
        }
        head = 10;
    }
    if (h->masked) head += 4;
    if (avail < (size_t)head) return 0;
    h->head = head;
    h->length = length;
    return 1;
}
