/* hide_driver: an LD_AUDIT module under which the dynamic loader finds no
 * libcuda.so.1 anywhere (its cache, LD_LIBRARY_PATH, the default
 * directories), whatever the host has installed: every place the loader
 * would look for it is refused. Tests use it to see what a command does on
 * a host without the NVIDIA driver, on any host. */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <string.h>

unsigned int la_version(unsigned int version) {
    (void)version;
    return LAV_CURRENT;
}

char *la_objsearch(const char *name, uintptr_t *cookie, unsigned int flag) {
    (void)cookie;
    (void)flag;
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    if (strncmp(base, "libcuda.so", strlen("libcuda.so")) == 0)
        return NULL;
    return (char *)name;
}
